-- examples/http_hello.lua: a small HTTP/1.1 server on smarm that answers every request with
-- "Hello, World!", keeping connections alive. The main actor accepts; each connection is handed
-- to an actor of its own on the least busy scheduler (spawn_on "any" moves the socket there).
-- Run: smarm -s 2 examples/http_hello.lua [port]   (then: curl http://127.0.0.1:8080/)
local smarm = require("smarm")

local port = tonumber(arg and arg[1]) or 8080
local RESPONSE = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\n"
  .. "Hello, World!"

-- Serves one connection until the client closes it or asks to.
local function serve(conn)
  while true do
    local request = conn:receive("*l")
    if not request then break end
    local keep_alive = request:find("HTTP/1.1", 1, true) ~= nil
    while true do -- headers, up to the empty line
      local header = conn:receive("*l")
      if not header then
        conn:close()
        return
      end
      if header == "" then break end
      local name, value = header:match("^([^:]+):%s*(.-)%s*$")
      if name and name:lower() == "connection" then keep_alive = value:lower() == "keep-alive" end
    end
    if not conn:send(RESPONSE) or not keep_alive then break end
  end
  conn:close()
end

local server = assert(smarm.tcp.listen("127.0.0.1", port, 1024))
print("listening on " .. select(2, server:getsockname()))
io.stdout:flush()
while true do
  local conn = server:accept()
  if conn then
    conn:setoption("tcp-nodelay", true)
    smarm.spawn_on("any", serve, conn)
  end
end
