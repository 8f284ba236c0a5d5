-- examples/kv_service.lua: a TCP key-value service built as a supervision tree (issue #11), on
-- smarm.tcp, smarm.server and smarm.supervisor. spec/chaos_spec.lua runs it under load while
-- killing its parts.
--
-- Protocol, one line per request and per answer:
--   SET k v -> OK           (v is the rest of the line, spaces included)
--   GET k   -> v | NIL
--   DEL k   -> OK
--   anything else -> ERR <why>
-- The data lives in the store server's memory: a restart of the store starts it empty.
--
-- The tree (every supervisor runs on the caller's scheduler; connections on any):
--   top (one_for_one, registered as opts.name, default "kv")
--   |- store      smarm.server, registered "<name>.store": the data
--   '- acceptors  (rest_for_one)
--      |- listener   smarm.server that opened the listening socket and owns it
--      |- conns      dynamic supervisor, registered "<name>.conns": one temporary worker per
--      |             connection, spawned on "any" scheduler (the socket moves with it)
--      '- acceptor   accepts on the listener's socket and hands each connection to conns
-- Why one_for_one at the top: the store and the connection side do not hold each other's pids.
-- A worker finds the store by its name at each request, and waits while that name is free
-- (the store being restarted), so a store crash needs nothing else restarted; rest_for_one
-- (store first) would drop every client connection at each store crash for no gain, and a
-- crash on the connection side must not wipe the data either. Under acceptors, each child
-- depends on those before it (the acceptor on the listener's socket and on conns), which is
-- what rest_for_one restarts.
-- Why a listener apart from the acceptor: a socket is closed when its owner is killed. The
-- acceptor only uses the listener's socket (actors of one VM share handles), so killing the
-- acceptor cancels its accept and nothing else: connections waiting in the backlog are
-- accepted by the next acceptor, and the port stays bound.
--
-- What a failure looks like to a client: a worker that is killed, or whose store dies holding
-- its request, ends abnormally, so the runtime closes its socket (docs/api.md, "Sockets and
-- files have an owner"): the client sees the connection close without an answer to the
-- request in flight, which may or may not have been applied. It never sees a wrong answer.
--
-- Two ways to use this file:
--   smarm examples/kv_service.lua [port]    serves on 127.0.0.1:port (default 7070) until
--                                           killed, or until the tree gives up (exit status 1)
--   package.path = "examples/?.lua;" .. package.path
--   local kv = require("kv_service")        as a module: the file returns the table below when
--                                           it is required (its first vararg, the module name,
--                                           ends in "kv_service"); run as a script it serves.
--   local top, port = kv.start(opts)        inside an actor; opts.port (default 7070; 0 picks
--     a free one), opts.host ("127.0.0.1"), opts.name ("kv"), opts.intensity and opts.period
--     (of the top and acceptors supervisors, default 10 in 1 s), opts.link (default true: the
--     top supervisor is linked to the caller). Returns the top supervisor's pid and the port,
--     or nil and the supervisor's reason. Stop it with require("smarm.supervisor").stop(top).
local smarm = require("smarm")
local server = require("smarm.server")
local sup = require("smarm.supervisor")

local kv = {}

-- Seconds a request waits for a store that is being restarted before its connection gives up.
local STORE_WAIT = 5

-- The store: a server whose state is the data. Requests are { op, key, value }; GET of a
-- missing key answers false (a nil reply would read as a failed call).
local store = {}

function store.init()
  return "ok", {}
end

function store.handle_call(request, _, data)
  local op, key = request[1], request[2]
  if op == "SET" then
    data[key] = request[3]
  elseif op == "DEL" then
    data[key] = nil
  else
    local value = data[key]
    if value == nil then value = false end
    return "reply", value, data
  end
  return "reply", true, data
end

local function start_store(name)
  return server.start(store, nil, { name = name, link = true })
end

-- A connection's worker. It moves to another scheduler's VM (spawn_opt with `on`), so its only
-- upvalues are modules and constants, which are re-bound or copied there (docs/api.md,
-- smarm.spawn_on).
local function serve(conn, store_name)
  while true do
    local line = conn:receive("*l")
    if not line then break end -- the client closed, or the connection broke
    local op, key, value = line:match("^(%u+) (%S+) ?(.*)$")
    local answer
    if (op == "GET" or op == "DEL") and value == "" or op == "SET" and value ~= "" then
      local request = { op, key, value }
      local reply, why = server.call(store_name, request, math.huge)
      local deadline = smarm.now() + STORE_WAIT
      while reply == nil and why == "noproc" and smarm.now() < deadline do
        smarm.sleep(0.001) -- nobody holds the name: the store is being restarted
        reply, why = server.call(store_name, request, math.huge)
      end
      -- The store died holding the request (or stayed away): end abnormally, so the runtime
      -- closes the socket and the client sees no answer rather than a made-up one.
      if reply == nil then smarm.exit({ store_failed = why }) end
      if reply == true then
        answer = "OK"
      elseif reply == false then
        answer = "NIL"
      else
        answer = reply
      end
    elseif op == "SET" or op == "GET" or op == "DEL" then
      answer = "ERR usage: SET k v | GET k | DEL k"
    else
      answer = "ERR unknown command"
    end
    if not conn:send(answer .. "\n") then break end
  end
  conn:close()
end

-- The dynamic template's start: start(store_name, conn, on), conn from start_child's extra
-- arguments and on the child spec's "any".
local function start_conn(store_name, conn, on)
  return smarm.spawn_opt({ link = true, on = on }, serve, conn, store_name)
end

local function start_conns(name, store_name)
  return sup.start({ strategy = "dynamic", name = name, children = {
    { id = "conn", start = start_conn, args = { store_name }, restart = "temporary", on = "any" } } })
end

-- The listener: a server that opens the listening socket in init (so it owns it) and puts it
-- in `box`, a table shared with the acceptor's start (same VM). A restarted listener binds the
-- port the first one got.
local listener = {}

function listener.init(a)
  local sock, err = smarm.tcp.listen(a.host, a.box.port or a.port)
  if not sock then return "stop", err end
  local _, port = sock:getsockname()
  a.box.sock, a.box.port = sock, port
  return "ok", sock
end

local function start_listener(box, host, port)
  return server.start(listener, { box = box, host = host, port = port }, { link = true })
end

local function accept_loop(sock, conns_name)
  while true do
    local conn, err = sock:accept()
    if not conn then smarm.exit({ accept_failed = err }) end
    local pid, why = sup.start_child(conns_name, { conn })
    -- conns is gone (its restart restarts this acceptor too): end abnormally, so that a
    -- connection still here is closed with this actor.
    if not pid then smarm.exit({ start_child_failed = why }) end
  end
end

local function start_acceptor(box, conns_name)
  return smarm.spawn_link(accept_loop, box.sock, conns_name)
end

local function start_acceptors(box, names, host, port, intensity, period)
  return sup.start({ strategy = "rest_for_one", intensity = intensity, period = period, children = {
    { id = "listener", start = start_listener, args = { box, host, port } },
    { id = "conns", type = "supervisor", start = start_conns, args = { names.conns, names.store } },
    { id = "acceptor", start = start_acceptor, args = { box, names.conns } } } })
end

function kv.start(opts)
  opts = opts or {}
  local name = opts.name or "kv"
  local names = { store = name .. ".store", conns = name .. ".conns" }
  local intensity, period = opts.intensity or 10, opts.period or 1
  local box = {}
  local top, why = sup.start({ strategy = "one_for_one", name = name, link = opts.link,
    intensity = intensity, period = period, children = {
      { id = "store", start = start_store, args = { names.store } },
      { id = "acceptors", type = "supervisor", start = start_acceptors,
        args = { box, names, opts.host or "127.0.0.1", opts.port or 7070, intensity, period } } } })
  if not top then return nil, why end
  return top, box.port
end

local modname = ...
if type(modname) == "string" and modname:match("kv_service$") then return kv end

-- Run as a script: serve until killed, or until the tree gives up.
local top, port = kv.start({ port = tonumber(modname) or 7070, link = false })
if not top then
  local why, reason = {}, port -- { failed_to_start_child = id, reason = r }, nested per level
  while type(reason) == "table" and reason.failed_to_start_child ~= nil do
    why[#why + 1] = tostring(reason.failed_to_start_child)
    reason = reason.reason
  end
  why[#why + 1] = type(reason) == "table" and tostring(reason.error) or tostring(reason)
  error("kv_service: cannot start: " .. table.concat(why, ": "), 0)
end
print(string.format("kv_service: listening on 127.0.0.1:%d (top supervisor %s)", port, tostring(top)))
io.stdout:flush()
local ref = smarm.monitor(top)
local down = smarm.receive(function(m) return type(m) == "table" and m.ref == ref end)
error("kv_service: the supervision tree gave up: " .. tostring(down.reason), 0)
