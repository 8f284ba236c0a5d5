-- examples/chat.lua: a line chat over TCP. Clients connect (e.g. with `nc 127.0.0.1 7000`); each
-- line one of them sends is broadcast to all of them, itself included, as "<id>: <line>".
--
-- One actor per connection, in active "once" mode (conn:setactive): the connection's data
-- arrives in the actor's mailbox beside the hub's broadcasts, so the actor waits on both with one
-- receive; it arms the connection again only once it has dealt with a message (flow control:
-- a client that floods the server is held back by its own connection, not queued here). A line
-- cut off by the client's leaving is dropped. The hub keeps the members: it monitors each one, so
-- an actor that dies without saying goodbye is removed all the same.
--
-- Two ways to use this file:
--   smarm -s 2 examples/chat.lua [port]     serves on 127.0.0.1:port (default 7000) until killed
--   package.path = "examples/?.lua;" .. package.path
--   local chat = require("chat")            as a module (its first vararg, the module name, ends
--                                           in "chat"); run as a script it serves.
--   local room = chat.start(opts)           inside an actor; opts.host ("127.0.0.1"), opts.port
--     (default 7000; 0 picks a free one), opts.max_line (default 4096 bytes: a longer line ends
--     its connection). Returns { port =, hub = pid, acceptor = pid }, or nil, message, code.
--   chat.members(room) -> n                 how many connections the hub holds now
--   chat.stop(room)                         closes the listener and every connection
local smarm = require("smarm")

local chat = {}

-- The hub: the members (pid -> true), monitored. Messages:
--   { join = pid }, { say = text }      a member joins, or says a line (broadcast to all)
--   { members = pid }                   answered with { members = n }
--   "stop"                              tells every member to stop, then ends
local function hub()
  local members = {}
  while true do
    local m = smarm.receive()
    if m == "stop" then
      for pid in pairs(members) do smarm.send(pid, "stop") end
      return
    elseif m.join then
      members[m.join] = smarm.monitor(m.join)
    elseif m.say then
      for pid in pairs(members) do smarm.send(pid, { line = m.say }) end
    elseif m.smarm == "DOWN" then
      members[m.pid] = nil
    elseif m.members then
      local n = 0
      for _ in pairs(members) do n = n + 1 end
      smarm.send(m.members, { members = n })
    end
  end
end

-- A connection's actor: lines from the client go to the hub, broadcasts from the hub go to the
-- client. It ends when the client leaves (or writes a line over max_line, or reads nothing for
-- SEND_TIMEOUT while lines wait for it), at "stop", or when the hub is gone.
local SEND_TIMEOUT = 10
local function session(conn, hub_pid, id, max_line)
  local hub_ref = smarm.monitor(hub_pid) -- a hub that ended already: its DOWN comes at once
  smarm.send(hub_pid, { join = smarm.self() })
  conn:settimeout(SEND_TIMEOUT)
  conn:setactive("once")
  local partial = ""
  while true do
    local m = smarm.receive()
    if m == "stop" or m.smarm == "DOWN" and m.ref == hub_ref then
      break
    elseif m.line then
      -- a client that is gone, or that does not read (its lines would pile up here): dropped
      if not conn:send(m.line .. "\n") then break end
    elseif m.socket == conn and m.smarm == "tcp" then
      local text = partial .. m.data
      local from = 1
      for line, after in text:gmatch("([^\n]*)\n()") do
        smarm.send(hub_pid, { say = id .. ": " .. (line:gsub("\r$", "")) })
        from = after
      end
      partial = text:sub(from)
      if #partial > max_line then
        conn:send("line too long\n")
        break
      end
      conn:setactive("once")
    elseif m.socket == conn then -- tcp_closed or tcp_error: a partial line is dropped
      break
    end
  end
  conn:close()
end

-- The acceptor: each connection to an actor of its own, on the least busy scheduler (the
-- socket moves there with the spawn).
local function acceptor(server, hub_pid, max_line)
  local serial = 0
  while true do
    local conn = server:accept()
    if not conn then return end
    serial = serial + 1
    smarm.spawn_on("any", session, conn, hub_pid, "guest" .. serial, max_line)
  end
end

function chat.start(opts)
  opts = opts or {}
  local server, err, code = smarm.tcp.listen(opts.host or "127.0.0.1", opts.port or 7000, 1024)
  if not server then return nil, err, code end
  local _, port = server:getsockname()
  local hub_pid = smarm.spawn(hub)
  local room = { port = port, hub = hub_pid, server = server }
  room.acceptor = smarm.spawn(acceptor, server, hub_pid, opts.max_line or 4096)
  return room
end

function chat.members(room)
  smarm.send(room.hub, { members = smarm.self() })
  return smarm.receive(function(m) return type(m) == "table" and m.members ~= nil end).members
end

function chat.stop(room)
  room.server:close() -- the acceptor's accept returns nil: it ends
  smarm.send(room.hub, "stop")
end

local modname = ...
if type(modname) == "string" and modname:match("chat$") then return chat end

-- Run as a script: serve until killed.
local room, err = chat.start({ port = tonumber(modname) or 7000 })
if not room then error("chat: cannot listen: " .. tostring(err), 0) end
print(string.format("chat: listening on 127.0.0.1:%d", room.port))
io.stdout:flush()
smarm.receive() -- nobody sends: serve forever
