-- smarm.send_after and smarm.cancel_timer: messages sent later (Erlang's send_after and
-- cancel_timer), on one scheduler and across two. Absence is checked after a sleep on the timer's
-- own scheduler with a later deadline: that scheduler fires deadlines in order, so a timer that
-- was not cancelled would have sent its message first, however slow the machine.
local smarm = require("smarm")

local WAIT = 60 -- a hang guard in seconds, never a time budget

-- Runs body(target) in a run of two schedulers, once with the target being the main actor
-- itself (on the clock clock_here, the real one by default) and once with a forwarder on
-- scheduler 2 that passes every message on to the main actor; a marker { sleep = s } makes it
-- sleep s seconds on its scheduler first.
local function both(body, clock_here)
  smarm.run(function() body(smarm.self()) end, { schedulers = 2, clock = clock_here })
  smarm.run(function()
    local target = smarm.spawn_on(2, function(to)
      local s = require("smarm")
      while true do
        local m = s.receive()
        if type(m) == "table" and m.sleep then s.sleep(m.sleep) end
        s.send(to, m)
      end
    end, smarm.self())
    body(target)
  end, { schedulers = 2 })
end

-- Nothing more comes from target, whose timers were due within `delay` s of being set (see the
-- top): a sleep of twice that here, or on the forwarder's scheduler, ends after them.
local function nothing_more(target, delay)
  if target == smarm.self() then
    smarm.sleep(2 * delay)
  else
    local marker = { sleep = 2 * delay }
    smarm.send(target, marker)
    assert.are.same(marker, smarm.receive(WAIT))
    -- what a timer sent it before that sleep ended waits in the forwarder's mailbox, behind the
    -- marker (forwarded after it): it comes before the next message through
    smarm.send(target, "last")
    assert.are.equal("last", smarm.receive(WAIT))
  end
  assert.are.same({ nil, "timeout" }, { smarm.receive(0) })
end

describe("smarm.send_after", function()
  it("sends messages later, in deadline order, here and across schedulers", function()
    both(function(target)
      local a, c
      if target == smarm.self() then -- latest first (the heap orders them); on the virtual
        -- clock, which stands still while this actor runs: no stall between the calls of a
        -- slow machine reorders their deadlines
        c = smarm.send_after(1, target, { n = 3 })
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
    end, "virtual")
  end)

  it("never sends a cancelled timer's message, and says what time it had left", function()
    both(function(target)
      -- The deadline counts from the call, and across schedulers the set and the cancel are a
      -- round trip each: a stall longer than the delay (a slow machine, a thread not run) lets
      -- the timer fire first. Its message then comes (cancel says false), and it is set again
      -- with twice the delay.
      local delay, t, left = 0.05, nil, nil
      for try = 1, 8 do -- up to 6.4 s
        t = smarm.send_after(delay, target, "late")
        left = smarm.cancel_timer(t)
        if left or try == 8 then break end
        assert.are.equal("late", smarm.receive(WAIT))
        delay = 2 * delay
      end
      assert.is_number(left)
      assert.is_true(left >= 0 and left <= delay, tostring(left))
      assert.is_false(smarm.cancel_timer(t)) -- once
      nothing_more(target, delay)
    end)
  end)

  it("says a timer past 31 years had all the time in the world left", function()
    both(function(target)
      local far = smarm.send_after(1e12, target, "never") -- beyond 31 years: never fires
      local near = smarm.send_after(1e8, target, "not yet") -- about 3 years: counted
      assert.are.equal(math.huge, smarm.cancel_timer(far))
      local left = smarm.cancel_timer(near)
      assert.is_true(left > 1e8 - 3600 and left <= 1e8, tostring(left))
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
      -- set in the order they come: a stall between the calls cannot put "second" first
      smarm.send_after(0, "ticker", "first")
      smarm.send_after(0.5, pid, "second")
      assert.are.same({ heard = "first" }, smarm.receive(WAIT))
      assert.are.same({ heard = "second" }, smarm.receive(WAIT))
      assert.is_true(server.stop(pid))
    end)
  end)

  -- Erlang's send_after to an atom looks the name up when it fires; smarm's looked it up when
  -- it was set, so a server restarted under its name (a supervisor's child) never got the tick
  -- meant for it: the timer went with the old pid. On the virtual clock, which stands still
  -- while any actor can run, the timer fires only once every actor waits, after the moves here.
  it("looks a name up when it fires: whoever holds it then gets the message", function()
    for _, where in ipairs({ 1, 2 }) do
      local got = smarm.run(function()
        local me = smarm.self()
        local function holder(tag) -- holds "ticker", says so, and passes on what it gets
          return smarm.spawn_opt({ on = where, monitor = true }, function()
            local s = require("smarm")
            s.register("ticker", s.self())
            s.send(me, "holding")
            while true do s.send(me, { [tag] = s.receive() }) end
          end)
        end
        -- set while nobody holds the name: no error, as Erlang's
        local t = smarm.send_after(10, "ticker", "tick")
        local first, ref = holder("first")
        assert.are.equal("holding", smarm.receive())
        smarm.kill(first) -- the first holder ends; the timer does not go with it
        assert.are.equal(ref, smarm.receive().ref)
        holder("second")
        assert.are.equal("holding", smarm.receive())
        local m = smarm.receive()
        return { m = m, after = smarm.cancel_timer(t) }
      end, { schedulers = 2, clock = "virtual" })
      assert.are.same({ m = { second = "tick" }, after = false }, got)
    end
  end)

  it("sends nothing when nobody holds the name as it fires, and is cancelled from anywhere", function()
    local got = smarm.run(function()
      local me = smarm.self()
      local out = {}
      local t = smarm.send_after(1, "nobody-holds-this", "lost")
      smarm.sleep(2) -- (virtual: at once) it fired, and nobody got it
      out.nothing = { smarm.receive(0) }
      out.fired = smarm.cancel_timer(t)
      -- a timer to a name travels in messages, and another scheduler's actor cancels it
      smarm.register("me", me)
      local later = smarm.send_after(3600, "me", "never")
      smarm.spawn_on(2, function(timer)
        local s = require("smarm")
        s.send(me, { left = s.cancel_timer(timer), again = s.cancel_timer(timer) })
      end, later)
      out.cancel = smarm.receive()
      smarm.sleep(7200) -- past its deadline (virtual): nothing comes
      out.after = { smarm.receive(0) }
      return out
    end, { schedulers = 2, clock = "virtual" })
    assert.are.same({ nil, "timeout" }, got.nothing)
    assert.is_false(got.fired)
    assert.are.equal(3600, got.cancel.left) -- (the virtual clock stood still meanwhile)
    assert.is_false(got.cancel.again)
    assert.are.same({ nil, "timeout" }, got.after)
  end)

  -- A timer that came back in a message was a new userdata: == held, but as a table key it
  -- was another key (refs and pids are interned; an OTP user keys a map by TRef).
  it("is the same table key when it comes back in a message, here or from another scheduler", function()
    local got = smarm.run(function()
      local me = smarm.self()
      local t = smarm.send_after(60, me, "never read")
      local by_timer = { [t] = "mine" }
      local echo = smarm.spawn_on(2, function()
        local m = smarm.receive()
        smarm.send(m.me, m)
      end)
      smarm.send(echo, { me = me, t = t })
      local far = smarm.receive(function(m) return type(m) == "table" and m.t end, 60)
      smarm.send(me, { t = t })
      local near = smarm.receive(function(m) return type(m) == "table" and m.t end, 60)
      local out = { far = by_timer[far.t], near = by_timer[near.t], same = rawequal(far.t, t) }
      smarm.cancel_timer(t)
      return out
    end, { schedulers = 2 })
    assert.are.same({ far = "mine", near = "mine", same = true }, got)
  end)

  it("refuses bad arguments", function()
    smarm.run(function()
      local me = smarm.self()
      assert.has_error(function() smarm.send_after(-1, me, "x") end)
      assert.has_error(function() smarm.send_after(0 / 0, me, "x") end)
      -- a string that reads as a number is refused, as by every other duration (it fired)
      local ok_s, err_s = pcall(smarm.send_after, "0.1", me, "x")
      assert.is_false(ok_s)
      assert.matches("bad argument #1 to '[%w_?]*' %(non%-negative number of seconds expected, " ..
        "got string%)", err_s)
      for _, name in ipairs({ "", ("n"):rep(256), "a\0b" }) do
        assert.has_error(function() smarm.send_after(0, name, "x") end,
          "bad argument #2 to 'send_after' (a name is 1 to 255 bytes, without NUL)")
      end
      assert.has_error(function() smarm.send_after(0, "a name", nil) end,
        "bad argument #3 to 'send_after' (message expected, got nil)")
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
