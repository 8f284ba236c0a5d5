-- examples/quickstart.lua: the README's Lua quick start (spec/cli_spec.lua runs it).
-- Run: build/lua-release/smarm examples/quickstart.lua
local smarm = require("smarm")

-- an echo server: each connection is served by its own actor, on any scheduler
local server = assert(smarm.tcp.listen("127.0.0.1", 0))
local _, port = server:getsockname()
smarm.spawn(function()
  while true do
    local conn = server:accept()
    if not conn then return end
    smarm.spawn_on("any", function(c)            -- the socket moves with the actor
      for line in function() return c:receive("*l") end do c:send(line .. "\n") end
      c:close()
    end, conn)
  end
end)

-- a client, and a worker that answers {from =, n =} requests
local worker = smarm.spawn(function()
  while true do
    local req = smarm.receive(function(m) return type(m) == "table" end)  -- selective
    smarm.send(req.from, req.n * 2)
  end
end)
local c = assert(smarm.tcp.connect("127.0.0.1", port))
c:send("hello\n")
print(c:receive("*l"))                              --> hello
smarm.send(worker, { from = smarm.self(), n = 21 })
print(smarm.receive(1.0))                           --> 42 (or nil, "timeout" after 1 s)
