-- Faults in Lua: exit reasons, links, monitors, exit signals, kill, refs, registered names and
-- spawn_opt, on one scheduler and across two (docs/api.md, "Faults").
local smarm = require("smarm")

local WAIT = 60 -- a hang guard in seconds, never a time budget
local fd_count = dofile("spec/support/fds.lua")
local guard = dofile("spec/support/guard.lua")

-- Runs body(where) as the main actor twice: with the other actors on its own scheduler (1 of 1)
-- and on the other one (2 of 2).
local function both(body)
  for _, n in ipairs({ 1, 2 }) do
    smarm.run(function() return body(n) end, { schedulers = n })
  end
end

local function wait_forever() smarm.receive() end

local function next_notice(kind)
  local m = assert(smarm.receive(function(m) return type(m) == "table" and m.smarm == kind end, WAIT))
  return m
end

describe("exit reasons", function()
  it("are normal, a value given to exit, killed, or an error table", function()
    both(function(where)
      local _, r1 = smarm.spawn_opt({ on = where, monitor = true }, function() end)
      local d = next_notice("DOWN")
      assert.are.equal(r1, d.ref)
      assert.are.equal("normal", d.reason)

      smarm.spawn_opt({ on = where, monitor = true }, function() smarm.exit({ code = 7, tags = { "a" } }) end)
      d = next_notice("DOWN")
      assert.are.same({ code = 7, tags = { "a" } }, d.reason)

      local p = smarm.spawn_opt({ on = where, monitor = true }, wait_forever)
      smarm.kill(p)
      d = next_notice("DOWN")
      assert.are.equal(p, d.pid)
      assert.are.equal("killed", d.reason)

      smarm.spawn_opt({ on = where, monitor = true }, function() error({ why = "table error" }) end)
      d = next_notice("DOWN")
      assert.is_table(d.reason)
      assert.are.same({ why = "table error" }, d.reason.error)
      assert.matches("stack traceback", d.reason.traceback)

      smarm.spawn_opt({ on = where, monitor = true }, function() error("plain") end)
      d = next_notice("DOWN")
      assert.matches("plain", d.reason.error)
    end)
  end)

  it("replace a value that cannot be sent by its tostring, and say so", function()
    both(function(where)
      -- a function too: functions travel in messages, but every notice of a reason decodes it,
      -- and decoding a function may run the receiver's require
      smarm.spawn_opt({ on = where, monitor = true }, function() smarm.exit(function() end) end)
      local d = next_notice("DOWN")
      assert.matches("^function: .* %(an exit reason that cannot be sent: reason is a function%)$", d.reason)
      smarm.spawn_opt({ on = where, monitor = true },
        function() smarm.exit({ co = coroutine.create(print) }) end)
      d = next_notice("DOWN")
      assert.matches("^table: .* %(an exit reason that cannot be sent: reason%.co is a thread%)$", d.reason)
      -- a crash keeps its shape and traceback: only its error value is replaced
      smarm.spawn_opt({ on = where, monitor = true },
        function() error({ code = 7, retry = function() end }) end)
      d = next_notice("DOWN")
      assert.matches("^table: .* %(an exit reason that cannot be sent: reason%.error%.retry is a "
        .. "function%)$", d.reason.error)
      assert.matches("^stack traceback:", d.reason.traceback)
      -- and when its __tostring raises too (made there: a metatable does not travel)
      smarm.spawn_opt({ on = where, monitor = true }, function()
        error(setmetatable({ f = print }, { __tostring = function() error("no text") end }))
      end)
      d = next_notice("DOWN")
      assert.matches("^%(a table value%) %(an exit reason that cannot be sent: reason%.error%.f "
        .. "is a function%)$", d.reason.error)
      assert.matches("^stack traceback:", d.reason.traceback)
    end)
  end)

  -- LuaJIT replaces an error raised inside a message handler by "error in error handling": the
  -- handler calls __tostring protected, so the reason keeps its value and its traceback.
  it("keep an error value whose __tostring raises, with its traceback", function()
    local bad = { __tostring = function() error("tostring fails") end }
    both(function(where)
      smarm.spawn_opt({ on = where, monitor = true },
        function() error(setmetatable({ code = 9 }, bad)) end)
      local d = next_notice("DOWN")
      assert.are.same({ code = 9 }, d.reason.error) -- a copy: metatables do not travel
      assert.matches("^stack traceback:", d.reason.traceback)
    end)
    local raised = setmetatable({ code = 10 }, bad)
    local ok, err = pcall(smarm.run, function() error(raised) end)
    assert.is_false(ok)
    assert.are.equal(raised, err)
    assert.matches("^%(error object is a table value: its __tostring failed: .*tostring fails%)\n"
      .. "stack traceback:", smarm.last_traceback())
  end)
end)

describe("monitors", function()
  it("give noproc at once for a dead pid or an unknown name", function()
    both(function(where)
      local p = smarm.spawn_on(where, function() end)
      while smarm.alive(p) do smarm.yield() end
      local ref = smarm.monitor(p)
      local d = next_notice("DOWN")
      assert.are.equal(ref, d.ref)
      assert.are.equal("noproc", d.reason)
      ref = smarm.monitor("nobody-has-this")
      d = next_notice("DOWN")
      assert.are.equal(ref, d.ref)
      assert.are.equal("noproc", d.reason)
    end)
  end)

  it("stop with demonitor, and flush removes a DOWN already queued", function()
    both(function(where)
      local p = smarm.spawn_on(where, wait_forever)
      local ref = smarm.monitor(p)
      assert.is_true(smarm.demonitor(ref))
      assert.is_false(smarm.demonitor(ref))
      smarm.kill(p)
      -- the DOWN of a monitor that ended never comes: a later monitor's DOWN comes alone
      local q = smarm.spawn_on(where, function() end)
      local r2 = smarm.monitor(q)
      assert.are.equal(r2, next_notice("DOWN").ref)
      local q2 = smarm.spawn_on(where, function() end)
      local r3 = smarm.monitor(q2)
      smarm.send(smarm.self(), "after")
      -- set the DOWN aside by a receive that wants something else, then flush it
      assert.are.equal("after", smarm.receive(function(m) return m == "after" end, WAIT))
      while smarm.alive(q2) do smarm.yield() end
      smarm.send(smarm.self(), "last")
      assert.are.equal("last", smarm.receive(function(m) return m == "last" end, WAIT))
      assert.is_false(smarm.demonitor(r3, "flush"))
      assert.are.same({ nil, "timeout" }, { smarm.receive(0) })
    end)
  end)

  it("see the messages sent before a death, then its DOWN", function()
    both(function(where)
      local me = smarm.self()
      smarm.spawn_opt({ on = where, monitor = true }, function(to)
        for i = 1, 50 do smarm.send(to, i) end
        error("done")
      end, me)
      for i = 1, 50 do assert.are.equal(i, smarm.receive(WAIT)) end
      assert.are.equal("DOWN", smarm.receive(WAIT).smarm)
    end)
  end)

  it("DOWN, EXIT and CALL tables keep their values while the collector runs", function()
    -- They are copies of a template whose slots are then set (lshape.c), the values made after
    -- the copy (the reason's table, the request's): a collector that never pauses runs through
    -- all of it, and every value must come out whole.
    local pause = collectgarbage("setpause", 1)
    local ok, err = pcall(both, function(where)
      smarm.trap_exit(true)
      local server = smarm.spawn_on(where, function()
        collectgarbage("setpause", 1) -- its own VM's collector too (scheduler 2's, made for the run)
        while true do
          local m = smarm.receive()
          if m == "stop" then return end
          collectgarbage("step", 1)
          smarm.reply(m.from, { echo = m.request.n })
        end
      end)
      for i = 1, 300 do
        local reason = { n = i, pad = string.rep("x", i % 40) }
        local pid, ref = smarm.spawn_opt({ on = where, monitor = true, link = true },
          function(r) collectgarbage("setpause", 1); collectgarbage("step", 1); smarm.exit(r) end,
          reason)
        local down = next_notice("DOWN")
        local exit = next_notice("EXIT")
        collectgarbage("step", 1)
        assert.are.equal(ref, down.ref)
        assert.are.equal(pid, down.pid)
        assert.are.equal(i, down.reason.n)
        assert.are.equal(reason.pad, down.reason.pad)
        assert.are.equal(pid, exit.pid)
        assert.are.equal(i, exit.reason.n)
        assert.are.same({ echo = i }, smarm.call(server, { n = i, pad = reason.pad }, WAIT))
      end
      smarm.send(server, "stop")
    end)
    collectgarbage("setpause", pause)
    assert(ok, err)
  end)

  it("refs print as #Ref, compare with ==, key tables and travel in messages", function()
    smarm.run(function()
      local a, b = smarm.ref(), smarm.ref()
      assert.matches("^#Ref<", tostring(a))
      assert.is_true(a ~= b)
      assert.is_true(smarm.is_ref(a))
      assert.is_false(smarm.is_ref({}))
      local t = { [a] = 1 }
      local echo = smarm.spawn_on(2, function() local m = smarm.receive(); smarm.send(m.to, m.ref) end)
      smarm.send(echo, { to = smarm.self(), ref = a })
      local back = smarm.receive(WAIT)
      assert.is_true(back == a)
      assert.are.equal(1, t[back])
    end, { schedulers = 2 })
  end)
end)

describe("links", function()
  it("spread a crash unless the other side traps exits", function()
    both(function(where)
      -- not trapping: the middle actor dies with the child's reason
      local middle = smarm.spawn_opt({ monitor = true }, function()
        smarm.spawn_link(function() error("child broke") end)
        wait_forever()
      end)
      local d = next_notice("DOWN")
      assert.are.equal(middle, d.pid)
      assert.matches("child broke", d.reason.error)
      -- trapping: the EXIT arrives as a message
      smarm.trap_exit(true)
      local child = smarm.spawn_opt({ on = where, link = true }, function() smarm.exit("bye") end)
      local e = next_notice("EXIT")
      assert.are.equal(child, e.pid)
      assert.are.equal("bye", e.reason)
      assert.is_true(smarm.trap_exit(false))
    end)
  end)

  it("a normal exit kills no linked actor; linking to a dead pid gives noproc", function()
    both(function(where)
      local p = smarm.spawn_opt({ on = where, link = true }, function() end)
      while smarm.alive(p) do smarm.yield() end
      smarm.trap_exit(true)
      smarm.link(p)
      local e = next_notice("EXIT")
      assert.are.equal("noproc", e.reason)
      smarm.trap_exit(false)
    end)
  end)

  it("unlink removes both sides", function()
    both(function(where)
      local p = smarm.spawn_opt({ on = where, link = true }, wait_forever)
      smarm.unlink(p)
      local ref = smarm.monitor(p)
      smarm.exit(p, "stop")
      local d = next_notice("DOWN")
      assert.are.equal(ref, d.ref)
      assert.are.equal("stop", d.reason) -- and we are still here
    end)
  end)
end)

describe("exit signals and kill", function()
  it("kill cannot be trapped; other signals can", function()
    both(function(where)
      local me = smarm.self()
      local p = smarm.spawn_opt({ on = where, monitor = true }, function()
        smarm.trap_exit(true)
        smarm.send(me, "trapping")
        while true do
          local m = smarm.receive()
          if m.smarm == "EXIT" then smarm.send(me, m.reason) end
        end
      end)
      assert.are.equal("trapping", smarm.receive(WAIT))
      smarm.exit(p, "please")
      assert.are.equal("please", smarm.receive(WAIT))
      smarm.kill(p)
      local d = next_notice("DOWN")
      assert.are.equal("killed", d.reason)
    end)
  end)

  it("end an actor parked anywhere, and pcall cannot catch them", function()
    both(function(where)
      local bodies = {
        function() smarm.receive() end,
        function() smarm.sleep(3600) end,
        function() while true do smarm.yield() end end,
        function() pcall(function() smarm.receive() end); error("pcall caught the kill") end,
        function() table.sort({ 3, 2, 1 }, function(a, b) smarm.sleep(3600); return a < b end) end,
      }
      for _, body in ipairs(bodies) do
        local p, ref = smarm.spawn_opt({ on = where, monitor = true }, body)
        smarm.yield()
        smarm.kill(p)
        local d = next_notice("DOWN")
        assert.are.equal(ref, d.ref)
        assert.are.equal("killed", d.reason)
      end
    end)
  end)

  -- Each of these calls asks scheduler 2 and parks for its answer; the answer's wait is not a
  -- point where a death is taken (the caller takes the answer first), and a loop of them was
  -- never killed. The next such call now dies before it asks.
  it("end an actor that only makes requests to another scheduler, in a loop", function()
    smarm.run(function()
      local remote = smarm.spawn_on(2, wait_forever)
      local loops = {
        function() while true do smarm.alive(remote) end end,
        function()
          while true do smarm.register("kill_loop", remote); smarm.unregister("kill_loop") end
        end,
        function() while true do smarm.cancel_timer(smarm.send_after(60, remote, "x")) end end,
        function()
          local i = 0
          while true do
            i = i + 1
            smarm.spawn_opt({ on = 2, name = "kill_loop" .. i }, function() end)
          end
        end,
      }
      for _, body in ipairs(loops) do
        local p, ref = smarm.spawn_monitor(body)
        smarm.sleep(0.01)
        smarm.kill(p)
        local d = assert(smarm.receive(function(m) return type(m) == "table" and m.ref == ref end,
          WAIT))
        assert.are.equal("killed", d.reason)
      end
      smarm.kill(remote)
    end, { schedulers = 2 })
  end)

  it("an exit signal to oneself ends the caller at once", function()
    smarm.run(function()
      local after = false
      smarm.spawn_monitor(function() smarm.exit(smarm.self(), "me"); after = true end)
      assert.are.equal("me", next_notice("DOWN").reason)
      assert.is_false(after)
    end)
  end)
end)

describe("registered names", function()
  it("register, whereis, send by name, registered, unregister, released at death", function()
    both(function(where)
      local p = smarm.spawn_on(where, function()
        while true do
          local m = smarm.receive()
          smarm.send(m.from, m.n * 2)
        end
      end)
      smarm.register("doubler", p)
      assert.are.equal(p, smarm.whereis("doubler"))
      smarm.send("doubler", { from = smarm.self(), n = 21 })
      assert.are.equal(42, smarm.receive(WAIT))
      assert.are.same({ "doubler" }, smarm.registered())
      assert.has_error(function() smarm.register("doubler", smarm.self()) end,
        "smarm.register: the name 'doubler' is taken")
      local ref = smarm.monitor("doubler")
      smarm.kill("doubler")
      assert.are.equal(ref, next_notice("DOWN").ref)
      assert.is_nil(smarm.whereis("doubler"))
      assert.has_error(function() smarm.send("doubler", 1) end,
        "smarm.send: no actor is registered as 'doubler'")
      smarm.register("doubler", smarm.self())
      smarm.unregister("doubler")
      assert.is_nil(smarm.whereis("doubler"))
      assert.has_error(function() smarm.unregister("doubler") end,
        "smarm.unregister: no actor is registered as 'doubler'")
    end)
  end)

  it("spawn_opt registers the name before the child runs", function()
    both(function(where)
      local me = smarm.self()
      local p = smarm.spawn_opt({ on = where, name = "early" }, function()
        smarm.send(me, smarm.whereis("early") == smarm.self())
        smarm.receive()
      end)
      assert.is_true(smarm.receive(WAIT))
      assert.has_error(function() smarm.spawn_opt({ on = where, name = "early" }, function() end) end,
        "smarm.spawn_opt: the name 'early' is taken")
      smarm.kill(p)
    end)
  end)

  it("bad arguments raise", function()
    smarm.run(function()
      assert.has_error(function() smarm.register("", smarm.self()) end)
      assert.has_error(function() smarm.register("x", "y") end)
      -- a name is a string: a number is not turned into one
      for _, call in ipairs({ function() smarm.register(5, smarm.self()) end,
        function() smarm.whereis(5) end, function() smarm.unregister(5) end }) do
        local ok, err = pcall(call)
        assert.is_false(ok)
        assert.matches("^spec/faults_spec%.lua:%d+: bad argument #1 to '%a+' %(name expected, "
          .. "got number%)$", err)
      end
      assert.are.same({}, smarm.registered())
      assert.has_error(function() smarm.monitor(42) end)
      assert.has_error(function() smarm.demonitor("ref") end)
      assert.has_error(function() smarm.link({}) end)
      assert.has_error(function() smarm.kill("no-such-name") end)
      -- the messages name the argument, and the position is the caller's
      local ok, err = pcall(function() smarm.demonitor(5) end)
      assert.is_false(ok)
      assert.matches("^spec/faults_spec%.lua:%d+: bad argument #1 to 'demonitor' %(ref expected, "
        .. "got number%)$", err)
      assert.has_error(function() smarm.demonitor(smarm.ref(), "x") end,
        "bad argument #2 to 'demonitor' (\"flush\" expected)")
      for _, on in ipairs({ 0, 3, 1.5, "x" }) do
        ok, err = pcall(smarm.spawn_opt, { on = on }, print)
        assert.is_false(ok)
        assert.matches("bad argument #1 to '%?' %(opts%.on must be a scheduler index from 1 to "
          .. "smarm%.schedulers%(%) or \"any\"%)$", err)
      end
    end, { schedulers = 2 })
  end)
end)

-- Each function that takes a target names itself in a bad target's error, at its caller's line
-- (no position in a protected call of the function itself), however it is called: the error
-- said "bad argument #1 to '?'" when pcall called it, and the name of the function the
-- Lua side called (smarm.monitor, at a line of init.lua) for smarm.call.
describe("a bad target", function()
  it("raises naming the function the user called, at the user's line", function()
    local args = { -- each function's arguments, with target t
      send = function(t) return t, 1 end,
      call = function(t) return t, 1, 0 end,
      alive = function(t) return t end,
      link = function(t) return t end,
      unlink = function(t) return t end,
      monitor = function(t) return t end,
      exit = function(t) return t, "x" end,
      kill = function(t) return t end,
      send_after = function(t) return 1, t, 1 end,
      whereis = function(t) return t end,
      register = function(t) return t, smarm.self() end,
      unregister = function(t) return t end,
    }
    local names = { whereis = true, register = true, unregister = true } -- take names only
    local bads = { { {}, "table" }, { true, "boolean" }, { print, "function" }, { nil, "nil" },
      { "", false }, { "a\0b", false }, { ("n"):rep(256), false } }
    local r = smarm.run(function()
      local out = {}
      for fname, f in pairs(args) do
        for i, bad in ipairs(bads) do
          -- from a Lua function (a line of this file), and by pcall itself (no line)
          local _, here = pcall(function() local v = smarm[fname](f(bad[1])); return v end)
          local _, bare = pcall(smarm[fname], f(bad[1]))
          out[#out + 1] = { fname = fname, i = i, here = here, bare = bare }
        end
      end
      return out
    end)
    assert.are.equal(12 * #bads, #r)
    for _, e in ipairs(r) do
      local n = e.fname == "send_after" and 2 or 1
      local t = bads[e.i][2]
      local why = not t and "a name is 1 to 255 bytes, without NUL"
        or (names[e.fname] and "name" or "pid or name") .. " expected, got " .. t
      local text = ("bad argument #%d to '%s' (%s)"):format(n, e.fname, why)
      assert.are.equal(text, e.bare)
      assert.matches("^spec/faults_spec%.lua:%d+: ", e.here)
      assert.are.equal(text, e.here:gsub("^spec/faults_spec%.lua:%d+: ", ""), e.fname)
    end
  end)
end)

describe("races across schedulers", function()
  local ROUNDS = 200

  -- Receives `expected` notices of the given kind; returns how many came per value of m[key].
  local function collect(kind, key, expected)
    local seen, n = {}, 0
    while n < expected do
      local m = next_notice(kind)
      seen[m[key]] = (seen[m[key]] or 0) + 1
      n = n + 1
    end
    return seen
  end

  it("a monitor placed while its target dies gives exactly one DOWN", function()
    smarm.run(function()
      local refs = {}
      for i = 1, ROUNDS do
        local p = smarm.spawn_on(2, function() require("smarm").receive() end)
        smarm.send(p, "die")
        refs[i] = smarm.monitor(p) -- the target may be running, ending or gone
      end
      local seen = collect("DOWN", "ref", ROUNDS)
      for i = 1, ROUNDS do assert.are.equal(1, seen[refs[i]], "monitor " .. i) end
      smarm.sleep(0.05) -- and no second DOWN comes later
      assert.are.same({ nil, "timeout" }, { smarm.receive(0) })
    end, { schedulers = 2 })
  end)

  it("a link and an exit crossing give exactly one exit signal", function()
    smarm.run(function()
      smarm.trap_exit(true)
      local pids = {}
      for i = 1, ROUNDS do
        local p = smarm.spawn_on(2, function()
          local s = require("smarm")
          s.receive()
          s.exit("boom")
        end)
        smarm.send(p, "go")
        smarm.link(p) -- crossing its exit
        pids[i] = p
      end
      local seen = collect("EXIT", "pid", ROUNDS)
      for i = 1, ROUNDS do assert.are.equal(1, seen[pids[i]], "link " .. i) end
    end, { schedulers = 2 })
  end)

  it("unlink drops an exit signal still on its way, and never delivers one twice", function()
    smarm.run(function()
      smarm.trap_exit(true)
      for _ = 1, ROUNDS do
        local p, ref = smarm.spawn_opt({ on = 2, link = true, monitor = true }, function()
          local s = require("smarm")
          s.receive()
          s.exit("boom")
        end)
        smarm.send(p, "go")
        smarm.unlink(p) -- crossing its exit signal
        assert.are.equal(ref, next_notice("DOWN").ref)
        -- an EXIT only if it had arrived before the unlink, and then only one
        local exits = 0
        while smarm.receive(function(m) return type(m) == "table" and m.smarm == "EXIT" end, 0) do
          exits = exits + 1
        end
        assert.is_true(exits <= 1, exits .. " exit signals of one link")
      end
    end, { schedulers = 2 })
  end)

  it("a kill overtakes nothing: messages sent before it arrive first, and it still kills", function()
    smarm.run(function()
      local me = smarm.self()
      for _ = 1, 50 do
        local p, ref = smarm.spawn_opt({ on = 2, monitor = true }, function(owner)
          local s = require("smarm")
          while true do s.send(owner, s.receive()) end
        end, me)
        smarm.send(p, 1)
        smarm.send(p, 2)
        smarm.kill(p)
        local d = next_notice("DOWN")
        assert.are.equal(ref, d.ref)
        assert.are.equal("killed", d.reason)
        -- what it echoed came in order, before its DOWN
        local got = {}
        while true do
          local m = smarm.receive(function(x) return type(x) == "number" end, 0)
          if not m then break end
          got[#got + 1] = m
        end
        assert.is_true(#got <= 2)
        for i, v in ipairs(got) do assert.are.equal(i, v) end
      end
    end, { schedulers = 2 })
  end)
end)

describe("smarm.call and smarm.reply", function()
  local function doubler()
    while true do
      local m = smarm.receive()
      if m.smarm == "CALL" then
        if m.request == "die" then error("asked to die") end
        if m.request == "hold" then
          local held = m.from
          local nxt = smarm.receive() -- answer the held call only when the next one comes
          smarm.reply(held, "late")
          smarm.reply(nxt.from, nxt.request * 2)
        else
          smarm.reply(m.from, m.request * 2)
        end
      end
    end
  end

  it("answers, across schedulers and by name", function()
    both(function(where)
      local server = smarm.spawn_opt({ on = where, name = "calc" }, doubler)
      assert.are.equal(42, smarm.call(server, 21))
      assert.are.equal(8, smarm.call("calc", 4))
      smarm.kill(server)
    end)
  end)

  it("hands the server a request whose from travels and can be answered from anywhere", function()
    both(function(where)
      local me = smarm.self()
      -- a server that passes each call on to a worker, which answers it
      local worker = smarm.spawn_on(where, function()
        while true do
          local job = smarm.receive()
          smarm.reply(job.from, { doubled = job.n * 2, caller = job.from.pid })
        end
      end)
      local seen = {}
      local server = smarm.spawn(function()
        while true do
          local m = smarm.receive()
          seen.kind, seen.request = m.smarm, m.request
          seen.pid, seen.is_ref = m.from.pid, smarm.is_ref(m.from.ref)
          seen.text = tostring(m.from)
          -- two copies (two userdata): equal by value
          smarm.send(smarm.self(), { f = m.from })
          smarm.send(smarm.self(), { f = m.from })
          local a, b = smarm.receive().f, smarm.receive().f
          seen.same, seen.distinct = a == b, not rawequal(a, b)
          seen.other = m.from.other
          smarm.send(worker, { from = m.from, n = m.request.n })
        end
      end)
      local r = smarm.call(server, { n = 21 })
      assert.are.equal(42, r.doubled)
      assert.are.equal(me, r.caller)
      assert.are.equal("CALL", seen.kind)
      assert.are.same({ n = 21 }, seen.request)
      assert.are.equal(me, seen.pid)
      assert.is_true(seen.is_ref)
      assert.matches("^#From<", seen.text)
      assert.is_true(seen.same)
      assert.is_true(seen.distinct)
      assert.is_nil(seen.other)
      smarm.kill(server)
      smarm.kill(worker)
    end)
  end)

  -- A number or a string answers through the FFI (src/lua/lfast.c), the rest classically.
  it("answers numbers, strings and tables from a loop the JIT compiles", function()
    both(function(where)
      local server = smarm.spawn_on(where, function()
        local receive, reply = smarm.receive, smarm.reply
        while true do
          local m = receive()
          local r = m.request
          if r % 3 == 0 then reply(m.from, r) elseif r % 3 == 1 then reply(m.from, "s" .. r)
          else reply(m.from, { r }) end
        end
      end)
      for i = 1, 3000 do
        local want = i % 3 == 0 and i or i % 3 == 1 and "s" .. i or nil
        local got = smarm.call(server, i)
        if want then assert.are.equal(want, got) else assert.are.same({ i }, got) end
      end
      smarm.kill(server)
    end)
  end)

  it("refuses a reply from outside an actor, and to what only says it is a from", function()
    local from = smarm.run(function()
      local server = smarm.spawn(function()
        local m = smarm.receive()
        smarm.reply(m.from, 1)
        smarm.send(m.from.pid, { f = m.from })
      end)
      smarm.call(server, 0)
      return smarm.receive().f
    end)
    assert.has_error(function() smarm.reply(from, 1) end)
    smarm.run(function()
      -- a file's and a string's metatables take a __metatable field from plain Lua; a closed
      -- file would reach C as a NULL FILE *: only the reply handles' own metatable lets through
      local closed = assert(io.open("/dev/null"))
      closed:close()
      local io_mt, str_mt = getmetatable(closed), getmetatable("")
      local was_io, was_str = io_mt.__metatable, str_mt.__metatable
      io_mt.__metatable, str_mt.__metatable = "smarm.from", "smarm.from"
      local fakes = { setmetatable({}, { __metatable = "smarm.from" }), closed, io.stderr, "abc" }
      local errors = {}
      for _, fake in ipairs(fakes) do
        for _, v in ipairs({ 1, "x" }) do
          local ok, err = pcall(smarm.reply, fake, v)
          errors[#errors + 1] = not ok and err
        end
      end
      io_mt.__metatable, str_mt.__metatable = was_io, was_str
      assert.are.equal(2 * #fakes, #errors)
      for _, err in ipairs(errors) do assert.matches("a call's `from` expected", err) end
    end)
  end)

  -- A tuple whose first element is no pid (as another node's {Pid, Tag} has) was refused by
  -- the send that answers such a from, in send's words; the others named '?' in a pcall.
  it("refuses a reply to something that is not a call's from", function()
    smarm.run(function()
      local me = smarm.self()
      for _, bad in ipairs({ { pid = me, ref = smarm.ref() }, me, smarm.ref(), "from", 1,
        smarm.tuple({ 1, 2 }), smarm.tuple({ "name", smarm.ref() }) }) do
        local ok, err = pcall(smarm.reply, bad, 1)
        assert.is_false(ok)
        assert.are.equal("bad argument #1 to 'reply' (a call's `from` expected)", err)
      end
    end)
  end)

  it("gives nil and the reason when the server is dead, dies, or does not answer in time", function()
    both(function(where)
      local server = smarm.spawn_on(where, doubler)
      assert.are.same({ nil, "noproc" }, { smarm.call("nobody", 1) })
      local r, why = smarm.call(server, "die")
      assert.is_nil(r)
      assert.matches("asked to die", why.error)
      assert.are.same({ nil, "noproc" }, { smarm.call(server, 1) })
      server = smarm.spawn_on(where, doubler)
      -- the late reply arrives after the call gave up: it never reaches the mailbox
      assert.are.same({ nil, "timeout" }, { smarm.call(server, "hold", 0.001) })
      assert.are.equal(6, smarm.call(server, 3))
      assert.are.same({ nil, "timeout" }, { smarm.receive(0) })
      smarm.kill(server)
    end)
  end)

  it("leaves older messages alone and in order", function()
    smarm.run(function()
      local server = smarm.spawn_on(2, doubler)
      for i = 1, 1000 do smarm.send(smarm.self(), i) end
      for i = 1, 20 do assert.are.equal(i * 2, smarm.call(server, i)) end
      for i = 1, 1000 do assert.are.equal(i, smarm.receive(0)) end
      assert.are.same({ nil, "timeout" }, { smarm.receive(0) })
    end, { schedulers = 2 })
  end)

  it("raises for a request that cannot be sent, leaving no monitor behind", function()
    smarm.run(function()
      local server = smarm.spawn(doubler)
      assert.has_error(function() smarm.call(server, coroutine.create(print)) end)
      assert.has_error(function() smarm.call(smarm.self(), 1) end)
      assert.has_error(function() smarm.reply({}, 1) end)
      smarm.kill(server)
      smarm.yield()
      assert.are.same({ nil, "timeout" }, { smarm.receive(0) }) -- no DOWN of a leftover monitor
    end)
  end)
end)

describe("crash reports", function()
  it("go to on_crash instead of stderr when nothing hears of the crash", function()
    local reports = {}
    smarm.run(function()
      local p = smarm.spawn_opt({ on = 2, name = "crasher" }, function()
        smarm.receive()
        error({ code = 3 })
      end)
      smarm.spawn_monitor(function() error("heard of: not reported") end) -- a monitor hears it
      smarm.send(p, "go")
      while #reports < 1 do smarm.sleep(0.001) end
    end, { schedulers = 2, on_crash = function(r) reports[#reports + 1] = r end })
    assert.are.equal(1, #reports)
    assert.is_true(smarm.is_pid(reports[1].pid))
    assert.are.equal("crasher", reports[1].name)
    assert.are.same({ code = 3 }, reports[1].reason.error)
    assert.matches("stack traceback", reports[1].reason.traceback)
    assert.has_error(function() smarm.run(function() end, { on_crash = 1 }) end)
  end)

  it("still come when on_crash raises or ends its actor", function()
    local seen = {}
    smarm.run(function()
      for _, what in ipairs({ "exits", "raises", "last" }) do
        smarm.spawn(function() error(what, 0) end)
        local deadline = smarm.now() + WAIT
        while not seen[what] and smarm.now() < deadline do smarm.sleep(0.001) end
      end
    end, { on_crash = function(r)
      seen[r.reason.error] = true
      if r.reason.error == "exits" then smarm.exit() end
      if r.reason.error == "raises" then error("on_crash failed") end
    end })
    assert.is_true(seen.exits and seen.raises and seen.last)
  end)

  -- The printer of on_crash's errors read the error from the DOWN of on_crash's actor: a copy,
  -- its metatable gone, so it printed "(error object is a table value)" and no traceback.
  it("print an error of on_crash as the runtime prints a crash: __tostring and traceback", function()
    local printed, real_stderr = {}, io.stderr
    -- luacheck: push ignore 122 (the printer writes to io.stderr: this VM's, read as it writes)
    io.stderr = { write = function(_, ...)
      for i = 1, select("#", ...) do printed[#printed + 1] = tostring((select(i, ...))) end
    end }
    local ok, err = pcall(smarm.run, function()
      for i = 1, 3 do smarm.spawn(error, i, 0) end
      guard.wait(function() return select(2, table.concat(printed):gsub("smarm: on_crash: ", "")) >= 3 end,
        "three errors of on_crash printed")
    end, { schedulers = 1, on_crash = function(r)
      local to_text = ({ function() return "custom text" end, function() error("no text", 0) end,
        function() return 42 end })[r.reason.error]
      error(setmetatable({}, { __tostring = to_text }))
    end })
    io.stderr = real_stderr
    -- luacheck: pop
    assert(ok, err)
    local text = table.concat(printed)
    local function printed_once(what)
      local _, n = text:gsub("smarm: on_crash: " .. what .. "\nstack traceback:\n\t%[C%]: in function " ..
        "'error'\n\tspec/faults_spec%.lua:%d+: in function <spec/faults_spec%.lua:%d+>\n", "")
      assert.are.equal(1, n, text)
    end
    printed_once("custom text")
    printed_once("%(error object is a table value: its __tostring failed: no text%)")
    printed_once("%(error object is a table value: its __tostring failed: it did not give a string%)")
  end)

  -- A linked actor that does not trap exits dies of the crash's reason; if nothing hears of that
  -- either, it reports the crash in turn (it used to end silently: the crash was lost).
  it("come once, from the last actor of a link chain that nobody watches", function()
    for _, n in ipairs({ 1, 2 }) do
      local reports, ends = {}, {}
      smarm.run(function()
        local function chain(depth, trap) -- depth actors linked in a line; the last one raises
          if depth == 1 then error({ code = 7 }) end
          smarm.trap_exit(trap)
          smarm.spawn_link(chain, depth - 1)
          if trap then smarm.receive(function(m) return type(m) == "table" and m.smarm == "EXIT" end) end
          smarm.receive()
        end
        local three = smarm.spawn_on(n, chain, 3, false) -- its crash reaches the top: reported
        local trapper = smarm.spawn_on(n, chain, 2, true) -- hears of it: nothing reported
        -- dies of it, but a monitor hears (placed with the spawn: a monitor placed after could
        -- come too late, and its end would be reported)
        local _, ref = smarm.spawn_opt({ on = n, monitor = true }, chain, 2, false)
        local down = assert(smarm.receive(function(m) return type(m) == "table" and m.ref == ref end, WAIT))
        ends.watched = down.reason
        local deadline = smarm.now() + WAIT
        while #reports < 1 and smarm.now() < deadline do smarm.sleep(0.001) end
        smarm.sleep(0.05) -- a second report, had there been one, would be here by now
        ends.three, ends.trapper = smarm.alive(three), smarm.alive(trapper)
        smarm.kill(trapper)
      end, { schedulers = n, on_crash = function(r) reports[#reports + 1] = r end })
      assert.are.equal(1, #reports, n)
      assert.are.same({ code = 7 }, reports[1].reason.error)
      assert.matches("stack traceback", reports[1].reason.traceback)
      assert.are.same({ code = 7 }, ends.watched.error)
      assert.is_false(ends.three)
      assert.is_true(ends.trapper)
    end
  end)

  it("make smarm.run raise when the crash reaches the main actor along a link", function()
    for _, n in ipairs({ 1, 2 }) do
      local raised = { code = 5 }
      local ok, err = pcall(smarm.run, function()
        smarm.spawn_opt({ on = n, link = true }, function() error(raised) end)
        smarm.receive(nil, WAIT)
      end, { schedulers = n })
      assert.is_false(ok)
      assert.are.same(raised, err) -- a copy: it crossed as the linked actor's exit reason
      assert.matches("^%(error object is a table value%)\nstack traceback", smarm.last_traceback())
      ok, err = pcall(smarm.run, function()
        smarm.spawn_link(function() error("worker failed") end)
        smarm.receive(nil, WAIT)
      end, { schedulers = n })
      assert.is_false(ok)
      assert.matches("worker failed$", err)
      assert.matches("worker failed\nstack traceback", smarm.last_traceback())
      -- a kill is not a crash: run returns nothing, as documented
      assert.are.same({}, { smarm.run(function()
        smarm.spawn_link(function() smarm.exit(smarm.self(), "kill") end)
        smarm.receive(nil, WAIT)
      end, { schedulers = n }) })
    end
  end)
end)

describe("a crash that reaches an actor as its body returns", function()
  -- The exit signal comes in while the actor waits for another scheduler's answer (here
  -- alive's: the crasher's scheduler pushes the signal before the answer that says it is dead),
  -- which leaves the death to its next park; the body returns instead. It dies of the signal
  -- all the same, and the crash was lost: nothing was reported, and run returned normally.
  local function linked_then_return()
    local crasher = smarm.spawn_opt({ on = 2, link = true }, function()
      smarm.receive()
      error({ code = 9 })
    end)
    smarm.send(crasher, "go")
    local deadline = smarm.now() + WAIT
    while smarm.alive(crasher) and smarm.now() < deadline do end
    return "returned"
  end

  it("is reported by that actor", function()
    local reports = {}
    smarm.run(function()
      smarm.spawn(linked_then_return) -- nobody watches it: it reports
      local deadline = smarm.now() + WAIT
      while #reports < 1 and smarm.now() < deadline do smarm.sleep(0.001) end
    end, { schedulers = 2, on_crash = function(r) reports[#reports + 1] = r end })
    assert.are.equal(1, #reports)
    assert.are.same({ code = 9 }, reports[1].reason.error)
  end)

  it("makes smarm.run raise when that actor is the main one", function()
    local ok, err = pcall(smarm.run, linked_then_return, { schedulers = 2 })
    assert.is_false(ok)
    assert.are.same({ code = 9 }, err)
  end)
end)

describe("a kill during IO", function()
  -- libuv's pool has four threads, which every file call shares. Actors killed while they waited
  -- in a FIFO's open or read held them, and every later file call of the process waited for a
  -- writer to come; the killed actors' calls are now interrupted.
  it("frees the file pool from the calls killed actors waited for", function()
    local posix = dofile("spec/support/posix.lua")
    local dir = posix.tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    smarm.run(function()
      local blocked = {
        function() smarm.fs.open(fifo, "r") end, -- no writer: the open blocks
        function() assert(smarm.fs.open(fifo, "r+")):read("*l") end, -- no line: the read blocks
      }
      for round = 1, 3 do
        for _, body in ipairs(blocked) do
          local p = smarm.spawn(body)
          local function waiting() -- nil once it ended (an open that found the other end open)
            local i = smarm.info(p, "waiting")
            return i and i.waiting
          end
          while smarm.alive(p) and not waiting() do smarm.sleep(0.001) end
          smarm.sleep(0.01) -- its call is in a pool thread by now, or queued there
          smarm.kill(p)
        end
        assert(round) -- six killed calls in all: more than the pool's threads
      end
      local got = smarm.fs.readfile("/proc/self/stat") -- hangs here without the interrupts
      assert.is_true(#got > 0)
      local deadline = smarm.now() + WAIT
      while smarm.stats().io_in_flight > 0 and smarm.now() < deadline do smarm.sleep(0.001) end
      assert.are.equal(0, smarm.stats().io_in_flight)
    end)
    posix.remove_tree(dir)
  end)

  it("cancels the request the actor waited for", function()
    smarm.run(function()
      local server = assert(smarm.tcp.listen("127.0.0.1", 0))
      local _, port = server:getsockname()
      local waiter, ref = smarm.spawn_monitor(function() server:accept() end)
      smarm.yield() -- it parks in accept
      smarm.kill(waiter)
      assert.are.equal(ref, next_notice("DOWN").ref)
      -- the killed accept no longer waits: another one may, and gets the next connection
      smarm.spawn(function()
        local c = assert(smarm.tcp.connect("127.0.0.1", port))
        c:send("hi")
        c:close()
      end)
      server:settimeout(WAIT)
      local conn = assert(server:accept())
      assert.are.equal("hi", conn:receive(2))
      conn:close()
      server:close()
    end)
  end)

  -- The collector is stopped while each case looks: a socket or file closed only by its __gc
  -- would stay open, so what closes here closes at the kill itself.
  local function without_gc(body)
    collectgarbage("stop")
    local ok, err = pcall(body)
    collectgarbage("restart")
    if not ok then error(err, 0) end
  end

  -- Waits until the process has at most n descriptors open; returns how many.
  local function fds_down_to(n, what)
    return guard.wait(function() local now = fd_count(); return now <= n and now end, what, 0.01)
  end

  it("closes the sockets and files the killed actor owned, at the kill", function()
    without_gc(function()
      smarm.run(function()
        local me = smarm.self()
        local server = assert(smarm.tcp.listen("127.0.0.1", 0))
        local _, port = server:getsockname()
        server:settimeout(WAIT)
        local before = fd_count()
        local owner = smarm.spawn(function()
          local c = assert(smarm.tcp.connect("127.0.0.1", port))
          local f = assert(smarm.fs.open("/dev/null", "r"))
          smarm.send(me, "ready")
          smarm.receive()
          return c, f
        end)
        local conn = assert(server:accept())
        assert.are.equal("ready", smarm.receive(WAIT))
        smarm.kill(owner)
        conn:settimeout(WAIT)
        local got, why = conn:receive(1)
        assert.are.same({ nil, "closed" }, { got, why }) -- the peer sees the end at once
        conn:close()
        fds_down_to(before, "the owner's socket and file")
        server:close()
      end)
    end)
  end)

  it("closes what an actor owned when a kill that came at a poll ends it as it returns", function()
    without_gc(function()
      smarm.run(function()
        local me = smarm.self()
        local server = assert(smarm.tcp.listen("127.0.0.1", 0))
        local _, port = server:getsockname()
        server:settimeout(WAIT)
        -- on the other scheduler (its VM collects as it likes: the socket is kept in a global
        -- there, so only its owner's end can close it); it polls, so the kill waits for its end
        local owner, ref = smarm.spawn_opt({ on = 2, monitor = true }, function(parent, p)
          local s = require("smarm")
          _G.kept = assert(s.tcp.connect("127.0.0.1", p))
          s.send(parent, "ready")
          while s.receive(0) ~= "go" do end
        end, me, port)
        local conn = assert(server:accept())
        conn:settimeout(WAIT)
        assert.are.equal("ready", smarm.receive(WAIT))
        smarm.kill(owner)
        smarm.send(owner, "go") -- after the kill: it returns with the kill pending
        local d = next_notice("DOWN")
        assert.are.equal(ref, d.ref)
        assert.are.equal("killed", d.reason)
        local got, why = conn:receive(1)
        assert.are.same({ nil, "closed" }, { got, why })
        conn:close()
        server:close()
      end, { schedulers = 2 })
    end)
  end)

  it("closes what a crashed actor owned, not what an actor that returned shared", function()
    without_gc(function()
      smarm.run(function()
        local me = smarm.self()
        local server = assert(smarm.tcp.listen("127.0.0.1", 0))
        local _, port = server:getsockname()
        server:settimeout(WAIT)
        -- a crash: the connection it made closes
        local crasher = smarm.spawn(function()
          local c = assert(smarm.tcp.connect("127.0.0.1", port))
          smarm.send(me, "ready")
          smarm.receive()
          error("on purpose: " .. tostring(c))
        end)
        smarm.monitor(crasher) -- heard of: no crash report
        local conn = assert(server:accept())
        conn:settimeout(WAIT)
        assert.are.equal("ready", smarm.receive(WAIT))
        smarm.send(crasher, "go")
        local got, why = conn:receive(1)
        assert.are.same({ nil, "closed" }, { got, why })
        conn:close()
        assert.matches("on purpose", next_notice("DOWN").reason.error)
        -- a normal end: a connection passed to spawn lives on in the actor that shares it
        local opener = smarm.spawn(function()
          local c = assert(smarm.tcp.connect("127.0.0.1", port))
          smarm.send(me, smarm.spawn(function(sock)
            smarm.receive() -- until the opener has ended
            assert(sock:send("hi"))
            smarm.send(me, "sent")
          end, c))
        end)
        local user = smarm.receive(WAIT)
        local conn2 = assert(server:accept())
        conn2:settimeout(WAIT)
        guard.ended(opener)
        smarm.send(user, "go")
        assert.are.equal("sent", smarm.receive(WAIT))
        assert.are.equal("hi", conn2:receive(2))
        conn2:close()
        server:close()
      end)
    end)
  end)

  it("leaves no descriptor behind when it ends actors parked in any kind of IO", function()
    smarm.run(function()
      local me = smarm.self()
      local path = os.tmpname()
      local server = assert(smarm.tcp.listen("127.0.0.1", 0))
      local _, port = server:getsockname()
      -- the IO thread's own descriptors (its loop, its signal pipe) come with a first use
      assert(smarm.process.run({ "true" }))
      smarm.signal.wait("SIGUSR2", 0.001)
      smarm.dns.getaddrinfo("localhost")
      local before = fd_count()
      local parked = {
        { "an accept", function() smarm.send(me, "parked"); server:accept() end },
        { "a socket's receive", function()
          local c = assert(smarm.tcp.connect("127.0.0.1", port))
          smarm.send(me, "parked")
          c:receive(1)
        end },
        { "a receive, holding a file", function()
          local f = assert(smarm.fs.open(path, "w"))
          smarm.send(me, "parked")
          smarm.receive()
          f:close()
        end },
        { "a program", function() smarm.send(me, "parked"); smarm.process.run({ "sleep", "600" }) end },
        { "a signal", function() smarm.send(me, "parked"); smarm.signal.wait("SIGUSR2") end },
        { "a lookup", function() -- one lookup may end before the kill comes: look up for good
          smarm.send(me, "parked")
          while true do smarm.dns.getaddrinfo("localhost") end
        end },
      }
      for _, case in ipairs(parked) do
        local p = smarm.spawn_monitor(case[2])
        assert.are.equal("parked", smarm.receive(WAIT), case[1])
        smarm.yield()
        smarm.kill(p)
        assert.are.equal("killed", next_notice("DOWN").reason, case[1])
      end
      server:close() -- with the connection of the first case, which nobody accepted
      os.remove(path)
      fds_down_to(before, "the descriptors of the killed actors")
    end)
  end)
end)
