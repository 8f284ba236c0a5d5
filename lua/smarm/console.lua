-- smarm.console: a prompt into a live system over a Unix socket, Tarantool's console in spirit.
--
--   local console = smarm.console.listen(path [, opts])   -- in the running service
--   $ smarm attach PATH                                    -- from a shell (or smarm -a PATH)
--
-- Whoever can connect to the socket runs code as the process: the path is made with mode 0600
-- (only the process's user) unless opts.mode says otherwise; see docs/api.md.
--
-- Actors (all on the scheduler of the actor that called listen):
-- - the acceptor makes and owns the listening socket and accepts connections;
-- - a session per connection owns the connection: it sends prompts, reads entries (the lines of
--   a chunk that continues, as the local prompt does: lua/smarm/repl.lua) and hands complete
--   ones to its evaluator, then waits for it;
-- - the evaluator runs the entries one after another, so they share its pid and mailbox, and
--   writes their output and values to the connection. An entry that ends it (smarm.exit, a kill)
--   is reported and a new evaluator takes over; the session's globals stay.
-- Entries run in an environment of their own per session (its globals; reads fall through to
-- _G), where print and io.write write to the connection. Code defined elsewhere prints where it
-- always does.
--
-- The executable's own prompt (console.prompt) is the same session, its client an actor of the
-- same runtime that talks to it in messages, with the process's globals.
--
-- The wire: the client sends lines; the server sends output, and for each prompt a frame
-- "\0" .. prompt .. "\n" (a NUL byte in the output is sent as "\\0"), after which it reads one
-- line.
local smarm = require("smarm")
local repl = require("smarm.repl")

local console = {}

local PROMPT_MARK = "\0"

-- Output as it goes on the wire: a NUL byte would read as a prompt frame.
local function wire(text)
  return (text:gsub("%z", "\\0"))
end

local INTERRUPT = "\3" -- a line of the client's that interrupts the running entry (Ctrl-C)

-- The environment of a session's entries: print and io.write write through emit (text, failed),
-- io.read reads a line of the console's input (read_input), smarm.top shows its tables on the
-- console and stops at a line of it. Globals are the session's own (reads fall through to _G),
-- or with shared_globals the process's (_G's), as the executable's own prompt has them (whose
-- smarm.top then clears the screen only on a terminal, as smarm.top does there).
local function session_env(emit, read_input, shared_globals)
  local function text_of(sep, ...)
    local parts = {}
    for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
    return table.concat(parts, sep)
  end
  local env_io = setmetatable({
    write = function(...) emit(text_of("", ...)) end,
    read = function(fmt)
      if fmt ~= nil and fmt ~= "*l" and fmt ~= "l" then
        error("bad argument #1 to 'read' (a console reads lines: \"*l\" expected)", 2)
      end
      return (read_input())
    end,
  }, { __index = io })
  local env_smarm = setmetatable({
    top = function(opts)
      local o = {}
      for k, v in pairs(opts or {}) do o[k] = v end
      o.write = o.write or function(text) emit(text) end
      if not o.count then -- else as many screens as asked, with no input waited for
        o.wait = o.wait or function(seconds) return read_input(seconds) ~= "timeout" end
      end
      if o.clear == nil and not shared_globals then o.clear = true end
      return smarm.top(o)
    end,
  }, { __index = smarm })
  local env = {
    print = function(...) emit(text_of("\t", ...) .. "\n") end,
    io = env_io,
    smarm = env_smarm,
  }
  return setmetatable(env, { __index = _G, __newindex = shared_globals and _G or nil })
end

-- The evaluator: runs the entries its session sends ({ run = text, console = key }), answers
-- { done = its pid } (the pid: an answer of an evaluator interrupted since is told apart and
-- dropped). Its mailbox is the entries' own (smarm.receive at the prompt), so what the session
-- sends it carries the session's key, a ref no one else has: a message of the user's with a
-- `run` field is the user's (it was taken and run as an entry).
local function evaluator(session, emit, env, chunkname, key)
  local session_ref = smarm.monitor(session) -- a session killed meanwhile leaves no evaluator
  while true do
    local m = smarm.receive(function(m)
      return type(m) == "table" and ((m.console == key and m.run ~= nil)
        or (m.smarm == "DOWN" and m.ref == session_ref))
    end)
    if m.run == nil then return end
    local f = repl.compile(m.run, chunkname, env)
    local text, failed = repl.format(xpcall(f, repl.traceback))
    if text ~= "" then emit(text, failed) end
    smarm.send(session, { done = smarm.self() })
  end
end

-- A session: the prompt for one client. A console's session owns its connection (it came in a
-- message, { conn = }), and a reader actor forwards the client's lines to it, so that it hears
-- the client (an interrupt, input the entry asked for, the client leaving) while an entry runs.
-- The executable's own prompt is a session too ({ client = pid }: console.prompt), whose client
-- is an actor of the same runtime: output goes to it in messages ({ console_data =, failed = }),
-- and its lines come the same way ({ console_line = line | false }); what its entries write goes
-- straight out through local_emit(text, failed) (as it went when they ran in the main actor: a
-- process that an entry ends, os.exit, has written it all).
local function session(local_emit)
  local m0 = smarm.receive(function(m) return type(m) == "table" and (m.conn or m.client) end)
  local conn, client = m0.conn, m0.client
  local me = smarm.self()
  local out, chunkname
  if conn then
    out, chunkname = function(text) conn:send(text) end, "=console"
  else
    out = function(text, failed) smarm.send(client, { console_data = text, failed = failed }) end
    chunkname = "=stdin"
  end
  local eval_pid, eval_ref
  local key = smarm.ref() -- on what this session sends its evaluator (see evaluator)
  local input_asked = false -- the running entry asked for a line and has not had it
  -- In the evaluator: a line of the console's input (nil when the client is gone), or
  -- "timeout" after `seconds`.
  local function read_input(seconds)
    if not input_asked then
      input_asked = true
      smarm.send(me, { input_wanted = smarm.self() })
    end
    local m = smarm.receive(function(m)
      return type(m) == "table" and m.console == key and m.console_input ~= nil
    end, seconds)
    if not m then return "timeout" end
    input_asked = false
    return m.console_input or nil
  end
  local emit = client and local_emit or function(text, failed) out(wire(text), failed) end
  local env = session_env(emit, read_input, client ~= nil)
  local function start_evaluator()
    input_asked = false
    eval_pid, eval_ref = smarm.spawn_monitor(evaluator, me, emit, env, chunkname, key)
  end
  start_evaluator()
  if conn then
    smarm.spawn(function()
      while true do
        local line = conn:receive()
        smarm.send(me, { console_line = line or false })
        if not line then return end
      end
    end)
  end
  local function prompt(p) out(PROMPT_MARK .. p .. "\n") end
  local function restart(why)
    smarm.demonitor(eval_ref, "flush")
    out(wire("** " .. why .. "; a new evaluator takes over\n"), true)
    start_evaluator()
  end
  local text, running, wanted = nil, false, false
  local ending = false -- the local prompt's input ended while an entry ran: it may finish
  prompt("> ")
  while true do
    local m = smarm.receive(function(m)
      return type(m) == "table" and (m.console_line ~= nil or m.done or m.input_wanted
        or (m.smarm == "DOWN" and m.ref == eval_ref))
    end)
    local from = m.done or m.input_wanted
    local line = m.console_line
    if from and from ~= eval_pid then -- luacheck: ignore 542 (an empty branch, on purpose)
      -- of an evaluator interrupted since: nothing to answer
    elseif line == false then -- the client is gone, or the local prompt's input ended
      if running and wanted then smarm.send(eval_pid, { console_input = false, console = key }) end
      if not (client and running) then break end
      ending, wanted = true, false -- (a console's client is gone: its entry ends with it)
    elseif line == INTERRUPT then
      if running then
        smarm.exit(eval_pid, "kill")
        if ending then break end
        restart("interrupted")
      end
      text, running, wanted = nil, false, false
      prompt("> ")
    elseif line and running then -- input the entry asked for (the client answers frames only)
      wanted = false
      smarm.send(eval_pid, { console_input = line, console = key })
    elseif line then
      text = text and (text .. "\n" .. line) or line
      local f, err, more = repl.compile(text, chunkname, env)
      if more then
        prompt(">> ")
      elseif not f then
        text = nil
        out(wire(err .. "\n"), true)
        prompt("> ")
      else
        smarm.send(eval_pid, { run = text, console = key })
        text, running = nil, true
      end
    elseif m.input_wanted and ending then
      smarm.send(eval_pid, { console_input = false, console = key }) -- no more input
    elseif m.input_wanted then
      wanted = true
      prompt("")
    elseif m.done then
      if ending then break end
      running, wanted = false, false
      prompt("> ")
    elseif ending then -- the evaluator ended inside the last entry
      break
    else -- the evaluator ended inside an entry: smarm.exit, a kill
      local reason = type(m.reason) == "table" and m.reason.error or m.reason
      restart("the evaluator ended (" .. tostring(reason) .. ")")
      running, wanted = false, false
      prompt("> ")
    end
  end
  smarm.demonitor(eval_ref, "flush")
  smarm.exit(eval_pid, "kill")
  if conn then conn:close() end
end

local function check_opts(opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error("bad argument #2 to 'listen' (table expected, got " .. type(opts) .. ")", 3)
  end
  return opts
end

-- listen(path [, opts]) -> console | nil, message, code. opts.mode: the path's permission bits
-- (default 0600); opts.backlog. The console: { path =, pid = (the acceptor), close = fn }.
function console.listen(path, opts)
  if type(path) ~= "string" then
    error("bad argument #1 to 'listen' (string expected, got " .. type(path) .. ")", 2)
  end
  opts = check_opts(opts)
  local listen_opts = { mode = opts.mode, backlog = opts.backlog }
  if listen_opts.mode == nil and path:sub(1, 1) ~= "@" then
    listen_opts.mode = tonumber("600", 8)
  end
  -- misuse raises here, in the caller, rather than in the acceptor
  if listen_opts.mode ~= nil and type(listen_opts.mode) ~= "number" then
    error("bad argument #2 to 'listen' (opts.mode must be a number)", 2)
  end
  local inside, me = pcall(smarm.self)
  if not inside then error("smarm.console.listen: not inside an actor", 2) end
  local tag, shared = smarm.ref(), {}
  local pid, ref = smarm.spawn_monitor(function()
    local server, err, code = smarm.unix.listen(path, listen_opts)
    shared.server = server
    smarm.send(me, { tag = tag, err = err, code = code })
    if not server then return end
    while true do
      local conn = server:accept()
      if not conn then return end -- closed (console:close(), or the run's end)
      local s = smarm.spawn(session)
      smarm.send(s, { conn = conn }) -- hands it over: the session owns it
    end
  end)
  local m = smarm.receive(function(m)
    return type(m) == "table" and (m.tag == tag or (m.smarm == "DOWN" and m.ref == ref))
  end)
  smarm.demonitor(ref, "flush")
  if m.tag ~= tag then
    local reason = type(m.reason) == "table" and m.reason.error or m.reason
    error("smarm.console.listen: " .. tostring(reason), 2)
  end
  if m.err then return nil, m.err, m.code end
  return {
    path = path,
    pid = pid,
    -- Stops accepting and removes the path (once; later calls do nothing); consoles already
    -- attached go on until they leave.
    close = function()
      if shared.server then shared.server:close() end
      shared.server = nil
    end,
  }
end

-- The client's side of a session (docs/api.md), for attach and prompt: helper actors feed it
-- the lines of opts.read (default: the process's standard input, with line editing on a
-- terminal: repl.stdin_reader) as it asks for them, and Ctrl-C (opts.interrupts: SIGINT is
-- caught meanwhile; typed into the line editor, it ends the read instead: nil, "interrupted"),
-- so that it hears them and the session's output at once. link: how it talks
-- to the session: send(line) (false: the input ended), and the session's output arrives as
-- { console_data = text (false: the session is gone), failed = } messages; link.drains: at the
-- end of input the session lets a running entry finish (the local prompt), and the client
-- waits for its end. Returns whether the input ended inside an unfinished entry.
local function client(link, opts)
  local write = opts.write or function(text) io.stdout:write(text); io.stdout:flush() end
  local read_line, edits = opts.read, false
  if not read_line then
    read_line, edits = repl.stdin_reader(smarm, opts.interactive)
  end
  -- a plain read shows no prompt: the client writes it, also when a read already waits (after
  -- a Ctrl-C, which does not end a plain read)
  local show_prompts = opts.interactive and not edits
  local entries, next_entry = opts.entries, 1
  local me = smarm.self()
  local helpers = {}
  local function start_reader()
    helpers.reader = smarm.spawn(function()
      while true do
        local m = smarm.receive(function(m) return type(m) == "table" and m.read end)
        local line, err = read_line(m.read)
        smarm.send(me, { console_read = line or false, interrupted = err == "interrupted",
          reader = smarm.self() })
      end
    end)
  end
  start_reader()
  if opts.interrupts then
    helpers.interrupts = smarm.spawn(function()
      while true do
        smarm.signal.wait("SIGINT")
        smarm.send(me, { console_interrupt = true })
      end
    end)
  end
  local pending, reading, last_prompt, read_prompt = "", false, "> ", "> "
  -- A prompt frame came: answer it with the next of opts.entries (an entry prompt, while they
  -- last; after the last one, the next entry prompt ends the session) or a line of input.
  local ended = false -- the input ended; the session finishes its entry (link.drains)
  local function answer(prompt)
    if ended then return true end
    if prompt ~= "" then last_prompt = prompt end
    if entries and prompt ~= "" then
      local line = entries[next_entry]
      next_entry = next_entry + 1
      if not line then return false end
      link.send(line)
      return true
    end
    if show_prompts then write(prompt) end
    if not reading then
      reading, read_prompt = true, prompt
      smarm.send(helpers.reader, { read = prompt })
    end
    return true
  end
  local going, unfinished = true, false
  while going do
    local m = smarm.receive(function(m)
      return type(m) == "table" and (m.console_data ~= nil or m.console_read ~= nil
        or m.console_interrupt)
    end)
    if m.console_data == false then
      going = false
    elseif m.failed then -- the session's errors, where they go apart (the local prompt)
      io.stdout:flush() -- entries' output, written straight, first
      io.stderr:write(m.console_data)
      io.stderr:flush()
    elseif m.console_data then
      pending = pending .. m.console_data
      while going do
        local mark = pending:find(PROMPT_MARK, 1, true)
        local eol = mark and pending:find("\n", mark, true)
        if not eol then -- no whole prompt frame yet: show what comes before one
          local upto = mark and mark - 1 or #pending
          write(pending:sub(1, upto))
          pending = pending:sub(upto + 1)
          break
        end
        write(pending:sub(1, mark - 1))
        local prompt = pending:sub(mark + 1, eol - 1)
        pending = pending:sub(eol + 1)
        going = answer(prompt)
      end
    elseif m.console_read ~= nil and m.reader ~= helpers.reader then -- luacheck: ignore 542
      -- a line a reader killed since had read (just before a Ctrl-C): dropped
    elseif m.interrupted then -- Ctrl-C typed into the editor: the line is dropped
      reading = false
      write("^C\n")
      if opts.interrupts then
        link.send(INTERRUPT) -- the session drops an unfinished entry and prompts again
      else
        answer(read_prompt) -- no interrupts asked for: the same prompt again
      end
    elseif m.console_read ~= nil then
      reading = false
      if m.console_read == false then
        if opts.interactive then write("\n") end
        unfinished = last_prompt == ">> "
        if link.drains then -- the session ends once its running entry has (console_data false)
          ended = true
          link.send(false)
        else
          going = false
        end
      else
        link.send(m.console_read)
      end
    else
      if reading and edits then -- (a SIGINT from elsewhere) the line being edited is dropped
        smarm.exit(helpers.reader, "kill")
        start_reader()
        reading = false
      end
      write("\n") -- after the terminal's own "^C"
      link.send(INTERRUPT)
    end
  end
  write((pending:gsub("%z.*$", ""))) -- what came last, without a half-received frame
  for _, pid in pairs(helpers) do smarm.exit(pid, "kill") end
  link.send(false)
  return unfinished
end

-- attach(path [, opts]) -> true when the console closed or the input ended | nil, message.
-- opts: interactive (prompts shown), interrupts (Ctrl-C interrupts the entry), read, write,
-- entries (lines to send instead of reading, ending the session after the last).
function console.attach(path, opts)
  smarm._need_actor("console.attach", 2)
  opts = opts or {}
  local conn, err = smarm.unix.connect(path)
  if not conn then return nil, err end
  local me = smarm.self()
  local receiver = smarm.spawn(function()
    while true do
      local data = conn:receiveany(65536)
      smarm.send(me, { console_data = data or false })
      if not data then return end
    end
  end)
  client({
    send = function(line)
      if line then conn:send(line .. "\n") end
    end,
  }, opts)
  smarm.exit(receiver, "kill")
  conn:close()
  return true
end

-- prompt([opts]) -> whether the input ended inside an unfinished entry. The executable's own
-- prompt (lua/smarm/cli.lua): a session of the calling actor's runtime, its entries run by an
-- evaluator actor with the process's globals, print and io.read through the prompt, errors on
-- stderr, Ctrl-C (opts.interrupts) interrupting the running entry or the line being typed.
-- opts as attach's.
function console.prompt(opts)
  smarm._need_actor("console.prompt", 2)
  opts = opts or {}
  local me = smarm.self()
  local write = opts.write or function(text) io.stdout:write(text) end
  local s = smarm.spawn(session, function(text, failed)
    if failed then
      io.stdout:flush()
      io.stderr:write(text)
      io.stderr:flush()
    else
      write(text)
    end
  end)
  smarm.send(s, { client = me })
  -- the session's end reads as the socket's end does for attach
  local watcher = smarm.spawn(function()
    local ref = smarm.monitor(s)
    smarm.receive(function(m) return type(m) == "table" and m.smarm == "DOWN" and m.ref == ref end)
    smarm.send(me, { console_data = false })
  end)
  local unfinished = client({
    send = function(line) smarm.send(s, { console_line = line }) end,
    drains = true,
  }, opts)
  smarm.exit(watcher, "kill")
  return unfinished
end

return console
