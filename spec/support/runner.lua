-- A small stand-in for busted, for where busted cannot run: the aarch64 build under qemu-user
-- (busted's C modules exist only for the host). It gives the specs what they use of busted and
-- luassert: describe, it, pending, before_each / after_each (for the cases of their describe
-- block and the blocks inside it, outermost first / innermost first), teardown (after all the
-- cases: a spec file's clean-up of what its cases share), and assert.are.equal /
-- are.same (also equals / same) / matches (luassert's init and plain too) / is_true / is_false /
-- is_nil / is_number / is_table / truthy / has_error.
-- Run with the smarm executable in plain mode, from the repository root:
--   smarm -n spec/support/runner.lua spec/actor_spec.lua spec/message_spec.lua ...
-- It prints each case's result and ends with busted's summary line
-- "N successes / N failures / N errors / N pending".

local cases = {} -- { name =, fn =, before =, after = } in the order the files declare them
local prefix = {}
local befores, afters = {}, {} -- per describe level: the hooks declared at it

local function full_name(name)
  local parts = {}
  for i = 1, #prefix do parts[i] = prefix[i] end
  parts[#parts + 1] = name
  return table.concat(parts, " ")
end

function describe(name, body) -- luacheck: ignore (busted's globals)
  prefix[#prefix + 1] = name
  befores[#prefix], afters[#prefix] = {}, {}
  body()
  befores[#prefix], afters[#prefix] = nil, nil
  prefix[#prefix] = nil
end

local teardowns = {}
function teardown(fn) teardowns[#teardowns + 1] = fn end -- luacheck: ignore

function before_each(fn) table.insert(befores[#prefix], fn) end -- luacheck: ignore
function after_each(fn) table.insert(afters[#prefix], fn) end -- luacheck: ignore

function it(name, fn) -- luacheck: ignore
  local before, after = {}, {}
  for level = 1, #prefix do
    for _, h in ipairs(befores[level]) do before[#before + 1] = h end
  end
  for level = #prefix, 1, -1 do
    for _, h in ipairs(afters[level]) do after[#after + 1] = h end
  end
  cases[#cases + 1] = { name = full_name(name), fn = fn, before = before, after = after }
end

-- As busted: inside a case it ends the case as pending; at declaration time it adds one.
local PENDING = {}
function pending(why) -- luacheck: ignore
  if #cases > 0 and cases.running then error(PENDING, 0) end
  cases[#cases + 1] = { name = full_name(why), pending = true }
end

-- ---- assertions ------------------------------------------------------------------------------

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

local function fail(what, msg)
  error((msg and (msg .. "\n") or "") .. what, 3)
end

local function deep_equal(a, b, seen)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  seen = seen or {}
  if seen[a] == b then return true end
  seen[a] = b
  for k, v in pairs(a) do
    if not deep_equal(v, b[k], seen) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

local function dump(v, depth)
  depth = depth or 0
  if type(v) ~= "table" or depth > 3 then return show(v) end
  local parts = {}
  for k, x in pairs(v) do parts[#parts + 1] = "[" .. show(k) .. "] = " .. dump(x, depth + 1) end
  table.sort(parts)
  return "{ " .. table.concat(parts, ", ") .. " }"
end

local are = {}
function are.equal(want, got, msg)
  if want ~= got then fail("expected " .. show(want) .. ", got " .. show(got), msg) end
end
function are.same(want, got, msg)
  if not deep_equal(want, got) then fail("expected " .. dump(want) .. ",\n   got " .. dump(got), msg) end
end

local checks = {
  are = are,
  equals = are.equal,
  same = are.same,
  -- matches(pattern, s [, msg]) or, as luassert, matches(pattern, s, init, plain [, msg])
  matches = function(pattern, s, ...)
    local init, plain, msg = 1, false, ...
    if select("#", ...) >= 2 then init, plain, msg = ... end
    if type(s) ~= "string" or not s:find(pattern, init or 1, plain) then
      fail(show(s) .. " does not match " .. show(pattern), msg)
    end
  end,
  is_true = function(v, msg) if v ~= true then fail("expected true, got " .. show(v), msg) end end,
  is_false = function(v, msg) if v ~= false then fail("expected false, got " .. show(v), msg) end end,
  is_nil = function(v, msg) if v ~= nil then fail("expected nil, got " .. show(v), msg) end end,
  is_number = function(v, msg)
    if type(v) ~= "number" then fail("expected a number, got " .. show(v), msg) end
  end,
  is_table = function(v, msg)
    if type(v) ~= "table" then fail("expected a table, got " .. show(v), msg) end
  end,
  truthy = function(v, msg) if not v then fail("expected a true value, got " .. show(v), msg) end end,
  has_error = function(fn, want, msg)
    local ok, err = pcall(fn)
    if ok then fail("expected an error", msg) end
    -- as luassert: the message without its "file:line: " prefix must equal want
    local bare = type(err) == "string" and err:gsub("^[^\n]-:%d+: ", "", 1) or err
    if want ~= nil and err ~= want and bare ~= want then
      fail("expected the error " .. show(want) .. ", got " .. show(err), msg)
    end
  end,
}

-- assert(v, msg) still works as Lua's; assert.x(...) are the checks above.
assert = setmetatable(checks, { __call = function(_, v, ...) -- luacheck: ignore
  if not v then error((...) or "assertion failed!", 2) end
  return v, ...
end })

-- ---- running ---------------------------------------------------------------------------------

for _, file in ipairs(arg) do
  local chunk, err = loadfile(file)
  if not chunk then
    io.stderr:write(err, "\n")
    os.exit(1)
  end
  chunk()
end

local ok_n, fail_n, pending_n = 0, 0, 0
cases.running = true
for _, c in ipairs(cases) do
  if c.pending then
    pending_n = pending_n + 1
    print("pending " .. c.name)
  else
    local function handler(e)
      if e == PENDING then return e end
      return debug.traceback(tostring(e), 2)
    end
    local ok, err = xpcall(function()
      for _, h in ipairs(c.before) do h() end
      c.fn()
    end, handler)
    for _, h in ipairs(c.after) do -- as busted: the after hooks run whatever the case did
      local hok, herr = xpcall(h, handler)
      if ok and not hok then ok, err = false, herr end
    end
    if ok then
      ok_n = ok_n + 1
      print("ok " .. c.name)
    elseif err == PENDING then
      pending_n = pending_n + 1
      print("pending " .. c.name)
    else
      fail_n = fail_n + 1
      print("FAIL " .. c.name .. "\n  " .. tostring(err):gsub("\n", "\n  "))
    end
  end
  io.stdout:flush()
end
for _, h in ipairs(teardowns) do
  local ok, err = xpcall(h, debug.traceback)
  if not ok then
    fail_n = fail_n + 1
    print("FAIL teardown\n  " .. tostring(err):gsub("\n", "\n  "))
  end
end
print(string.format("%d successes / %d failures / 0 errors / %d pending", ok_n, fail_n, pending_n))
os.exit(fail_n == 0 and 0 or 1)
