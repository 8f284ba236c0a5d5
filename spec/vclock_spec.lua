-- Virtual time: smarm.run(fn, { clock = "virtual" }) (src/core/vclock.c, docs/api.md). The actors'
-- clock starts at 0, stands still while any actor can run, and jumps to the earliest deadline (a
-- sleep, a receive's timeout, a send_after) once every actor waits and no IO is in flight. These
-- specs assert simulated times exactly (smarm.now() is a whole number of seconds where every
-- deadline is) and real time only as "far below what was simulated": no real-time bound is tight.
-- Runs go through guard.run, whose watchdog is on the real clock: guard.receive's and guard.wait's
-- limits would be on the simulated one here, so the waits below have no limit of their own.
local smarm = require("smarm")
local guard = dofile("spec/support/guard.lua")

local VIRTUAL2 = { clock = "virtual", schedulers = 2 }

local function real_now() return (smarm.clock()) / 1e9 end -- the real clock, in seconds

describe("virtual time", function()
  it("sleeps a simulated hour in far less real time", function()
    local start = real_now()
    local now = guard.run(function()
      assert(smarm.now() == 0, "the clock starts at 0")
      smarm.sleep(3600)
      return smarm.now()
    end, VIRTUAL2)
    assert.are.equal(3600, now)
    -- far less real time than simulated (not a time limit: a machine 100 times slower passes)
    assert.is_true(real_now() - start < 360, "an hour took " .. (real_now() - start) .. " s")
  end)

  it("wakes 1,000 actors sleeping random minutes each at its own minute, in order", function()
    local start = real_now()
    local got, last = guard.run(function()
      local me = smarm.self()
      local minutes = {}
      for i = 1, 1000 do
        minutes[i] = math.random(1, 120)
        smarm.spawn_on("any", function(to, m)
          local s = require("smarm")
          s.sleep(m * 60)
          s.send(to, { m = m, at = s.now() })
        end, me, minutes[i])
      end
      local seen = {}
      for i = 1, 1000 do seen[i] = smarm.receive() end
      return seen, smarm.now()
    end, VIRTUAL2)
    local latest = 0
    for i, r in ipairs(got) do
      assert.are.equal(r.m * 60, r.at, "actor " .. i .. " woke at its deadline")
      assert.is_true(r.at >= latest, "in deadline order")
      latest = r.at
    end
    assert.are.equal(latest, last)
    assert.is_true(real_now() - start < 720, "two hours took " .. (real_now() - start) .. " s")
  end)

  it("fires sleeps, receive timeouts, send_after and call timeouts in order across schedulers",
    function()
      local events = guard.run(function()
        local me = smarm.self()
        local fwd = smarm.spawn_on(2, function(to)
          local s = require("smarm")
          local m = s.receive(function(m) return m == "send_after 25" end)
          s.send(to, { m, s.now() })
          s.receive(function() return false end) -- never answers the call below
        end, me)
        smarm.spawn_on(2, function(to)
          local s = require("smarm")
          local m, err = s.receive(30)
          s.send(to, { err or m, s.now() })
        end, me)
        smarm.spawn_on(1, function(to)
          local s = require("smarm")
          s.sleep(10)
          s.send(to, { "sleep 10", s.now() })
        end, me)
        smarm.spawn_on(2, function(to)
          local s = require("smarm")
          s.sleep(40)
          s.send(to, { "sleep 40", s.now() })
        end, me)
        smarm.send_after(20, me, { "send_after 20", 20 })
        smarm.send_after(25, fwd, "send_after 25")
        local cancelled = smarm.send_after(35, me, { "cancelled", 35 })
        assert.are.equal(35, smarm.cancel_timer(cancelled))
        smarm.spawn_on(1, function(to, server)
          local s = require("smarm")
          local reply, err = s.call(server, "hello", 45)
          s.send(to, { (reply or err) .. " 45", s.now() })
        end, me, fwd)
        local seen = {}
        for i = 1, 6 do
          local e = smarm.receive()
          seen[i] = { e[1], e[2], smarm.now() }
        end
        assert.are.same({ nil, "timeout" }, { smarm.receive(3600) }) -- nothing else comes
        return seen
      end, VIRTUAL2)
      assert.are.same({
        { "sleep 10", 10, 10 }, { "send_after 20", 20, 20 }, { "send_after 25", 25, 25 },
        { "timeout", 30, 30 }, { "sleep 40", 40, 40 }, { "timeout 45", 45, 45 },
      }, events)
    end)

  it("delivers a message sent at an earlier simulated time before a receive times out", function()
    local r = guard.run(function()
      local me = smarm.self()
      local function race(send_at)
        local receiver = smarm.spawn_on(2, function(to)
          local s = require("smarm")
          local m, err = s.receive(10)
          s.send(to, { m or err, s.now() })
        end, me)
        local t0 = smarm.now()
        smarm.spawn_on(1, function(to, t)
          local s = require("smarm")
          s.sleep(t)
          s.send(to, "message")
        end, receiver, send_at)
        local got = smarm.receive()
        return { got[1], got[2] - t0 }
      end
      return { race(5), race(15), race(9.999) }
    end, VIRTUAL2)
    assert.are.same({ "message", 5 }, r[1])
    assert.are.same({ "timeout", 10 }, r[2])
    assert.are.equal("message", r[3][1])
  end)

  it("keeps smarm.now() still while an actor computes", function()
    local early, clock_moved, after = guard.run(function()
      local me = smarm.self()
      smarm.spawn_on(2, function(to)
        local s = require("smarm")
        s.sleep(0.001) -- long gone in real time before the loop below ends
        s.send(to, s.now())
      end, me)
      local early, moved, x = 0, 0, 0
      for i = 1, 20000 do
        for j = 1, 50 do x = x + i * j end -- compute
        smarm.yield() -- and give way: still runnable, so the clock stays
        if smarm.receive(0) ~= nil then early = early + 1 end
        if smarm.now() ~= 0 then moved = moved + 1 end
      end
      assert(x > 0)
      return early, moved, smarm.receive()
    end, VIRTUAL2)
    assert.are.equal(0, early)
    assert.are.equal(0, clock_moved)
    assert.are.equal(0.001, after)
  end)

  it("waits for IO in real time, the clock standing still until it is done", function()
    local events = guard.run(function()
      local me = smarm.self()
      smarm.spawn_on(2, function(to) -- a simulated hour, which cannot pass while IO is in flight
        local s = require("smarm")
        s.sleep(3600)
        s.send(to, { "slept", s.now() })
      end, me)
      smarm.spawn_on(1, function(to)
        local s = require("smarm")
        local r = assert(s.process.run({ "sh", "-c", "sleep 0.2; echo done" }))
        s.send(to, { r.stdout, s.now() })
        -- an IO timeout is real time too: nobody connects, the accept gives up after 0.2 s
        local server = assert(s.tcp.listen("127.0.0.1", 0))
        server:settimeout(0.2)
        local conn, err = server:accept()
        server:close()
        s.send(to, { conn or err, s.now() })
      end, me)
      return { smarm.receive(), smarm.receive(), smarm.receive() }
    end, VIRTUAL2)
    assert.are.same({ { "done\n", 0 }, { "timeout", 0 }, { "slept", 3600 } }, events)
  end)

  it("is the real clock by default and with clock = \"real\"", function()
    for _, opts in ipairs({ { schedulers = 1 }, { schedulers = 1, clock = "real" } }) do
      local before = real_now()
      local now = guard.run(function() return smarm.now() end, opts)
      assert.is_true(now >= before and now <= real_now())
    end
  end)

  it("refuses another clock", function()
    for _, clock in ipairs({ "Virtual", "fake", 1, true }) do
      local ok, err = pcall(function() smarm.run(function() end, { clock = clock }) end)
      assert.is_false(ok)
      assert.matches("bad argument #2 to 'run' (opts.clock must be \"real\" or \"virtual\")", err,
        1, true)
    end
  end)
end)
