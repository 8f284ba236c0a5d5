-- smarm attach, smarm top and smarm's own prompt under a real terminal: tmux runs a service with
-- a console and the clients, the spec types keys into them and reads their screens (issue 14:
-- Ctrl-C out of a waiting entry or a typed line, =expr, line editing and history, Ctrl-D at an
-- empty prompt, top showing a busy actor first).
-- Everything runs in tmux's processes: this file starts no runtime, so its own forks (tmux's
-- commands) come before any libuv thread could exist (spec/support/posix.lua says why).
local posix = dofile("spec/support/posix.lua")
local guard = dofile("spec/support/guard.lua")

local exe = os.getenv("SMARM_EXE") or "smarm"
local have_tmux = os.execute("command -v tmux >/dev/null 2>&1") == 0

local own_pid = posix.pid()

local dir = posix.tmpdir()
local server = "smarm-spec-" .. own_pid -- tmux's server socket: this process's alone

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function tmux(args)
  return os.execute("tmux -L " .. server .. " " .. args .. " >/dev/null 2>&1") == 0
end

-- Starts a window named `name` running the shell command line cmd, 120 columns wide. A first
-- session that outlives the cases keeps tmux's server up between them: a new-session that meets
-- a server exiting because its last session just ended fails ("server exited unexpectedly"),
-- which a loaded machine made happen. A failed start is tried again all the same.
local keeper = false
local function start(name, cmd)
  if not keeper then
    keeper = tmux("new-session -d -s keeper " .. quote("exec sleep " .. 10 * guard.HANG))
  end
  for _ = 1, 5 do
    if tmux("new-session -d -x 120 -y 40 -s " .. name .. " " .. quote(cmd)) then return end
    posix.sleep(0.2)
  end
  error("tmux could not start " .. name)
end

-- Types text (literally: "end" is no key name here) and presses Enter.
local function type_line(name, text)
  assert(tmux("send-keys -t " .. name .. " -l " .. quote(text)))
  assert(tmux("send-keys -t " .. name .. " Enter"))
end

-- Presses a key by tmux's name for it ("C-c", "Enter").
local function press(name, key) assert(tmux("send-keys -t " .. name .. " " .. key)) end

local function screen(name)
  local p = io.popen("tmux -L " .. server .. " capture-pane -p -t " .. name .. " 2>/dev/null")
  local text = p:read("*a")
  p:close()
  return text
end

-- Waits until window name's screen matches pattern (plain text unless `pattern` is true);
-- returns the screen. Raises with the screen past the hang guard.
local function wait_for(name, text, is_pattern)
  local deadline = os.time() + guard.HANG
  while true do
    local s = screen(name)
    if s:find(text, 1, not is_pattern) then return s end
    if os.time() > deadline then
      error("tmux window " .. name .. ": no " .. text .. " within " .. guard.HANG
        .. " s; it shows:\n"
        .. s, 2)
    end
    posix.sleep(0.05)
  end
end

-- How many times text shows on window name's screen.
local function shown(name, text)
  local n, at = 0, 1
  local s = screen(name)
  while true do
    local i = s:find(text, at, true)
    if not i then return n end
    n, at = n + 1, i + #text
  end
end

-- Types text once window name shows the prompt that follows `after` (the last output, or the
-- entry typed before). A line typed ahead of its prompt is echoed at once by the terminal on
-- plain lines (no libedit: the emulated build), and its output then follows the prompt on the
-- same line ("> waiting"), which a slow machine showed; the entries here are typed as a user
-- types them, at their prompts (the busy loop's case below types ahead on purpose).
-- Waits until window name shows the prompt again (its last line a bare ">"; tmux drops the
-- space after it), after a line that holds `after` when given. Raises at `level`.
local function wait_prompt(name, after, level)
  local deadline = os.time() + guard.HANG
  while true do
    local s = ("\n" .. screen(name)):gsub("%s+$", "")
    if s:sub(-2) == "\n>" and (not after or s:sub(1, -3):match("[^\n]*$"):find(after, 1, true)) then
      return
    end
    if os.time() > deadline then
      error("tmux window " .. name .. ": no prompt" .. (after and " after " .. after or "")
        .. " within " .. guard.HANG .. " s; it shows:\n" .. s, level + 1)
    end
    posix.sleep(0.05)
  end
end

local function type_after(name, after, text)
  wait_prompt(name, after, 2)
  type_line(name, text)
end

-- A `for` over three lines in window name: it runs once whole, the middle lines prompted ">> ".
-- Each line is typed once the prompt for it shows: a line typed ahead is echoed by the terminal
-- before the prompt comes (a slow machine showed "print('line ' .. i)>>"), which proves nothing.
local function check_multi_line(name, after)
  local prompts = shown(name, ">>")
  local function after_prompt(k)
    local deadline = os.time() + guard.HANG
    while shown(name, ">>") < prompts + k do
      if os.time() > deadline then
        error("tmux window " .. name .. ": no continuation prompt " .. k .. " within "
          .. guard.HANG .. " s; it shows:\n" .. screen(name), 2)
      end
      posix.sleep(0.05)
    end
  end
  type_after(name, after, "for i = 1, 2 do")
  after_prompt(1)
  type_line(name, "print('line ' .. i)")
  after_prompt(2)
  type_line(name, "end")
  local s = wait_for(name, "line 2\n")
  assert.matches(">> print", s, 1, true) -- the continued entry's prompt
end

-- Presses key once window name shows the prompt again (its last line a bare ">"; tmux drops the
-- space after it). A key typed while an entry still runs reaches the terminal in its ordinary
-- line mode, where Ctrl-D is an end of file that the line editor's raw mode, set when it next
-- reads, receives as a NUL byte: the Ctrl-D is lost, as it is for readline's shells (a loaded
-- machine showed it: the prompt stayed up after the last entry's output).
local function press_at_prompt(name, key)
  wait_prompt(name, nil, 2)
  press(name, key)
end

local function gone(name)
  local deadline = os.time() + guard.HANG
  while tmux("has-session -t " .. name) do
    if os.time() > deadline then error("tmux window " .. name .. " did not end", 2) end
    posix.sleep(0.05)
  end
  return true
end

teardown(function()
  tmux("kill-server")
  posix.remove_tree(dir)
end)

-- The service: a console at path, a registered actor that keeps a scheduler busy (giving way
-- itself: TSan builds cannot preempt a Lua loop), and a wait for SIGTERM (from timeout, when
-- teardown never came).
local function service_cmd(path)
  local code = table.concat({
    "local smarm = require('smarm')",
    "assert(smarm.console.listen(" .. string.format("%q", path) .. "))",
    "smarm.spawn_on(2, function() smarm.register('busy_one', smarm.self()); local x = 0;"
      .. " while true do for _ = 1, 100000 do x = x + 1 end smarm.yield() end end)",
    -- the name is given on scheduler 2, whose start a slow machine (qemu) can make later than
    -- a client's entry that looks for it: the service says it listens once the name is there
    "while not smarm.whereis('busy_one') do smarm.sleep(0.01) end",
    "print('console ' .. 'listening')",
    "smarm.signal.wait('SIGTERM')",
  }, "; ")
  -- a bound on its life: a spec run killed before its teardown leaves no busy service behind
  -- (timeout's SIGTERM is the one it waits for)
  return "exec timeout -k 10 " .. 5 * guard.HANG .. " " .. exe .. " -s 2 -e " .. quote(code)
end

-- Waits until the service in window name listens at path: until it says so once listen has
-- returned, not until the socket's file exists (bind makes the file before listen, and a client
-- started in between was refused and ended at once: a blank window on a loaded machine).
-- Raises with its screen past the guard.
local function wait_listening(name, path)
  wait_for(name, "console listening")
  assert(posix.exists(path), "the service says it listens, and " .. path .. " does not exist")
end

describe("under a terminal", function()
  if not have_tmux then
    pending("tmux is not installed (Debian: tmux; deps/debian-test.txt)")
    return
  end

  it("smarm attach: =expr, Ctrl-C out of a waiting entry, Ctrl-D at an empty prompt", function()
    local path = dir .. "/console-a"
    start("service_a", service_cmd(path))
    wait_listening("service_a", path)
    start("client_a", exe .. " attach " .. quote(path))
    wait_for("client_a", ">") -- (tmux's screen drops the spaces that end a line)
    type_line("client_a", "=1 + 41")
    wait_for("client_a", "\n42\n")
    -- Ctrl-C only once the entry runs: a terminal's SIGINT flushes the input its reader has
    -- not taken yet, the typed entry with it (then nothing is interrupted)
    type_after("client_a", "42", "print('wait' .. 'ing'); smarm.receive()")
    wait_for("client_a", "\nwaiting\n")
    press("client_a", "C-c")
    wait_for("client_a", "** interrupted; a new evaluator takes over")
    type_after("client_a", "a new evaluator takes over", "=smarm.whereis('busy_one') ~= nil")
    wait_for("client_a", "\ntrue\n")
    check_multi_line("client_a", "true")
    press_at_prompt("client_a", "C-d")
    assert.is_true(gone("client_a"))
    tmux("kill-session -t service_a")
  end)

  -- The executable's own prompt: the same session as a console's, in the process. Line editing
  -- needs libedit (libedit2), which the aarch64 emulator's root lacks: there the editing steps
  -- are skipped, and the rest still runs on plain lines.
  it("smarm alone: edits lines, recalls history, interrupts an entry or a typed line", function()
    -- (no timeout wrapper: it would take the terminal's Ctrl-C too, and send it again; the
    -- prompt ends with its terminal, at tmux's kill-server)
    start("local_p", exe .. " -s 1")
    wait_for("local_p", ">")
    type_line("local_p", "print('editing', smarm.lineedit.available())")
    local edits = wait_for("local_p", "\nediting%s+[tf]", true):find("editing%s+true") ~= nil
    type_after("local_p", "editing", "x = 40")
    type_after("local_p", "x = 40", "=x + 2")
    wait_for("local_p", "\n42\n")
    if edits then
      -- "=x10", then the cursor two to the left and "*": "=x*10"
      assert(tmux("send-keys -t local_p -l '=x10'"))
      press("local_p", "Left")
      press("local_p", "Left")
      assert(tmux("send-keys -t local_p -l '*'"))
      press("local_p", "Enter")
      wait_for("local_p", "\n400\n")
      type_line("local_p", "x = 5")
      press("local_p", "Up") -- x = 5
      press("local_p", "Up") -- =x*10
      press("local_p", "Enter")
      wait_for("local_p", "\n50\n")
      -- Ctrl-C drops the line being typed (once it is on the screen: the editor has it)
      assert(tmux("send-keys -t local_p -l \"print('dropped')\""))
      wait_for("local_p", "print('dropped')")
      press("local_p", "C-c")
      type_line("local_p", "print('kept')")
      local s = wait_for("local_p", "\nkept\n")
      assert.is_nil(s:find("\ndropped\n", 1, true))
    end
    check_multi_line("local_p", edits and "kept" or "42")
    -- Ctrl-C out of a waiting entry (once it runs, as for attach above); the prompt goes on
    type_after("local_p", "line 2", "print('wait' .. 'ing'); smarm.receive()")
    wait_for("local_p", "\nwaiting\n")
    press("local_p", "C-c")
    wait_for("local_p", "** interrupted; a new evaluator takes over")
    type_after("local_p", "a new evaluator takes over", "=x + 1")
    wait_for("local_p", edits and "\n6\n" or "\n41\n")
    -- and out of a busy loop, which the preemption switches out so that the prompt hears it
    -- (not under TSan, which runs a signal's handler only at its next interceptor: never in a
    -- pure Lua loop)
    if os.getenv("SMARM_SANITIZER") ~= "tsan" then
      type_after("local_p", edits and "6" or "41",
        "print('spin' .. 'ning'); while true do end")
      wait_for("local_p", "\nspinning\n")
      press("local_p", "C-c")
      -- typed ahead, before the new evaluator takes over: on plain lines the terminal echoes
      -- it at once, and its output then follows the prompt ("> after the loop"); libedit
      -- echoes it after the prompt, and the output starts a line
      type_line("local_p", "print('after' .. ' the loop')")
      wait_for("local_p", "\n[> ]*after the loop\n", true)
    end
    press_at_prompt("local_p", "C-d")
    assert.is_true(gone("local_p"))
  end)

  -- A cancel (Ctrl-C, a killed reader, the process's exit) ends any read of the editor's: also
  -- one inside an incremental search or after Escape, where libedit reads keys itself, and one
  -- cancelled before its work ran; non-ASCII characters are kept.
  it("smarm alone: Ctrl-C out of a search or a key sequence; a cancel before the read ran", function()
    start("edit_e", "LANG=C.UTF-8 " .. exe .. " -s 1")
    wait_for("edit_e", ">")
    type_line("edit_e", "print('editing', smarm.lineedit.available())")
    if not wait_for("edit_e", "\nediting%s+[tf]", true):find("editing%s+true") then
      tmux("kill-session -t edit_e")
      return -- no libedit here (see above)
    end
    type_line("edit_e", "=#'\195\169' .. '|\195\169|'") -- e acute, typed as UTF-8
    wait_for("edit_e", "\n2|\195\169|\n")
    type_line("edit_e", "=10 + 1")
    wait_for("edit_e", "\n11\n")
    -- Ctrl-R only at the prompt: typed while the entry still runs it reaches the terminal in
    -- its ordinary line mode, which takes it as its own reprint key (^R) and never passes it on
    press_at_prompt("edit_e", "C-r")
    assert(tmux("send-keys -t edit_e -l 1"))
    wait_for("edit_e", "bck:1") -- the search is libedit's: it reads the keys itself
    press("edit_e", "C-c")
    type_line("edit_e", "print('after' .. ' the search')")
    wait_for("edit_e", "\nafter the search\n")
    assert(tmux("send-keys -t edit_e -l abc"))
    wait_for("edit_e", "> abc")
    press("edit_e", "Escape") -- the start of a key sequence: libedit waits for the next key
    press("edit_e", "C-c")
    type_line("edit_e", "print('after' .. ' escape')")
    wait_for("edit_e", "\nafter escape\n")
    -- an exit while the prompt reads: the read ends (libuv joins its pool's threads at exit)
    type_line("edit_e", "smarm.spawn(function() smarm.sleep(0.2); os.exit(0) end)")
    assert.is_true(gone("edit_e"))
    -- a read killed while its work waits for libuv's pool (one thread, kept busy by the open of a
    -- FIFO with no writer) does not run once the pool frees: the next read gets the line
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    -- (ordered, not timed: the IO thread takes requests in order and libuv's pool its works, so
    -- the open waiting first holds the pool before the read is queued; the reader's end posts
    -- its cancel, and a later request's answer comes only once the IO thread has taken it)
    local code = table.concat({
      "local smarm = require('smarm')",
      "local o = smarm.spawn(function() local f = smarm.fs.open(" .. string.format("%q", fifo)
        .. ", 'r'); if f then f:close() end end)",
      "while (smarm.info(o) or {}).waiting ~= 'io:fs.open' do smarm.sleep(0.01) end",
      "local r = smarm.spawn(function() smarm.lineedit.read('cancelled> ') end)",
      "while (smarm.info(r) or {}).waiting ~= 'io:lineedit.read' do smarm.sleep(0.01) end",
      "smarm.exit(r, 'kill')",
      "while smarm.alive(r) do smarm.sleep(0.01) end",
      "smarm.signal.wait('SIGUSR2', 0)",
      "local w = assert(io.open(" .. string.format("%q", fifo) .. ", 'w')); w:close()",
      "print('got ' .. tostring(smarm.lineedit.read('real> ')))",
    }, "; ")
    start("edit_q", "UV_THREADPOOL_SIZE=1 " .. exe .. " -e " .. quote(code) .. "; sleep 60")
    wait_for("edit_q", "real>")
    type_line("edit_q", "x")
    local s = wait_for("edit_q", "got x")
    assert.is_nil(s:find("cancelled>", 1, true))
    tmux("kill-session -t edit_q")
  end)

  it("smarm top PATH shows the busy actor first and stops at Enter", function()
    local path = dir .. "/console-t"
    start("service_t", service_cmd(path))
    wait_listening("service_t", path)
    start("top_t", exe .. " top " .. quote(path))
    -- the first actor row under the header names the busy actor
    local s = wait_for("top_t", "\npid[^\n]*\n[^\n]*busy_one", true)
    assert.matches("smarm top: 2 schedulers", s, 1, true)
    press("top_t", "Enter")
    assert.is_true(gone("top_t"))
    tmux("kill-session -t service_t")
  end)

  -- Plain lines (no libedit, or turned off): a Ctrl-C while a line is read does not end that read,
  -- and the prompt that follows is shown all the same.
  it("smarm alone, plain lines: the prompt comes back after Ctrl-C", function()
    start("plain_p", "SMARM_LINEEDIT=0 " .. exe .. " -s 1")
    wait_for("plain_p", ">")
    assert(tmux("send-keys -t plain_p -l abc"))
    wait_for("plain_p", "> abc")
    press("plain_p", "C-c")
    wait_for("plain_p", "^C\n>") -- a new prompt on the next line
    type_line("plain_p", "=6 * 7")
    wait_for("plain_p", "\n42\n")
    press_at_prompt("plain_p", "C-d")
    assert.is_true(gone("plain_p"))
  end)
end)
