-- smarm.spawn_on: functions moving between VMs, messages across schedulers, require safety.
local smarm = require("smarm")
local guard = dofile("spec/support/guard.lua")
local HANG = guard.HANG -- seconds: receive limits below only guard against a hang

package.path = "spec/fixtures/?.lua;" .. package.path

describe("smarm.spawn_on", function()
  it("starts an actor on the scheduler asked, with copied arguments and upvalues", function()
    local r = smarm.run(function()
      local me = smarm.self()
      local config = { factor = 10, name = "cfg" }
      local p = smarm.spawn_on(2, function(a, t)
        t.changed = true
        smarm.send(me, { sched = smarm.scheduler(), v = a * config.factor, name = config.name,
          self = smarm.self() })
      end, 4, { changed = false })
      local got = guard.receive("the spawned actor's report")
      got.pid_matches = got.self == p
      got.pid_sched = tostring(p):match("^<(%d+)%.")
      return got
    end, { schedulers = 2 })
    assert.are.equal(2, r.sched)
    assert.are.equal(40, r.v)
    assert.are.equal("cfg", r.name)
    assert.is_true(r.pid_matches)
    assert.are.equal("2", r.pid_sched)
  end)

  it("re-binds loaded modules and globals by name in the target VM", function()
    local r = smarm.run(function()
      local me = smarm.self()
      local fmt = string.format
      smarm.spawn_on(2, function()
        smarm.send(me, fmt("%s-%d", type(smarm.receive), smarm.scheduler()))
      end)
      return guard.receive("the spawned actor's report")
    end, { schedulers = 2 })
    assert.are.equal("function-2", r)
  end)

  it("names an upvalue that cannot move", function()
    local err = smarm.run(function()
      local helper = function() end
      local ok, e = pcall(smarm.spawn_on, 2, function() helper() end)
      return (not ok) and e
    end, { schedulers = 2 })
    assert.matches("upvalue 'helper' is a function", err)
  end)

  it("names an argument that cannot move", function()
    local err = smarm.run(function()
      local ok, e = pcall(smarm.spawn_on, 2, function() end, { cb = print })
      return (not ok) and e
    end, { schedulers = 2 })
    assert.matches("argument%.args%[1%]%.cb is a function", err)
  end)

  it("spawns by 'module.function' name", function()
    local r = smarm.run(function()
      smarm.spawn_on(2, "smarm_slow_module.where", smarm.self(), "named")
      return guard.receive("the named function's report")
    end, { schedulers = 2 })
    assert.are.equal("named", r.tag)
    assert.are.equal(2, r.sched)
  end)

  it("balances with 'any'", function()
    local counts = smarm.run(function()
      local me = smarm.self()
      local c = { 0, 0 }
      for _ = 1, 40 do
        -- each stays alive (parked) until the run ends, so that it counts for the balance
        smarm.spawn_on("any", function() smarm.send(me, smarm.scheduler()); smarm.receive() end)
        local k = guard.receive("a spawned actor's scheduler")
        c[k] = c[k] + 1
      end
      return c
    end, { schedulers = 2 })
    assert.is_true(counts[1] > 0)
    assert.is_true(counts[2] > 0)
  end)

  it("rejects bad arguments", function()
    local e1, e2, e3, e4, e5 = smarm.run(function()
      local _, a = pcall(function() smarm.spawn_on(3, function() end) end)
      local _, b = pcall(function() smarm.spawn_on(1, 42) end)
      local _, c = pcall(function() smarm.spawn_on(2, print) end)
      local _, d = pcall(function() smarm.spawn_on(2, "nodot") end)
      local _, e = pcall(function() smarm.spawn_on(2, "trailing.") end)
      return a, b, c, d, e
    end, { schedulers = 2 })
    assert.matches("bad argument #1 to 'spawn_on'", e1)
    assert.matches("bad argument #2 to 'spawn_on' %(function or \"module.function\" expected, got number%)", e2)
    assert.matches("C function cannot move", e3)
    assert.matches("bad argument #2 to 'spawn_on' %('nodot' is not of the form module.function%)", e4)
    assert.matches("'trailing%.' is not of the form module.function", e5)
  end)

  it("reports a bad 'module.function' in the new actor, which dies alone", function()
    local still = smarm.run(function()
      local a = smarm.spawn_on(2, "no_such_module_here.fn")
      local b = smarm.spawn_on(2, "smarm_slow_module.nothing")
      guard.ended(a, "the actor of a missing module")
      guard.ended(b, "the actor of a missing function")
      return "alive"
    end, { schedulers = 2 })
    assert.are.equal("alive", still)
  end)

  it("runs thousands of actors across schedulers, messages crossing both ways", function()
    local n = 2000
    local total, by = smarm.run(function()
      local me = smarm.self()
      local pids = {}
      for i = 1, n do
        -- no wall-clock budget: an actor may wait as long as the other spawns take
        pids[i] = smarm.spawn_on(i % 2 + 1, function(v)
          local m = smarm.receive(HANG)
          smarm.send(me, { v = v * m, sched = smarm.scheduler() })
        end, i)
      end
      for i = 1, n do smarm.send(pids[i], 2) end
      local sum, per = 0, { 0, 0 }
      for _ = 1, n do
        local r = guard.receive("an actor's answer")
        sum = sum + r.v
        per[r.sched] = per[r.sched] + 1
      end
      return sum, per
    end, { schedulers = 2 })
    assert.are.equal(n * (n + 1), total)
    assert.are.equal(n / 2, by[1])
    assert.are.equal(n / 2, by[2])
  end)
end)

describe("require while a loader is parked", function()
  it("gives the module to every requirer, loading it once", function()
    local same, loads = smarm.run(function()
      package.loaded.smarm_slow_module = nil
      _G.smarm_slow_module_loads = 0
      local got = {}
      for i = 1, 3 do
        smarm.spawn(function() got[i] = require("smarm_slow_module") end)
      end
      guard.wait(function() return got[1] and got[2] and got[3] end, "three requirers")
      return got[1] == got[2] and got[2] == got[3], _G.smarm_slow_module_loads
    end)
    assert.is_true(same)
    assert.are.equal(1, loads)
  end)

  it("loads a module afresh after a run stopped its loader half-way", function()
    package.loaded.smarm_stuck_module = nil
    _G.smarm_stuck_module_mode = "park"
    smarm.run(function()
      smarm.spawn(require, "smarm_stuck_module") -- parks in the top level until the run ends
      smarm.yield() -- the loader (this scheduler) runs until it parks
    end)
    _G.smarm_stuck_module_mode = nil
    local got = smarm.run(function()
      local me = smarm.self()
      smarm.spawn(function() smarm.send(me, require("smarm_stuck_module")) end)
      return guard.receive("the requirer's module")
    end)
    assert.are.same({}, got) -- loaded (mode nil), not "timeout" or a loop error
    -- and outside a run, too
    package.loaded.smarm_stuck_module = nil
    _G.smarm_stuck_module_mode = "park"
    smarm.run(function()
      smarm.spawn(require, "smarm_stuck_module")
      smarm.yield() -- the loader (this scheduler) runs until it parks
    end)
    _G.smarm_stuck_module_mode = "plain"
    assert.are.equal("plain", require("smarm_stuck_module").mode)
  end)

  it("lets a waiting requirer load a module whose loader exited in its top level", function()
    local got = smarm.run(function()
      package.loaded.smarm_stuck_module = nil
      _G.smarm_stuck_module_mode = "exit"
      smarm.spawn(require, "smarm_stuck_module") -- ends its actor half-way through loading
      local me = smarm.self()
      smarm.spawn(function()
        _G.smarm_stuck_module_mode = "second"
        smarm.send(me, require("smarm_stuck_module"))
      end)
      return guard.receive("the second requirer's module")
    end)
    _G.smarm_stuck_module_mode = nil
    assert.are.same({ mode = "second" }, got)
  end)
end)
