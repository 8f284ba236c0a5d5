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

-- The environment of a session's entries: print and io.write write to conn, io.read reads a
-- line of the console's input (read_input), smarm.top shows its tables on the console and
-- stops at a line of it.
local function session_env(conn, read_input)
  local function text_of(sep, ...)
    local parts = {}
    for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
    return table.concat(parts, sep)
  end
  local env_io = setmetatable({
    write = function(...) conn:send(wire(text_of("", ...))) end,
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
      o.write = o.write or function(text) conn:send(wire(text)) end
      if not o.count then -- else as many screens as asked, with no input waited for
        o.wait = o.wait or function(seconds) return read_input(seconds) ~= "timeout" end
      end
      if o.clear == nil then o.clear = true end
      return smarm.top(o)
    end,
  }, { __index = smarm })
  local env = {
    print = function(...) conn:send(wire(text_of("\t", ...) .. "\n")) end,
    io = env_io,
    smarm = env_smarm,
  }
  return setmetatable(env, { __index = _G })
end

-- The evaluator: runs the entries its session sends ({ run = text }), answers { done = its pid }
-- (the pid: an answer of an evaluator interrupted since is told apart and dropped).
local function evaluator(session, conn, env)
  local session_ref = smarm.monitor(session) -- a session killed meanwhile leaves no evaluator
  while true do
    local m = smarm.receive(function(m)
      return type(m) == "table" and (m.run ~= nil or (m.smarm == "DOWN" and m.ref == session_ref))
    end)
    if m.run == nil then return end
    local f = repl.compile(m.run, "=console", env)
    local text = repl.format(xpcall(f, repl.traceback))
    if text ~= "" then conn:send(wire(text)) end
    smarm.send(session, { done = smarm.self() })
  end
end

-- A session: the prompt for one connection, which it owns (it came in a message). A reader
-- actor forwards the client's lines to it, so that it hears the client (an interrupt, input the
-- entry asked for, the client leaving) while an entry runs.
local function session()
  local conn = smarm.receive(function(m) return type(m) == "table" and m.conn end).conn
  local me = smarm.self()
  local eval_pid, eval_ref
  local input_asked = false -- the running entry asked for a line and has not had it
  -- In the evaluator: a line of the console's input (nil when the client is gone), or
  -- "timeout" after `seconds`.
  local function read_input(seconds)
    if not input_asked then
      input_asked = true
      smarm.send(me, { input_wanted = smarm.self() })
    end
    local m = smarm.receive(function(m) return type(m) == "table" and m.console_input ~= nil end,
      seconds)
    if not m then return "timeout" end
    input_asked = false
    return m.console_input or nil
  end
  local env = session_env(conn, read_input)
  local function start_evaluator()
    input_asked = false
    eval_pid, eval_ref = smarm.spawn_monitor(evaluator, me, conn, env)
  end
  start_evaluator()
  smarm.spawn(function()
    while true do
      local line = conn:receive()
      smarm.send(me, { console_line = line or false })
      if not line then return end
    end
  end)
  local function prompt(p) conn:send(PROMPT_MARK .. p .. "\n") end
  local function restart(why)
    smarm.demonitor(eval_ref, "flush")
    conn:send(wire("** " .. why .. "; a new evaluator takes over\n"))
    start_evaluator()
  end
  local text, running, wanted = nil, false, false
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
    elseif line == false then -- the client is gone
      if running and wanted then smarm.send(eval_pid, { console_input = false }) end
      break
    elseif line == INTERRUPT then
      if running then
        smarm.exit(eval_pid, "kill")
        restart("interrupted")
      end
      text, running, wanted = nil, false, false
      prompt("> ")
    elseif line and running then -- input the entry asked for (the client answers frames only)
      wanted = false
      smarm.send(eval_pid, { console_input = line })
    elseif line then
      text = text and (text .. "\n" .. line) or line
      local f, err, more = repl.compile(text, "=console", env)
      if more then
        prompt(">> ")
      elseif not f then
        text = nil
        conn:send(wire(err .. "\n"))
        prompt("> ")
      else
        smarm.send(eval_pid, { run = text })
        text, running = nil, true
      end
    elseif m.input_wanted then
      wanted = true
      prompt("")
    elseif m.done then
      running, wanted = false, false
      prompt("> ")
    else -- the evaluator ended inside an entry: smarm.exit, a kill
      local reason = type(m.reason) == "table" and m.reason.error or m.reason
      restart("the evaluator ended (" .. tostring(reason) .. ")")
      running, wanted = false, false
      prompt("> ")
    end
  end
  smarm.demonitor(eval_ref, "flush")
  smarm.exit(eval_pid, "kill")
  conn:close()
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
  local me, tag, shared = smarm.self(), smarm.ref(), {}
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

-- attach(path [, opts]) -> true when the console closed or the input ended | nil, message. The
-- client's side (docs/api.md): three helper actors feed it the console's bytes, the lines of
-- opts.read (default: the process's standard input) as it asks for them, and Ctrl-C
-- (opts.interrupts: SIGINT is caught while attached) so that it hears all three at once.
function console.attach(path, opts)
  opts = opts or {}
  local read_line = opts.read or repl.stdin_reader(smarm)
  local write = opts.write or function(text) io.stdout:write(text); io.stdout:flush() end
  local entries, next_entry = opts.entries, 1
  local conn, err = smarm.unix.connect(path)
  if not conn then return nil, err end
  local me = smarm.self()
  local helpers = {}
  helpers[1] = smarm.spawn(function()
    while true do
      local data = conn:receiveany(65536)
      smarm.send(me, { console_data = data or false })
      if not data then return end
    end
  end)
  helpers[2] = smarm.spawn(function()
    while true do
      smarm.receive(function(m) return m == "read" end)
      smarm.send(me, { console_read = read_line() or false })
    end
  end)
  if opts.interrupts then
    helpers[3] = smarm.spawn(function()
      while true do
        smarm.signal.wait("SIGINT")
        smarm.send(me, { console_interrupt = true })
      end
    end)
  end
  local pending, reading = "", false
  -- A prompt frame came: answer it with the next of opts.entries (an entry prompt, while they
  -- last; after the last one, the next entry prompt ends the session) or a line of input.
  local function answer(prompt)
    if entries and prompt ~= "" then
      local line = entries[next_entry]
      next_entry = next_entry + 1
      if not line then return false end
      conn:send(line .. "\n")
      return true
    end
    if opts.interactive then write(prompt) end
    if not reading then
      reading = true
      smarm.send(helpers[2], "read")
    end
    return true
  end
  local going = true
  while going do
    local m = smarm.receive(function(m)
      return type(m) == "table" and (m.console_data ~= nil or m.console_read ~= nil
        or m.console_interrupt)
    end)
    if m.console_data == false then
      going = false
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
    elseif m.console_read ~= nil then
      reading = false
      if m.console_read == false then
        if opts.interactive then write("\n") end
        going = false
      else
        conn:send(m.console_read .. "\n")
      end
    else
      write("\n") -- after the terminal's own "^C"
      conn:send(INTERRUPT .. "\n")
    end
  end
  write((pending:gsub("%z.*$", ""))) -- what came last, without a half-received frame
  for _, pid in pairs(helpers) do smarm.exit(pid, "kill") end
  conn:close()
  return true
end

return console
