-- smarm.unix: Unix domain stream sockets (src/lua/ltcp.c, src/io/tcp.c: the TCP handle's
-- methods, made by path or by Linux's abstract "@name").
local smarm = require("smarm")

local posix = dofile("spec/support/posix.lua")
local guard = dofile("spec/support/guard.lua")

local dir = posix.tmpdir()
local serial = 0

-- A fresh socket path in this file's temporary directory.
local function new_path()
  serial = serial + 1
  return dir .. "/sock" .. serial
end

local own_pid = posix.pid()

-- An abstract name no other process of this machine uses.
local function new_abstract()
  serial = serial + 1
  return string.format("@smarm-spec-%d-%d", own_pid, serial)
end

-- Waits (outside a runtime) until fd_count() is at most n, or the hang guard passes; returns it.
local function fds_down_to(n)
  local deadline, now = os.time() + guard.HANG, posix.fd_count()
  while now > n and os.time() < deadline do
    posix.sleep(0.05)
    now = posix.fd_count()
  end
  return now
end

local exists = posix.exists

teardown(function() posix.remove_tree(dir) end)

describe("smarm.unix", function()
  it("echoes lines between actors on two schedulers, and removes its path when closed", function()
    -- the process's first IO keeps a few descriptors of libuv's for good: count after one
    guard.run(function() assert(smarm.fs.stat(dir)) end)
    local before = posix.fd_count()
    local path = new_path()
    local r = guard.run(function()
      local out = {}
      local server = assert(smarm.unix.listen(path, { mode = tonumber("600", 8) }))
      out.stat = smarm.fs.stat(path)
      out.server_name = server:getsockname()
      out.server_str = tostring(server)
      smarm.spawn(function()
        local c = assert(server:accept())
        out.accepted_name = { c:getsockname() }
        while true do
          local line = c:receive()
          if not line then break end
          assert(c:send("echo:" .. line .. "\n"))
        end
        c:close()
      end)
      local me = smarm.self()
      smarm.spawn_on(2, function(owner, p)
        local c = assert(smarm.unix.connect(p))
        local got = { str = tostring(c), peer = c:getpeername(), own = c:getsockname() }
        for i = 1, 100 do
          assert(c:send("line " .. i .. "\n"))
          got[i] = c:receive()
        end
        c:close()
        smarm.send(owner, got)
      end, me, path)
      out.got = guard.receive("the client's lines")
      server:close()
      out.after_close = exists(path)
      -- a mode wider than the umask's leave (bits it takes are given back after the bind)
      local wide_path = new_path()
      local wide = assert(smarm.unix.listen(wide_path, { mode = tonumber("666", 8) }))
      out.wide_mode = smarm.fs.stat(wide_path).mode
      wide:close()
      return out
    end, { schedulers = 2 })
    assert.are.equal("socket", r.stat.type)
    assert.are.equal(tonumber("600", 8), r.stat.mode)
    assert.are.equal(tonumber("666", 8), r.wide_mode)
    assert.are.equal(path, r.server_name)
    assert.are.equal("unix.server (open)", r.server_str)
    assert.are.same({ path }, r.accepted_name) -- the server's end is named, with no port
    assert.are.equal("unix.conn (open)", r.got.str)
    assert.are.equal(path, r.got.peer)
    assert.are.equal("", r.got.own) -- a client's end has no name
    assert.are.equal(100, #r.got)
    assert.are.equal("echo:line 1", r.got[1])
    assert.are.equal("echo:line 100", r.got[100])
    assert.is_false(r.after_close)
    assert.are.equal(before, fds_down_to(before))
  end)

  it("reaches abstract names, which leave no file and are refused when taken", function()
    local name = new_abstract()
    local r = guard.run(function()
      local out = {}
      local server = assert(smarm.unix.listen(name))
      out.name = server:getsockname()
      out.taken = { smarm.unix.listen(name) }
      smarm.spawn(function()
        local c = assert(server:accept())
        c:send("abstract\n")
        c:close()
      end)
      local c = assert(smarm.unix.connect(name))
      out.line = c:receive()
      out.peer = c:getpeername()
      c:close()
      server:close()
      out.gone = { smarm.unix.connect(name) }
      return out
    end)
    assert.are.equal(name, r.name)
    assert.is_nil(r.taken[1])
    assert.are.equal(name .. ": address already in use", r.taken[2])
    assert.are.equal("EADDRINUSE", r.taken[3])
    assert.are.equal("abstract", r.line)
    assert.are.equal(name, r.peer)
    assert.is_nil(r.gone[1])
    assert.are.equal("ECONNREFUSED", r.gone[3])
  end)

  it("reports missing paths and stale files, and raises on misuse", function()
    local stale = new_path()
    local r = guard.run(function()
      local out = {}
      out.missing = { smarm.unix.connect(dir .. "/nobody-listens") }
      out.nodir = { smarm.unix.listen(dir .. "/no/such/dir/sock") }
      -- a path left by a listener of another process (or a file): in use, and left alone
      assert(smarm.fs.writefile(stale, "not a socket"))
      out.stale = { smarm.unix.listen(stale) }
      out.stale_kept = smarm.fs.readfile(stale)
      local function raises(fn, ...) return select(2, pcall(fn, ...)) end
      out.mode_abstract = raises(smarm.unix.listen, "@x", { mode = 384 })
      out.too_long = raises(smarm.unix.listen, dir .. "/" .. ("x"):rep(120))
      out.empty = raises(smarm.unix.connect, "")
      out.nul = raises(smarm.unix.connect, "a\0b")
      out.notstring = raises(smarm.unix.listen, 5 > 4)
      out.badmode = raises(smarm.unix.listen, new_path(), { mode = 4096 })
      out.badbacklog = raises(smarm.unix.listen, new_path(), { backlog = 0 })
      local server = assert(smarm.unix.listen(new_path()))
      local c = assert(smarm.unix.connect(server:getsockname()))
      out.nodelay = raises(c.setoption, c, "tcp-nodelay", true)
      c:close()
      out.closed = raises(c.receive, c)
      server:close()
      return out
    end)
    assert.is_nil(r.missing[1])
    assert.are.equal(dir .. "/nobody-listens: no such file or directory", r.missing[2])
    assert.are.equal("ENOENT", r.missing[3])
    assert.are.equal("ENOENT", r.nodir[3])
    assert.are.equal("EADDRINUSE", r.stale[3])
    assert.are.equal("not a socket", r.stale_kept)
    assert.matches("opts.mode does not apply to an abstract name", r.mode_abstract, 1, true)
    assert.matches("socket path of at most 107 bytes expected", r.too_long, 1, true)
    assert.matches("socket path expected", r.empty, 1, true)
    assert.matches("socket path without NUL bytes expected", r.nul, 1, true)
    assert.matches("string expected, got boolean", r.notstring, 1, true)
    assert.matches("opts.mode from 0 to 0777 (511) expected", r.badmode, 1, true)
    assert.matches("opts.backlog from 1 to 65535 expected", r.badbacklog, 1, true)
    assert.matches("\"tcp-nodelay\" applies to TCP sockets only", r.nodelay, 1, true)
    assert.matches("smarm.unix.receive: the socket is closed", r.closed, 1, true)
    local ok, e = pcall(smarm.unix.listen, new_path())
    assert.is_false(ok)
    assert.matches("smarm.unix.listen: not inside an actor", e, 1, true)
  end)

  it("removes the paths of listeners the end of the run closes, and of a killed owner's", function()
    local kept, owned = new_path(), new_path()
    local r = guard.run(function()
      _G.kept_server = assert(smarm.unix.listen(kept)) -- never closed: the run's end does it
      local pid = smarm.spawn(function()
        assert(smarm.unix.listen(owned))
        smarm.receive()
      end)
      guard.wait(function() return exists(owned) end, "the owner's listener")
      local down = guard.watch(pid)
      smarm.kill(pid)
      down()
      local gone = guard.wait(function() return not exists(owned) end, "the path removed")
      return { owned_gone = gone }
    end)
    _G.kept_server = nil
    assert.is_true(r.owned_gone)
    assert.is_false(exists(kept))
  end)

  it("closes a listener where parking is refused (a hook, a __gc) without waiting", function()
    local in_hook, in_gc = new_path(), new_path()
    local r = guard.run(function()
      local out = {}
      local a = assert(smarm.unix.listen(in_hook))
      debug.sethook(function()
        debug.sethook()
        out.hook = { pcall(a.close, a) }
      end, "", 1)
      local x = 0
      for i = 1, 10 do x = x + i end
      debug.sethook()
      local b = assert(smarm.unix.listen(in_gc))
      local u = newproxy(true)
      getmetatable(u).__gc = function() out.gc = { pcall(b.close, b) } end
      u = nil -- luacheck: ignore
      collectgarbage()
      collectgarbage()
      -- closed for good: the paths go (posted closes), and nothing connects any more
      guard.wait(function() return not exists(in_hook) and not exists(in_gc) end, "paths removed")
      out.connect = select(3, smarm.unix.connect(in_hook))
      return out
    end)
    assert.are.same({ true, true }, r.hook)
    assert.are.same({ true, true }, r.gc)
    assert.are.equal("ENOENT", r.connect)
  end)

  it("hands a connection to an actor on another scheduler, with what was read ahead", function()
    local path = new_path()
    local r = guard.run(function()
      local server = assert(smarm.unix.listen(path))
      local me = smarm.self()
      smarm.spawn(function()
        local c = assert(server:accept())
        local first = c:receive() -- reads ahead: the other lines came with it
        smarm.spawn_on(2, function(owner, conn, got)
          smarm.send(owner, { got, conn:receive(), conn:receive(5), tostring(conn) })
          conn:close()
        end, me, c, first)
        smarm.send(me, tostring(c))
      end)
      local c = assert(smarm.unix.connect(path))
      c:send("first\nsecond\nthird")
      local got = guard.receive("the new owner's lines", function(m) return type(m) == "table" end)
      local old = guard.receive("the old handle", function(m) return type(m) == "string" end)
      c:close()
      server:close()
      return { got = got, old = old }
    end, { schedulers = 2 })
    assert.are.same({ "first", "second", "third", "unix.conn (open)" }, r.got)
    assert.are.equal("unix.conn (handed over)", r.old)
  end)

  it("says what an actor waits for in smarm.info", function()
    local path = new_path()
    local r = guard.run(function()
      local server = assert(smarm.unix.listen(path))
      local pid = smarm.spawn(function() server:accept() end)
      local waiting = guard.wait(function()
        local i = smarm.info(pid)
        return i and i.waiting == "io:unix.accept" and i.waiting
      end, "the actor parked in accept")
      server:close()
      guard.ended(pid)
      return waiting
    end)
    assert.are.equal("io:unix.accept", r)
  end)
end)
