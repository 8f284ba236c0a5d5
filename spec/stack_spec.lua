-- An actor's C stack (issue #10, item 7): recursion through the C functions that call back into
-- Lua is that actor's problem. string.gsub callbacks nested 30 deep (8 KiB of C stack each) and
-- table.sort comparators recursing 1,000-1,500 deep used to reach the guard page and abort the
-- process; now each raises a catchable "stack overflow" in its actor, and the rest runs on.
local smarm = require("smarm")
local guard = dofile("spec/support/guard.lua")

-- Recurses through gsub callbacks until something raises; returns the depth and the error.
local function deep_gsub()
  local depth = 0
  local function f()
    depth = depth + 1
    return (string.gsub("x", "x", f))
  end
  local ok, err = pcall(f)
  return depth, (not ok) and tostring(err)
end

-- The same through table.sort comparators.
local function deep_sort()
  local depth = 0
  local function g()
    depth = depth + 1
    table.sort({ 3, 2, 1 }, function(a, b) g() return a < b end)
  end
  local ok, err = pcall(g)
  return depth, (not ok) and tostring(err)
end

-- The same through string.format's %s and a __tostring that formats again (a printer of a deep
-- tree); and through tostring, which LuaJIT runs without C recursion (its own limit trips).
local function deep_format(via)
  local depth = 0
  local mt = {}
  mt.__tostring = function()
    depth = depth + 1
    local inner = setmetatable({}, mt)
    return via == "format" and string.format("(%s)", inner) or "(" .. tostring(inner) .. ")"
  end
  local ok, err = pcall(tostring, setmetatable({}, mt))
  return depth, (not ok) and tostring(err)
end

-- Coroutines that each resume a new one (a recursive generator over a deep tree), through
-- coroutine.create and resume or through coroutine.wrap.
local function deep_coroutines(via)
  local depth = 0
  local function body()
    depth = depth + 1
    if via == "wrap" then return coroutine.wrap(body)() end
    local ok, err = coroutine.resume(coroutine.create(body))
    if not ok then error(err, 0) end
  end
  local ok, err = pcall(body)
  return depth, (not ok) and tostring(err)
end

describe("an actor's C stack", function()
  it("gives coroutines nested without end a catchable error, and coroutines still work", function()
    local r = guard.run(function()
      local cd, ce = deep_coroutines("create")
      local wd, we = deep_coroutines("wrap")
      local gen = coroutine.wrap(function(a)
        local b = coroutine.yield(a + 1)
        return b * 2
      end)
      local co = coroutine.create(function(...) return select("#", ...), ... end)
      return { cd = cd, ce = ce, wd = wd, we = we, y1 = gen(1), y2 = gen(5),
        co = { coroutine.resume(co, "a", nil, "c") },
        bad = select(2, pcall(function() local c = coroutine.create(1) return c end)) }
    end)
    assert.equals("stack overflow (coroutines nested too deeply for the actor's C stack)", r.ce)
    assert.equals("stack overflow (coroutines nested too deeply for the actor's C stack)", r.we)
    assert.is_true(r.cd > 100, "create went " .. r.cd .. " deep")
    assert.is_true(r.wd > 100, "wrap went " .. r.wd .. " deep")
    assert.equals(2, r.y1)
    assert.equals(10, r.y2)
    assert.same({ true, 3, "a", nil, "c" }, r.co)
    assert.matches("bad argument #1 to 'create' (function expected, got number)", r.bad, 1, true)
  end)

  it("gives a __tostring that recurses through string.format or tostring a catchable error",
    function()
      local r = guard.run(function()
        local fd, fe = deep_format("format")
        local td, te = deep_format("tostring")
        return { fd = fd, fe = fe, td = td, te = te, ok = string.format("%d-%s", 7, "x") }
      end)
      assert.matches("stack overflow %(string%.format: __tostring nested too deeply", r.fe)
      assert.is_true(r.fd > 50, "format went " .. r.fd .. " deep")
      assert.matches("stack overflow", r.te)
      assert.equals("7-x", r.ok)
    end)

  it("gives nested gsub callbacks and sort comparators a catchable error", function()
    local r = guard.run(function()
      local gd, ge = deep_gsub()
      local sd, se = deep_sort()
      return { gd = gd, ge = ge, sd = sd, se = se }
    end)
    assert.matches("stack overflow %(string%.gsub callbacks nested too deeply", r.ge)
    assert.matches("stack overflow %(table%.sort comparators nested too deeply", r.se)
    assert.is_true(r.gd > 10, "gsub went " .. r.gd .. " deep")
    assert.is_true(r.sd > 300, "sort went " .. r.sd .. " deep")
  end)

  it("stops an actor that does not catch it, alone", function()
    local r = guard.run(function()
      local me = smarm.self()
      local ticker = smarm.spawn(function()
        local n = 0
        while true do
          local m = smarm.receive()
          if m == "count" then n = n + 1 elseif m == "report" then smarm.send(me, n) end
        end
      end)
      smarm.send(ticker, "count")
      local _, ref = smarm.spawn_monitor(function()
        local function f() return (string.gsub("x", "x", f)) end
        f()
      end)
      local down = guard.receive("the deep actor's DOWN",
        function(m) return type(m) == "table" and m.ref == ref end)
      smarm.send(ticker, "count")
      smarm.send(ticker, "report")
      return { reason = tostring(down.reason.error), counted = guard.receive("the ticker's count") }
    end)
    assert.matches("stack overflow", r.reason)
    assert.are.equal(2, r.counted)
  end)

  it("checks against the stack the run gives its actors, small or large", function()
    local small = guard.run(function() return { deep_gsub() } end, { stack_size = 128 * 1024 })
    local large = guard.run(function() return { deep_gsub() } end, { stack_size = 4 * 1024 * 1024 })
    assert.matches("stack overflow", small[2])
    assert.matches("stack overflow", large[2])
    assert.is_true(large[1] > 2 * small[1], small[1] .. " then " .. large[1])
  end)

  it("refuses a stack below twice the checks' reserve, on which every gsub and sort would raise", function()
    local ok, err = pcall(smarm.run, function() return (string.gsub("a", "a", "b")) end,
      { stack_size = 32 * 1024 })
    assert.is_false(ok)
    assert.matches("opts.stack_size must be from 131072", err)
  end)
end)
