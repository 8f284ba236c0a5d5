-- Active sockets (conn:setactive): a connection's data, end and errors arrive in its owner's
-- mailbox as messages (src/lua/ltcp.c, src/io/tcp.c), so one actor serves a socket and its
-- mailbox with one receive.
local smarm = require("smarm")

local posix = dofile("spec/support/posix.lua")
local guard = dofile("spec/support/guard.lua")

-- A listener on a free port of 127.0.0.1, and its port.
local function listen()
  local server = assert(smarm.tcp.listen("127.0.0.1", 0))
  local _, port = server:getsockname()
  return server, port
end

-- The next message of socket c (tcp or unix) in the mailbox, skipping nothing else.
local function next_of(c)
  return guard.receive("a message of the socket", function(m)
    return type(m) == "table" and m.socket == c
  end)
end

-- Receives c's data messages until its end message (arming c again after each one when
-- once); returns the bytes and the end's table.
local function drain(c, once)
  local parts = {}
  while true do
    local m = next_of(c)
    if m.smarm ~= "tcp" and m.smarm ~= "unix" then return table.concat(parts), m end
    parts[#parts + 1] = m.data
    if once then assert(c:setactive("once")) end
  end
end

describe("conn:setactive", function()
  it("\"once\" sends one message per arming, then the end as tcp_closed", function()
    local r = guard.run(function()
      local server, port = listen()
      local me = smarm.self()
      smarm.spawn(function()
        local c = assert(server:accept())
        local out = { armed = tostring(c) }
        assert(c:setactive("once"))
        local m = next_of(c)
        out.first = { m.smarm, m.socket == c, m.data }
        out.after = tostring(c) -- received: passive again
        out.quiet = smarm.receive(function(x) return type(x) == "table" and x.socket == c end, 0.05)
        c:send("ok\n")
        assert(c:setactive("once"))
        m = next_of(c)
        out.second = m.data
        assert(c:setactive("once"))
        m = next_of(c)
        out.closed = { m.smarm, m.socket == c, m.data }
        out.receive_after = { c:receive() } -- the end stays known to a passive receive
        smarm.send(me, out)
      end)
      local c = assert(smarm.tcp.connect("127.0.0.1", port))
      c:send("one")
      assert(c:receive() == "ok") -- "two" must not arrive with "one"
      c:send("two")
      c:close()
      local out = guard.receive("the server's messages")
      server:close()
      return out
    end)
    assert.are.equal("tcp.conn (open)", r.armed)
    assert.are.same({ "tcp", true, "one" }, r.first)
    assert.are.equal("tcp.conn (open)", r.after)
    assert.is_nil(r.quiet)
    assert.are.equal("two", r.second)
    assert.are.same({ "tcp_closed", true }, r.closed)
    assert.are.same({ nil, "closed", "" }, r.receive_after)
  end)

  it("lets one actor serve its socket and its mailbox with one receive", function()
    local r = guard.run(function()
      local server, port = listen()
      local me = smarm.self()
      local s = smarm.spawn(function()
        local c = assert(server:accept())
        assert(c:setactive(true))
        local seen = {}
        while true do
          local m = smarm.receive()
          if m == "tick" then
            seen[#seen + 1] = "tick"
            c:send("tock\n")
          elseif m.smarm == "tcp" then
            seen[#seen + 1] = m.data
            c:send("got " .. m.data .. "\n")
          elseif m.smarm == "tcp_closed" then
            smarm.send(me, seen)
            return
          end
        end
      end)
      local c = assert(smarm.tcp.connect("127.0.0.1", port))
      c:send("hello")
      local lines = { c:receive() }
      smarm.send(s, "tick")
      lines[2] = c:receive()
      c:close()
      local seen = guard.receive("the server's record")
      server:close()
      return { lines = lines, seen = seen }
    end)
    assert.are.same({ "got hello", "tock" }, r.lines)
    assert.are.same({ "hello", "tick" }, r.seen)
  end)

  it("true pushes back on a peer whose owner does not receive, and loses nothing", function()
    local total = 32 * 1024 * 1024 -- beyond what the kernel's buffers hold on loopback
    local r = guard.run(function()
      local server, port = listen()
      local me = smarm.self()
      local owner = smarm.spawn(function()
        local c = assert(server:accept())
        assert(c:setactive(true))
        guard.receive("the go", function(m) return m == "go" end)
        local bytes, ok, last = 0, true
        local m
        repeat
          m = next_of(c)
          if m.smarm == "tcp" then
            -- the writer's bytes count up: byte i is i % 251
            for i = 1, #m.data, 4099 do
              local want = (bytes + i - 1) % 251
              if m.data:byte(i) ~= want then ok = false end
            end
            bytes = bytes + #m.data
          end
          last = m.smarm
        until m.smarm ~= "tcp"
        smarm.send(me, { bytes = bytes, ok = ok, last = last })
      end)
      local c = assert(smarm.tcp.connect("127.0.0.1", port))
      local chunk = {}
      for i = 0, 251 * 261 - 1 do chunk[#chunk + 1] = string.char(i % 251) end
      chunk = table.concat(chunk) -- a whole number of 251s: turned, it goes on counting
      local sent, parked = 0, false
      c:settimeout(0.5)
      while sent < total do
        local off = sent % 251
        local piece = chunk:sub(off + 1) .. chunk:sub(1, off)
        local n, err, partial = c:send(piece)
        if not n then
          parked = err == "timeout"
          sent = sent + partial
          break
        end
        sent = sent + n
      end
      smarm.send(owner, "go")
      c:close() -- the rest of a piece that timed out still goes out before the end
      local got = guard.receive("the owner's count", function(m) return type(m) == "table" end)
      server:close()
      return { parked = parked, sent = sent, got = got }
    end)
    assert.is_true(r.parked)
    assert.is_true(r.sent < total)
    assert.is_true(r.got.ok)
    assert.are.equal("tcp_closed", r.got.last)
    assert.is_true(r.got.bytes >= r.sent and r.got.bytes <= r.sent + 251 * 261)
  end)

  it("false takes back the messages not received yet, set aside or not, in order", function()
    local r = guard.run(function()
      local server, port = listen()
      local me = smarm.self()
      local owner = smarm.spawn(function()
        local c = assert(server:accept())
        assert(c:setactive(true))
        -- a selective receive for something else sets the socket's messages aside
        guard.receive("the writer's word", function(m) return m == "sent" end)
        local out = { mode = tostring(c) }
        assert(c:setactive(false))
        out.after = tostring(c)
        out.left = smarm.receive(function(m) return type(m) == "table" and m.socket == c end, 0)
        out.bytes = c:receive(9)
        c:close()
        smarm.send(me, out)
      end)
      local c = assert(smarm.tcp.connect("127.0.0.1", port))
      for _, piece in ipairs({ "aaa", "bbb", "ccc" }) do
        c:send(piece)
        smarm.yield()
      end
      smarm.send(owner, "sent")
      local out = guard.receive("the owner's report")
      c:close()
      server:close()
      return out
    end)
    assert.are.equal("tcp.conn (open, active)", r.mode)
    assert.are.equal("tcp.conn (open)", r.after)
    assert.is_nil(r.left)
    assert.are.equal("aaabbbccc", r.bytes)
  end)

  it("moves with the socket from actor to actor, across schedulers, losing nothing", function()
    local lines = 3000
    local r = guard.run(function()
      local server, port = listen()
      local me = smarm.self()
      -- A worker takes three messages of the socket it is sent, then hands it to the next of its
      -- route; the last one, or one that meets the end, tells the bytes.
      local function worker()
        local m = smarm.receive()
        if m == "stop" then return end
        local c, got, route = m.conn, { m.got }, m.route
        if m.mode ~= nil then assert(c:setactive(m.mode)) end
        local taken = 0
        while true do
          local e = next_of(c)
          if e.smarm ~= "tcp" then
            smarm.send(me, { bytes = table.concat(got), last = e.smarm, route = route })
            return
          end
          got[#got + 1] = e.data
          taken = taken + 1
          if taken < 3 or #route == 0 then smarm.send(m.client, "more") end
          if m.mode == "once" then assert(c:setactive("once")) end
          if taken == 3 and #route > 0 then
            -- data on its way while it hands over: the client has sent a batch, which reaches
            -- the mailbox at any time (a short pause makes that likelier; it is no condition)
            smarm.send(m.client, smarm.self())
            guard.receive("the client's batch", function(x) return x == "sent" end)
            smarm.sleep(0.002)
            local to = table.remove(route, 1)
            smarm.send(to.pid, { conn = c, got = table.concat(got), mode = to.mode, route = route,
              client = m.client })
            return
          end
        end
      end
      -- true as it is, made "once", made true again, as it is to the end
      local route = {
        { pid = smarm.spawn_on(2, worker) },
        { pid = smarm.spawn_on(1, worker), mode = "once" },
        { pid = smarm.spawn_on(2, worker), mode = true },
        { pid = smarm.spawn_on(1, worker) },
      }
      -- the client sends its lines in batches of 50, two at first, then one per message taken
      local client = smarm.spawn_on(2, function()
        local c = assert(smarm.tcp.connect("127.0.0.1", port))
        local i = 0
        local function batch()
          local b = {}
          for k = 1, 50 do b[k] = (i + k) .. "\n" end
          i = i + 50
          assert(c:send(table.concat(b)))
        end
        batch()
        batch()
        while true do -- until told to stop: a worker may ask after the last line
          local m = smarm.receive()
          if m == "stop" then return end
          if i < lines then batch() end -- "more", or a worker about to hand over
          if i >= lines and c then
            c:close()
            c = nil
          end
          if smarm.is_pid(m) then smarm.send(m, "sent") end
        end
      end)
      smarm.spawn(function()
        local c = assert(server:accept())
        assert(c:setactive(true))
        local first = next_of(c)
        smarm.send(client, "more")
        local to = table.remove(route, 1)
        smarm.send(to.pid, { conn = c, got = first.data, mode = to.mode, route = route,
          client = client })
      end)
      local out = guard.receive("the last owner's bytes", function(m) return type(m) == "table" end)
      for _, left in ipairs(out.route) do smarm.send(left.pid, "stop") end
      smarm.send(client, "stop")
      server:close()
      return out
    end, { schedulers = 2 })
    local want = {}
    for i = 1, lines do want[i] = i .. "\n" end
    assert.are.equal("tcp_closed", r.last)
    assert.are.same({}, r.route) -- every hand-over happened
    assert.are.equal(table.concat(want), r.bytes)
  end)

  it("refuses misuse with clear errors", function()
    local r = guard.run(function()
      local server, port = listen()
      local me = smarm.self()
      local out = {}
      smarm.spawn(function()
        local c = assert(server:accept())
        out.bad_mode = select(2, pcall(c.setactive, c, "twice"))
        out.no_mode = select(2, pcall(c.setactive, c))
        assert(c:setactive(true))
        out.receive = select(2, pcall(c.receive, c))
        out.receiveany = select(2, pcall(c.receiveany, c, 10))
        -- an actor that shares the socket (an upvalue) is not the one its messages go to
        local owner = smarm.self()
        smarm.spawn(function()
          out.shared_set = select(2, pcall(c.setactive, c, false))
          out.shared_send = select(2, pcall(smarm.send, smarm.self(), { c }))
          smarm.send(owner, "shared done")
        end)
        guard.receive("the sharer", function(m) return m == "shared done" end)
        -- a message that is not sent (its receiver is dead) leaves the socket active here
        local dead = smarm.spawn(function() end)
        guard.wait(function() return not smarm.alive(dead) end, "the dead actor")
        smarm.send(dead, { conn = c })
        out.kept = tostring(c)
        smarm.send(me, "kept")
        out.data = next_of(c).data
        c:close()
        out.closed = select(2, pcall(c.setactive, c, true))
        smarm.send(me, "done")
      end)
      local c = assert(smarm.tcp.connect("127.0.0.1", port))
      guard.receive("the kept socket", function(m) return m == "kept" end)
      c:send("still here")
      guard.receive("the end", function(m) return m == "done" end)
      c:close()
      server:close()
      return out
    end)
    assert.matches('bad argument #2 to .*%(true, false or "once" expected%)', r.bad_mode)
    assert.matches('true, false or "once" expected', r.no_mode)
    assert.matches("smarm.tcp.receive: the socket is active", r.receive, 1, true)
    assert.matches("smarm.tcp.receiveany: the socket is active", r.receiveany, 1, true)
    assert.matches("smarm.tcp.setactive: the socket is active for another actor", r.shared_set, 1,
      true)
    assert.matches("smarm.send: the socket is active for another actor", r.shared_send, 1, true)
    assert.are.equal("tcp.conn (open, active)", r.kept)
    assert.are.equal("still here", r.data)
    assert.matches("smarm.tcp.setactive: the socket is closed", r.closed, 1, true)
  end)

  it("works for Unix sockets, whose messages say unix", function()
    local dir = posix.tmpdir()
    local r = guard.run(function()
      local path = dir .. "/active"
      local server = assert(smarm.unix.listen(path))
      local me = smarm.self()
      smarm.spawn(function()
        local c = assert(server:accept())
        assert(c:setactive("once"))
        local data, ending = drain(c, true)
        smarm.send(me, { data = data, ending = ending.smarm, mode = tostring(c) })
      end)
      local c = assert(smarm.unix.connect(path))
      c:send("over a path")
      c:close()
      local out = guard.receive("the server's messages")
      server:close()
      return out
    end)
    posix.remove_tree(dir)
    assert.are.same({ data = "over a path", ending = "unix_closed", mode = "unix.conn (open)" }, r)
  end)

  it("leaves every socket of a message that raised as it was", function()
    local r = guard.run(function()
      local server, port = listen()
      local me = smarm.self()
      smarm.spawn(function()
        local c1 = assert(server:accept())
        local c2 = assert(server:accept())
        local owner = smarm.self()
        assert(c1:setactive(true))
        smarm.spawn(function() -- a sharer arms c2 for itself, and stays
          assert(c2:setactive(true))
          smarm.send(owner, "armed")
          smarm.receive()
        end)
        guard.receive("the sharer", function(m) return m == "armed" end)
        local sink = smarm.spawn_on(2, function(to)
          while true do smarm.send(to, { mode = tostring(smarm.receive().c) }) end
        end, owner)
        local out = {}
        -- c1 is checked first and could be readied; c2 cannot travel: nothing may change
        out.err = select(2, pcall(smarm.send, sink, { c1, c2 }))
        out.after = tostring(c1)
        smarm.send(me, "go")
        out.data = next_of(c1).data -- still active: the data comes as a message
        assert(c1:setactive(false))
        smarm.send(sink, { c = c1 }) -- handed over passive, it arrives passive
        out.receiver = guard.receive("the sink", function(x) return type(x) == "table" end).mode
        smarm.send(me, out)
      end)
      local cl1 = assert(smarm.tcp.connect("127.0.0.1", port))
      local cl2 = assert(smarm.tcp.connect("127.0.0.1", port))
      guard.receive("the go", function(m) return m == "go" end)
      cl1:send("hello")
      local out = guard.receive("the report", function(m) return type(m) == "table" end)
      cl1:close()
      cl2:close()
      server:close()
      return out
    end, { schedulers = 2 })
    assert.matches("smarm.send: the socket is active for another actor", r.err, 1, true)
    assert.are.equal("tcp.conn (open, active)", r.after)
    assert.are.equal("hello", r.data)
    assert.are.equal("tcp.conn (open)", r.receiver)
  end)

  it("lets the holder take back a socket whose arming actor has ended", function()
    local r = guard.run(function()
      local server, port = listen()
      local me = smarm.self()
      smarm.spawn(function()
        local c = assert(server:accept())
        local w = smarm.spawn(function() assert(c:setactive(true)) end)
        guard.ended(w)
        local out = { receive = select(2, pcall(c.receive, c)) }
        out.set = c:setactive(false)
        smarm.send(me, "passive")
        out.data = c:receive(5)
        smarm.send(me, out)
      end)
      local cl = assert(smarm.tcp.connect("127.0.0.1", port))
      guard.receive("the owner", function(m) return m == "passive" end)
      cl:send("world")
      local out = guard.receive("the report", function(m) return type(m) == "table" end)
      cl:close()
      server:close()
      return out
    end)
    assert.matches("smarm.tcp.receive: the socket is active", r.receive, 1, true)
    assert.is_true(r.set)
    assert.are.equal("world", r.data)
  end)

  it("lets the holder arm again, in the mode of an arming actor that has ended", function()
    local r = guard.run(function()
      local server, port = listen()
      local me = smarm.self()
      smarm.spawn(function()
        local c = assert(server:accept())
        local w = smarm.spawn(function() assert(c:setactive(true)) end)
        guard.ended(w)
        assert(c:setactive(true)) -- the same mode, but for this actor now
        smarm.send(me, "armed")
        smarm.send(me, next_of(c).data)
      end)
      local cl = assert(smarm.tcp.connect("127.0.0.1", port))
      guard.receive("the owner", function(m) return m == "armed" end)
      cl:send("again")
      local data = guard.receive("the data", function(m) return type(m) == "string" end)
      cl:close()
      server:close()
      return data
    end)
    assert.are.equal("again", r)
  end)
end)

describe("udp sock:setactive", function()
  -- A UDP socket on 127.0.0.1 and its port.
  local function bind()
    local u = assert(smarm.udp.bind("127.0.0.1", 0))
    local _, port = u:getsockname()
    return u, port
  end

  it("sends datagrams as messages, with their sender, once or on", function()
    local r = guard.run(function()
      local u, port = bind()
      local peer, peer_port = bind()
      local out = {}
      assert(u:setactive("once"))
      out.mode = tostring(u)
      out.receive = select(2, pcall(u.receivefrom, u))
      assert(peer:sendto("one", "127.0.0.1", port))
      local m = next_of(u)
      out.first = { m.smarm, m.socket == u, m.data, m.ip, m.port == peer_port }
      out.after = tostring(u)
      assert(u:setactive(true))
      for i = 1, 3 do assert(peer:sendto("d" .. i, "127.0.0.1", port)) end
      out.rest = { next_of(u).data, next_of(u).data, next_of(u).data }
      assert(u:setactive(false))
      u:close()
      peer:close()
      return out
    end)
    assert.are.equal("udp.socket (open, active once)", r.mode)
    assert.matches("smarm.udp.receivefrom: the socket is active", r.receive, 1, true)
    assert.are.same({ "udp", true, "one", "127.0.0.1", true }, r.first)
    assert.are.equal("udp.socket (open)", r.after)
    assert.are.same({ "d1", "d2", "d3" }, r.rest)
  end)

  it("false gives the datagrams not received yet back to receivefrom, in order", function()
    local r = guard.run(function()
      local u, port = bind()
      local me = smarm.self()
      assert(u:setactive(true))
      smarm.spawn_on(2, function(p)
        local peer = assert(smarm.udp.bind("127.0.0.1", 0))
        for i = 1, 5 do assert(peer:sendto("d" .. i, "127.0.0.1", p)) end
        local _, own = peer:getsockname()
        smarm.send(me, own)
        smarm.receive()
        peer:close()
      end, port)
      -- a selective receive for something else sets some of them aside
      local peer_port = guard.receive("the sender's word", function(m) return type(m) == "number" end)
      local first = next_of(u)
      assert(u:setactive(false))
      local out = { first = first.data }
      for i = 2, 5 do
        local data, _, from = u:receivefrom()
        out[i] = data .. (from == peer_port and "" or "?")
      end
      out.left = smarm.receive(function(m) return type(m) == "table" and m.socket == u end, 0)
      u:close()
      return out
    end, { schedulers = 2 })
    assert.are.same({ first = "d1", nil, "d2", "d3", "d4", "d5" }, r)
  end)

  it("moves its messages with it to an actor on another scheduler", function()
    local r = guard.run(function()
      local u, port = bind()
      local peer = bind()
      local me = smarm.self()
      local taker = smarm.spawn_on(2, function()
        local m = smarm.receive()
        local got = { tostring(m.u) }
        for i = 2, 4 do got[i] = next_of(m.u).data end
        smarm.send(me, got)
        m.u:close()
      end)
      assert(u:setactive(true))
      for i = 1, 4 do assert(peer:sendto("d" .. i, "127.0.0.1", port)) end
      local first = next_of(u).data -- the others are on their way or in the mailbox
      smarm.send(taker, { u = u })
      local got = guard.receive("the taker's datagrams", function(m) return type(m) == "table" end)
      peer:close()
      got[1] = first .. " " .. got[1]
      return got
    end, { schedulers = 2 })
    assert.are.same({ "d1 udp.socket (open, active)", "d2", "d3", "d4" }, r)
  end)

  it("lets the holder arm again, \"once\" as an ended arming actor had", function()
    local r = guard.run(function()
      local u, port = bind()
      local peer = bind()
      local w = smarm.spawn(function() assert(u:setactive("once")) end)
      guard.ended(w)
      assert(u:setactive("once"))
      assert(peer:sendto("x", "127.0.0.1", port))
      local m = next_of(u)
      u:close()
      peer:close()
      return { m.data, tostring(u) }
    end)
    assert.are.same({ "x", "udp.socket (closed)" }, r)
  end)
end)
