-- Handles outlive their run: a socket or file kept from one smarm.run and used in a later one
-- (or between runs) must behave like a closed handle, with an error that says it belongs to an
-- earlier run, and must never touch the descriptor a later run opened under the same number.
-- Its __gc in a later run must not close anything of that run either.
local smarm = require("smarm")

local posix = dofile("spec/support/posix.lua") -- no shells: a fork here can hang under qemu
local fd_count = posix.fd_count

-- A connected pair (client, server side) and the listener, inside an actor.
local function pair()
  local server = assert(smarm.tcp.listen("127.0.0.1", 0))
  local _, port = assert(server:getsockname())
  local me = smarm.self()
  smarm.spawn(function()
    smarm.send(me, { conn = assert(server:accept()) })
  end)
  local client = assert(smarm.tcp.connect("127.0.0.1", port))
  local accepted = smarm.receive(10)
  return client, accepted.conn, server
end

-- Kept from a run that has ended: a client, its accepted peer, the listener, a file.
local function handles_of_an_ended_run(path)
  return smarm.run(function()
    local client, conn, server = pair()
    local file = assert(smarm.fs.open(path, "w+"))
    assert(file:write("old run"))
    return { client = client, conn = conn, server = server, file = file }
  end)
end

local function tmpfile(name)
  local dir = posix.tmpdir()
  return dir .. "/" .. name, dir
end

-- The error a call raises, or "no error: <results>".
local function error_of(f, ...)
  local r = { pcall(f, ...) }
  if r[1] then
    for i = 2, #r do r[i] = tostring(r[i]) end
    return "no error: " .. table.concat(r, ", ", 2)
  end
  return tostring(r[2])
end

describe("handles of an earlier run", function()
  local path, dir, old

  before_each(function()
    path, dir = tmpfile("f")
    old = handles_of_an_ended_run(path)
  end)

  after_each(function()
    posix.remove_tree(dir)
  end)

  it("raise on every socket method, in a later run", function()
    local errors = smarm.run(function()
      local c, s = old.client, old.server
      return {
        send = error_of(c.send, c, "sent on the OLD run's socket"),
        receive = error_of(c.receive, c),
        receiveany = error_of(c.receiveany, c, 10),
        getsockname = error_of(c.getsockname, c),
        getpeername = error_of(c.getpeername, c),
        settimeout = error_of(c.settimeout, c, 1),
        setoption = error_of(c.setoption, c, "tcp-nodelay", true),
        close = error_of(c.close, c),
        accept = error_of(s.accept, s),
        server_getsockname = error_of(s.getsockname, s),
        server_settimeout = error_of(s.settimeout, s, 1),
        server_close = error_of(s.close, s),
      }
    end)
    for what, err in pairs(errors) do
      local fn = what:gsub("^server_", "")
      assert.matches("smarm%.tcp%." .. fn .. ": the socket belongs to an earlier run", err, 1)
    end
  end)

  it("raise on every file method, in a later run", function()
    local errors = smarm.run(function()
      local f = old.file
      return {
        read = error_of(f.read, f, 3, 0),
        write = error_of(f.write, f, "written through the OLD run's file"),
        close = error_of(f.close, f),
      }
    end)
    for fn, err in pairs(errors) do
      assert.matches("smarm%.fs%." .. fn .. ": the file belongs to an earlier run", err, 1)
    end
    -- and its descriptor went with its run: the file holds what the earlier run wrote
    local f = assert(io.open(path))
    assert.are.equal("old run", f:read("*a"))
    f:close()
  end)

  it("have their descriptors closed by the end of their run", function()
    local before = fd_count()
    local kept = smarm.run(function()
      local files = {}
      for i = 1, 20 do files[i] = assert(smarm.fs.open(dir .. "/kept" .. i, "w")) end
      local client, conn, server = pair()
      return { files = files, client = client, conn = conn, server = server }
    end)
    local after = fd_count()
    assert.are.equal(20, #kept.files) -- all still referenced here
    assert.is_true(after < before + 20, before .. " descriptors before, " .. after .. " after")
  end)

  it("raise between runs as well", function()
    assert.matches("smarm%.tcp%.send: the socket belongs to an earlier run",
      error_of(old.client.send, old.client, "x"))
    assert.matches("smarm%.tcp%.accept: the socket belongs to an earlier run",
      error_of(old.server.accept, old.server))
    assert.matches("smarm%.fs%.write: the file belongs to an earlier run",
      error_of(old.file.write, old.file, "x"))
  end)

  it("raise when sent, naming smarm.send (not the socket's own send)", function()
    local errors = smarm.run(function()
      return {
        client = error_of(smarm.send, smarm.self(), { old.client }),
        server = error_of(smarm.spawn_on, 1, function() end, old.server),
        file = error_of(smarm.send, smarm.self(), { old.file }),
      }
    end)
    assert.matches("smarm%.send: the socket belongs to an earlier run", errors.client)
    assert.matches("smarm%.send: the socket belongs to an earlier run", errors.server)
    assert.matches("smarm%.send: the file belongs to an earlier run", errors.file)
  end)

  it("say so when printed", function()
    assert.matches("earlier run", tostring(old.client))
    assert.matches("earlier run", tostring(old.server))
    assert.matches("earlier run", tostring(old.file))
  end)

  it("never write into the sockets a later run opened", function()
    local got = smarm.run(function()
      -- new sockets: descriptors freed by the end of the earlier run are taken again
      local client, conn, server = pair()
      local err = error_of(old.client.send, old.client, "sent on the OLD run's socket\n")
      local err2 = error_of(old.conn.send, old.conn, "sent on the OLD run's peer\n")
      assert(client:send("new\n"))
      assert(conn:send("new too\n"))
      local line, line2 = conn:receive(), client:receive()
      client:close()
      conn:close()
      server:close()
      return { err = err, err2 = err2, line = line, line2 = line2 }
    end)
    assert.matches("belongs to an earlier run", got.err)
    assert.matches("belongs to an earlier run", got.err2)
    assert.are.equal("new", got.line)
    assert.are.equal("new too", got.line2)
  end)

  it("never write into the files a later run opened", function()
    local path2 = dir .. "/g"
    local got = smarm.run(function()
      local f = assert(smarm.fs.open(path2, "w+")) -- likely the earlier file's number
      local err = error_of(old.file.write, old.file, "written through the OLD run's file")
      assert(f:write("new run"))
      local back = f:read(100, 0)
      f:close()
      return { err = err, back = back }
    end)
    assert.matches("belongs to an earlier run", got.err)
    assert.are.equal("new run", got.back)
  end)

  it("cannot be sent in a message", function()
    local errors = smarm.run(function()
      local me = smarm.self()
      return {
        sock = error_of(smarm.send, me, { s = old.client }),
        server = error_of(smarm.send, me, { s = old.server }),
        file = error_of(smarm.send, me, { f = old.file }),
      }
    end)
    assert.matches("the socket belongs to an earlier run", errors.sock)
    assert.matches("the socket belongs to an earlier run", errors.server)
    assert.matches("the file belongs to an earlier run", errors.file)
  end)

  it("close nothing of a later run when collected there", function()
    local got = smarm.run(function()
      local client, conn, server = pair()
      local f = assert(smarm.fs.open(dir .. "/g", "w+"))
      old = nil -- the earlier run's handles become garbage here, in this run
      collectgarbage()
      collectgarbage()
      -- a close posted for them would reach the IO thread before these requests
      assert(client:send("still open\n"))
      local line = conn:receive()
      local wrote = f:write("still open")
      local back = f:read(100, 0)
      local _, port = server:getsockname()
      client:close()
      conn:close()
      server:close()
      f:close()
      return { line = line, wrote = wrote, back = back, port = port }
    end)
    assert.are.equal("still open", got.line)
    assert.are.equal(10, got.wrote)
    assert.are.equal("still open", got.back)
    assert.is_number(got.port)
  end)
end)

describe("handles of the running run", function()
  it("keep working across schedulers when handed over", function()
    -- the guard must not refuse handles that merely moved to another VM of the same run
    local got = smarm.run(function()
      local client, conn, server = pair()
      local me = smarm.self()
      smarm.spawn_on(2, function(owner, c)
        smarm.send(owner, c:receive())
        c:close()
      end, me, conn)
      assert(client:send("across\n"))
      local line = smarm.receive(10)
      client:close()
      server:close()
      return line
    end, { schedulers = 2 })
    assert.are.equal("across", got)
  end)
end)
