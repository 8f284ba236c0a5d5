-- Erlang beside the specs (Debian's erlang-base): whether `erl` is here, and the spec's Erlang
-- modules compiled into a temporary directory, once per module and process.
local erl = {}

erl.have = os.execute("command -v erl >/dev/null 2>&1 && command -v erlc >/dev/null 2>&1") == 0

local dirs = {}

-- The directory holding spec/fixtures/<module>.erl compiled (`erl -pa` it).
function erl.compile(module)
  if dirs[module] then return dirs[module] end
  local p = assert(io.popen("mktemp -d"))
  local dir = p:read("*l")
  p:close()
  local out = assert(io.popen("erlc -o " .. dir .. " spec/fixtures/" .. module .. ".erl 2>&1"))
  local text = out:read("*a")
  assert(out:close(), "erlc failed: " .. text)
  dirs[module] = dir
  return dir
end

-- What a case that needs erl says when it is missing: pending(erl.SKIP).
erl.SKIP = "SKIP: erl is not installed (Debian: erlang-base; deps/debian-test.txt)"

-- Removes the directories made (a spec file's teardown).
function erl.clean()
  for module, dir in pairs(dirs) do
    os.execute("rm -rf " .. dir)
    dirs[module] = nil
  end
end

return erl
