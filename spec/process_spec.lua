-- smarm.process and smarm.signal on the IO thread (src/io/proc.c, src/lua/lio.c).
local smarm = require("smarm")
local guard = dofile("spec/support/guard.lua")
local posix = dofile("spec/support/posix.lua")
local HANG = guard.HANG -- seconds: limits that only guard against a hang (spec/support/guard.lua)

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

  it("reports a program that cannot start, one killed by a signal, and a timeout", function()
    local r = guard.run(function()
      return { missing = { smarm.process.run({ "/no/such/program" }) },
        no_cwd = { smarm.process.run({ "pwd" }, { cwd = "/no/such/folder" }) },
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
    assert.are.equal(15, r.killed.signal)
    assert.is_nil(r.killed.status) -- no `status == 0` check takes it for success
    assert.are.equal("before\n", r.killed.stdout)
    assert.are.equal(nil, r.slow[1])
    assert.are.equal("timeout", r.slow[2])
    assert.are.same({ stdout = "so far\n", stderr = "and err\n" }, r.slow[3])
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
    local t0 = os.time()
    local started = fresh_path()
    guard.run(function()
      -- a duration no other test uses, so that the count below sees only this program; it says
      -- when it has started by creating a file
      smarm.spawn(function()
        smarm.process.run({ "sh", "-c", 'echo > "$1"; exec sleep 29.5', "sh", started })
      end)
      guard.wait(function() return smarm.fs.stat(started) end, "the program's start", 0.01)
      -- the main actor ends, and the runtime with it
    end)
    os.remove(started)
    assert.is_true(os.time() - t0 < 25) -- killed: not waited for (29.5 s)
    -- no process left running `sleep 29.5` (read from /proc without a fork: see posix.lua)
    local left = 0
    for _, name in ipairs(posix.list("/proc")) do
      local f = name:match("^%d+$") and io.open("/proc/" .. name .. "/cmdline")
      if f then
        if (f:read("*a") or ""):gsub("%z", " ") == "sleep 29.5 " then left = left + 1 end
        f:close()
      end
    end
    assert.are.equal(0, left)
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

  it("raises on misuse", function()
    local e1, e2 = guard.run(function()
      return select(2, pcall(function() smarm.process.run("ls") end)),
        select(2, pcall(function() smarm.process.run({ "ls", {} }) end))
    end)
    assert.matches("bad argument #1 to 'run' %(table expected, got string%)", e1)
    assert.matches("argv%[2%] is not a string", e2)
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

  it("times out, and refuses names it does not know", function()
    local r, e = guard.run(function()
      return { smarm.signal.wait("SIGHUP", 0.05) }, select(2, pcall(function() smarm.signal.wait("SIGKILL") end))
    end)
    assert.are.same({ nil, "timeout" }, r)
    assert.matches("bad argument #1 to 'wait'", e)
  end)
end)
