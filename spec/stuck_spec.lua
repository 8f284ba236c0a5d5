-- A scheduler stuck in C code (issue #10, item 4): a request to it (alive, spawn_on with a name,
-- register, send_after, cancel_timer) fails after opts.request_timeout with a clear error instead of
-- waiting for good, and its answer, when the scheduler gets to it, is not taken for the answer
-- to a later request.
--
-- Scheduler 2 is held in C by an actor blocked in read(2) on a pipe that only the main actor
-- writes to, after its requests: they cannot be answered in time on any machine, however slow.
-- The requests made before it is held must be answered within the timeout, half a second: a
-- margin of hundreds of times what a slow machine needs once scheduler 2 has started (its
-- start, which a slow machine may take longer for, is waited for first).
local smarm = require("smarm")
local guard = dofile("spec/support/guard.lua")
local run = guard.run

local CDEFS = [[
  int pipe(int fds[2]);
  intptr_t read(int fd, void *buf, size_t n);
  intptr_t write(int fd, const void *buf, size_t n);
  int close(int fd);
]]

local function no_answer(fname)
  return "smarm." .. fname .. ": scheduler 2 did not answer within opts.request_timeout (it is " ..
    "stuck in C code, a __gc finalizer or an actor with no time slice)"
end

-- Holds scheduler 2 (called by the main actor): spawns there an actor that reads from a pipe
-- only release() writes to, then runs then_() if given. Returns the hog's pid and release,
-- which lets the hog go (its write from an actor of its own with `from_actor`, so that the
-- caller can wait in a request meanwhile) and closes the pipe when called with `close`.
local function hold_scheduler_2(then_)
  local ffi = require("ffi")
  pcall(ffi.cdef, CDEFS)
  local fds = ffi.new("int[2]")
  assert.equals(0, ffi.C.pipe(fds))
  local rfd, wfd = fds[0], fds[1]
  local me = smarm.self()
  local hog = smarm.spawn_opt({ on = 2, slice = math.huge }, function()
    local ffi2 = require("ffi")
    pcall(ffi2.cdef, CDEFS)
    smarm.send(me, "blocking")
    ffi2.C.read(rfd, ffi2.new("char[1]"), 1) -- holds scheduler 2 until release() writes
    if then_ then then_() end
  end)
  guard.receive("the hog's start", function(m) return m == "blocking" end)
  local function release(how)
    if how == "from_actor" then
      smarm.spawn(function() ffi.C.write(wfd, "x", 1) end)
    elseif how == "close" then
      ffi.C.close(rfd)
      ffi.C.close(wfd)
    else
      ffi.C.write(wfd, "x", 1)
    end
  end
  return hog, release
end

-- Asks scheduler 2 something with f(...) and checks that it times out with fname's error.
local function times_out(fname, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok)
  assert.matches(no_answer(fname), err, 1, true)
end

describe("a request to a scheduler stuck in C", function()
  it("times out with a clear error, and takes effect when the scheduler gets to it", function()
    run(function()
      local me = smarm.self()
      guard.started()
      local dead, ref = smarm.spawn_opt({ on = 2, monitor = true }, function() end)
      guard.receive("the DOWN of an actor of scheduler 2",
        function(m) return type(m) == "table" and m.ref == ref end)
      local hog, release = hold_scheduler_2(function()
        while true do smarm.send(me, { forwarded = smarm.receive() }) end
      end)

      times_out("alive", smarm.alive, hog)
      -- a spawn without a name does not wait: its pid was set aside ahead (the spawn of `dead`
      -- on scheduler 2, above, asked for some); the actor starts when scheduler 2 gets to it
      local late = smarm.spawn_on(2, function() smarm.send(me, "late spawn") end)
      assert.equals("userdata", type(late))
      smarm.register("taken", me)
      times_out("spawn_opt", smarm.spawn_opt, { on = 2, name = "taken" }, function() end)
      times_out("spawn_opt", smarm.spawn_opt, { on = 2, link = true, name = "late_linked" },
        function() smarm.receive() end)
      times_out("register", smarm.register, "stuck_hog", hog)
      times_out("info", smarm.info, hog)
      times_out("processes", smarm.processes)
      times_out("send_after", smarm.send_after, 0, hog, "late tick")

      -- Scheduler 2 is let go only once this actor waits in its next request, so the late
      -- answers arrive while it waits for another one: each must find its token stale.
      release("from_actor")
      local ok, answer
      repeat ok, answer = pcall(smarm.alive, dead) until ok or not answer:find("did not answer")
      assert.is_true(ok, answer)
      assert.is_false(answer)
      assert.is_true(smarm.alive(hog))

      -- What the timed-out requests asked for happened late (documented): the spawn ran, the
      -- name was given, the timer fired; the spawn with a taken name failed there, its data freed.
      guard.receive("the late spawn", function(m) return m == "late spawn" end)
      guard.receive("the late timer",
        function(m) return type(m) == "table" and m.forwarded == "late tick" end)
      assert.equals(hog, smarm.whereis("stuck_hog"))
      -- the late linked spawn started, and its link told it of a spawner that gave up (noproc)
      guard.wait(function() return smarm.whereis("late_linked") == nil end,
        "the late linked child's end")
      release("close")
    end, { schedulers = 2, request_timeout = 0.5, watchdog = math.huge })
  end)

  -- smarm.top raised with the first scheduler that did not answer, and showed nothing: the tool
  -- one reaches for when a scheduler hangs. It shows the rest, and says which one is missing.
  it("leaves smarm.top the schedulers that answer, naming the one that does not", function()
    local screen = run(function()
      guard.started()
      local hog, release = hold_scheduler_2()
      local shown
      local ok, err = pcall(smarm.top, { count = 1, interval = 0.01, write = function(t) shown = t end })
      release() -- (before any assertion: the hog must go whatever happened)
      guard.ended(hog)
      release("close")
      return ok and shown or tostring(err)
    end, { schedulers = 2, request_timeout = 0.5, watchdog = math.huge })
    assert.matches("smarm top: 2 schedulers", screen, 1, true)
    assert.matches("scheduler 2 did not answer: its actors are not listed", screen, 1, true)
    assert.matches("\n<1%.%d+%.%d+> ", screen) -- scheduler 1's actors are listed
  end)

  -- An actor of spawn_on is its transfer block until it starts (lvm.h): stopped before that,
  -- the block goes with it, and so do the sockets in its arguments; asked about, it has no
  -- state to read yet. What follows is pushed to scheduler 2 while it is held, and taken there
  -- in push order when it is let go: the spawns, the kill and the message before any new actor
  -- runs, and the asker before the actor it asks about (siblings run in the order made).
  it("closes the socket of an actor spawned there that is killed before it starts", function()
    local r = run(function()
      local me = smarm.self()
      guard.started()
      guard.ended(smarm.spawn_on(2, function() end), "a first actor of scheduler 2") -- (pids set aside)
      local server = assert(smarm.tcp.listen("127.0.0.1", 0))
      local _, port = server:getsockname()
      local client = assert(smarm.tcp.connect("127.0.0.1", port))
      local conn = assert(server:accept())
      local hog, release = hold_scheduler_2()
      local killed, ref = smarm.spawn_opt({ on = 2, monitor = true }, function(c)
        c:send("ran\n")
      end, conn)
      smarm.kill(killed)
      local asker = smarm.spawn_on(2, function(owner)
        local pid = smarm.receive()
        smarm.send(owner, { info = smarm.info(pid, { "status", "func", "traceback", "scheduled" }) })
      end, me)
      local asked = smarm.spawn_on(2, function() end)
      smarm.send(asker, asked)
      release()
      local out = { down = guard.receive("the killed actor's DOWN",
        function(m) return type(m) == "table" and m.ref == ref end).reason }
      local line, e = client:receive()
      out.peer = { line, e }
      out.info = guard.receive("the asker's answer", function(m) return type(m) == "table" and m.info end).info
      guard.ended(hog)
      release("close")
      client:close()
      server:close()
      return out
    end, { schedulers = 2, watchdog = math.huge })
    assert.are.equal("killed", r.down)
    assert.are.same({ nil, "closed" }, r.peer)
    assert.are.same({ status = "runnable", traceback = "stack traceback:\n\t(not started)", scheduled = 0 },
      r.info)
  end)

  it("raises on a bad opts.request_timeout", function()
    for _, bad in ipairs({ 0, -1, "1", true, 1e-9, 7200 }) do
      assert.has_error(function() smarm.run(function() end, { request_timeout = bad }) end,
        "bad argument #2 to 'run' (opts.request_timeout must be a number of seconds from 1e-5 " ..
        "to 3600, or math.huge (no limit))")
    end
  end)
end)
