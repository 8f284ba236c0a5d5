-- smarm.console: a prompt into the live system over a Unix socket (lua/smarm/console.lua), and
-- `smarm attach PATH` / `smarm -a PATH`, the executable's client (lua/smarm/cli.lua).
local smarm = require("smarm")

local posix = dofile("spec/support/posix.lua")
local guard = dofile("spec/support/guard.lua")

-- The smarm executable as argv's first words (a command line under qemu: the emulator first).
local exe_words = {}
for word in (os.getenv("SMARM_EXE") or "smarm"):gmatch("%S+") do
  exe_words[#exe_words + 1] = word
end
local function smarm_argv(...)
  local argv = { unpack(exe_words) }
  for _, a in ipairs({ ... }) do argv[#argv + 1] = a end
  return argv
end
local dir = posix.tmpdir()
local serial = 0

local function new_path()
  serial = serial + 1
  return dir .. "/console" .. serial
end

local exists = posix.exists

-- Attaches to path from an actor of this runtime, answering the prompts with `lines` in turn;
-- returns everything the console showed (prompts included) and attach's results.
local function attach(path, lines, seen)
  local out, i = {}, 0
  local ok, err = smarm.console.attach(path, {
    interactive = true,
    read = function()
      i = i + 1
      return lines[i]
    end,
    write = function(text)
      out[#out + 1] = text
      if seen then seen(table.concat(out)) end
    end,
  })
  return table.concat(out), ok, err
end

teardown(function() posix.remove_tree(dir) end)

describe("smarm.console", function()
  it("runs entries in the live system: values, prints, multi-line chunks, errors", function()
    local path = new_path()
    local r = guard.run(function()
      _G.service_counter = 7 -- the system's own global, seen from the console
      local console = assert(smarm.console.listen(path))
      local out = {}
      out.mode = smarm.fs.stat(path).mode
      out.text = attach(path, {
        "=1 + 1",
        "x = 41",
        "=x + 1, nil, 'three'",
        "print('hi', x)",
        "for i = 1, 3 do",
        "  io.write(i, ' ')",
        "end",
        "=service_counter",
        "error('boom')",
        "=smarm.scheduler()",
        "x = (",
        "nonsense here",
      })
      out.global_kept = rawget(_G, "x") -- the console's globals are its own
      console.close()
      console.close() -- a second close does nothing
      out.removed = not exists(path)
      _G.service_counter = nil
      return out
    end)
    assert.are.equal(tonumber("600", 8), r.mode)
    assert.is_nil(r.global_kept)
    assert.is_true(r.removed)
    local t = r.text
    assert.matches("^> 2\n> > 42\tnil\tthree\n> hi\t41\n> >> >> 1 2 3 > 7\n> ", t)
    assert.matches("> console:1: boom\nstack traceback:\n", t, 1, true)
    assert.is_nil(t:find("xpcall", 1, true)) -- no frames of the prompt's own
    assert.is_nil(t:find("repl.lua", 1, true))
    assert.matches("\n> 1\n> >> console:2: ", t, 1, true) -- the syntax error of the 2-line entry
  end)

  it("starts a new evaluator when an entry ends it, keeping the session's globals", function()
    local path = new_path()
    local r = guard.run(function()
      local console = assert(smarm.console.listen(path))
      local text = attach(path, {
        "kept = 'still here'",
        "first = smarm.self()",
        "smarm.exit('enough')",
        "=kept",
        "=smarm.self() ~= first",
        "smarm.exit(smarm.self(), 'kill')",
        "=kept",
      })
      console.close()
      return text
    end)
    assert.matches("** the evaluator ended (enough); a new evaluator takes over\n> still here\n"
      .. "> true\n", r, 1, true)
    assert.matches("** the evaluator ended (killed); a new evaluator takes over\n> still here\n",
      r, 1, true)
  end)

  -- The evaluator's mailbox is the entries' own: it took any message with a `run` field as an
  -- entry (a user's { run = job } was run as code, or, not a string, ended the evaluator), and
  -- one with `console_input` as the client's input. What the session sends carries its key.
  it("leaves the entries' messages with run or console_input fields to the entries", function()
    local path = new_path()
    local r = guard.run(function()
      local console = assert(smarm.console.listen(path))
      local text = attach(path, {
        "first = smarm.self()",
        "smarm.send(smarm.self(), { run = 'print(\"hijacked\")' })",
        "=smarm.receive(5).run",
        "smarm.send(smarm.self(), { run = 42 })",
        "=smarm.receive(5).run",
        "smarm.send(smarm.self(), { console_input = 'not typed' })",
        "=smarm.receive(5).console_input",
        "=smarm.self() == first",
      })
      console.close()
      return text
    end)
    assert.is_nil(r:find("hijacked\n", 1, true))
    assert.is_nil(r:find("evaluator ended", 1, true))
    assert.matches('> > > print("hijacked")\n> > 42\n> > not typed\n> true\n', r, 1, true)
  end)

  it("serves several consoles at once, each with its own globals", function()
    local path = new_path()
    local r = guard.run(function()
      local console = assert(smarm.console.listen(path))
      local me = smarm.self()
      for k = 1, 3 do
        smarm.spawn(function()
          -- each waits in its console (a receive there) until all three have set their value
          local text = attach(path, {
            "mine = " .. k,
            "smarm.register('console" .. k .. "', smarm.self())",
            "=smarm.receive(120)",
            "=mine",
          })
          smarm.send(me, { k = k, text = text })
        end)
      end
      for k = 1, 3 do
        guard.wait(function() return smarm.whereis("console" .. k) end, "console " .. k)
      end
      for k = 1, 3 do smarm.send(smarm.whereis("console" .. k), "go " .. k) end
      local got = {}
      for _ = 1, 3 do
        local m = guard.receive("a console's transcript")
        got[m.k] = m.text
      end
      console.close()
      return got
    end)
    for k = 1, 3 do
      assert.are.equal("> > > go " .. k .. "\n> " .. k .. "\n> \n", r[k]) -- "\n": input ended
    end
  end)

  it("ends the session of a client that dies mid-entry, and the system runs on", function()
    local path = new_path()
    local r = guard.run(function()
      local console = assert(smarm.console.listen(path))
      local before = #smarm.processes()
      local raw = assert(smarm.unix.connect(path))
      raw:send("for i = 1, 3 do\n") -- an unfinished entry
      local prompt = raw:receive() -- the first prompt frame
      raw:close()
      -- its session and evaluator end: back to the actors there were before it came
      guard.wait(function() return #smarm.processes() == before end, "the session ended")
      local text = attach(path, { "=1 + 2" })
      console.close()
      return { prompt = prompt, text = text }
    end)
    assert.are.equal("\0> ", r.prompt)
    assert.are.equal("> 3\n> \n", r.text)
  end)

  it("ends the evaluator of a session that was killed", function()
    local path = new_path()
    local r = guard.run(function()
      local console = assert(smarm.console.listen(path))
      local before = #smarm.processes()
      local raw = assert(smarm.unix.connect(path))
      -- the entry names its session: the actor that monitors the evaluator
      raw:send("local _ = rawset(_G, 'console_session', "
        .. "smarm.info(smarm.self()).monitored_by[1])\n")
      guard.wait(function() return rawget(_G, "console_session") end, "the session's pid")
      smarm.kill(rawget(_G, "console_session"))
      _G.console_session = nil
      guard.wait(function() return #smarm.processes() == before end,
        "session, reader and evaluator ended")
      local rest = raw:receive("*a") -- the session's end closed the connection
      raw:close()
      console.close()
      return rest
    end)
    assert.matches("^%z> \n", r) -- the next prompt may or may not have come before the kill
  end)

  it("gives an entry the console's input, and interrupts a running entry", function()
    local path = new_path()
    local r = guard.run(function()
      local console = assert(smarm.console.listen(path))
      local out = {}
      out.input = attach(path, {
        "local line = io.read(); print('got ' .. line)",
        "typed while it ran",
        "=1",
      })
      -- Ctrl-C, as smarm attach sends it: a line of one ETX byte
      local raw = assert(smarm.unix.connect(path))
      assert(raw:receive() == "\0> ")
      raw:send("rawset(_G, 'console_waiting', smarm.self()); smarm.receive()\n")
      guard.wait(function()
        local pid = rawget(_G, "console_waiting")
        local i = pid and smarm.info(pid)
        return i and i.waiting == "receive"
      end, "the entry waiting in receive")
      raw:send("\3\n")
      out.interrupted = raw:receive()
      out.frame = raw:receive()
      raw:send("=smarm.self() ~= console_waiting, smarm.alive(console_waiting)\n")
      out.after = raw:receive()
      raw:close()
      _G.console_waiting = nil
      console.close()
      return out
    end)
    assert.are.equal("> got typed while it ran\n> 1\n> \n", r.input)
    assert.are.equal("** interrupted; a new evaluator takes over", r.interrupted)
    assert.are.equal("\0> ", r.frame)
    assert.are.equal("true\tfalse", r.after)
  end)

  it("reports bad paths, refuses a taken one, and raises on misuse", function()
    local taken = new_path()
    local r = guard.run(function()
      local out = {}
      out.nodir = { smarm.console.listen(dir .. "/no/such/dir/console") }
      assert(smarm.fs.writefile(taken, "a file"))
      out.taken = { smarm.console.listen(taken) }
      local open = assert(smarm.console.listen(new_path(), { mode = tonumber("660", 8) }))
      out.mode = smarm.fs.stat(open.path).mode
      open.close()
      out.notstring = select(2, pcall(smarm.console.listen, 42))
      out.badopts = select(2, pcall(smarm.console.listen, new_path(), "x"))
      out.badmode = select(2, pcall(smarm.console.listen, new_path(), { mode = "rw" }))
      out.attach_missing = { smarm.console.attach(dir .. "/nobody") }
      return out
    end)
    assert.is_nil(r.nodir[1])
    assert.are.equal("ENOENT", r.nodir[3])
    assert.are.equal("EADDRINUSE", r.taken[3])
    assert.are.equal(tonumber("660", 8), r.mode)
    assert.matches("bad argument #1 to 'listen' (string expected, got number)", r.notstring, 1,
      true)
    assert.matches("bad argument #2 to 'listen' (table expected, got string)", r.badopts, 1, true)
    assert.matches("opts.mode must be a number", r.badmode, 1, true)
    assert.is_nil(r.attach_missing[1])
    assert.matches("nobody: no such file or directory", r.attach_missing[2], 1, true)
    local ok, outside = pcall(smarm.console.listen, new_path())
    assert.is_false(ok)
    assert.are.equal("smarm.console.listen: not inside an actor", outside)
  end)
end)

describe("smarm attach", function()
  it("runs a shell's lines in a live system, and fails clearly without one", function()
    local path = new_path()
    local r = guard.run(function()
      local console = assert(smarm.console.listen(path))
      _G.from_service = "service value"
      local out = {}
      out.attach = smarm.process.run(smarm_argv("attach", path),
        { stdin = "=from_service\nfor i = 1, 2 do\nprint(i)\nend\nerror('bad')\n" })
      out.dash_a = smarm.process.run(smarm_argv("-a", path), { stdin = "=2 * 21\n" })
      console.close()
      out.gone = smarm.process.run(smarm_argv("attach", path))
      out.usage = smarm.process.run(smarm_argv("attach"))
      _G.from_service = nil
      return out
    end)
    assert.are.equal(0, r.attach.status)
    assert.matches("^service value\n1\n2\nconsole:1: bad\nstack traceback:", r.attach.stdout)
    assert.are.equal(0, r.dash_a.status)
    assert.are.equal("42\n", r.dash_a.stdout)
    assert.are.equal(1, r.gone.status)
    assert.matches("^smarm: attach: .*: no such file or directory\n$", r.gone.stderr)
    assert.are.equal(2, r.usage.status)
  end)
end)

describe("smarm.top", function()
  it("shows the busiest actors first, in a console and in the executable's prompt", function()
    local path = new_path()
    local r = guard.run(function()
      local console = assert(smarm.console.listen(path))
      local busy = smarm.spawn_on(2, function()
        smarm.register("busy_one", smarm.self())
        local x = 0
        while true do -- busy, and giving way itself: TSan builds cannot preempt a Lua loop
          for _ = 1, 100000 do x = x + 1 end
          smarm.yield()
        end
      end)
      guard.wait(function() return smarm.whereis("busy_one") end, "the busy actor")
      local out = {}
      out.once = attach(path,
        { "smarm.top({ count = 1, interval = 0.2, rows = 3, clear = false })" })
      -- stopped by Enter (the line answering top's request for input) once a screen has come
      local lines, screen = { "smarm.top({ interval = 0.05, clear = false })" }, false
      out.stopped = attach(path, setmetatable(lines, { __index = function(_, i)
        if i == 2 then
          guard.wait(function() return screen end, "a screen of smarm.top")
          return ""
        end
      end }), function(text) screen = text:find("smarm top: ", 1, true) ~= nil end)
      smarm.exit(busy, "kill")
      console.close()
      out.prompt = smarm.process.run(smarm_argv("-s", "1"),
        { stdin = "smarm.top({ count = 1, interval = 0.05, clear = false })\n" })
      out.misuse = select(2, pcall(smarm.top, { interval = -1 }))
      -- NaN is no positive number: a count of NaN was never reached, and top never returned
      out.nan_count = select(2, pcall(smarm.top, { count = 0 / 0, interval = 0.01 }))
      out.write = select(2, pcall(smarm.top, { write = 5, count = 1, interval = 0.01 }))
      return out
    end, { schedulers = 2 })
    assert.matches("smarm top: 2 schedulers", r.once, 1, true)
    -- the busy actor heads the list of actors
    local first = r.once:match("\npid[^\n]*\n([^\n]*)")
    assert.matches("busy_one", first, 1, true)
    assert.matches("smarm top: 2 schedulers", r.stopped, 1, true)
    assert.matches("> \n$", r.stopped) -- back at the prompt, then the input ended
    assert.are.equal(0, r.prompt.status)
    assert.matches("^smarm top: 1 schedulers", r.prompt.stdout)
    assert.matches("opts.interval must be a positive number", r.misuse, 1, true)
    assert.matches("opts.count must be a positive number", r.nan_count, 1, true)
    -- a count alone stops it, and its header says so rather than "Enter stops"
    assert.matches("between samples (1 screen)\n", r.prompt.stdout, 1, true)
    assert.matches("bad argument #1 to 'top' (opts.write must be a function, got number)",
      r.write, 1, true)
  end)

  it("shows no actor above 100% of a core", function()
    local top = require("smarm.top")
    local stats = { { wall_ns = 0, busy_ns = 0, runq = 0, live = 1, received = 0, switches = 0,
      memory = 0 }, total = { live = 1 } }
    local pid = "<1.1.1>" -- (any key: render shows it with tostring)
    local function sample(at, cpu)
      return { at = at, stats = stats, actors = { [pid] = { pid = pid, status = "running",
        cpu = cpu, scheduled = 0 } } }
    end
    -- 1.01 s of CPU time in the 1 s between two samples: read at the scheduler's answer
    local text = top.render(sample(0, 0), sample(1, 1.01), 5)
    assert.matches("\n<1%.1%.1>%s+100%.0 ", text)
  end)

  -- `smarm top PATH | less` showed the console's escape codes: a console's top clears by default
  it("smarm top PATH off a terminal writes no screen clearing, and stops at a line", function()
    local path = new_path()
    local r = guard.run(function()
      local console = assert(smarm.console.listen(path))
      local p = assert(smarm.process.spawn(smarm_argv("top", path), { stderr = "stdout" }))
      local out = {}
      repeat -- (guard.run's watchdog ends a wait for a screen that never comes)
        out[#out + 1] = assert(p.stdout:receive("*l")) .. "\n"
      until out[#out]:find("smarm top: ", 1, true)
      p.stdin:send("\n")
      p.stdin:close()
      out[#out + 1] = p.stdout:receive("*a")
      local status = p:wait()
      console.close()
      return { text = table.concat(out), status = status.status }
    end)
    assert.are.equal(0, r.status)
    assert.matches("smarm top: %d+ schedulers", r.text)
    assert.is_nil(r.text:find("\27[", 1, true))
  end)
end)
