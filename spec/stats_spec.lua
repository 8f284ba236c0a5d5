-- smarm.stats: counters that move with what the actors do (issue #14, item 2). Counts only:
-- no assertion here depends on how fast the machine is (the busy shares compare a scheduler
-- that never idles with one that never runs).
local smarm = require "smarm"

local WAIT = 60 -- a hang guard in seconds, never a time budget

-- Sleeps a millisecond at a time until ok() (at most WAIT seconds); returns whether it came.
local function wait_until(ok)
  for _ = 1, WAIT * 1000 do
    if ok() then return true end
    smarm.sleep(0.001)
  end
  return ok()
end

describe("smarm.stats", function()
  it("counts the messages each scheduler's actors send and receive", function()
    smarm.run(function()
      local me = smarm.self()
      local there = smarm.spawn_on(2, function()
        for _ = 1, 10 do smarm.receive() end
        smarm.send(me, "done")
        smarm.receive()
      end)
      local here = smarm.spawn(function() for _ = 1, 5 do smarm.receive() end end)
      smarm.yield()
      local before = smarm.stats()
      for i = 1, 10 do smarm.send(there, i) end
      for i = 1, 5 do smarm.send(here, i) end
      assert.are.equal("done", smarm.receive(nil, WAIT))
      local after = smarm.stats()
      assert.are.equal(15, after[1].sent - before[1].sent)
      assert.are.equal(5 + 1, after[1].received - before[1].received) -- here's five, and "done"
      assert.are.equal(10, after[2].received - before[2].received)
      assert.are.equal(1, after[2].sent - before[2].sent)
      assert.are.equal(after[1].sent + after[2].sent, after.total.sent)
    end, { schedulers = 2 })
  end)

  it("counts the idle spin's pauses per scheduler and in total", function()
    -- A pause needs a busy machine (spec/c/test_runtime.c makes one); here only the counts.
    smarm.run(function()
      local st = smarm.stats()
      for k = 1, 2 do assert.are.equal("number", type(st[k].spin_pauses)) end
      assert.are.equal(st[1].spin_pauses + st[2].spin_pauses, st.total.spin_pauses)
    end, { schedulers = 2 })
  end)

  it("tells the run queue, the pending timers and the live actors now", function()
    smarm.run(function()
      local pids = {}
      for i = 1, 7 do pids[i] = smarm.spawn(function() smarm.sleep(3600) end) end
      local queued = smarm.stats()[1]
      assert.are.equal(7, queued.runq) -- spawned, not yet run
      assert.are.equal(8, queued.live)
      -- they run and sleep; on a slow machine (qemu) this one's 10 ms may end first, so it
      -- waits until all seven sleep, then once more: the count is published as of the
      -- scheduler's last look at its timers, the one that woke this actor
      local function all_asleep()
        for _, p in ipairs(pids) do
          if smarm.info(p).waiting ~= "sleep" then return false end
        end
        return true
      end
      repeat smarm.sleep(0.01) until all_asleep()
      smarm.sleep(0.01)
      local sleeping = smarm.stats()[1]
      assert.are.equal(0, sleeping.runq)
      assert.are.equal(7, sleeping.timers)
    end, { schedulers = 1, slice = math.huge }) -- no slice ends in the spawning loop
  end)

  it("tells each scheduler's busy share: one that never idles, one that never runs", function()
    smarm.run(function()
      local me = smarm.self()
      local spinner = smarm.spawn_on(2, function()
        smarm.send(me, "spinning")
        repeat smarm.yield() -- alone there: never idle, until told
        until smarm.receive(function(m) return m == "stop" end, 0)
      end)
      assert.are.equal("spinning", smarm.receive(nil, WAIT))
      local before = smarm.stats()
      local t = smarm.now()
      while smarm.now() - t < 0.2 do smarm.sleep(0.05) end
      local after = smarm.stats()
      smarm.send(spinner, "stop")
      local function share(k)
        return (after[k].busy_ns - before[k].busy_ns) / (after[k].wall_ns - before[k].wall_ns)
      end
      assert.is_true(share(2) > 0.8, "scheduler 2 spins, busy " .. share(2))
      assert.is_true(share(1) < 0.5, "scheduler 1 sleeps, busy " .. share(1))
      for _, s in ipairs({ after[1], after[2], after.total }) do
        assert.is_true(s.busy >= 0 and s.busy <= 1)
        assert.is_true(s.busy_ns <= s.wall_ns)
      end
    end, { schedulers = 2 })
  end)

  it("tells every VM's memory, as of its scheduler's last look at its timers", function()
    smarm.run(function()
      local me = smarm.self()
      local small = smarm.stats()[2].memory
      local big = smarm.spawn_on(2, function()
        local hold = { string.rep("x", 2 * 1024 * 1024) }
        smarm.send(me, "holding")
        smarm.receive()
        return #hold
      end)
      assert.are.equal("holding", smarm.receive(nil, WAIT))
      -- told when its scheduler idles after the actor has parked: later than an info that says
      -- the actor waits (answered before that idle), so waited for
      local s
      assert.is_true(wait_until(function()
        s = smarm.stats()
        return s[2].memory >= small + 2 * 1024 * 1024
      end), "scheduler 2's VM: " .. s[2].memory)
      assert.are.equal(s[1].memory + s[2].memory, s.total.memory)
      assert.is_true(math.abs(s[1].memory - s.memory) < 1024 * 1024) -- the caller's, now
      smarm.send(big, "go")
    end, { schedulers = 2 })
  end)

  it("counts the IO requests in flight", function()
    smarm.run(function()
      local server = assert(smarm.tcp.listen("127.0.0.1", 0))
      local _, port = server:getsockname()
      local me = smarm.self()
      local reader = smarm.spawn(function()
        local c = assert(smarm.tcp.connect("127.0.0.1", port))
        smarm.send(me, "connected")
        return c:receive() -- waits on the IO thread
      end)
      smarm.monitor(reader)
      assert.are.equal("connected", smarm.receive(nil, WAIT))
      local conn = assert(server:accept())
      assert.is_true(wait_until(function()
        return smarm.info(reader, "waiting").waiting == "io:tcp.receive"
      end))
      assert.is_true(smarm.stats().io_in_flight >= 1)
      conn:send("line\n")
      smarm.receive(function(m) return type(m) == "table" and m.smarm == "DOWN" end, WAIT)
      conn:close()
      server:close()
      assert.is_true(wait_until(function() return smarm.stats().io_in_flight == 0 end))
    end, { schedulers = 1 })
  end)
end)
