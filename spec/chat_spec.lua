-- examples/chat.lua (issue #15): a chat server of one active-"once" actor per connection, driven
-- by 500 clients on two schedulers, one of which leaves in the middle of a line. No timing
-- asserts: the waits are for messages and counts, under the hang guards.
package.path = "examples/?.lua;" .. package.path
local smarm = require("smarm")
local chat = require("chat")
local posix = dofile("spec/support/posix.lua")
local guard = dofile("spec/support/guard.lua")

-- 500 clients, fewer where the descriptor limit cannot hold both ends of each and some spare
local CLIENTS = math.min(500, math.floor((posix.fd_limit() - 64) / 2))
local SPEAKERS = 10

describe("examples/chat.lua", function()
  it("broadcasts every line to every client, and drops a line cut off by a leaving one", function()
    local r = guard.run(function()
      local room = assert(chat.start({ port = 0 }))
      local fds_before = posix.fd_count() -- the listener and the IO thread's own included
      local me = smarm.self()
      -- Client k connects, says it is in, and waits for its orders: "leave" (send half a line,
      -- then close), "speak" (send one line), "listen" (read SPEAKERS lines and report them).
      local clients = {}
      for k = 1, CLIENTS do
        clients[k] = smarm.spawn_on(k % 2 + 1, function(owner, port, id)
          local c = assert(smarm.tcp.connect("127.0.0.1", port))
          smarm.send(owner, "in")
          while true do
            local order = smarm.receive()
            if order == "leave" then
              c:send("half a li")
              c:close()
              smarm.send(owner, "left")
              return
            elseif order == "speak" then
              assert(c:send("line of " .. id .. "\n"))
            elseif order == "listen" then
              local got = {}
              for i = 1, SPEAKERS do got[i] = c:receive() or "(closed)" end
              smarm.send(owner, { id = id, got = got })
            elseif order == "close" then
              c:close()
              return
            end
          end
        end, me, room.port, k)
      end
      for _ = 1, CLIENTS do guard.receive("a client's connect", function(m) return m == "in" end) end
      guard.wait(function() return chat.members(room) == CLIENTS end, "every client joining")
      smarm.send(clients[1], "leave")
      guard.receive("the leaver", function(m) return m == "left" end)
      guard.wait(function() return chat.members(room) == CLIENTS - 1 end, "the leaver leaving")
      for k = 2, SPEAKERS + 1 do smarm.send(clients[k], "speak") end -- (each, before it listens)
      for k = 2, CLIENTS do smarm.send(clients[k], "listen") end
      local reports = {}
      for _ = 2, CLIENTS do
        local m = guard.receive("a client's lines", function(m) return type(m) == "table" end)
        reports[m.id] = m.got
      end
      for k = 2, CLIENTS do smarm.send(clients[k], "close") end
      guard.wait(function() return chat.members(room) == 0 end, "every client leaving")
      -- both ends of every connection closed: the process is back to its descriptors
      guard.wait(function() return posix.fd_count() <= fds_before end, "the descriptors closing")
      chat.stop(room)
      return { reports = reports }
    end, { schedulers = 2 })
    -- every client but the leaver got each speaker's line once, and nothing else
    local bad = {}
    for k = 2, CLIENTS do
      local got = r.reports[k]
      local seen = {}
      for _, line in ipairs(got or {}) do
        local speaker = line:match("^guest%d+: line of (%d+)$")
        speaker = tonumber(speaker)
        if not speaker or speaker < 2 or speaker > SPEAKERS + 1 or seen[speaker] then
          bad[#bad + 1] = k .. ": " .. line
        end
        seen[speaker or -1] = true
      end
      if not got or #got ~= SPEAKERS then bad[#bad + 1] = k .. ": " .. #(got or {}) .. " lines" end
    end
    assert.are.same({}, bad)
  end)
end)
