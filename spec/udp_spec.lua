-- smarm.udp: datagrams on the IO thread (src/lua/ludp.c, src/io/udp.c), over loopback.
local smarm = require("smarm")

local posix = dofile("spec/support/posix.lua")
local guard = dofile("spec/support/guard.lua")
local HANG = guard.HANG

-- A socket bound to a free port of 127.0.0.1, and its port.
local function bind()
  local s = assert(smarm.udp.bind("127.0.0.1", 0))
  local _, port = s:getsockname()
  return s, port
end

describe("smarm.udp", function()
  -- First in this file: the IO thread's stop hooks of the other modules registered before udp's
  -- (four slots once held proc's three and tcp's one, and udp's was dropped: its sockets stayed
  -- open past the run's end, and a later run hung on one).
  it("closes its sockets at the run's end after the other IO modules came first", function()
    guard.run(function() -- process and tcp first; libuv's own descriptors too
      assert(smarm.process.run({ "true" }))
      assert(smarm.tcp.listen("127.0.0.1", 0)):close()
    end)
    local before = posix.fd_count()
    guard.run(function() _G.kept_udp = assert(smarm.udp.bind("127.0.0.1", 0)) end)
    _G.kept_udp = nil
    assert.are.equal(before, posix.fds_down_to(before, HANG))
  end)

  it("echoes datagrams between actors on two schedulers, each with its sender", function()
    local r = guard.run(function()
      local server, port = bind()
      smarm.spawn_on(2, function(s)
        s:settimeout(HANG)
        while true do
          local data, host, from = s:receivefrom()
          if not data or data == "stop" then break end
          assert(s:sendto("echo:" .. data, host, from))
        end
        s:close()
      end, server)
      local client, cport = bind()
      client:settimeout(HANG)
      local got = {}
      for i = 1, 100 do
        assert(client:sendto("datagram " .. i, "127.0.0.1", port))
        local data, host, from = client:receivefrom()
        got[i] = { data, host, from }
      end
      client:sendto("stop", "127.0.0.1", port)
      client:close()
      return { got = got, cport = cport, port = port }
    end, { schedulers = 2 })
    assert.are.same({ "echo:datagram 1", "127.0.0.1", r.port }, r.got[1])
    assert.are.same({ "echo:datagram 100", "127.0.0.1", r.port }, r.got[100])
  end)

  it("sends a binary as the datagram it holds", function()
    local r = guard.run(function()
      local server, port = bind()
      server:settimeout(HANG)
      local client = bind()
      assert(client:sendto(smarm.binary("a binary datagram"), "127.0.0.1", port))
      local data = server:receivefrom()
      client:close()
      server:close()
      return data
    end)
    assert.are.equal("a binary datagram", r)
  end)

  it("keeps datagrams whole and in order, cuts them to size, and takes empty ones", function()
    local r = guard.run(function()
      local a, pa = bind()
      local b = bind()
      a:settimeout(HANG)
      local big = ("0123456789"):rep(6000) -- 60,000 bytes: one datagram
      assert(b:sendto(big, "127.0.0.1", pa))
      assert(b:sendto("", "127.0.0.1", pa))
      assert(b:sendto("cut me short", "127.0.0.1", pa))
      assert(b:sendto("plain", "127.0.0.1", pa))
      local out = {}
      out.big = a:receivefrom()
      out.empty = a:receivefrom()
      out.cut = a:receivefrom(3) -- the rest of that datagram is gone, as in LuaSocket
      out.plain = a:receive()
      out.too_big = { b:sendto(("x"):rep(70000), "127.0.0.1", pa) }
      a:close()
      b:close()
      return out, big
    end)
    assert.are.equal(60000, #r.big)
    assert.are.equal(("0123456789"):rep(6000), r.big)
    assert.are.equal("", r.empty)
    assert.are.equal("cut", r.cut)
    assert.are.equal("plain", r.plain)
    assert.are.same({ nil, "EMSGSIZE" }, r.too_big)
  end)

  it("times out a receive and stays usable; a peer that is gone loses datagrams quietly", function()
    local r = guard.run(function()
      local a, pa = bind()
      local gone, pgone = bind()
      gone:close()
      local out = {}
      a:settimeout(0.01)
      out.timeout = { a:receivefrom() }
      -- to a port nobody listens on: UDP gives no error for it (or at most ECONNREFUSED later)
      out.lost = { a:sendto("into the void", "127.0.0.1", pgone) }
      local b = bind()
      b:sendto("after the timeout", "127.0.0.1", pa)
      a:settimeout(HANG)
      out.after = a:receivefrom()
      a:close()
      b:close()
      return out
    end)
    assert.are.same({ nil, "timeout" }, r.timeout)
    assert.is_true(r.lost[1])
    assert.are.equal("after the timeout", r.after)
  end)

  it("sets broadcast, ttl and multicast options, and reports bad ones", function()
    local r = guard.run(function()
      local s = bind()
      local out = {}
      out.ok = { s:setoption("broadcast", true), s:setoption("ttl", 16),
                 s:setoption("multicast-loop", false), s:setoption("multicast-ttl", 2) }
      out.join = { s:setoption("multicast-join", "239.255.7.7", "127.0.0.1") }
      out.leave = { s:setoption("multicast-leave", "239.255.7.7", "127.0.0.1") }
      out.not_group = { s:setoption("multicast-join", "10.0.0.1") }
      out.badname = select(2, pcall(s.setoption, s, "colour", 1))
      out.badttl = select(2, pcall(s.setoption, s, "ttl", 0))
      out.badflag = select(2, pcall(s.setoption, s, "broadcast", 1))
      s:close()
      return out
    end)
    assert.are.same({ true, true, true, true }, r.ok)
    -- joining needs a multicast route; a machine without one says so rather than failing here
    assert.is_true(r.join[1] == true or r.join[3] ~= nil)
    assert.is_true(r.leave[1] == true or r.leave[3] ~= nil)
    assert.is_nil(r.not_group[1])
    assert.are.equal("EINVAL", r.not_group[3])
    assert.matches("invalid option 'colour'", r.badname, 1, true)
    assert.matches("ttl from 1 to 255 expected", r.badttl, 1, true)
    assert.matches("boolean expected, got number", r.badflag, 1, true)
  end)

  it("raises on misuse, and a socket closed by a sharer gives nil, \"closed\"", function()
    local r = guard.run(function()
      local out = {}
      local function raises(f, ...) return select(2, pcall(f, ...)) end
      out.name = raises(smarm.udp.bind, "localhost", 0)
      out.port = raises(smarm.udp.bind, "127.0.0.1", 70000)
      out.inuse = { smarm.udp.bind("127.0.0.1", select(2, (bind()):getsockname())) }
      local s = bind()
      out.size = raises(s.receivefrom, s, 0)
      out.data = raises(s.sendto, s, {}, "127.0.0.1", 9)
      local me = smarm.self()
      local sharer = smarm.spawn(function()
        smarm.send(me, { s:receivefrom() }) -- parked when the owner closes it
        smarm.send(me, { s:sendto("x", "127.0.0.1", 9) })
      end)
      guard.wait(function()
        local i = smarm.info(sharer)
        return i and i.waiting == "io:udp.receivefrom"
      end, "the sharer parked")
      s:close()
      out.parked = guard.receive("the sharer's receive")
      out.later = guard.receive("the sharer's send")
      out.own = raises(s.receivefrom, s)
      return out
    end)
    assert.matches("numeric IPv4 or IPv6 address expected", r.name, 1, true)
    assert.matches("port from 0 to 65535 expected", r.port, 1, true)
    assert.are.equal("EADDRINUSE", r.inuse[3])
    assert.matches("byte count of at least 1 expected", r.size, 1, true)
    assert.matches("string or binary expected, got table", r.data, 1, true)
    assert.are.same({ nil, "closed" }, r.parked)
    assert.are.same({ nil, "closed" }, r.later)
    assert.matches("smarm.udp.receivefrom: the socket is closed", r.own, 1, true)
    local ok, e = pcall(smarm.udp.bind, "127.0.0.1", 0)
    assert.is_false(ok)
    assert.matches("not inside an actor", e, 1, true)
  end)

  it("closes the sockets of collected handles and of the run's end: no descriptor left", function()
    guard.run(function() assert(smarm.udp.bind("127.0.0.1", 0)):close() end) -- libuv's own first
    local before = posix.fd_count()
    guard.run(function()
      for _ = 1, 50 do assert(smarm.udp.bind("127.0.0.1", 0)) end -- dropped at once
      collectgarbage()
      _G.kept_udp = assert(smarm.udp.bind("127.0.0.1", 0)) -- closed by the run's end
    end)
    _G.kept_udp = nil
    assert.are.equal(before, posix.fds_down_to(before, HANG))
  end)
end)
