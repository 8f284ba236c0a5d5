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

-- The environment of a session's entries: print and io.write write to conn.
local function session_env(conn)
  local function write(...)
    local parts = {}
    for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
    conn:send(wire(table.concat(parts)))
  end
  local env_io = setmetatable({ write = write }, { __index = io })
  local env = {
    print = function(...)
      local parts = {}
      for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
      conn:send(wire(table.concat(parts, "\t") .. "\n"))
    end,
    io = env_io,
    smarm = smarm,
  }
  return setmetatable(env, { __index = _G })
end

-- The evaluator: runs the entries its session sends ({ run = text }), answers { done = true }.
local function evaluator(session, conn, env)
  while true do
    local m = smarm.receive(function(m) return type(m) == "table" and m.run ~= nil end)
    local f = repl.compile(m.run, "=console", env)
    local text = repl.format(xpcall(f, repl.traceback))
    if text ~= "" then conn:send(wire(text)) end
    smarm.send(session, { done = true })
  end
end

-- A session: the prompt for one connection, which it owns (it came in a message).
local function session()
  local conn = smarm.receive(function(m) return type(m) == "table" and m.conn end).conn
  local env = session_env(conn)
  local me = smarm.self()
  local eval_pid, eval_ref
  local function start_evaluator()
    eval_pid, eval_ref = smarm.spawn_monitor(evaluator, me, conn, env)
  end
  start_evaluator()
  local function read(prompt)
    if not conn:send(PROMPT_MARK .. prompt .. "\n") then return nil end
    return conn:receive() -- nil when the client is gone, even mid-entry
  end
  local function run(_, text)
    smarm.send(eval_pid, { run = text })
    local m = smarm.receive(function(m)
      return type(m) == "table" and (m.done or (m.smarm == "DOWN" and m.ref == eval_ref))
    end)
    if not m.done then
      local reason = m.reason
      if type(reason) == "table" then reason = reason.error end
      conn:send(wire("** the evaluator ended (" .. tostring(reason) .. "); a new one takes over\n"))
      start_evaluator()
    end
  end
  local function fail(err) conn:send(wire(err .. "\n")) end
  repl.loop(read, run, fail, "=console", env)
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
  if listen_opts.mode == nil and path:sub(1, 1) ~= "@" then listen_opts.mode = tonumber("600", 8) end
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
-- client's side: prints what the console sends, and answers each prompt with a line of opts.read
-- (default: the process's standard input), showing the prompt when opts.interactive.
function console.attach(path, opts)
  opts = opts or {}
  local read_line = opts.read or repl.stdin_reader(smarm)
  local write = opts.write or function(text) io.stdout:write(text); io.stdout:flush() end
  local conn, err = smarm.unix.connect(path)
  if not conn then return nil, err end
  local pending = ""
  while true do
    local data = conn:receiveany(65536)
    if not data then
      write(pending)
      conn:close()
      return true -- the console ended the session
    end
    pending = pending .. data
    while true do
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
      if opts.interactive then write(prompt) end
      local line = read_line()
      if not line then
        if opts.interactive then write("\n") end
        conn:close()
        return true
      end
      conn:send(line .. "\n")
    end
  end
end

return console
