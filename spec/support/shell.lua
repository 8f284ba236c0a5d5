-- Running a shell command from a spec, for the specs whose point is a program as a user starts
-- it (the smarm executable, a bench script, a renderer). Loaded with
-- dofile("spec/support/shell.lua").
local shell = {}

-- Runs cmd (with input on its stdin when given); returns its stdout, its stderr and its exit
-- status (128 + n for a signal n). LuaJIT's popen:close() gives no status, so the shell prints
-- it after the command's own output.
function shell.run(cmd, input)
  local tmp = os.tmpname()
  local redirect = input and " <" .. tmp .. ".in" or ""
  if input then
    local f = assert(io.open(tmp .. ".in", "w"))
    f:write(input)
    f:close()
  end
  local line = "(" .. cmd .. ")" .. redirect .. " 2>" .. tmp .. ".err; echo \"status=$?\""
  local p = assert(io.popen(line))
  local out = p:read("*a")
  p:close()
  local ef = assert(io.open(tmp .. ".err"))
  local err = ef:read("*a")
  ef:close()
  os.remove(tmp)
  os.remove(tmp .. ".err")
  os.remove(tmp .. ".in")
  local status = tonumber(out:match("status=(%d+)\n$"))
  return (out:gsub("status=%d+\n$", "")), err, status
end

-- The same with stderr merged into stdout: returns the output and the exit status.
function shell.run_merged(cmd)
  local out, _, status = shell.run("(" .. cmd .. ") 2>&1")
  return out, status
end

return shell
