-- smarm.processes and smarm.info: each scheduler answers for its own actors.
local smarm = require "smarm"

local function contains(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

describe("smarm.processes", function()
  it("lists the live actors of every scheduler, the caller's included", function()
    smarm.run(function()
      local me = smarm.self()
      local here = smarm.spawn(function() smarm.receive() end)
      local there = smarm.spawn_on(2, function() smarm.receive() end)
      local gone = smarm.spawn(function() end)
      smarm.yield()
      smarm.yield()
      local all = smarm.processes()
      assert.is_true(contains(all, me))
      assert.is_true(contains(all, here))
      assert.is_true(contains(all, there))
      assert.is_false(contains(all, gone))
      assert.equals(3, #all) -- no actor of its own is left behind in the list
    end, { schedulers = 2 })
  end)
end)

describe("smarm.info", function()
  it("tells status, what it waits for, scheduler, name, mailbox and traceback", function()
    smarm.run(function()
      local me = smarm.self()
      local receiver = smarm.spawn_on(2, function()
        smarm.register("receiver", smarm.self())
        smarm.send(me, "registered")
        smarm.receive(function(m) return m == "wanted" end) -- line 35
      end)
      local sleeper = smarm.spawn(function() smarm.sleep(3600) end)
      assert.equals("registered", smarm.receive())
      smarm.send(receiver, "unwanted")
      smarm.send(receiver, "unwanted")
      smarm.yield()
      local i = smarm.info(receiver)
      while i.mailbox < 2 do smarm.yield(); i = smarm.info(receiver) end -- both delivered
      assert.equals(receiver, i.pid)
      assert.equals("waiting", i.status)
      assert.equals("receive", i.waiting)
      assert.equals(2, i.scheduler)
      assert.equals("receiver", i.name)
      assert.equals(2, i.mailbox)
      assert.matches("info_spec.lua:35:", i.traceback, 1, true)
      local s = smarm.info(sleeper)
      assert.equals("sleep", s.waiting)
      assert.equals(1, s.scheduler)
      assert.is_nil(s.name)
      local mine = smarm.info(me)
      assert.equals("running", mine.status)
      assert.is_nil(mine.waiting)
      assert.matches("info_spec.lua:55:", mine.traceback, 1, true) -- this line
      assert.same({ status = "waiting" }, smarm.info(receiver, "status"))
      assert.same({ waiting = "sleep", scheduler = 1 }, smarm.info(sleeper, { "waiting", "scheduler" }))
    end, { schedulers = 2 })
  end)

  it("answers nil for an actor that is not alive, and raises on bad arguments", function()
    smarm.run(function()
      local done = smarm.spawn_on(2, function() end)
      local _, ref = smarm.spawn_monitor(function() end)
      smarm.receive(function(m) return type(m) == "table" and m.ref == ref end)
      while smarm.alive(done) do smarm.yield() end
      assert.is_nil(smarm.info(done))
      assert.has_error(function() smarm.info("x") end,
        "bad argument #1 to 'info' (pid expected, got string)")
      assert.has_error(function() smarm.info(smarm.self(), 5) end,
        "bad argument #2 to 'info' (key or list of keys expected, got number)")
    end, { schedulers = 2 })
  end)
end)
