-- smarm.processes and smarm.info: each scheduler answers for its own actors.
local smarm = require "smarm"
local guard = dofile("spec/support/guard.lua")
local HANG = guard.HANG

local function sorted(pids)
  table.sort(pids, function(a, b) return tostring(a) < tostring(b) end)
  return pids
end

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
        smarm.receive(function(m) return m == "wanted" end) -- the receiver's receive
      end)
      local sleeper = smarm.spawn(function() smarm.sleep(3600) end)
      assert.equals("registered", smarm.receive())
      smarm.send(receiver, "unwanted")
      smarm.send(receiver, "unwanted")
      smarm.yield()
      local i = smarm.info(receiver)
      while i.mailbox < 2 or i.status ~= "waiting" do -- both delivered, and refused
        smarm.yield()
        i = smarm.info(receiver)
      end
      assert.equals(receiver, i.pid)
      assert.equals("waiting", i.status)
      assert.equals("receive", i.waiting)
      assert.equals(2, i.scheduler)
      assert.equals("receiver", i.name)
      assert.equals(2, i.mailbox)
      local at
      for l in io.lines("spec/info_spec.lua") do
        at = (at or 0) + 1
        if l:find("-- the receiver's receive", 1, true) and not l:find("l:find", 1, true) then break end
      end
      assert.matches("info_spec.lua:" .. at .. ":", i.traceback, 1, true)
      local s = smarm.info(sleeper)
      assert.equals("sleep", s.waiting)
      assert.equals(1, s.scheduler)
      assert.is_nil(s.name)
      local mine, line = smarm.info(me), debug.getinfo(1, "l").currentline
      assert.equals("running", mine.status)
      assert.is_nil(mine.waiting)
      assert.matches("info_spec.lua:" .. line .. ":", mine.traceback, 1, true)
      assert.same({ status = "waiting" }, smarm.info(receiver, "status"))
      assert.matches("info_spec.lua:" .. at .. ":", smarm.info(receiver, { "traceback" }).traceback, 1, true)
      assert.same({ "func", "links" }, (function(t)
        local ks = {}
        for k in pairs(t) do ks[#ks + 1] = k end
        table.sort(ks)
        return ks
      end)(smarm.info(receiver, { "links", "func" })))
      assert.same({ waiting = "sleep", scheduler = 1 }, smarm.info(sleeper, { "waiting", "scheduler" }))
    end, { schedulers = 2 })
  end)

  it("tells links, monitors, stack, schedulings, origin and function, here and there", function()
    smarm.run(function()
      local me = smarm.self()
      local function serve()
        local req = smarm.receive(function(m) return type(m) == "table" and m.smarm == "CALL" end)
        smarm.receive(function(m) return m == "answer now" end)
        smarm.reply(req.from, "answered")
      end
      local server = smarm.spawn_opt({ on = 2, link = true }, serve)
      local watched = smarm.spawn(function() smarm.receive() end)
      local ref = smarm.monitor(watched)
      local ref2 = smarm.monitor(server)
      local wait_for = function(pid, what)
        for _ = 1, 60000 do
          if smarm.info(pid, "waiting").waiting == what then return end
          smarm.sleep(0.001)
        end
        error(what .. " never came")
      end
      -- the server runs once before the call comes (on a slow machine the call could otherwise
      -- be there at its first run, and it would be scheduled once only)
      wait_for(server, "receive")
      local caller = smarm.spawn(function() return smarm.call(server, "question", 60) end)
      local fresh = smarm.spawn(function() end) -- not run yet
      local f = smarm.info(fresh)
      assert.equals(0, f.scheduled)
      assert.equals(0, f.stack_used)
      assert.matches("info_spec.lua:%d+$", f.func)
      wait_for(caller, "call")
      wait_for(server, "receive")
      local s = smarm.info(server)
      assert.same({ me }, s.links)
      assert.same(sorted({ me, caller }), sorted(s.monitored_by)) -- a call monitors its server
      assert.same({}, s.monitors)
      assert.equals(me, s.spawned_by)
      assert.equals("spec/info_spec.lua:" .. debug.getinfo(serve, "S").linedefined, s.func)
      assert.is_true(s.scheduled >= 2) -- it ran, and ran again for the call
      assert.is_true(s.stack_used > 0 and s.stack_used < s.stack_size)
      assert.is_true(s.age >= 0 and s.age < 3600)
      local m = smarm.info(me)
      assert.same({ server }, m.links)
      assert.same(sorted({ watched, server }), sorted(m.monitors))
      assert.is_nil(m.spawned_by) -- the run's main actor
      assert.same({ me }, smarm.info(watched).monitored_by)
      smarm.send(server, "answer now")
      smarm.demonitor(ref)
      smarm.demonitor(ref2)
      assert.same({}, smarm.info(watched).monitored_by)
    end, { schedulers = 2 })
  end)

  it("tells time on CPU, sampled: a spinner's, not a sleeper's", function()
    smarm.run(function()
      local me = smarm.self()
      local sleeper = smarm.spawn_on(2, function()
        while true do smarm.sleep(0.001) end
      end)
      local spinner = smarm.spawn_on(2, function()
        -- spins until charged a tenth of a second, however few of the ticker's looks find it
        -- running on a slow machine (each yield switches only to the sleeper)
        local deadline = smarm.now() + HANG
        while smarm.info(smarm.self(), "cpu").cpu < 0.1 and smarm.now() < deadline do
          smarm.yield()
        end
        smarm.send(me, "spun")
        smarm.receive()
      end)
      assert.equals("spun", smarm.receive(nil, HANG))
      local spun = smarm.info(spinner, "cpu").cpu
      local slept = smarm.info(sleeper, "cpu").cpu
      assert.is_true(spun >= 0.1, "the spinner's " .. spun .. " s")
      assert.is_true(slept < spun, "the sleeper's " .. slept .. " s, the spinner's " .. spun)
      assert.equals(0, smarm.info(smarm.spawn(function() end), "cpu").cpu)
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
      -- another node's pid (a pid term of "a@h"): said in info's words, at the caller's line
      -- (it raised "bad argument #1 to '_scheduler_of'" at a line of init.lua)
      local far = smarm.term.decode("\131\88\119\3a@h\0\0\0\1\0\0\0\0\0\0\0\1")
      local ok, err = pcall(function() local v = smarm.info(far); return v end)
      assert.is_false(ok)
      assert.matches("^spec/info_spec%.lua:%d+: bad argument #1 to 'info' %(a pid of another " ..
        "node", err)
      -- another scheduler is asked by a spawn there, which a finalizer cannot make: said in
      -- the asker's own words
      local there = smarm.spawn_on(2, function() smarm.receive() end)
      local errors = {}
      do
        local u = newproxy(true)
        getmetatable(u).__gc = function()
          errors.info = select(2, pcall(smarm.info, there))
          errors.processes = select(2, pcall(smarm.processes))
        end
      end
      collectgarbage()
      collectgarbage()
      smarm.send(there, "end")
      assert.are.same({ info = "smarm.info: cannot park inside a __gc finalizer",
        processes = "smarm.processes: cannot park inside a __gc finalizer" }, errors)
    end, { schedulers = 2 })
  end)

  it("raises after opts.request_timeout when the answer is queued behind a stuck actor", function()
    smarm.run(function()
      local ffi = require("ffi")
      pcall(ffi.cdef, "int pipe(int fds[2]); intptr_t read(int fd, void *buf, size_t n);"
        .. " intptr_t write(int fd, const void *buf, size_t n); int close(int fd);")
      local fds = ffi.new("int[2]")
      assert.equals(0, ffi.C.pipe(fds))
      local rfd, wfd = fds[0], fds[1]
      guard.started() -- the spawn below must be answered within request_timeout
      local hog, hog_ref = smarm.spawn_opt({ on = 2, slice = math.huge, monitor = true },
        function(main)
          local ffi2 = require("ffi")
          pcall(ffi2.cdef, "intptr_t read(int fd, void *buf, size_t n);")
          smarm.send(main, "holding") -- a send does not give way: read comes next
          ffi2.C.read(rfd, ffi2.new("char[1]"), 1) -- holds scheduler 2 until the main actor writes
        end, smarm.self())
      -- the hog holds scheduler 2 from before the question reaches it, so the answer cannot come
      -- on any machine (a question's actor would run ahead of a hog merely queued there)
      guard.receive("the hog's word", function(m) return m == "holding" end)
      local ok, err = pcall(smarm.info, hog)
      ffi.C.write(wfd, "x", 1)
      smarm.receive(function(m) return type(m) == "table" and m.ref == hog_ref end) -- read done
      ffi.C.close(wfd) -- (only now: a close racing the read is a race, TSan says)
      ffi.C.close(rfd)
      assert.is_false(ok)
      assert.matches("smarm.info: scheduler 2 did not answer within opts.request_timeout", err, 1, true)
    end, { schedulers = 2, request_timeout = 0.3, watchdog = math.huge })
  end)
end)

-- An actor that parks inside a coroutine it resumed (a receive in a coroutine.wrap generator)
-- was shown waiting in the resume itself: the traceback of its own coroutine stops there. Go's
-- goroutine dump shows the frame that blocks; so do info and the dump now, innermost first.
describe("smarm.info of an actor parked inside a coroutine", function()
  it("shows the frames where it waits, then the resumer's", function()
    local got = smarm.run(function()
      local function wait_for_job() local m = smarm.receive() return m end
      local gen_pid = smarm.spawn(function()
        local gen = coroutine.wrap(function() while true do coroutine.yield(wait_for_job()) end end)
        gen()
      end)
      local nested_pid = smarm.spawn(function()
        local co = coroutine.create(function()
          local inner = coroutine.wrap(function() smarm.sleep(HANG) end)
          inner()
        end)
        coroutine.resume(co)
      end)
      -- parked in an xpcall's handler inside the coroutine (whose status is then LUA_ERRERR)
      local handler_pid = smarm.spawn(function()
        local gen = coroutine.wrap(function()
          xpcall(error, function() local m = smarm.receive() return m end, "raised")
        end)
        gen()
      end)
      local held_pid = smarm.spawn(function() -- a yielded coroutine it holds is not where it waits
        local co = coroutine.create(function() coroutine.yield() end)
        coroutine.resume(co)
        smarm.receive()
      end)
      for _, pid in ipairs({ gen_pid, nested_pid, handler_pid, held_pid }) do
        guard.wait(function() return smarm.info(pid, "status").status == "waiting" end, "a parked actor")
      end
      local out = {}
      for k, pid in pairs({ gen = gen_pid, nested = nested_pid, handler = handler_pid, held = held_pid }) do
        out[k] = smarm.info(pid, "traceback").traceback
        smarm.exit(pid, "kill")
      end
      return out
    end, { schedulers = 1 })
    assert.matches("in function 'wait_for_job'.*in function 'gen'", got.gen)
    assert.matches("sleep.*in function 'inner'.*in function 'resume'", got.nested)
    assert.matches("^stack traceback:\n\t%[C%]: in function 'receive'\n.*xpcall.*in function 'gen'", got.handler)
    assert.matches("^stack traceback:\n\t%[C%]: in function 'receive'\n", got.held)
    assert.is_nil(got.held:find("yield", 1, true))
  end)
end)

-- Outside an actor the Lua ones failed deeper down, naming another function at a line of
-- theirs ("init.lua:278: smarm.scheduler: not inside the runtime", "top.lua:80: smarm.self:
-- ...", "smarm.unix.connect: ..."): they say what the C functions say.
describe("inspection outside an actor", function()
  it("raises in the called function's words, with no position of its own", function()
    local pid = smarm.run(function() return smarm.self() end, { schedulers = 1 })
    local calls = { -- (no tail calls: the error's position is the caller's line)
      processes = function() local r = smarm.processes() return r end,
      info = function() local r = smarm.info(pid) return r end,
      top = function() local r = smarm.top({ count = 1 }) return r end,
      ["console.attach"] = function() local r = smarm.console.attach("/nonexistent/console") return r end,
      ["console.prompt"] = function() local r = smarm.console.prompt() return r end,
    }
    for name, f in pairs(calls) do
      local ok, e = pcall(f)
      assert.is_false(ok, name)
      assert.matches("spec/info_spec.lua:%d+: smarm%." .. name:gsub("%.", "%%.") ..
        ": not inside an actor %(call it from smarm%.run%)$", e)
    end
  end)
end)

describe("the dump", function()
  local ffi = require("ffi")
  pcall(ffi.cdef, "int dup(int fd); int dup2(int fd, int to); int close(int fd); int raise(int sig);"
    .. " int fileno(void *f);")

  -- Runs fn with stderr (fd 2) going to a fresh file; returns fn's results and a reader of it.
  local function with_stderr_in_file(fn)
    local path = os.tmpname()
    local file = assert(io.open(path, "w"))
    local saved = ffi.C.dup(2)
    io.stderr:flush()
    ffi.C.dup2(ffi.C.fileno(file), 2)
    local ok, err = pcall(fn, function()
      local f = assert(io.open(path))
      local text = f:read("*a")
      f:close()
      return text
    end)
    io.stderr:flush()
    ffi.C.dup2(saved, 2)
    ffi.C.close(saved)
    file:close()
    os.remove(path)
    assert(ok, err)
  end

  it("writes every scheduler's actors with their tracebacks on SIGQUIT, and runs on", function()
    with_stderr_in_file(function(written)
      smarm.run(function()
        local me = smarm.self()
        local receiver = smarm.spawn_on(2, function()
          smarm.register("dumped_receiver", smarm.self())
          smarm.send(me, "ready")
          smarm.receive(function(m) return m == "never" end) -- the line the dump must name
        end)
        smarm.receive()
        -- parked for good: a dump that came sooner could find it running, at receive's start
        while smarm.info(receiver, "status").status ~= "waiting" do smarm.sleep(0.001) end
        ffi.C.raise(3) -- SIGQUIT: the run's handler
        -- Each scheduler writes its part whole (under stderr's lock), in either order: both
        -- parts are in once each has its header and, after it, a line of this file.
        local function whole(text)
          return text:find("scheduler 2 of 2\n.-info_spec%.lua:%d+: in function")
            and text:find("scheduler 1 of 2\n.-info_spec%.lua:%d+: in function")
        end
        local text = written()
        for _ = 1, 120000 do -- up to two minutes, for the slowest machine
          if whole(text) then break end
          smarm.sleep(0.001)
          text = written()
        end
        assert.matches("smarm: dump: scheduler 2 of 2\n  actor <2%.%d+%.%d+>: waiting in receive, 0 in its "
          .. "mailbox, name dumped_receiver\n    stack traceback:\n", text)
        assert.matches("smarm: dump: scheduler 1 of 2\n", text)
        assert.matches("info_spec.lua:%d+: in function", text)
        assert.is_true(smarm.alive(smarm.whereis("dumped_receiver")))
      end, { schedulers = 2 })
    end)
  end)

  it("is asked by smarm.dump() too, with the signal off, and refuses a bad signal", function()
    with_stderr_in_file(function(written)
      smarm.run(function()
        smarm.dump()
        local text = written()
        for _ = 1, 120000 do
          if text:find("scheduler 1 of 1", 1, true) then break end
          smarm.sleep(0.001)
          text = written()
        end
        assert.matches("smarm: dump: scheduler 1 of 1\n  actor <1%.0%.%d+>: ", text)
      end, { schedulers = 1, dump_signal = false })
    end)
    assert.has_error(function() smarm.run(function() end, { dump_signal = "SIGKILL" }) end,
      'bad argument #2 to \'run\' (opts.dump_signal must be false, "SIGQUIT", "SIGUSR1" or "SIGUSR2")')
  end)
end)
