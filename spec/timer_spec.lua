-- smarm.send_after and smarm.cancel_timer: messages sent later (Erlang's send_after and
-- cancel_timer), on one scheduler and across two. Absence is checked after a sleep on the timer's
-- own scheduler with a later deadline: that scheduler fires deadlines in order, so a timer that
-- was not cancelled would have sent its message first, however slow the machine.
local smarm = require("smarm")

local WAIT = 60 -- a hang guard in seconds, never a time budget

-- Runs body(target) in a run of two schedulers, once with the target being the main actor
-- itself and once with a forwarder on scheduler 2 that passes every message on to the main
-- actor; a "marker" makes it sleep 0.1 s on its scheduler first.
local function both(body)
  smarm.run(function() body(smarm.self()) end, { schedulers = 2 })
  smarm.run(function()
    local target = smarm.spawn_on(2, function(to)
      local s = require("smarm")
      while true do
        local m = s.receive()
        if m == "marker" then s.sleep(0.1) end
        s.send(to, m)
      end
    end, smarm.self())
    body(target)
  end, { schedulers = 2 })
end

-- Nothing more comes from target (see the top): the marker, or a sleep here, comes last.
local function nothing_more(target)
  if target == smarm.self() then
    smarm.sleep(0.1)
  else
    smarm.send(target, "marker")
    assert.are.equal("marker", smarm.receive(WAIT))
  end
  assert.are.same({ nil, "timeout" }, { smarm.receive(0) })
end

describe("smarm.send_after", function()
  it("sends messages later, in deadline order, here and across schedulers", function()
    both(function(target)
      local a, c
      if target == smarm.self() then -- latest first (the heap orders them), far enough apart
        c = smarm.send_after(1, target, { n = 3 }) -- that no stall between calls reorders them
        smarm.send_after(0.5, target, { n = 2 })
        a = smarm.send_after(0, target, { n = 1 })
      else -- each set is a round trip of any length: deadlines in the order of the calls
        a = smarm.send_after(0, target, { n = 1 })
        smarm.send_after(0.01, target, { n = 2 })
        c = smarm.send_after(0.03, target, { n = 3 })
      end
      for n = 1, 3 do assert.are.same({ n = n }, smarm.receive(WAIT)) end
      assert.is_false(smarm.cancel_timer(a)) -- fired: nothing to cancel
      assert.is_false(smarm.cancel_timer(c))
    end)
  end)

  it("never sends a cancelled timer's message, and says what time it had left", function()
    both(function(target)
      local t = smarm.send_after(0.05, target, "late")
      local left = smarm.cancel_timer(t)
      assert.is_number(left)
      assert.is_true(left >= 0 and left <= 0.05, tostring(left))
      assert.is_false(smarm.cancel_timer(t)) -- once
      nothing_more(target)
    end)
  end)

  it("can be cancelled by another actor that received the timer in a message", function()
    smarm.run(function()
      local me = smarm.self()
      local t = smarm.send_after(3600, me, "never")
      assert.matches("^#Timer<", tostring(t))
      local canceller = smarm.spawn_on(2, function(owner)
        local s = require("smarm")
        local got = s.receive()
        s.send(owner, { left = s.cancel_timer(got.t), same = got.t == got.copy })
      end, me)
      smarm.send(canceller, { t = t, copy = t })
      local r = smarm.receive(WAIT)
      assert.is_true(r.left > 3500, tostring(r.left))
      assert.is_true(r.same)
      assert.is_false(smarm.cancel_timer(t))
    end, { schedulers = 2 })
  end)

  it("goes with its target: after the target's end there is nothing to cancel", function()
    for _, where in ipairs({ 1, 2 }) do
      smarm.run(function()
        local pid, ref = smarm.spawn_opt({ on = where, monitor = true },
          function() require("smarm").receive() end)
        local t = smarm.send_after(3600, pid, "never")
        smarm.kill(pid)
        local d = smarm.receive(WAIT)
        assert.are.equal(ref, d.ref)
        assert.is_false(smarm.cancel_timer(t))
        assert.is_false(smarm.cancel_timer(smarm.send_after(0, pid, "to a dead actor")))
      end, { schedulers = 2 })
    end
  end)

  it("takes a registered name, and reaches a server's handle_info", function()
    local server = require("smarm.server")
    smarm.run(function()
      local pid = assert(server.start({
        init = function(watcher) return "ok", watcher end,
        handle_info = function(msg, watcher)
          smarm.send(watcher, { heard = msg })
          return "noreply", watcher
        end,
      }, smarm.self(), { name = "ticker" }))
      smarm.send_after(0.5, pid, "second")
      smarm.send_after(0, "ticker", "first")
      assert.are.same({ heard = "first" }, smarm.receive(WAIT))
      assert.are.same({ heard = "second" }, smarm.receive(WAIT))
      assert.is_true(server.stop(pid))
    end)
  end)

  it("refuses bad arguments", function()
    smarm.run(function()
      local me = smarm.self()
      assert.has_error(function() smarm.send_after(-1, me, "x") end)
      assert.has_error(function() smarm.send_after(0 / 0, me, "x") end)
      assert.has_error(function() smarm.send_after(0, "nobody-has-this", "x") end,
        "smarm.send_after: no actor is registered as 'nobody-has-this'")
      assert.has_error(function() smarm.send_after(0, me, nil) end)
      local ok, err = pcall(smarm.send_after, 0, me, { f = coroutine.create(print) })
      assert.is_false(ok)
      assert.matches("message.f is a thread", err)
      assert.has_error(function() smarm.cancel_timer(smarm.ref()) end)
      assert.has_error(function() smarm.cancel_timer({}) end)
      assert.are.same({ nil, "timeout" }, { smarm.receive(0) }) -- nothing was sent
    end)
    assert.has_error(function() smarm.send_after(0, 1, "x") end) -- outside a runtime
  end)
end)
