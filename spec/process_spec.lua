-- smarm.process and smarm.signal on the IO thread (src/io/proc.c, src/lua/lio.c).
local smarm = require("smarm")

describe("smarm.process.run", function()
  it("returns the exit status and what the program wrote, fed from stdin", function()
    local r = smarm.run(function()
      return smarm.process.run({ "sh", "-c", "echo out; echo err >&2; cat; exit 3" }, { stdin = "fed\n" })
    end)
    assert.are.equal(3, r.status)
    assert.is_nil(r.signal)
    assert.are.equal("out\nfed\n", r.stdout)
    assert.are.equal("err\n", r.stderr)
  end)

  it("survives a program that does not read its stdin (no SIGPIPE for the runtime)", function()
    local r = smarm.run(function()
      return smarm.process.run({ "true" }, { stdin = ("x"):rep(4 * 1024 * 1024) })
    end)
    assert.are.equal(0, r.status)
  end)

  it("runs in a folder with an environment, and collects large output", function()
    local r = smarm.run(function()
      return smarm.process.run({ "sh", "-c", "echo $FOO; pwd; head -c 3000000 /dev/zero" },
        { env = { FOO = "bar" }, cwd = "/tmp" })
    end)
    assert.are.equal(0, r.status)
    assert.are.equal("bar\n/tmp\n", r.stdout:sub(1, 9))
    assert.are.equal(9 + 3000000, #r.stdout)
  end)

  it("reports a program that cannot start, one killed by a signal, and a timeout", function()
    local r = smarm.run(function()
      return { missing = { smarm.process.run({ "/no/such/program" }) },
        killed = smarm.process.run({ "sh", "-c", "kill -TERM $$" }),
        slow = { smarm.process.run({ "sleep", "5" }, { timeout = 0.2 }) } }
    end)
    assert.is_nil(r.missing[1])
    assert.are.equal("ENOENT", r.missing[3])
    assert.are.equal(15, r.killed.signal)
    assert.are.same({ nil, "timeout" }, r.slow)
  end)

  it("parks only the caller: other actors run while a program runs", function()
    local ticks = smarm.run(function()
      local done = false
      smarm.spawn(function() smarm.process.run({ "sleep", "0.2" }); done = true end)
      local ticks = 0
      while not done do smarm.sleep(0.01); ticks = ticks + 1 end
      return ticks
    end, { schedulers = 1 })
    assert.is_true(ticks >= 5)
  end)

  it("kills a program still running when the runtime ends", function()
    local t0 = os.time()
    smarm.run(function()
      -- a duration no other test uses, so that the count below sees only this program
      smarm.spawn(function() smarm.process.run({ "sleep", "29.5" }) end)
      smarm.sleep(0.1) -- it has started; the main actor ends, and the runtime with it
    end)
    assert.is_true(os.time() - t0 < 10)
    local p = io.popen("for d in /proc/[0-9]*; do tr '\\0' ' ' < $d/cmdline 2>/dev/null; echo; done"
      .. " | grep -c '^sleep 29.5 $'")
    local left = tonumber(p:read("*a"))
    p:close()
    assert.are.equal(0, left)
  end)

  it("raises on misuse", function()
    local e1, e2 = smarm.run(function()
      return select(2, pcall(function() smarm.process.run("ls") end)),
        select(2, pcall(function() smarm.process.run({ "ls", {} }) end))
    end)
    assert.matches("bad argument #1 to 'run' %(table expected, got string%)", e1)
    assert.matches("argv%[2%] is not a string", e2)
  end)
end)

describe("smarm.signal.wait", function()
  it("wakes every actor waiting for a signal the process receives", function()
    local got = smarm.run(function()
      local me = smarm.self()
      for _ = 1, 2 do
        smarm.spawn_on("any", function(owner) smarm.send(owner, smarm.signal.wait("SIGUSR1", 5)) end, me)
      end
      smarm.sleep(0.05)
      smarm.process.run({ "sh", "-c", "kill -USR1 $PPID" }) -- the shell's parent is this process
      return { smarm.receive(5), smarm.receive(5) }
    end, { schedulers = 2 })
    assert.are.same({ "SIGUSR1", "SIGUSR1" }, got)
  end)

  it("times out, and refuses names it does not know", function()
    local r, e = smarm.run(function()
      return { smarm.signal.wait("SIGHUP", 0.05) }, select(2, pcall(function() smarm.signal.wait("SIGKILL") end))
    end)
    assert.are.same({ nil, "timeout" }, r)
    assert.matches("bad argument #1 to 'wait'", e)
  end)
end)
