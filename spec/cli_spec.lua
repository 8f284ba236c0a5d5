-- The smarm executable: scripts, -e, -s, -v, the prompt, exit status and stderr.
-- dev.sh sets SMARM_EXE to the executable of the build under test.
local exe = os.getenv("SMARM_EXE")
-- The files a case makes for the executable, without a shell (the forks here are the
-- executable's runs alone: spec/support/posix.lua)
local posix = dofile("spec/support/posix.lua")

local sh = dofile("spec/support/shell.lua").run -- stdout, stderr, exit status

local function script(text)
  local name = os.tmpname() .. ".lua"
  local f = assert(io.open(name, "w"))
  f:write(text)
  f:close()
  return name
end

describe("the smarm executable", function()
  if not exe then
    pending("SMARM_EXE is not set (./dev.sh test sets it)")
    return
  end

  it("runs a script as the main actor with arg set like lua", function()
    local s = script([[
      local smarm = require("smarm")
      local p = smarm.spawn(function(me) smarm.send(me, "pong") end, smarm.self())
      print(arg[0]:match("%.lua$") ~= nil, arg[1], arg[2], select("#", ...), smarm.receive(120))
    ]])
    local out, err, status = sh(exe .. " -s 2 " .. s .. " one two")
    os.remove(s)
    assert.are.equal(0, status, err)
    assert.are.equal("true\tone\ttwo\t2\tpong\n", out)
  end)

  it("makes the runtime an Erlang node with -N, before the script runs", function()
    local smarm = require("smarm")
    local name = "cli" .. tostring(io.open("/proc/self/stat"):read("*n")) .. "@localhost"
    local code = "-e 'print(require(\"smarm\").node.self())'"
    local out, err, status = sh(exe .. " -N " .. name .. " -C spec-cookie " .. code)
    if smarm.node.available() and os.execute("command -v epmd >/dev/null 2>&1") == 0 then
      assert.are.equal(0, status, err)
      assert.are.equal(name .. "\n", out)
    else
      assert.are.equal(1, status)
      assert.matches("-N " .. name .. ": ", err, 1, true)
    end
    local _, err2, status2 = sh(exe .. " -N nohost -C c " .. code)
    assert.are.equal(1, status2)
    -- the line alone, as api.md says (a traceback of cli.lua's came with it), and at the prompt
    -- too (it said "(error object is a table value)" there)
    assert.are.equal("smarm: -N nohost: smarm.node.start: a node name is 'alive@host', got 'nohost'\n",
      err2)
    local _, err3, status3 = sh(exe .. " -N nohost -C c </dev/null")
    assert.are.equal(1, status3)
    assert.are.equal("smarm: -N nohost: smarm.node.start: a node name is 'alive@host', got 'nohost'\n",
      err3)
    for _, bad in ipairs({ "-C c -e 1", "-n -N a@b x.lua", "-a /tmp/x -N a@b" }) do
      out, _, status = sh(exe .. " " .. bad)
      assert.are.equal(2, status, bad)
      assert.are.equal("", out, bad)
    end
  end)

  it("exits 1 with the error and its traceback on stderr", function()
    local s = script("local function f() error('script failed') end\nf()\n")
    local out, err, status = sh(exe .. " " .. s)
    os.remove(s)
    assert.are.equal(1, status)
    assert.are.equal("", out)
    assert.matches("script failed", err)
    assert.matches("stack traceback", err)
  end)

  -- busted on Lua 5.1 ends a run with failures by error() with no value, as lua.c allows: the
  -- status says it, and nothing is printed (it printed "smarm: (error object is a nil value)").
  it("exits 1 silently for an error without a value, in both modes", function()
    local s = script("error()\n")
    for _, mode in ipairs({ "", "-n " }) do
      local out, err, status = sh(exe .. " " .. mode .. s)
      assert.are.equal(1, status, mode)
      assert.are.equal("", out, mode)
      assert.are.equal("", err, mode)
    end
    os.remove(s)
  end)

  -- A crash that spreads along links is reported by the last actor of the chain that nobody
  -- watches; reaching the main actor, it ends the script with status 1 (it ended silently, 0).
  it("reports a crash that spread along a link, and exits 1 when it reached the main actor", function()
    local s = script("local smarm = require('smarm')\nlocal a = smarm.spawn(function()\n"
      .. "  smarm.spawn_link(function() error('linked boom') end); smarm.receive()\nend)\n"
      .. "while smarm.alive(a) do smarm.sleep(0.001) end\n"
      .. "smarm.spawn_link(function() error('main boom') end)\nsmarm.receive()\n")
    local out, err, status = sh(exe .. " -s 2 " .. s)
    os.remove(s)
    assert.are.equal(1, status, err)
    assert.are.equal("", out)
    assert.matches("smarm: actor <1%.%d+%.%d+> died of an exit signal: [^\n]*: linked boom\n"
      .. "stack traceback:", err)
    assert.matches("smarm: [^\n]*: main boom\nstack traceback:", err)
  end)

  -- The executable called the error value's __tostring unprotected in plain mode: a raising one
  -- made LuaJIT panic.
  it("exits 1 for an error value whose __tostring raises, in both modes", function()
    local s = script("error(setmetatable({}, { __tostring = function() error('no text') end }))\n")
    for _, mode in ipairs({ "", "-n " }) do
      local _, err, status = sh(exe .. " " .. mode .. s)
      assert.are.equal(1, status, mode)
      assert.matches("^smarm: %(error object is a table value: its __tostring failed: [^\n]*no text%)",
        err, mode)
      assert.is_nil(err:find("PANIC", 1, true), mode)
    end
    os.remove(s)
  end)

  -- A script's own usage error (a table with a string `usage`): its text alone, status 2.
  it("exits 2 with a script's usage error's text alone, in both modes", function()
    local s = script("local function f() error({ usage = 'try: thing [a|b]' }) end\nf()\n")
    for _, mode in ipairs({ "", "-n " }) do
      local out, err, status = sh(exe .. " " .. mode .. s)
      assert.are.equal(2, status, mode)
      assert.are.equal("", out, mode)
      assert.are.equal("smarm: try: thing [a|b]\n", err, mode)
    end
    os.remove(s)
  end)

  it("runs busted with smarm test, failures making the status 1", function()
    if exe:find("qemu") then -- busted's C modules exist for the host only
      pending("smarm test under qemu: busted's C modules are the host's")
      return
    end
    local dir = posix.tmpdir()
    posix.mkdir(dir .. "/spec")
    local function write(name, text)
      local f = assert(io.open(dir .. "/spec/" .. name, "w"))
      f:write(text)
      f:close()
    end
    write("good_spec.lua", 'describe("g", function() it("runs", function()\n'
      .. '  assert.are.equal(3, require("smarm").run(function() return 3 end)) end) end)\n')
    local out, err, status = sh("cd " .. dir .. " && " .. exe .. " test -o plainTerminal")
    assert.are.equal(0, status, err)
    assert.matches("1 success / 0 failures", out)
    write("bad_spec.lua", 'describe("b", function() it("fails", function()\n'
      .. '  assert.are.equal(1, 2) end) end)\n')
    out, err, status = sh("cd " .. dir .. " && " .. exe .. " test -o plainTerminal")
    posix.remove_tree(dir)
    assert.are.equal(1, status)
    assert.matches("1 success / 1 failure", out)
    assert.are.equal("", err)
  end)

  it("exits 1 for a script that does not exist or does not compile", function()
    local _, err1, status1 = sh(exe .. " /nonexistent/script.lua")
    assert.are.equal(1, status1)
    assert.matches("cannot open", err1)
    local s = script("this is not lua\n")
    local _, err2, status2 = sh(exe .. " " .. s)
    os.remove(s)
    assert.are.equal(1, status2)
    assert.matches("expected", err2)
  end)

  it("keeps a scheduler whose VM cannot find the smarm module, its actors working", function()
    -- The other schedulers' VMs load smarm from the caller's package.path alone: here it finds
    -- nothing there. The VM is reported on stderr and runs on the module's C part (smarm.core);
    -- decoding a pid there crashed (a segfault) while its refs were nil.
    local s = script([[
      local smarm = require("smarm")
      local core = require("smarm.core")
      package.path = "./no/such/?.lua"
      local ok, err = pcall(smarm.run, function()
        local me = smarm.self()
        smarm.spawn_on(2, function(back, p) core.send(back, p == back and "pid" or "other") end,
          me, me)
        print(smarm.receive(120))
      end, { schedulers = 2 })
      print(ok, err)
    ]])
    local out, err, status = sh(exe .. " -n " .. s)
    os.remove(s)
    assert.are.equal(0, status, err)
    assert.are.equal("pid\ntrue\tnil\n", out)
    assert.matches("smarm: scheduler 2: module 'smarm' not found", err, 1, true)
  end)

  it("runs -e code with -s schedulers", function()
    local out, err, status = sh(exe .. [[ -s 3 -e 'print(require("smarm").schedulers(), ...)' x]])
    assert.are.equal(0, status, err)
    assert.are.equal("3\tx\n", out)
  end)

  it("runs a script in plain mode with -n: it starts runtimes itself", function()
    local s = script([[
      local smarm = require("smarm")
      local inside = pcall(smarm.self)
      print(inside, smarm.run(function() return smarm.schedulers() end, { schedulers = 3 }), ...)
    ]])
    local out, err, status = sh(exe .. " -n " .. s .. " z")
    os.remove(s)
    assert.are.equal(0, status, err)
    assert.are.equal("false\t3\tz\n", out)
  end)

  -- With -n the script's handler was debug.traceback, whose frames end at smarm.run: the main
  -- actor's (where the crash was) were lost, though smarm.run keeps them (last_traceback).
  it("shows the main actor's frames for a crash out of smarm.run in plain mode", function()
    local s = script([[
      local smarm = require("smarm")
      local function inner() local t = nil; return t.field end
      local function middle() return inner() + 1 end
      smarm.run(function() middle() end, { schedulers = 1 })
    ]])
    local out, err, status = sh(exe .. " -n " .. s)
    os.remove(s)
    assert.are.equal(1, status)
    assert.are.equal("", out)
    assert.matches("attempt to index local 't' %(a nil value%)\nstack traceback:\n", err)
    assert.matches("in function 'inner'", err, 1, true)
    assert.matches("in function 'middle'", err, 1, true)
    assert.matches("in main chunk", err, 1, true) -- and the script's frames after them
    -- a message of several lines is printed once
    s = script([[
      local smarm = require("smarm")
      smarm.run(function() error("line one\nline two") end, { schedulers = 1 })
    ]])
    local _, err2, status2 = sh(exe .. " -n " .. s)
    os.remove(s)
    assert.are.equal(1, status2)
    local _, twos = err2:gsub("line two", "")
    assert.are.equal(1, twos, err2)
    -- a later error of the same text, not smarm.run's, gets its own frames only
    s = script([[
      local smarm = require("smarm")
      local function inner() error("same text", 0) end
      pcall(smarm.run, function() inner() end, { schedulers = 1 })
      local function unrelated() error("same text", 0) end
      unrelated()
    ]])
    local _, err3 = sh(exe .. " -n " .. s)
    os.remove(s)
    assert.matches("in function 'unrelated'", err3, 1, true)
    assert.is_nil(err3:find("in function 'inner'", 1, true), err3)
  end)

  it("runs the README's quick start (examples/quickstart.lua)", function()
    local out, err, status = sh(exe .. " examples/quickstart.lua")
    assert.are.equal(0, status, err)
    assert.are.equal("hello\n42\n", out)
  end)

  it("prints an actor's __gc error with its text and traceback", function()
    -- LuaJIT prints a finalizer's error with lua_tostring; inside an actor the error had become
    -- the crash report's table, and it printed "ERROR in finalizer: ?"
    local s = script([[
      do local u = newproxy(true); getmetatable(u).__gc = function() error("gc boom") end end
      collectgarbage()
      collectgarbage()
      print("went on")
    ]])
    local out, err, status = sh(exe .. " -s 1 " .. s)
    os.remove(s)
    assert.are.equal(0, status, err)
    assert.are.equal("went on\n", out)
    assert.matches("ERROR in finalizer: [^\n]*:1: gc boom\nstack traceback:\n", err)
  end)

  it("prints versions with -v", function()
    local out, _, status = sh(exe .. " -v")
    assert.are.equal(0, status)
    assert.matches("^smarm %d+%.%d+%.%d+\nLuaJIT 2%.1[^\n]*\nlibuv %d+%.%d+%.%d+\n$", out)
  end)

  it("refuses bad usage with status 2", function()
    local _, err, status = sh(exe .. " -s zero -e 'print(1)'")
    assert.are.equal(2, status)
    assert.matches("%-s wants", err)
    local _, err2, status2 = sh(exe .. " -q")
    assert.are.equal(2, status2)
    assert.matches("usage", err2)
    -- plain mode starts no runtime: -s and -S would do nothing
    local _, err3, status3 = sh(exe .. " -n -s 2 -e 'print(1)'")
    assert.are.equal(2, status3)
    assert.matches("-s and -S configure the runtime that -n does not start", err3, 1, true)
    -- -n with nothing to run: the prompt would have started a runtime after all
    local _, err4, status4 = sh(exe .. " -n < /dev/null")
    assert.are.equal(2, status4)
    assert.matches("-n runs a script (or -e code) that calls smarm.run itself", err4, 1, true)
  end)

  it("sets the actors' C stack with -S", function()
    -- gsub callbacks nest until the stack's reserve: deeper with a larger stack
    local probe = "local d = 0; local function f() d = d + 1; return (string.gsub('x', 'x', f)) end; "
      .. "print(pcall(f), d)"
    local small, _, s1 = sh(exe .. " -s 1 -S 128K -e \"" .. probe .. "\"")
    local large, _, s2 = sh(exe .. " -s 1 -S 4M -e \"" .. probe .. "\"")
    assert.are.equal(0, s1)
    assert.are.equal(0, s2)
    local d1, d2 = tonumber(small:match("(%d+)%s*$")), tonumber(large:match("(%d+)%s*$"))
    assert.is_true(d2 > 2 * d1, small .. " / " .. large)
    assert.matches("^false", small)
    for _, bad in ipairs({ "1", "16K", "2G", "lots", "8X" }) do
      local _, err, status = sh(exe .. " -S " .. bad .. " -e 'print(1)'")
      assert.are.equal(2, status)
      assert.matches("%-S wants a stack size", err)
    end
  end)

  it("lets the other actors run while the prompt waits for a line", function()
    local lines, flag = os.tmpname(), os.tmpname()
    os.remove(flag)
    local f = assert(io.open(lines, "w"))
    -- the ticker creates the flag file at its 10th tick
    f:write("smarm = require('smarm'); t = { n = 0 }; ",
      "smarm.spawn(function() while true do t.n = t.n + 1; ",
      "if t.n == 10 then io.open('", flag, "', 'w'):close() end; smarm.sleep(0.01) end end)\n")
    f:close()
    -- one scheduler: the ticker shares it with the prompt's actor, which waits for the next
    -- line, sent once the flag exists (the shell gives up after 120 s: a hang guard)
    local out, _, status = sh("(cat " .. lines .. "; i=0; while [ ! -e " .. flag .. " ] && " ..
      "[ $i -lt 12000 ]; do sleep 0.01; i=$((i+1)); done; echo 'print(t.n >= 10)'; " ..
      "printf 'print(\"last line, no newline\")') | " .. exe .. " -s 1")
    os.remove(lines)
    os.remove(flag)
    assert.are.equal(0, status)
    assert.are.equal("true\nlast line, no newline\n", out)
  end)

  it("reads a regular file on stdin from where the shell left it", function()
    local out, _, status = sh("read skipped; " .. exe .. " -s 1", "print('first')\nprint('second')\n")
    assert.are.equal(0, status)
    assert.are.equal("second\n", out)
  end)

  it("opens standard input again for the next reader when its owner was killed", function()
    -- repl.stdin_reader's file is owned by the actor that asked first (smarm.top's caller);
    -- killed, it takes the file with it: the next to ask (the prompt) must still read
    local name = script(table.concat({
      "local smarm = require('smarm')",
      "local repl = require('smarm.repl')",
      "local me = smarm.self()",
      "local pid = smarm.spawn(function() repl.stdin_reader(smarm); smarm.send(me, 'ready');"
        .. " smarm.receive() end)",
      "smarm.receive(function(m) return m == 'ready' end)",
      "local ref = smarm.monitor(pid)",
      "smarm.exit(pid, 'kill')",
      "smarm.receive(function(m) return type(m) == 'table' and m.ref == ref end)",
      "print(repl.stdin_reader(smarm)())",
    }, "\n"))
    local out, err, status = sh("printf 'hello\\n' | " .. exe .. " " .. name)
    os.remove(name)
    assert.are.equal("", err)
    assert.are.equal(0, status)
    assert.are.equal("hello\n", out)
  end)

  it("runs with standard streams closed, IO included", function()
    local _, _, status = sh(exe .. " -s 1 <&-")
    assert.are.equal(0, status)
    local name = script("local smarm = require('smarm')\n" ..
      "assert(smarm.fs.writefile(arg[1], 'x'))\n" ..
      "local r = smarm.process.run({ 'cat', arg[1] })\n" ..
      "os.exit(r.stdout == 'x' and 0 or 5)\n")
    local target = os.tmpname()
    local _, _, status2 = sh(exe .. " " .. name .. " " .. target .. " <&- >&-")
    os.remove(name)
    os.remove(target)
    assert.are.equal(0, status2)
  end)

  it("continues unfinished chunks, prints =expr, knows smarm, and trims its own frames", function()
    local out, err, status = sh(exe, table.concat({
      "for i = 1, 3 do",
      "  print(i)",
      "end",
      "=1 + 1",
      "print(smarm.is_pid(smarm.self()))",
      "function boom()",
      "  error('boom')",
      "end",
      "boom()",
      "print(",
      "'after')",
      "x = 1 end", -- an error near the end of a line is no unfinished chunk
      "print('still here')",
    }, "\n") .. "\n")
    assert.are.equal(0, status)
    assert.are.equal("1\n2\n3\n2\ntrue\nafter\nstill here\n", out)
    assert.matches("'<eof>' expected near 'end'", err)
    assert.matches("stdin:2: boom\nstack traceback:\n", err) -- lines count within an entry
    -- a call entry is no tail call: its frame and the function's name stay
    assert.matches("stdin:2: in function 'boom'\n\tstdin:1: in main chunk", err, 1, true)
    assert.is_nil(err:find("cli.lua", 1, true))
    assert.is_nil(err:find("xpcall", 1, true))
  end)

  it("shows a value whose __tostring raises, and goes on", function()
    local out, err, status = sh(exe .. " -s 1", table.concat({
      "=setmetatable({}, { __tostring = function() error('no text') end })",
      "print('still here')",
    }, "\n") .. "\n")
    assert.are.equal(0, status)
    assert.are.equal("(table: its __tostring failed: stdin:1: no text)\nstill here\n", out)
    assert.are.equal("", err)
  end)

  it("writes an entry's output as it goes: an entry that ends the process has written it", function()
    local out, err, status = sh(exe, table.concat({
      "io.write('a\\0b', '\\n')", -- a NUL byte is output like any other
      "smarm.top({ count = 1, limit = 1 })", -- no terminal: no screen clearing
      "print('bye'); os.exit(3)",
      "print('not run')",
    }, "\n") .. "\n")
    assert.are.equal(3, status)
    assert.are.equal("a\0b\n", out:sub(1, 4))
    assert.is_nil(out:find("\27[", 1, true))
    assert.matches("\nbye\n$", out)
    assert.are.equal("", err)
  end)

  it("lets an entry that reads the input see its end, and finish", function()
    local out, err, status = sh(exe .. " -s 1", "x = io.read(); smarm.sleep(0.05); print(x or 'eof')\n")
    assert.are.equal(0, status)
    assert.are.equal("eof\n", out)
    assert.are.equal("", err)
  end)

  it("runs prompt lines in one actor, whose mailbox lasts from entry to entry", function()
    local out, err, status = sh(exe .. " -s 2", table.concat({
      "1 + 1",
      "smarm = require('smarm')",
      "me = smarm.self()",
      -- globals do not travel: the function finds smarm in its own VM
      "p = smarm.spawn_on(2, function(me) local s = require('smarm'); s.send(me, s.scheduler()) end, smarm.self())",
      "smarm.receive(120)", -- a hang guard
      "error('oops')",
      "smarm.send(me, 'kept')",
      "=smarm.receive(120), smarm.self() == me",
      "print('after')",
      "for i = 1, 2 do", -- the input ends inside an entry
    }, "\n") .. "\n")
    assert.are.equal(0, status)
    assert.are.equal("2\n2\nkept\ttrue\nafter\n", out)
    assert.matches("oops", err)
    assert.matches("stdin: unfinished input dropped at the end", err, 1, true)
  end)
end)
