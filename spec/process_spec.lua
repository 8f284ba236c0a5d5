-- smarm.process and smarm.signal on the IO thread (src/io/proc.c, src/lua/lio.c).
local smarm = require("smarm")
local guard = dofile("spec/support/guard.lua")
local posix = dofile("spec/support/posix.lua")
local script = dofile("spec/support/script.lua")
local HANG = guard.HANG -- seconds: limits that only guard against a hang (spec/support/guard.lua)

-- A duration for `sleep` that names this process's programs alone: the cases below look for
-- them by command line, and the other variants' process_spec run beside this one (ctest -j).
local function own_duration(seconds)
  return ("%d.%05d"):format(seconds, posix.pid() % 100000)
end

-- A path that does not exist yet, for a program to wait for or to create.
local function fresh_path()
  local p = os.tmpname()
  os.remove(p)
  return p
end

describe("smarm.process.run", function()
  it("returns the exit status and what the program wrote, fed from stdin", function()
    local r = guard.run(function()
      return smarm.process.run({ "sh", "-c", "echo out; echo err >&2; cat; exit 3" }, { stdin = "fed\n" })
    end)
    assert.are.equal(3, r.status)
    assert.is_nil(r.signal)
    assert.are.equal("out\nfed\n", r.stdout)
    assert.are.equal("err\n", r.stderr)
  end)

  it("feeds a binary as the string it holds", function()
    local r = guard.run(function()
      return smarm.process.run({ "cat" }, { stdin = smarm.binary("from a binary\n") })
    end)
    assert.are.equal("from a binary\n", r.stdout)
  end)

  it("survives a program that does not read its stdin (no SIGPIPE for the runtime)", function()
    local r = guard.run(function()
      return smarm.process.run({ "true" }, { stdin = ("x"):rep(4 * 1024 * 1024) })
    end)
    assert.are.equal(0, r.status)
  end)

  it("runs in a folder with an environment, and collects large output", function()
    local r = guard.run(function()
      return smarm.process.run({ "sh", "-c", "echo $FOO; pwd; head -c 3000000 /dev/zero" },
        { env = { FOO = "bar" }, cwd = "/tmp" })
    end)
    assert.are.equal(0, r.status)
    assert.are.equal("bar\n/tmp\n", r.stdout:sub(1, 9))
    assert.are.equal(9 + 3000000, #r.stdout)
  end)

  -- opts.env was walked with lua_next while its NAME=value strings were made, and making one
  -- may run a GC step and with it finalizers: one that took the name the walk stood on and grew
  -- env made run raise "invalid key to 'next'". The finalizers here take env's names F.. and
  -- add others. In a smarm of its own: the GC settings below make it likely.
  it("reads opts.env while finalizers change it", function()
    local exe = os.getenv("SMARM_EXE")
    if not exe then return pending("SMARM_EXE is not set (./dev.sh test sets it)") end
    local code = [[
      local smarm = require("smarm")
      local env = {}
      for i = 1, 64 do env["K" .. i] = "v" end
    ]] .. script.churn("env", "F", '"w"') .. [[
      for _ = 1, 200 do
        local r, err = smarm.process.run({ "sh", "-c", 'test "$K64" = v' }, { env = env })
        assert(r and r.status == 0, err)
      end
      print(added > 0)
    ]]
    local r = guard.run(function()
      return smarm.process.run({ "sh", "-c", '$1 -s 1 -e "$2"', "sh", exe, code },
        { timeout = 5 * HANG })
    end)
    assert.are.equal("true\n", r.stdout, r.stderr)
    assert.are.equal(0, r.status, r.stderr)
  end)

  it("reports a program that cannot start, one killed by a signal, and a timeout", function()
    local r = guard.run(function()
      return { missing = { smarm.process.run({ "/no/such/program" }) },
        no_cwd = { smarm.process.run({ "pwd" }, { cwd = "/no/such/folder" }) },
        -- an executable file passes access(X_OK): the cwd is still the one to blame
        file_cwd = { smarm.process.run({ "pwd" }, { cwd = "/bin/sh" }) },
        killed = smarm.process.run({ "sh", "-c", "echo before; kill -TERM $$" }),
        -- what it wrote before the timeout comes with the error: a timeout longer each time,
        -- until the program has written before it (a slow machine starts a shell slowly)
        slow = (function()
          local timeout, r = 0.25
          repeat
            r = { smarm.process.run({ "sh", "-c", "echo so far; echo and err >&2; exec sleep 60" },
              { timeout = timeout }) }
            timeout = timeout * 2
          until (r[3] and r[3].stderr ~= "" and r[3].stdout ~= "") or timeout > 60
          return r
        end)() }
    end)
    assert.is_nil(r.missing[1])
    assert.are.equal("/no/such/program: no such file or directory", r.missing[2])
    assert.are.equal("ENOENT", r.missing[3])
    assert.are.same({ nil, "cwd /no/such/folder: no such file or directory", "ENOENT" }, r.no_cwd)
    assert.are.same({ nil, "cwd /bin/sh: not a directory", "ENOTDIR" }, r.file_cwd)
    assert.are.equal(15, r.killed.signal)
    assert.is_nil(r.killed.status) -- no `status == 0` check takes it for success
    assert.are.equal("before\n", r.killed.stdout)
    assert.are.equal(nil, r.slow[1])
    assert.are.equal("timeout", r.slow[2])
    assert.are.same({ stdout = "so far\n", stderr = "and err\n" }, r.slow[3])
  end)

  -- A run given up (its caller killed, or timed out) must stop writing its stdin: the bytes
  -- are the request's, freed with it. A program the run started reads them only later.
  it("stops feeding the stdin of a run given up (the input goes with the request)", function()
    local base = fresh_path()
    local out = guard.run(function()
      local caller = smarm.spawn(function()
        smarm.process.run({ "sh", "-c", [[exec 3<&0
          (echo > "$1.ready"; while [ ! -e "$1" ]; do sleep 0.01; done
           cat <&3 > "$1.out"; echo > "$1.done") &
          exec sleep 60]], "sh", base }, { stdin = ("x"):rep(1024 * 1024) })
      end)
      guard.wait(function() return smarm.fs.stat(base .. ".ready") end, "the reader's start")
      smarm.kill(caller) -- its request is cancelled: the program killed, the input freed
      guard.ended(caller)
      assert(smarm.fs.writefile(base, "go")) -- now the reader reads what it is given
      guard.wait(function() return smarm.fs.stat(base .. ".done") end, "the reader's end")
      return smarm.fs.readfile(base .. ".out")
    end)
    for _, suffix in ipairs({ "", ".ready", ".out", ".done" }) do os.remove(base .. suffix) end
    assert.is_true(#out < 1024 * 1024) -- cut off at the cancel (what the pipe held by then)
    assert.are.equal(("x"):rep(#out), out)
  end)

  -- A run given up killed its program, but a program that one started kept the output pipes,
  -- and the IO thread read on what it wrote into buffers nobody would take (`sh -c "yes;
  -- true"`: a gigabyte a second). The pipes close at the cancel, so such a writer meets EPIPE
  -- (as in Erlang when a port closes). Here it writes slowly, ignores SIGPIPE, and says when a
  -- write fails.
  it("closes the output pipes of a run given up: a program it left meets EPIPE", function()
    local base = fresh_path()
    local done = guard.run(function()
      local caller = smarm.spawn(function()
        smarm.process.run({ "sh", "-c", [[
          (trap '' PIPE; echo > "$1.ready"; i=0
           while [ $i -lt 15000 ]; do # (bounded: a shell whose echo ignores EPIPE ends too)
             echo x || { echo > "$1.done"; exit; }; sleep 0.01; i=$((i+1))
           done) &
          exec sleep 60]], "sh", base })
      end)
      guard.wait(function() return smarm.fs.stat(base .. ".ready") end, "the writer's start")
      smarm.kill(caller) -- its request is cancelled: the program killed, the pipes closed
      return guard.wait(function() return smarm.fs.stat(base .. ".done") end, "the writer's EPIPE")
    end)
    for _, suffix in ipairs({ ".ready", ".done" }) do os.remove(base .. suffix) end
    assert.is_table(done)
  end)

  it("parks only the caller: other actors run while a program runs", function()
    -- the program runs until the main actor, which ticks meanwhile, creates a file after 5 ticks
    local flag = fresh_path()
    local ticks, r = guard.run(function()
      local done, r = false, nil
      smarm.spawn(function()
        local wait_for_flag = 'while [ ! -e "$1" ]; do sleep 0.01; done'
        r = smarm.process.run({ "sh", "-c", wait_for_flag, "sh", flag },
          { timeout = HANG }) -- a hang guard
        done = true
      end)
      local ticks = 0
      while not done do
        smarm.sleep(0.01)
        ticks = ticks + 1
        if ticks == 5 then assert(smarm.fs.writefile(flag, "go")) end
      end
      return ticks, r
    end, { schedulers = 1 })
    os.remove(flag)
    assert.are.equal(0, r.status)
    assert.is_true(ticks >= 5)
  end)

  it("kills a program still running when the runtime ends", function()
    local t0 -- once the program has started: the run's end alone is timed, not a slow start
    local started = fresh_path()
    guard.run(function()
      -- a duration no other test uses, so that the count below sees only this program; it says
      -- when it has started by creating a file
      smarm.spawn(function()
        smarm.process.run({ "sh", "-c", 'echo > "$1"; exec sleep ' .. own_duration(29), "sh", started })
      end)
      guard.wait(function() return smarm.fs.stat(started) end, "the program's start", 0.01)
      t0 = os.time()
      -- the main actor ends, and the runtime with it
    end)
    os.remove(started)
    assert.is_true(os.time() - t0 < 25) -- killed: not waited for (29.5 s)
    -- no process left running this sleep (read from /proc without a fork: see posix.lua). The
    -- runtime sends SIGKILL and does not wait: a loaded machine may run the program's exit a
    -- little later, so the count is taken again until none is left, for up to 10 s from the
    -- run's end and never past 28 s from the program's start (its own end is at 29.5 s)
    local until_t = os.time() + 10
    local function left()
      local n = 0
      for _, name in ipairs(posix.list("/proc")) do
        local f = name:match("^%d+$") and io.open("/proc/" .. name .. "/cmdline")
        if f then
          if (f:read("*a") or ""):gsub("%z", " ") == "sleep " .. own_duration(29) .. " " then n = n + 1 end
          f:close()
        end
      end
      return n
    end
    local n = left()
    while n > 0 and os.time() < until_t and os.time() - t0 < 28 do
      posix.sleep(0.05)
      n = left()
    end
    assert.are.equal(0, n)
  end)

  -- issue 15: `sleep 77` outlived a parent killed by SIGTERM. A smarm process runs a program
  -- and is sent SIGTERM (nobody waits for it): it must end of that signal, its program with it.
  -- The shell that does it is itself run through smarm.process (no fork from this process: see
  -- posix.lua). A zombie counts as gone: the program's parent is dead and nothing may reap it.
  it("kills its programs when a signal nobody waits for ends the process", function()
    local exe = os.getenv("SMARM_EXE")
    if not exe then return pending("SMARM_EXE is not set (./dev.sh test sets it)") end
    local pidfile = fresh_path()
    local code = "local smarm = require('smarm'); smarm.process.run({ 'sh', '-c', "
      .. "'echo $$ > \"$1.tmp\"; mv \"$1.tmp\" \"$1\"; exec sleep 301.5', 'sh', "
      .. string.format("%q", pidfile) .. " })"
    local r = guard.run(function()
      return smarm.process.run({ "sh", "-c", [[
        $1 -s 1 -e "$2" & p=$!
        i=0; while [ ! -s "$3" ] && [ $i -lt 6000 ]; do sleep 0.02; i=$((i+1)); done
        kid=$(cat "$3")
        kill -TERM $p; wait $p; echo "smarm ended: $?"
        alive() { [ -e /proc/$1 ] && ! awk '{ print $3 }' /proc/$1/stat | grep -q Z; }
        i=0; while alive "$kid" && [ $i -lt 500 ]; do sleep 0.02; i=$((i+1)); done
        if alive "$kid"; then echo "left running"; kill -KILL "$kid"; else echo "gone"; fi
      ]], "sh", exe, code, pidfile }, { timeout = 5 * HANG })
    end)
    os.remove(pidfile)
    assert.are.equal("smarm ended: 143\ngone\n", r.stdout) -- 128 + SIGTERM
  end)

  -- An option's bad type was reported as an argument of its own, numbered by the stack slot
  -- it was read into ("bad argument #4 to 'run' (string expected, got table)" for opts.cwd),
  -- and a bad argv entry without the function. The calls are not tail calls: those lose the
  -- function's name.
  it("raises on misuse, naming the argument and the option", function()
    local e = guard.run(function()
      local process = smarm.process
      local calls = {
        function() local r = process.run("ls") return r end,
        function() local r = process.run({ "ls", {} }) return r end,
        function() local r = process.spawn({ "ls", true }) return r end,
        function() local r = process.run({ "echo" }, { cwd = {} }) return r end,
        function() local r = process.spawn({ "echo" }, { cwd = 5 }) return r end,
        function() local r = process.run({ "echo" }, { stdin = true }) return r end,
        function() local r = process.run({ "echo" }, { env = 5 }) return r end,
        function() local r = process.spawn({ "echo" }, { env = "A=1" }) return r end,
      }
      for i = 1, #calls do calls[i] = select(2, pcall(calls[i])) end
      return calls
    end)
    local want = {
      "bad argument #1 to 'run' (table expected, got string)",
      "bad argument #1 to 'run' (argv[2] must be a string, got table)",
      "bad argument #1 to 'spawn' (argv[2] must be a string, got boolean)",
      "bad argument #2 to 'run' (opts.cwd must be a string, got table)",
      "bad argument #2 to 'spawn' (opts.cwd must be a string, got number)",
      "bad argument #2 to 'run' (opts.stdin must be a string or a binary, got boolean)",
      "bad argument #2 to 'run' (opts.env must be a table, got number)",
      "bad argument #2 to 'spawn' (opts.env must be a table, got string)",
    }
    for i = 1, #want do
      assert.matches(want[i], e[i], 1, true)
    end
  end)
end)

-- Whether a process of this machine runs with exactly this command line (read from /proc without
-- a fork: see posix.lua); a zombie counts as gone.
local function running_cmdline(cmdline)
  for _, name in ipairs(posix.list("/proc")) do
    local f = name:match("^%d+$") and io.open("/proc/" .. name .. "/cmdline")
    if f then
      local line = (f:read("*a") or ""):gsub("%z", " ")
      f:close()
      local st = io.open("/proc/" .. name .. "/stat")
      local state = st and (st:read("*a") or ""):match("^%d+ %b() (%a)")
      if st then st:close() end
      if line == cmdline and state ~= "Z" then return true end
    end
  end
  return false
end

-- Whether one of this process's `sleep own_duration(seconds)` runs.
local function running_sleep(seconds)
  return running_cmdline("sleep " .. own_duration(seconds) .. " ")
end

local function rss_kib()
  local f = io.open("/proc/self/status")
  local kib = tonumber(f:read("*a"):match("VmRSS:%s*(%d+)"))
  f:close()
  return kib
end

describe("smarm.process.spawn", function()
  it("talks through its pipes, tells its exit in a wait and a message, and closes what it made", function()
    local r = guard.run(function()
      smarm.process.run({ "true" }) -- the IO thread started: its own descriptors are counted
      local fds_before = posix.fd_count()
      local p = assert(smarm.process.spawn({ "sh", "-c", "while read x; do echo \"got $x\"; done; exit 3" },
        { exit_message = true }))
      local out = {}
      assert(p.stdin:send("one\ntwo\n"))
      out[1] = p.stdout:receive("*l")
      out[2] = p.stdout:receive("*l")
      p.stdin:close() -- its end of input: the loop ends
      local m = guard.receive("the exit message", function(m)
        return type(m) == "table" and m.smarm == "process_exit"
      end)
      local w = p:wait()
      local tail = { p.stdout:receive("*a") }
      p.stdout:close()
      local fds_closed = guard.wait(function() return posix.fd_count() <= fds_before end, "the pipes closing")
      return { fds_closed = fds_closed, out = out, pid_ok = type(p.pid) == "number" and p.pid > 1, stderr = p.stderr,
        w = w, again = p:wait(0), same = m.process == p, m_pid = m.pid == p.pid, m_status = m.status,
        m_signal = m.signal, tail = tail, text = tostring(p):match("^smarm%.process %(pid %d+%)$") ~= nil }
    end)
    assert.are.same({ "got one", "got two" }, r.out)
    assert.is_true(r.pid_ok)
    assert.is_nil(r.stderr) -- inherited by default: no pipe
    assert.are.same({ status = 3 }, r.w)
    assert.are.same({ status = 3 }, r.again) -- waits after the exit answer at once
    assert.is_true(r.same)
    assert.is_true(r.m_pid)
    assert.are.equal(3, r.m_status)
    assert.is_nil(r.m_signal)
    assert.are.same({ "" }, r.tail) -- "*a": everything until the end, nothing
    assert.is_true(r.text)
    assert.is_true(r.fds_closed)
  end)

  it("kills it: a signal's end has no status; killing it again or waiting too long says so", function()
    local r = guard.run(function()
      local p = smarm.process.spawn({ "sleep", "30.25" }, { stdin = "null", stdout = "null" })
      local early = { p:wait(0.01) }
      local killed = { p:kill() } -- SIGTERM
      local w = p:wait()
      local again = { p:kill("SIGKILL") }
      local q = smarm.process.spawn({ "sleep", "30.25" }, { stdin = "null", stdout = "null" })
      q:kill(9)
      return { early = early, killed = killed, w = w, again = again, nine = q:wait(),
        pipes = { p.stdin, p.stdout, p.stderr } }
    end)
    assert.are.same({ nil, "timeout" }, r.early)
    assert.are.same({ true }, r.killed)
    assert.are.same({ signal = 15 }, r.w) -- no status: no `status == 0` check mistakes it
    assert.are.same({ nil, "no such process", "ESRCH" }, r.again) -- (no group: its pid is gone)
    assert.are.same({ signal = 9 }, r.nine)
    assert.are.same({}, r.pipes)
  end)

  it("kills a whole process group when the program leads one", function()
    local r = guard.run(function()
      local sleep = "sleep " .. own_duration(31)
      local p = smarm.process.spawn({ "sh", "-c", sleep .. " & " .. sleep .. " & echo started; wait" },
        { group = true, stdin = "null" })
      local line = p.stdout:receive("*l")
      guard.wait(function() return running_cmdline(sleep .. " ") end, "the group's sleeps")
      assert(p:kill("SIGTERM"))
      return { line = line, w = p:wait() }
    end)
    assert.are.same({ line = "started", w = { signal = 15 } }, r)
    guard.run(function()
      guard.wait(function() return not running_sleep(31) end, "the group's end")
    end)
  end)

  -- Once the leader had exited, process:kill answered ESRCH and the runtime's end skipped the
  -- group, so the programs it left ran on. The group is signalled while someone is in it.
  it("kills a group whose leader has exited, by process:kill and at the runtime's end", function()
    local r = guard.run(function()
      local out = {}
      for i, seconds in ipairs({ 32, 33 }) do
        local sleep = "sleep " .. own_duration(seconds)
        local p = smarm.process.spawn({ "sh", "-c", sleep .. " & echo started; exit 0" },
          { group = true, stdin = "null" })
        out[i] = { p.stdout:receive("*l"), p:wait() }
        guard.wait(function() return running_cmdline(sleep .. " ") end, "the group's sleep")
        if i == 1 then
          out.kill = { p:kill("SIGKILL") }
          guard.wait(function() return not running_sleep(seconds) end, "the group's end")
        end -- the second is left to the runtime's end
      end
      return out
    end)
    assert.are.same({ "started", { status = 0 } }, r[1])
    assert.are.same({ "started", { status = 0 } }, r[2])
    assert.are.same({ true }, r.kill)
    guard.run(function()
      guard.wait(function() return not running_sleep(33) end, "the second group's end")
    end)
  end)

  it("gives output as messages in active mode, merges stderr into stdout, hands a pipe over", function()
    local r = guard.run(function()
      local p = smarm.process.spawn({ "sh", "-c", "echo out; echo err >&2" }, { stdin = "null", stderr = "stdout" })
      p.stdout:setactive(true)
      local got, ending = {}, nil
      while not ending do
        local m = guard.receive("the output", function(m)
          return type(m) == "table" and m.socket == p.stdout
        end)
        if m.smarm == "unix" then got[#got + 1] = m.data else ending = m.smarm end
      end
      local q = smarm.process.spawn({ "sh", "-c", "cat; echo done" }, { stderr = "null" })
      local me = smarm.self()
      local reader = smarm.spawn_on(2, function()
        local m = smarm.receive()
        smarm.send(me, { m.out:receive("*a") })
      end)
      smarm.send(reader, { out = q.stdout }) -- the pipe goes to an actor on the other scheduler
      q.stdin:send("over there\n")
      q.stdin:close()
      local there = guard.receive("the other actor's read", function(m) return type(m) == "table" and m[1] end)
      return { text = table.concat(got), ending = ending, w = p:wait(), there = there[1],
        handed = select(2, pcall(q.stdout.receive, q.stdout)), qw = q:wait() }
    end, { schedulers = 2 })
    assert.are.equal("out\nerr\n", r.text)
    assert.are.equal("unix_closed", r.ending)
    assert.are.same({ status = 0 }, r.w)
    assert.are.equal("over there\ndone\n", r.there)
    assert.matches("handed to another actor", r.handed)
    assert.are.same({ status = 0 }, r.qw)
  end)

  it("streams 100 MB to a slow reader in bounded memory", function()
    local r = guard.run(function()
      local rss0 = rss_kib()
      local p = smarm.process.spawn({ "head", "-c", "100000000", "/dev/zero" }, { stdin = "null" })
      local total, peak, n = 0, 0, 0
      while true do
        local data, err, partial = p.stdout:receive(65536)
        data = data or partial
        total = total + #data
        if err then break end
        n = n + 1
        if n % 64 == 0 then -- slower than the program: its writes wait on the pipe
          smarm.sleep(0.001)
          local rss = rss_kib()
          if rss > peak then peak = rss end
        end
      end
      return { total = total, grew_kib = peak - rss0, w = p:wait() }
    end)
    assert.are.equal(100000000, r.total)
    assert.are.same({ status = 0 }, r.w)
    -- the IO side stops reading at 256 KiB unclaimed, the reader reads ahead 64 KiB: nothing
    -- like the 100 MB may pile up (the margin is the allocator's). Not under ASan, whose
    -- quarantine keeps what was freed (256 MB) out of reuse.
    if os.getenv("SMARM_SANITIZER") ~= "asan" then
      assert.is_true(r.grew_kib < 32 * 1024, "grew by " .. r.grew_kib .. " KiB")
    end
  end)

  it("reports a program that cannot start, raises on misuse, and cannot travel", function()
    local r = guard.run(function()
      local function err_of(f, ...) return select(2, pcall(f, ...)) end
      local p = smarm.process.spawn({ "true" }, { stdin = "null", stdout = "null" })
      p:wait()
      return {
        missing = { smarm.process.spawn({ "smarm-no-such-program" }) },
        cwd = { smarm.process.spawn({ "pwd" }, { cwd = "/smarm-no-such-folder" }) },
        bad_argv = err_of(function() smarm.process.spawn("ls") end),
        bad_stdio = err_of(smarm.process.spawn, { "ls" }, { stdout = "file" }),
        bad_stderr = err_of(smarm.process.spawn, { "ls" }, { stderr = 2 }),
        bad_group = err_of(smarm.process.spawn, { "true" }, { group = "no" }), -- not true
        bad_exit_message = err_of(smarm.process.spawn, { "true" }, { exit_message = 0 }),
        file_cwd = { smarm.process.spawn({ "pwd" }, { cwd = "/bin/sh" }) },
        bad_signal = err_of(function() p:kill("SIGNOPE") end),
        set = err_of(function() p.pid = 1 end),
        send = err_of(smarm.send, smarm.self(), p),
      }
    end)
    assert.are.same({ nil, "smarm-no-such-program: no such file or directory", "ENOENT" }, r.missing)
    assert.are.same({ nil, "cwd /smarm-no-such-folder: no such file or directory", "ENOENT" }, r.cwd)
    assert.matches("bad argument #1 to 'spawn' %(table expected, got string%)", r.bad_argv)
    assert.matches("opts.stdout must be \"pipe\", \"inherit\" or \"null\"", r.bad_stdio)
    assert.matches("opts.stderr must be \"pipe\", \"inherit\" or \"null\" or \"stdout\"", r.bad_stderr)
    assert.matches("bad argument #1 to 'kill' %(a signal number or a name", r.bad_signal)
    assert.matches("opts.group must be a boolean, got string", r.bad_group, 1, true)
    assert.matches("opts.exit_message must be a boolean, got number", r.bad_exit_message, 1, true)
    assert.are.same({ nil, "cwd /bin/sh: not a directory", "ENOTDIR" }, r.file_cwd)
    assert.matches("cannot be set", r.set)
    assert.matches("userdata", r.send)
  end)

  it("kills a spawned program still running when the runtime ends, its handle collected or not", function()
    local gone_handle
    guard.run(function()
      local p = smarm.process.spawn({ "sleep", own_duration(32) }, { stdin = "null", stdout = "null" })
      smarm.process.spawn({ "sleep", own_duration(33) }, { stdin = "null", stdout = "null" }) -- dropped
      collectgarbage()
      collectgarbage()
      gone_handle = true
      guard.wait(function() return running_sleep(32) and running_sleep(33) end, "the programs' start")
      assert(p.pid)
    end)
    assert.is_true(gone_handle)
    guard.run(function()
      guard.wait(function() return not running_sleep(32) and not running_sleep(33) end, "the programs' end")
    end)
  end)

  -- A program killed at the runtime's end is reaped before the run returns: its process handle
  -- closes only once it has exited, else it would stay a zombie child of this process for good.
  it("leaves no zombie of a program killed at the runtime's end (spawned or run)", function()
    local function state(pid) -- of our child pid ("gone" also for a pid reused by another's)
      local f = io.open("/proc/" .. pid .. "/stat")
      if not f then return "gone" end
      local s, ppid = (f:read("*a") or ""):match("^%d+ %b() (%a) (%d+)")
      f:close()
      return tonumber(ppid) == posix.pid() and s or "gone"
    end
    local pidfile = fresh_path()
    local spawned = guard.run(function()
      local p = smarm.process.spawn({ "sleep", "32.75" }, { stdin = "null", stdout = "null" })
      smarm.spawn(function()
        smarm.process.run({ "sh", "-c", 'echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 32.75',
          "sh", pidfile })
      end)
      guard.wait(function() local s = smarm.fs.readfile(pidfile); return s and #s > 0 end,
        "the run's start")
      return p.pid
    end)
    local f = assert(io.open(pidfile))
    local ran = f:read("*n")
    f:close()
    os.remove(pidfile)
    -- the runtime has ended: both were killed and waited for (not a zombie, not running)
    assert.are.same({ "gone", "gone" }, { state(spawned), state(ran) })
  end)

  it("raises for a handle of an earlier run", function()
    local p = guard.run(function()
      local p = smarm.process.spawn({ "true" }, { stdin = "null", stdout = "null" })
      p:wait()
      return p
    end)
    local e = guard.run(function() return select(2, pcall(p.wait, p)) end)
    assert.matches("the process belongs to an earlier run", e)
    assert.matches("of an earlier run", tostring(p))
  end)
end)

describe("smarm.signal.wait", function()
  it("wakes every actor waiting for a signal the process receives", function()
    -- Raising the signal before a waiter is in place would end the process (SIGUSR1's default
    -- action). The IO thread takes requests in order: a file request made after a wait was
    -- submitted completes only after that wait is registered. So each scheduler has a helper
    -- that spawns a local waiter, lets it park, makes such a request and reports.
    local got = guard.run(function()
      local me = smarm.self()
      for k = 1, 2 do
        smarm.spawn_on(k, function(owner, hang)
          smarm.spawn(function() smarm.send(owner, smarm.signal.wait("SIGUSR1", hang)) end)
          smarm.yield() -- the waiter (this scheduler) runs until it parks in its wait
          smarm.fs.stat("/")
          smarm.send(owner, "waiting")
        end, me, HANG)
      end
      for _ = 1, 2 do assert(guard.receive("a waiter in place") == "waiting") end
      smarm.process.run({ "sh", "-c", "kill -USR1 $PPID" }) -- the shell's parent is this process
      return { guard.receive("a woken waiter"), guard.receive("a woken waiter") }
    end, { schedulers = 2 })
    assert.are.same({ "SIGUSR1", "SIGUSR1" }, got)
  end)

  -- A signal the process started with ignored (nohup's SIGHUP; SIGINT in a shell's background
  -- job) stays ignored: a program's guard, a waiter that timed out (libuv's stop put the default
  -- action back), both, and the end of an earlier run made each of them fatal. The shell starts smarm
  -- so, waits for its word, sends SIGHUP and SIGINT, then SIGUSR1, which the code waits for.
  local function with_hup_ignored(...)
    local exe = os.getenv("SMARM_EXE")
    local ready = fresh_path()
    local args = { ... }
    local r = guard.run(function()
      return smarm.process.run({ "sh", "-c", [[
        ready=$1; exe=$2; shift 2; trap '' HUP
        SMARM_READY=$ready $exe "$@" & p=$!
        i=0; while [ ! -e "$ready" ] && [ $i -lt 6000 ]; do sleep 0.02; i=$((i+1)); done
        kill -HUP $p; kill -INT $p; kill -USR1 $p; wait $p; echo "smarm ended: $?"
      ]], "sh", ready, exe, unpack(args) }, { timeout = 5 * HANG }) -- $exe: maybe "qemu-... smarm"
    end)
    os.remove(ready)
    return r.stdout, r.stderr
  end
  -- Waits for SIGUSR1 once its waiter is in place (the IO thread takes requests in order: see
  -- the case above), telling the shell so through the file SMARM_READY names.
  local USR1 = "local me = smarm.self(); "
    .. "smarm.spawn(function() smarm.send(me, smarm.signal.wait('SIGUSR1', 600)) end); "
    .. "smarm.yield(); smarm.fs.stat('/'); io.open(os.getenv('SMARM_READY'), 'w'):close(); "
    .. "print(smarm.receive(600)); "

  it("leaves ignored what the process started with ignored", function()
    if not os.getenv("SMARM_EXE") then
      return pending("SMARM_EXE is not set (./dev.sh test sets it)")
    end
    local sleep = own_duration(302)
    assert.are.equal("running\nSIGUSR1\nrunning\nsmarm ended: 0\n", with_hup_ignored("-s", "1", "-e",
      "local smarm = require('smarm'); local p = smarm.process.spawn({ 'sleep', '" .. sleep
      .. "' }, { stdin = 'null', stdout = 'null' }); print(p:wait(0) == nil and 'running'); "
      .. USR1
      .. "print(p:wait(0) == nil and 'running')"))
    assert.are.equal("timeout\nSIGUSR1\nsmarm ended: 0\n", with_hup_ignored("-s", "1", "-e",
      "local smarm = require('smarm'); print(select(2, smarm.signal.wait('SIGHUP', 0.001))); " .. USR1))
    assert.are.equal("timeout\nSIGUSR1\nrunning\nsmarm ended: 0\n", with_hup_ignored("-s", "1",
      "-e", "local smarm = require('smarm'); local p = smarm.process.spawn({ 'sleep', '" .. sleep
      .. "' }, { stdin = 'null', stdout = 'null' }); "
      .. "print(select(2, smarm.signal.wait('SIGHUP', 0.001))); " .. USR1
      .. "print(p:wait(0) == nil and 'running')"))
    local path = fresh_path()
    local f = assert(io.open(path, "w"))
    f:write("local smarm = require('smarm')\n",
      "smarm.run(function() print(select(2, smarm.signal.wait('SIGHUP', 0.001))) end, { schedulers = 1 })\n",
      "smarm.run(function() ", USR1, "end, { schedulers = 1 })\n")
    f:close()
    local out, err = with_hup_ignored("-n", path)
    os.remove(path)
    assert.are.equal("timeout\nSIGUSR1\nsmarm ended: 0\n", out, err)
    -- and a run that caught it (smarm.signal.catch) before any wait: its end left SIGHUP's
    -- default action in place, since the catch had not read the disposition it started with
    f = assert(io.open(path, "w"))
    f:write("local smarm = require('smarm')\n",
      "smarm.run(function() print(smarm.signal.catch('SIGHUP')) end, { schedulers = 1 })\n",
      "smarm.run(function() ", USR1, "end, { schedulers = 1 })\n")
    f:close()
    out, err = with_hup_ignored("-n", path)
    os.remove(path)
    assert.are.equal("true\nSIGUSR1\nsmarm ended: 0\n", out, err)
    assert.is_false(guard.run(function() return running_sleep(302) end))
  end)

  -- A reload loop (wait for SIGHUP, reload, wait again) died of a second SIGHUP that came while
  -- it reloaded: nobody waited, so the default action applied. smarm.signal.catch keeps it
  -- caught for the run, and keeps one that comes while nobody waits for the next wait. In a
  -- smarm of its own: a signal there can only end that one (the shells signal their parent).
  it("catch: keeps a signal caught for the run, and one that comes between waits", function()
    local exe = os.getenv("SMARM_EXE")
    if not exe then return pending("SMARM_EXE is not set (./dev.sh test sets it)") end
    local code = "local smarm = require('smarm'); assert(smarm.signal.catch('SIGUSR2')); "
      .. "smarm.process.run({ 'sh', '-c', 'kill -USR2 $PPID; kill -USR2 $PPID' }); "
      .. "io.write(smarm.signal.wait('SIGUSR2', 600), ' '); "
      .. "smarm.process.run({ 'sh', '-c', 'kill -USR2 $PPID' }); "
      .. "io.write(smarm.signal.wait('SIGUSR2', 600), ' and on\\n'); io.stdout:flush()"
    local r = guard.run(function()
      return smarm.process.run({ "sh", "-c", '$1 -s 1 -e "$2"', "sh", exe, code },
        { timeout = 5 * HANG })
    end)
    -- (its status is not asked: a signal still on its way when the run ended may end it then)
    assert.are.equal("SIGUSR2 SIGUSR2 and on\n", r.stdout, r.stderr)
  end)

  it("times out, and refuses names it does not know", function()
    local r, e = guard.run(function()
      assert.has_error(function() smarm.signal.catch("SIGKILL") end,
        "bad argument #1 to 'catch' (SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 or SIGQUIT expected)")
      return { smarm.signal.wait("SIGHUP", 0.05) }, select(2, pcall(function() smarm.signal.wait("SIGKILL") end))
    end)
    assert.are.same({ nil, "timeout" }, r)
    assert.matches("bad argument #1 to 'wait'", e)
  end)
end)

-- Time limits are checked alike everywhere: a negative number, NaN or a string raises. Some calls
-- took them for "no limit" (a program with { timeout = -1 } was never killed), others raised.
describe("time limits of IO calls", function()
  it("refuse negative numbers, NaN and strings; nil is no limit", function()
    smarm.run(function()
      local sock = assert(smarm.udp.bind("127.0.0.1", 0))
      local cases = {
        { function(t) return smarm.signal.wait("SIGUSR1", t) end, "non-negative number of seconds" },
        { function(t) return smarm.process.run({ "true" }, { timeout = t }) end, "opts.timeout" },
        { function(t) return smarm.tcp.connect("127.0.0.1", 1, t) end, "non-negative number of seconds" },
        { function(t) return smarm.dns.getaddrinfo("localhost", nil, t) end, "non-negative number of seconds" },
      }
      for _, case in ipairs(cases) do
        for _, bad in ipairs({ -1, 0 / 0, "1" }) do
          local ok, err = pcall(case[1], bad)
          assert.is_false(ok, tostring(bad))
          assert.matches(case[2], err, 1, true)
        end
      end
      local p = smarm.process.spawn({ "true" })
      assert.has_error(function() p:wait(-1) end)
      assert.are.equal(0, p:wait(nil).status)
      assert.are.equal(0, smarm.process.run({ "true" }, { timeout = 5 }).status)
      assert.has_error(function() sock:settimeout(0 / 0) end)
      assert.has_error(function() sock:settimeout("0.1") end)
      assert.is_true(sock:settimeout(-1)) -- documented: no limit
      assert.is_true(sock:settimeout(nil))
      sock:close()
    end)
  end)
end)

-- Paths, host names, arguments and environments go to C as C strings: a NUL byte cut them
-- silently (writefile("victim\0.txt") wrote "victim"); such a string now raises.
describe("strings the IO calls hand to C", function()
  it("refuse a NUL byte instead of cutting the string there", function()
    os.remove("/tmp/smarm-nul")
    smarm.run(function()
      local udp = assert(smarm.udp.bind("127.0.0.1", 0))
      local calls = {
        function() return smarm.fs.writefile("/tmp/smarm-nul\0.txt", "data") end,
        function() return smarm.fs.readfile("/etc/hostname\0.bak") end,
        function() return smarm.fs.open("/etc/hostname\0x", "r") end,
        function() return smarm.tcp.listen("127.0.0.1\0garbage", 0) end,
        function() return smarm.tcp.connect("127.0.0.1\0x", 1) end,
        function() return smarm.dns.getaddrinfo("localhost\0evil") end,
        function() return udp:sendto("x", "127.0.0.1\0z", 9) end,
        function() return smarm.process.run({ "true" }, { cwd = "/\0tmp" }) end,
      }
      for i, call in ipairs(calls) do
        local ok, err = pcall(call)
        assert.is_false(ok, i)
        assert.matches("string without NUL bytes expected", err, 1, true)
      end
      local ok, err = pcall(smarm.process.run, { "echo", "a\0b" })
      assert.is_false(ok)
      assert.matches("argv[2] holds a NUL byte", err, 1, true)
      ok, err = pcall(smarm.process.run, { "true" }, { env = { A = "x\0y" } })
      assert.is_false(ok)
      assert.matches("hold no NUL byte", err, 1, true)
      assert.is_nil(io.open("/tmp/smarm-nul", "r")) -- nothing was written under the cut name
      udp:close()
    end)
  end)
end)
