-- smarm.fs: files through the IO thread (src/lua/lio.c, src/io/io.c).
local smarm = require("smarm")
local posix = dofile("spec/support/posix.lua") -- no shells: a fork here can hang under qemu
local fd_count = posix.fd_count
local guard = dofile("spec/support/guard.lua")
local HANG = guard.HANG -- seconds: limits that only guard against a hang (spec/support/guard.lua)
local tmpdir = posix.tmpdir

-- Whether libuv's pool has its four threads: the specs that hold a request back behind four
-- blocked FIFO opens need exactly that many.
local function pool_of_four()
  local n = os.getenv("UV_THREADPOOL_SIZE")
  return n == nil or tonumber(n) == 4
end

describe("smarm.fs", function()
  it("writes and reads back files, binary and large", function()
    local dir = tmpdir()
    local ok, small, big_ok = guard.run(function()
      local bin = ("\0\1\2\255 line\n"):rep(100)
      local big = {}
      for i = 1, 100000 do big[i] = string.format("%07d\n", i) end
      big = table.concat(big) -- 800 KB
      assert(smarm.fs.writefile(dir .. "/bin", bin))
      assert(smarm.fs.writefile(dir .. "/big", big))
      assert(smarm.fs.writefile(dir .. "/empty", ""))
      return smarm.fs.readfile(dir .. "/bin") == bin, smarm.fs.readfile(dir .. "/empty"),
        smarm.fs.readfile(dir .. "/big") == big
    end)
    posix.remove_tree(dir)
    assert.is_true(ok)
    assert.are.equal("", small)
    assert.is_true(big_ok)
  end)

  it("writes binaries as the strings they hold", function()
    local dir = tmpdir()
    local r = guard.run(function()
      local bin = smarm.binary(("\0\1 binary\n"):rep(1000))
      assert(smarm.fs.writefile(dir .. "/whole", bin))
      local f = assert(smarm.fs.open(dir .. "/parts", "w"))
      local n = f:write(bin)
      f:write(smarm.binary("tail"))
      f:close()
      return { whole = smarm.fs.readfile(dir .. "/whole") == tostring(bin), n = n,
        parts = smarm.fs.readfile(dir .. "/parts") == tostring(bin) .. "tail" }
    end)
    posix.remove_tree(dir)
    assert.are.same({ whole = true, n = 10000, parts = true }, r)
  end)

  it("returns nil, message, code on failure", function()
    local dir = tmpdir()
    local r = guard.run(function()
      local out = {}
      out.missing = { smarm.fs.readfile(dir .. "/nope") }
      out.nodir = { smarm.fs.writefile(dir .. "/no/such/dir/f", "x") }
      out.stat = { smarm.fs.stat(dir .. "/nope") }
      assert(smarm.fs.mkdir(dir .. "/d"))
      out.exists = { smarm.fs.mkdir(dir .. "/d") }
      assert(smarm.fs.writefile(dir .. "/d/f", "x"))
      out.notempty = { smarm.fs.rmdir(dir .. "/d") }
      out.unlink = { smarm.fs.unlink(dir .. "/nope") }
      out.rename = { smarm.fs.rename(dir .. "/nope", dir .. "/other") }
      -- the source exists: the destination's folder is what is missing
      out.rename_to = { smarm.fs.rename(dir .. "/d/f", dir .. "/nodir/f") }
      out.scandir = { smarm.fs.scandir(dir .. "/nope") }
      out.isdir = { smarm.fs.readfile(dir) }
      return out
    end)
    posix.remove_tree(dir)
    assert.is_nil(r.missing[1])
    assert.matches("nope: no such file or directory", r.missing[2])
    assert.are.equal("ENOENT", r.missing[3])
    assert.are.equal("ENOENT", r.nodir[3])
    assert.are.equal("ENOENT", r.stat[3])
    assert.are.equal("EEXIST", r.exists[3])
    assert.are.equal("ENOTEMPTY", r.notempty[3])
    assert.are.equal("ENOENT", r.unlink[3])
    assert.are.same({ nil, dir .. "/nope -> " .. dir .. "/other: no such file or directory", "ENOENT" },
      r.rename)
    assert.are.same({ nil, dir .. "/d/f -> " .. dir .. "/nodir/f: no such file or directory",
      "ENOENT" }, r.rename_to)
    assert.are.equal("ENOENT", r.scandir[3])
    assert.are.equal("EISDIR", r.isdir[3])
  end)

  it("returns EPIPE for a write to a FIFO whose reader is gone, and the process lives", function()
    local dir = tmpdir()
    posix.mkfifo(dir .. "/fifo")
    local res = guard.run(function()
      local me = smarm.self()
      smarm.spawn(function() smarm.send(me, { smarm.fs.open(dir .. "/fifo", "r") }) end)
      local w = assert(smarm.fs.open(dir .. "/fifo", "w")) -- both opens meet
      local r = guard.receive("the reader's open")[1]
      assert(r:close()) -- the descriptor is closed when close returns
      local out = { w:write("hello") }
      w:close()
      return out
    end)
    posix.remove_tree(dir)
    assert.is_nil(res[1])
    assert.matches("broken pipe", res[2])
    assert.are.equal("EPIPE", res[3])
  end)

  it("stats, renames, lists, removes", function()
    local dir = tmpdir()
    local r = guard.run(function()
      local out = {}
      assert(smarm.fs.writefile(dir .. "/b.txt", "12345"))
      assert(smarm.fs.mkdir(dir .. "/a", tonumber("750", 8)))
      out.file = smarm.fs.stat(dir .. "/b.txt")
      out.dir = smarm.fs.stat(dir .. "/a")
      assert(smarm.fs.rename(dir .. "/b.txt", dir .. "/c.txt"))
      out.list = smarm.fs.scandir(dir)
      assert(smarm.fs.unlink(dir .. "/c.txt"))
      assert(smarm.fs.rmdir(dir .. "/a"))
      out.after = smarm.fs.scandir(dir)
      return out
    end)
    posix.remove_tree(dir)
    assert.are.equal(5, r.file.size)
    assert.are.equal("file", r.file.type)
    assert.is_true(r.file.mtime > 1e9)
    assert.are.equal("directory", r.dir.type)
    assert.are.equal(tonumber("750", 8), r.dir.mode)
    assert.are.same({ { name = "a", type = "directory" }, { name = "c.txt", type = "file" } }, r.list)
    assert.are.same({}, r.after)
  end)

  it("parks only the calling actor", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    local got, ticks = guard.run(function()
      local me = smarm.self()
      -- opening a FIFO blocks until a writer comes: the reader's thread would hang if the read
      -- ran on its scheduler
      smarm.spawn(function() smarm.send(me, { smarm.fs.readfile(fifo) }) end)
      local ticks = 0
      for _ = 1, 50 do smarm.yield(); ticks = ticks + 1 end
      assert(smarm.fs.writefile(fifo, "through the pipe"))
      return guard.receive("the FIFO's contents"), ticks
    end, { schedulers = 1 })
    posix.remove_tree(dir)
    assert.are.equal(50, ticks)
    assert.are.equal("through the pipe", got[1])
  end)

  it("serves many actors on every scheduler at once", function()
    local dir = tmpdir()
    local good = guard.run(function()
      local me = smarm.self()
      local n = 200
      for i = 1, n do
        smarm.spawn_on("any", function(owner, path, k)
          local data = ("%d;"):format(k):rep(k)
          assert(smarm.fs.writefile(path, data))
          smarm.send(owner, smarm.fs.readfile(path) == data)
        end, me, dir .. "/f" .. i, i)
      end
      local good = 0
      for _ = 1, n do if guard.receive("an actor's answer") then good = good + 1 end end
      return good
    end, { schedulers = 2 })
    posix.remove_tree(dir)
    assert.are.equal(200, good)
  end)

  it("lets a runtime end while a request is blocked in flight", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    -- open(2) of a FIFO blocks a pool thread until a writer comes, and none will: the IO thread's
    -- stop interrupts it (io.h), the request completes with nobody to wake, and run returns
    local t0 = os.time()
    local r = guard.run(function()
      smarm.spawn(function() smarm.fs.readfile(fifo) end)
      smarm.yield()
      return "main done"
    end)
    posix.remove_tree(dir)
    assert.are.equal("main done", r)
    assert.is_true(os.time() - t0 < HANG) -- only that it was not waited for without end
    -- and the next runtime's IO works
    assert.are.equal("ENOENT", select(3, guard.run(function() return smarm.fs.readfile(fifo) end)))
  end)

  -- A readfile of a source that never blocks (/dev/zero) was read on after its actor was
  -- killed, until malloc failed: only an EINTR made it look whether to give up, and a read that
  -- always has data returns none. Shown in a smarm of its own, with one scheduler so that its
  -- actors' requests reach libuv's pool in the order they are made: four blocked FIFO opens hold
  -- the pool's four threads, the reader's request waits behind them and is killed there; the
  -- blockers are killed, and the reader's work, run for nobody, must read nothing. The bytes the
  -- process read (/proc/self/io) tell; its data limit keeps a failure small.
  it("stops reading a source that never blocks once its actor is killed", function()
    if not pool_of_four() then return pending("UV_THREADPOOL_SIZE is not 4") end
    local exe = os.getenv("SMARM_EXE")
    if not exe then return pending("SMARM_EXE is not set (./dev.sh test sets it)") end
    local dir = tmpdir()
    posix.mkfifo(dir .. "/fifo")
    local script = io.open(dir .. "/child.lua", "w")
    script:write([=[
      local smarm = require("smarm")
      local ffi = require("ffi")
      local fifo = ...
      ffi.cdef("struct sm_rlimit { unsigned long cur, max; }; "
        .. "int setrlimit(int resource, const struct sm_rlimit *rlim);")
      local function field(file, name)
        local f = io.open(file)
        local n = tonumber(f:read("*a"):match(name .. ":%s*(%d+)"))
        f:close()
        return n
      end
      -- RLIMIT_DATA (2): 256 MiB more than now
      local data = field("/proc/self/status", "VmData") * 1024 + 256 * 1024 * 1024
      ffi.C.setrlimit(2, ffi.new("struct sm_rlimit", data, data))
      local blockers = {}
      for i = 1, 4 do blockers[i] = smarm.spawn(function() smarm.fs.readfile(fifo) end) end
      local reader = smarm.spawn(function() smarm.fs.readfile("/dev/zero") end)
      smarm.yield() -- each has made its request
      local before = field("/proc/self/io", "rchar")
      smarm.kill(reader)
      for i = 1, 4 do smarm.kill(blockers[i]) end
      -- taken from the pool's queue after the reader's work
      for _ = 1, 4 do smarm.fs.readfile("/proc/self/stat") end
      smarm.sleep(0.2)
      print(field("/proc/self/io", "rchar") - before)
    ]=])
    script:close()
    local r = guard.run(function()
      -- ($1: the executable's command line, maybe "qemu-... smarm")
      return smarm.process.run({ "sh", "-c", '$1 -s 1 "$2" "$3"', "sh", exe, dir .. "/child.lua",
        dir .. "/fifo" }, { timeout = HANG })
    end)
    posix.remove_tree(dir)
    assert.are.equal("", r.stderr)
    -- what the process read itself (/proc files), not the megabytes of /dev/zero
    assert.is_true(tonumber(r.stdout) < 65536, r.stdout)
  end)

  -- A standard input that is a socket (what libuv, Node or smarm.process.spawn give a program
  -- as its pipe: a socketpair's end) cannot be opened through /dev/stdin on Linux (ENXIO): the
  -- prompt then read it with a plain read that held its whole scheduler.
  it("opens /dev/stdin (and /dev/fd/N) that is a socket, as a duplicate of the descriptor", function()
    local exe = os.getenv("SMARM_EXE")
    if not exe then return pending("SMARM_EXE is not set (./dev.sh test sets it)") end
    local code = "local smarm = require('smarm'); local f = assert(smarm.fs.open('/dev/stdin', 'r')); "
      .. "local g = assert(smarm.fs.open('/dev/fd/0', 'r')); "
      .. "io.write(f:read('*l'), '|', f:read('*a'), '|', tostring(g:read('*a')), '|', "
      .. "select(3, smarm.fs.open('/dev/fd/999', 'r')), '\\n')"
    local out = guard.run(function()
      local p = assert(smarm.process.spawn({ "sh", "-c", '$1 -s 1 -e "$2"', "sh", exe, code }))
      p.stdin:send("first line\nthe rest\n")
      p.stdin:close()
      local text = p.stdout:receive("*a")
      p:wait()
      return text
    end)
    assert.are.equal("first line|the rest\n||ENOENT\n", out)
  end)

  it("raises on misuse", function()
    local e1, e2, e3 = guard.run(function()
      local _, a = pcall(function() smarm.fs.readfile(nil) end)
      local _, b = pcall(function() smarm.fs.writefile("/tmp/x", {}) end)
      local _, c = pcall(function() smarm.fs.mkdir("/tmp/x", "rwx") end)
      return a, b, c
    end)
    assert.matches("bad argument #1 to 'readfile' %(string expected, got nil%)", e1)
    assert.matches("bad argument #2 to 'writefile' %(string or binary expected, got table%)", e2)
    assert.matches("bad argument #2 to 'mkdir'", e3)
    local ok, e4 = pcall(smarm.fs.readfile, "/etc/hostname")
    assert.is_false(ok)
    assert.matches("smarm.fs.readfile: not inside an actor", e4)
  end)
end)

describe("smarm.fs.open", function()
  it("reads and writes at offsets and at the file's position, and closes", function()
    local dir = tmpdir()
    local r = guard.run(function()
      local out = {}
      local f = assert(smarm.fs.open(dir .. "/data", "w+", tonumber("600", 8)))
      out.w1 = f:write("hello ")
      out.w2 = f:write("world")
      out.at = f:write("W", 6) -- at an offset: the position does not move
      out.r1 = f:read(5, 0)
      out.r2 = f:read(100, 6)
      out.eof = f:read(10, 100)
      out.str = tostring(f)
      assert(f:close())
      out.closed = select(2, pcall(function() f:read(1) end))
      local g = assert(smarm.fs.open(dir .. "/data", "r"))
      out.seq = { g:read(3), g:read(3), g:read(100), g:read(1) }
      g:close()
      local a = assert(smarm.fs.open(dir .. "/data", "a"))
      a:write("!")
      a:close()
      out.all = smarm.fs.readfile(dir .. "/data")
      out.stat = smarm.fs.stat(dir .. "/data")
      out.missing = { smarm.fs.open(dir .. "/nope", "r") }
      out.badflags = select(2, pcall(function() smarm.fs.open(dir .. "/data", "rw") end))
      return out
    end)
    posix.remove_tree(dir)
    assert.are.equal(6, r.w1)
    assert.are.equal(5, r.w2)
    assert.are.equal(1, r.at)
    assert.are.equal("hello", r.r1)
    assert.are.equal("World", r.r2)
    assert.is_nil(r.eof) -- at or past the end: nil, as Lua's io gives
    assert.matches("^fs%.file %(", r.str)
    assert.matches("smarm.fs.read: the file is closed", r.closed)
    assert.are.same({ "hel", "lo ", "World" }, r.seq) -- then nil at the end
    assert.are.equal("hello World!", r.all)
    assert.are.equal(tonumber("600", 8), r.stat.mode)
    assert.is_nil(r.missing[1])
    assert.are.equal("ENOENT", r.missing[3])
    assert.matches("bad argument #2 to 'open'", r.badflags)
  end)

  -- Linux's pwrite appends on a file opened with O_APPEND, whatever the offset: the write was
  -- reported as made at the offset, and its bytes landed at the end.
  it("refuses a write at an offset to a file opened for appending", function()
    local dir = tmpdir()
    local r = guard.run(function()
      local out = {}
      assert(smarm.fs.writefile(dir .. "/data", "0123456789"))
      for _, how in ipairs({ "a", "a+" }) do
        local f = assert(smarm.fs.open(dir .. "/data", how))
        out[how] = { pcall(function() local n = f:write("AB", 0) return n end) } -- no tail call
        out[how .. " at the end"] = f:write("!")
        f:close()
      end
      out.all = smarm.fs.readfile(dir .. "/data")
      return out
    end)
    posix.remove_tree(dir)
    for _, how in ipairs({ "a", "a+" }) do
      assert.is_false(r[how][1])
      assert.matches("bad argument #2 to 'write' %(the file is open for appending %(\"a\" or "
        .. "\"a%+\"%), where a write at an offset would append%)", r[how][2])
      assert.are.equal(1, r[how .. " at the end"])
    end
    assert.are.equal("0123456789!!", r.all) -- nothing written at 0, nor appended
  end)

  -- a FIFO's writer may go on as soon as its reader's close returns (the EPIPE specs rely on it)
  it("closes the descriptor before close returns; a finalizer's close is posted", function()
    local dir = tmpdir()
    local r = guard.run(function()
      local out = {}
      local f = assert(smarm.fs.open(dir .. "/a", "w"))
      out.open = posix.fd_list():find(dir .. "/a", 1, true) ~= nil
      out.close = { f:close() }
      out.after = posix.fd_list():find(dir .. "/a", 1, true) ~= nil
      local g = assert(smarm.fs.open(dir .. "/b", "w"))
      local proxy = newproxy(true) -- a finalizer cannot park: its close is posted
      getmetatable(proxy).__gc = function() out.gc = { g:close() } end
      proxy = nil -- luacheck: no unused
      collectgarbage()
      collectgarbage()
      out.gone = guard.wait(function() return not posix.fd_list():find(dir .. "/b", 1, true) end,
        "the posted close", 0.01)
      return out
    end)
    posix.remove_tree(dir)
    assert.is_true(r.open)
    assert.are.same({ true }, r.close)
    assert.is_false(r.after)
    assert.are.same({ true }, r.gc)
    assert.is_true(r.gone)
  end)

  it("shows a half-written file as far as it is written", function()
    local dir = tmpdir()
    local r = guard.run(function()
      local me = smarm.self()
      local path = dir .. "/half"
      local w = assert(smarm.fs.open(path, "w"))
      assert(w:write(("a"):rep(4096)))
      smarm.spawn_on(2, function(owner, p) -- another scheduler reads it meanwhile
        smarm.send(owner, { smarm.fs.stat(p).size, #smarm.fs.readfile(p) })
      end, me, path)
      local half = guard.receive("the other scheduler's view")
      assert(w:write(("b"):rep(4096)))
      assert(w:close())
      local whole = smarm.fs.readfile(path)
      return { half = half, size = #whole, tail = whole:sub(-1) }
    end, { schedulers = 2 })
    posix.remove_tree(dir)
    assert.are.same({ 4096, 4096 }, r.half)
    assert.are.equal(8192, r.size)
    assert.are.equal("b", r.tail)
  end)

  it("closes a collected file, and defers a close while another actor reads", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    local before = fd_count()
    local r = guard.run(function()
      local me = smarm.self()
      -- a reader parks in read on a FIFO (opened read-write so the open does not block)
      local f = assert(smarm.fs.open(fifo, "r+"))
      smarm.spawn(function() smarm.send(me, { f:read(5) }) end)
      smarm.yield()
      assert(f:close()) -- waits for the read in flight before the descriptor goes
      local after = select(2, pcall(function() f:read(1) end))
      assert(smarm.fs.writefile(fifo, "12345"))
      local got = guard.receive("the reader's bytes")
      for i = 1, 50 do -- opened and dropped without close
        assert(smarm.fs.open(dir .. "/other" .. i, "w"))
      end
      collectgarbage()
      collectgarbage()
      -- the posted closes run on the pool: wait until they have
      local open = guard.wait(function() local n = fd_count(); return n <= before + 8 and n end,
        "closes of collected files", 0.01)
      return { got = got, after = after, open = open }
    end)
    posix.remove_tree(dir)
    assert.is_true(r.open <= before + 8, before .. " descriptors before, " .. r.open .. " with 50 dropped")
    assert.are.same({ "12345" }, r.got)
    assert.matches("the file is closed", r.after)
  end)
end)

-- Waits until actor pid is parked in `what` ("io:file.read"), as smarm.info says.
local function parked(pid, what)
  guard.wait(function()
    local i = smarm.info(pid)
    return i and i.waiting == what
  end, "an actor parked in " .. what)
end

-- Holds libuv's pool of four (pool_of_four) with four blocked opens of a FIFO made in dir, so
-- that a request made next waits in the pool's queue; returns what lets them go (kills them
-- and waits for their ends). It returns once the four have made their requests: a caller
-- switched out before its own request (preempted, on a slow machine) then still comes after
-- them. So every request that must not wait (opening the file to read) is made before it.
local function hold_pool(dir)
  posix.mkfifo(dir .. "/fifo")
  local blockers = {}
  for i = 1, 4 do blockers[i] = smarm.spawn(function() smarm.fs.readfile(dir .. "/fifo") end) end
  for i = 1, 4 do parked(blockers[i], "io:fs.readfile") end
  return function()
    for i = 1, 4 do smarm.kill(blockers[i]) end
    for i = 1, 4 do guard.ended(blockers[i]) end
  end
end

describe("a file closed by another actor", function()
  -- What a read or write by pattern that takes several trips has done is not lost when another
  -- actor closes the file under it: it finishes on its own duplicate of the descriptor.

  it("lets a read of everything in flight finish", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    local before = fd_count()
    local r = guard.run(function()
      local me = smarm.self()
      local writer = smarm.spawn(function()
        local w = assert(smarm.fs.open(fifo, "w")) -- waits for the reading end
        for _ = 1, 2 do w:write(smarm.receive()) end
        w:close()
      end)
      local f = assert(smarm.fs.open(fifo, "r"))
      local reader = smarm.spawn(function() smarm.send(me, { pcall(f.read, f, "*a") }) end)
      parked(reader, "io:file.read")
      local scheduled = smarm.info(reader).scheduled
      smarm.send(writer, "first,")
      guard.wait(function() -- it took the first part, and waits in its next trip
        local i = smarm.info(reader)
        return i.scheduled > scheduled and i.waiting == "io:file.read"
      end, "the reader's second trip")
      local closed = f:close()
      smarm.send(writer, "second")
      return { closed = closed, got = guard.receive("the reader's answer") }
    end)
    posix.remove_tree(dir)
    assert.are.same({ closed = true, got = { true, "first,second" } }, r)
    assert.are.equal(before, fd_count())
  end)

  it("lets a write with a time limit in flight finish", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    local before = fd_count()
    local big = ("x"):rep(256 * 1024) -- more than a pipe holds: the write waits for room
    local r = guard.run(function()
      local me = smarm.self()
      local reader = smarm.spawn(function()
        local g = assert(smarm.fs.open(fifo, "r"))
        smarm.receive() -- told to read
        smarm.send(me, #g:read("*a"))
        g:close()
      end)
      local f = assert(smarm.fs.open(fifo, "w"))
      f:settimeout(HANG)
      local writer = smarm.spawn(function() smarm.send(me, { pcall(f.write, f, big) }) end)
      parked(writer, "io:file.write")
      local closed = f:close()
      smarm.send(reader, "read")
      local wrote = guard.receive("the writer's answer")
      return { closed = closed, wrote = wrote, read = guard.receive("the reader's count") }
    end)
    posix.remove_tree(dir)
    assert.are.same({ closed = true, wrote = { true, #big }, read = #big }, r)
    assert.are.equal(before, fd_count())
  end)
end)

describe("a write with a time limit whose actor is killed", function()
  -- Such a write holds a duplicate of the descriptor for all its trips; a kill while it waits
  -- closes it at once (not at the dead actor's collection): the FIFO's reader sees the end.
  it("lets the reader see the end at once", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    local before = fd_count()
    local r = guard.run(function()
      local me = smarm.self()
      local writer = smarm.spawn(function()
        local w = assert(smarm.fs.open(fifo, "w"))
        w:settimeout(HANG)
        smarm.send(me, "opened")
        w:write(("x"):rep(256 * 1024)) -- more than a pipe holds: it waits for room
      end)
      local g = assert(smarm.fs.open(fifo, "r"))
      guard.receive("the writer's open")
      parked(writer, "io:file.write")
      smarm.kill(writer)
      g:settimeout(HANG) -- a hang guard: the end comes at once, no writer holds the FIFO
      local got, err = g:read("*a")
      g:close()
      return { got = got and #got or err }
    end)
    posix.remove_tree(dir)
    assert.is_true(r.got > 0 and r.got < 256 * 1024, tostring(r.got))
    assert.are.equal(before, fd_count())
  end)
end)

describe("reading files as Lua's io does", function()
  -- A read at the position ran read(2) on a duplicate of the descriptor, which moved the shared
  -- position in the pool: an actor killed while parked in it dropped its bytes, and the actor
  -- it shared the file with (spawn's upvalues) read on 64 KiB further. Four blocked FIFO opens
  -- hold libuv's four pool threads, so the reader's read is still queued when it is killed;
  -- it runs for nobody once they are freed, and the owner must still get the first line.
  it("keeps the place of a reader killed while its read of a regular file waited", function()
    if not pool_of_four() then return pending("UV_THREADPOOL_SIZE is not 4") end
    local dir = tmpdir()
    local lines = {}
    for i = 1, 20000 do lines[i] = ("line%07d"):format(i) end
    local r = guard.run(function()
      assert(smarm.fs.writefile(dir .. "/lines", table.concat(lines, "\n") .. "\n"))
      local f = assert(smarm.fs.open(dir .. "/lines", "r"))
      local let_go = hold_pool(dir)
      local got
      local reader = smarm.spawn(function() got = f:read("*l") end)
      parked(reader, "io:file.read")
      smarm.kill(reader)
      let_go()
      -- the reader's read, queued first, runs now; this only makes it likely to have run before
      -- the owner's (so that the old fault shows), nothing waits on it
      smarm.sleep(0.05)
      local out = { got = got, first = f:read("*l"), second = f:read("*l") }
      f:close()
      return out
    end)
    posix.remove_tree(dir)
    assert.is_nil(r.got)
    assert.are.equal("line0000001", r.first)
    assert.are.equal("line0000002", r.second)
  end)

  -- A read at the position of a file that can seek moves the position past its bytes only when
  -- it returns (pread): a write at the position meanwhile landed inside what it read, and the
  -- read's move undid the write's ("abcdefgh" became "XYcdZfgh" under a reader of 4 bytes).
  -- Refused, as a seek is. The reader is held back as above (a write at an offset, which is
  -- not refused, would wait behind the held pool too).
  it("refuses a write at the position while another actor's read of a regular file waits", function()
    if not pool_of_four() then return pending("UV_THREADPOOL_SIZE is not 4") end
    local dir = tmpdir()
    local r = guard.run(function()
      assert(smarm.fs.writefile(dir .. "/data", "abcdefgh"))
      local f = assert(smarm.fs.open(dir .. "/data", "r+"))
      local let_go = hold_pool(dir)
      local got
      local reader = smarm.spawn(function() got = f:read(4) end)
      parked(reader, "io:file.read")
      local out = { refused = { pcall(f.write, f, "XY") } }
      let_go()
      guard.ended(reader)
      out.got = got
      out.after = f:write("XY") -- at the position: after the 4 bytes read
      f:close()
      out.file = smarm.fs.readfile(dir .. "/data")
      return out
    end)
    posix.remove_tree(dir)
    assert.is_false(r.refused[1])
    assert.matches("smarm.fs.write: another actor is reading this file", r.refused[2], 1, true)
    assert.are.equal("abcd", r.got)
    assert.are.equal(2, r.after)
    assert.are.equal("abcdXYgh", r.file)
  end)

  it("reads lines, everything and counts, at the file's position, and seeks", function()
    local dir = tmpdir()
    local r = guard.run(function()
      local path = dir .. "/lines"
      assert(smarm.fs.writefile(path, "one\ntwo\r\n\nthree"))
      local f = assert(smarm.fs.open(path, "r"))
      local out = {}
      out.seq = { f:read("*l"), f:read("*L"), f:read("l"), f:read(2), f:read(0), f:read("*a") }
      out.at_end = { f:read("*l"), f:read(1), f:read(0), f:read("*a"), f:read() }
      out.seek = { f:seek("set"), f:read(3), f:seek(), f:seek("end"), f:seek("cur", -2),
                   f:read("a") }
      out.bad_seek = { f:seek("set", -5) }
      f:seek("set", 0)
      out.lines = {}
      for line in f:lines() do out.lines[#out.lines + 1] = line end
      out.open_after = tostring(f) ~= "fs.file (closed)"
      f:seek("set", 0)
      out.chunks = {}
      for chunk in f:lines(5) do out.chunks[#out.chunks + 1] = chunk end
      out.pread_after = f:read(3, 4) -- at an offset: no read-ahead, no position involved
      out.misuse = {
        select(2, pcall(f.read, f, "*x")),
        select(2, pcall(f.read, f, "*l", 3)),
        select(2, pcall(f.seek, f, "middle")),
        select(2, pcall(f.lines, f, "x")),
        select(2, pcall(f.read, f, 3, 1.5)),
        select(2, pcall(f.read, f, 3, -1)),
        select(2, pcall(f.write, f, "x", -1)), -- not taken for "at the position"
        select(2, pcall(f.write, f, "x", 0.5)),
      }
      f:close()
      out.closed = select(2, pcall(f.lines, f))
      -- a write at the position goes where the reader had got to, not where it read ahead to
      local g = assert(smarm.fs.open(path, "r+"))
      out.rw = { g:read("*l"), g:write("T"), g:seek(), g:read("*a") }
      g:close()
      out.whole = smarm.fs.readfile(path)
      out.fs_lines = {}
      for line in smarm.fs.lines(path) do out.fs_lines[#out.fs_lines + 1] = line end
      out.fs_lines_keep = {}
      for line in smarm.fs.lines(path, "*L") do out.fs_lines_keep[#out.fs_lines_keep + 1] = line end
      out.missing = select(2, pcall(smarm.fs.lines, dir .. "/nope"))
      return out
    end)
    posix.remove_tree(dir)
    assert.are.same({ "one", "two\r\n", "", "th", "", "ree" }, r.seq)
    assert.are.same({ nil, nil, nil, "" }, { r.at_end[1], r.at_end[2], r.at_end[3], r.at_end[4] })
    assert.is_nil(r.at_end[5])
    assert.are.same({ 0, "one", 3, 15, 13, "ee" }, r.seek)
    assert.is_nil(r.bad_seek[1])
    assert.are.equal("EINVAL", r.bad_seek[3])
    assert.are.same({ "one", "two\r", "", "three" }, r.lines)
    assert.is_true(r.open_after)
    assert.are.same({ "one\nt", "wo\r\n\n", "three" }, r.chunks)
    assert.are.equal("two", r.pread_after)
    assert.matches("\"%*l\", \"%*L\", \"%*a\" or a byte count expected", r.misuse[1])
    assert.matches("an offset goes with a byte count", r.misuse[2])
    assert.matches("invalid option 'middle'", r.misuse[3])
    assert.matches("\"%*l\", \"%*L\", \"%*a\" or a byte count expected", r.misuse[4])
    for i = 5, 8 do
      assert.matches("bad argument #3 to '.-' %(offset of at least 0 expected, a whole number "
        .. "of bytes%)", r.misuse[i])
    end
    assert.matches("smarm.fs.lines: the file is closed", r.closed)
    assert.are.same({ "one", 1, 5, "wo\r\n\nthree" }, r.rw)
    assert.are.equal("one\nTwo\r\n\nthree", r.whole)
    assert.are.same({ "one", "Two\r", "", "three" }, r.fs_lines)
    assert.are.same({ "one\n", "Two\r\n", "\n", "three" }, r.fs_lines_keep)
    assert.matches("smarm.fs.lines: .*/nope: no such file or directory", r.missing)
  end)

  it("reads a FIFO line by line as its writer writes, and hands read-ahead back", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    local r = guard.run(function()
      local me = smarm.self()
      local writer = smarm.spawn_on(2, function()
        local w = assert(smarm.fs.open(fifo, "w"))
        for i = 1, 3 do
          w:write("line " .. i .. "\n")
          assert(smarm.receive(120) == "next") -- one line at a time: the reader waits for each
        end
        w:close()
      end)
      local f = assert(smarm.fs.open(fifo, "r"))
      local got = {}
      for line in f:lines() do
        got[#got + 1] = line
        smarm.send(writer, "next")
      end
      f:close()
      -- a file handed over after reading ahead: the receiver reads on from the sender's line
      local path = dir .. "/handed"
      assert(smarm.fs.writefile(path, "first\nsecond\nthird\n"))
      local h = assert(smarm.fs.open(path, "r"))
      local first = h:read()
      local reader = smarm.spawn_on(2, function(owner)
        local m = smarm.receive()
        smarm.send(owner, { m.file:read(), m.file:read() })
        m.file:close()
      end, me)
      smarm.send(reader, { file = h })
      local rest = guard.receive("the new owner's lines", function(m) return type(m) == "table" end)
      return { got = got, first = first, rest = rest }
    end, { schedulers = 2 })
    posix.remove_tree(dir)
    assert.are.same({ "line 1", "line 2", "line 3" }, r.got)
    assert.are.equal("first", r.first)
    assert.are.same({ "second", "third" }, r.rest)
  end)

  -- issue 15, item 6: a read that waits for data can be given a time limit, and what it took
  -- before the limit passed stays for the next read
  it("times out a read that waits for data, keeping what it had read", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    local r = guard.run(function()
      local writer = smarm.spawn(function()
        local w = assert(smarm.fs.open(fifo, "w"))
        assert(smarm.receive(HANG) == "part")
        w:write("par")
        assert(smarm.receive(HANG) == "rest")
        w:write("tial\nnext\n")
        assert(smarm.receive(HANG) == "end")
        w:close()
      end)
      local f = assert(smarm.fs.open(fifo, "r"))
      local out = { set = f:settimeout(0.01) }
      out.nothing = { f:read("*l") } -- nothing written yet
      smarm.send(writer, "part")
      -- a read that took "par" and then waited for the end of the line
      guard.wait(function()
        local got = { f:read("*l") }
        return got[2] == "timeout" and f:read(0) == "" -- "par" is held: a count of 0 sees it
      end, "the first half")
      smarm.send(writer, "rest")
      f:settimeout(nil) -- no limit again
      out.line = f:read("*l")
      out.next = f:read("*l")
      f:settimeout(0)
      out.zero = { f:read("*l") } -- a limit of 0: only what is there now
      smarm.send(writer, "end")
      f:settimeout(HANG)
      out.eof = { f:read("*l") } -- the writer's end ends the wait
      f:close()
      -- a regular file never waits: its reads go on as without a limit
      local path = dir .. "/plain"
      assert(smarm.fs.writefile(path, "a\nb\n"))
      local g = assert(smarm.fs.open(path, "r"))
      g:settimeout(0)
      out.plain = { g:read("*l"), g:read("*l"), g:read("*l") }
      g:close()
      out.closed = select(2, pcall(g.settimeout, g, 1))
      out.bad = select(2, pcall(function() assert(smarm.fs.open(path, "r")):settimeout("soon") end))
      return out
    end)
    posix.remove_tree(dir)
    assert.is_true(r.set)
    assert.are.same({ nil, "timeout" }, r.nothing)
    assert.are.equal("partial", r.line)
    assert.are.equal("next", r.next)
    assert.are.same({ nil, "timeout" }, r.zero)
    assert.are.same({}, r.eof)
    assert.are.same({ "a", "b" }, r.plain)
    assert.matches("smarm.fs.settimeout: the file is closed", r.closed, 1, true)
    assert.matches("number of seconds or nil expected, got string", r.bad, 1, true)
  end)

  -- a limit of 0 (or the little left of one) does what it can without waiting: the data already
  -- in a FIFO is read and the room in it written, never a "timeout" that depends on the IO
  -- thread's speed
  it("reads what is there and writes what fits with a limit of 0", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    local r = guard.run(function()
      local me = smarm.self()
      local writer = smarm.spawn(function()
        local w = assert(smarm.fs.open(fifo, "w"))
        w:settimeout(0)
        while smarm.receive(HANG) == "go" do
          smarm.send(me, { w:write("line\n") }) -- the FIFO has room: all of it, at once
        end
        w:close()
      end)
      local f = assert(smarm.fs.open(fifo, "r"))
      f:settimeout(0)
      local out = { writes = {}, reads = {} }
      for i = 1, 50 do
        smarm.send(writer, "go")
        out.writes[i] = guard.receive("a write", function(m) return type(m) == "table" end)
        out.reads[i] = { f:read("*l") } -- the line is in the FIFO now
        if out.writes[i][1] ~= 5 or out.reads[i][1] ~= "line" then break end
      end
      smarm.send(writer, "stop")
      f:close()
      return out
    end)
    posix.remove_tree(dir)
    assert.are.equal(50, #r.reads)
    for i = 1, 50 do
      assert.are.same({ 5 }, r.writes[i])
      assert.are.same({ "line" }, r.reads[i])
    end
  end)

  it("times out a write that waits for room, saying how much it wrote", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    local r = guard.run(function()
      local me = smarm.self()
      local reader = smarm.spawn(function()
        local f = assert(smarm.fs.open(fifo, "r"))
        assert(smarm.receive(HANG) == "read") -- nothing read until then: the FIFO fills
        local got = {}
        while true do
          local data = f:read(65536)
          if not data then break end
          got[#got + 1] = data
        end
        smarm.send(me, { table.concat(got) })
      end)
      local w = assert(smarm.fs.open(fifo, "w"))
      w:settimeout(0.05)
      local first = { w:write(("a"):rep(1000000)) } -- more than a FIFO holds
      smarm.send(reader, "read")
      w:settimeout(HANG)
      local second = w:write("end")
      w:close()
      local got = guard.receive("the reader's bytes", function(m) return type(m) == "table" end)[1]
      return { first = first, second = second, got = got }
    end)
    posix.remove_tree(dir)
    assert.is_nil(r.first[1])
    assert.are.equal("timeout", r.first[2])
    local n = r.first[3]
    assert.is_true(n > 0 and n < 1000000, tostring(n))
    assert.are.equal(3, r.second)
    assert.are.equal(("a"):rep(n) .. "end", r.got) -- exactly what the writes said they wrote
  end)

  -- a write with a time limit to a FIFO whose reader is gone says EPIPE, as one without does
  -- (libuv's poll answers EBADF for the pipe's POLLERR: the write must say what happened)
  it("says EPIPE for a write with a time limit to a FIFO whose reader is gone", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    local r = guard.run(function()
      local me = smarm.self()
      smarm.spawn(function()
        assert(smarm.fs.open(fifo, "r")):close()
        smarm.send(me, "closed")
      end)
      local w = assert(smarm.fs.open(fifo, "w"))
      guard.receive("the reader's close", function(m) return m == "closed" end)
      w:settimeout(HANG)
      local out = { w:write("x") }
      w:close()
      return out
    end)
    posix.remove_tree(dir)
    assert.is_nil(r[1])
    assert.are.equal("EPIPE", r[3])
  end)

  it("watches a folder: its changes arrive as messages until the watch is closed", function()
    local dir, other = tmpdir(), tmpdir()
    local r = guard.run(function()
      local out = {}
      local w = assert(smarm.fs.watch(dir))
      out.text = tostring(w)
      local function event_of(watch, name, kind)
        return guard.receive(name .. " " .. kind, function(m)
          return type(m) == "table" and m.smarm == "fs_event" and m.watch == watch and m.name == name
            and m[kind] == true
        end)
      end
      assert(smarm.fs.writefile(dir .. "/a", "one"))
      local made = event_of(w, "a", "rename") -- made: a rename in libuv's (inotify's) terms
      out.path = made.path
      local f = assert(smarm.fs.open(dir .. "/a", "a"))
      f:write("two")
      f:close()
      out.changed = event_of(w, "a", "change").change
      assert(w:close())
      out.closed = tostring(w)
      -- a watch started after the close went through the IO thread after it: from here on
      -- nothing of w's can come
      local w2 = assert(smarm.fs.watch(other))
      assert(smarm.fs.writefile(dir .. "/b", "x"))
      assert(smarm.fs.writefile(other .. "/c", "x"))
      event_of(w2, "c", "rename")
      out.after_close = smarm.receive(function(m) return type(m) == "table" and m.name == "b" end, 0)
      out.missing = { smarm.fs.watch(dir .. "/nothing-here") }
      out.send = select(2, pcall(smarm.send, smarm.self(), w2))
      _G.kept_watch = w2
      return out
    end)
    local stale = select(2, pcall(_G.kept_watch.close, _G.kept_watch))
    _G.kept_watch = nil
    posix.remove_tree(dir)
    posix.remove_tree(other)
    assert.matches("^smarm%.fs%.watch %(.*, watching%)$", r.text)
    assert.are.equal(dir, r.path)
    assert.is_true(r.changed)
    assert.matches("closed%)$", r.closed)
    assert.is_nil(r.after_close)
    assert.is_nil(r.missing[1])
    assert.matches("nothing%-here: no such file or directory", r.missing[2])
    assert.are.equal("ENOENT", r.missing[3])
    assert.matches("userdata", r.send)
    assert.matches("smarm.fs.watch.close: the watch belongs to an earlier run", stale, 1, true)
  end)

  -- docs/api.md: after w:close(), the events already sent may still arrive; they are w's
  -- events, with watch = w and its path, so that a receive that picks w's events still can
  it("delivers a closed watch's events sent before the close as its own", function()
    local dir, other = tmpdir(), tmpdir()
    local r = guard.run(function()
      local w = assert(smarm.fs.watch(dir))
      -- another actor's watch of the same folder, started after w: libuv gives each change to
      -- w first, so once that actor has its event, w's is in this mailbox (nothing here looks
      -- at the mailbox until w is closed: a look decodes a message)
      local helper = smarm.spawn(function()
        local w2 = assert(smarm.fs.watch(dir))
        assert(smarm.fs.writefile(other .. "/ready", ""))
        guard.receive("x", function(m) return type(m) == "table" and m.watch == w2 and m.name == "x" end)
        w2:close()
      end)
      guard.wait(function() return smarm.fs.stat(other .. "/ready") end, "the helper's watch")
      assert(smarm.fs.writefile(dir .. "/x", "1"))
      guard.ended(helper, "the helper")
      assert(w:close())
      local m = smarm.receive(function(m)
        return type(m) == "table" and m.smarm == "fs_event" and m.name == "x"
      end, 0)
      return { is_w = m and m.watch == w, path = m and m.path }
    end)
    posix.remove_tree(dir)
    posix.remove_tree(other)
    assert.is_true(r.is_w)
    assert.are.equal(dir, r.path)
  end)

  it("refuses to hand over a FIFO whose read-ahead cannot be put back", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    local r = guard.run(function()
      local f = assert(smarm.fs.open(fifo, "r+"))
      local w = assert(smarm.fs.open(fifo, "w"))
      w:write("first\nsecond\n")
      local out = { first = f:read() }
      local receiver = smarm.spawn(function() smarm.receive() end)
      out.send = select(2, pcall(smarm.send, receiver, { file = f }))
      out.second = f:read() -- still the sender's, nothing lost
      smarm.kill(receiver)
      w:close()
      f:close()
      return out
    end)
    posix.remove_tree(dir)
    assert.are.equal("first", r.first)
    assert.matches("smarm.send: the file holds bytes read ahead that cannot be handed over", r.send,
      1, true)
    assert.are.equal("second", r.second)
  end)

  it("refuses a second reader at the position while one waits, and allows it after", function()
    local dir = tmpdir()
    local fifo = dir .. "/fifo"
    posix.mkfifo(fifo)
    local r = guard.run(function()
      local me = smarm.self()
      local f = assert(smarm.fs.open(fifo, "r+")) -- r+: opening does not wait for a writer
      local waiting = smarm.spawn(function() smarm.send(me, { f:read() }) end)
      parked(waiting, "io:file.read") -- the first reader
      local out = {}
      out.second = select(2, pcall(f.read, f))
      out.send = select(2, pcall(smarm.send, me, { file = f }))
      out.seek = select(2, pcall(f.seek, f))
      local w = assert(smarm.fs.open(fifo, "w"))
      w:write("for the first\nthen the second\n")
      out.first = guard.receive("the first reader's line")[1]
      out.after = f:read()
      w:close()
      f:close()
      return out
    end)
    posix.remove_tree(dir)
    assert.matches("smarm.fs.read: another actor is reading this file", r.second, 1, true)
    assert.matches("smarm.send: the file is in use by another actor", r.send, 1, true)
    assert.matches("smarm.fs.seek: another actor is reading this file", r.seek, 1, true)
    assert.are.equal("for the first", r.first)
    assert.are.equal("then the second", r.after)
  end)
end)

describe("files in messages", function()
  it("hand an open file to an actor on another scheduler; a lost one is closed", function()
    local dir = tmpdir()
    local before = fd_count()
    local r = guard.run(function()
      local me = smarm.self()
      assert(smarm.fs.writefile(dir .. "/f", "shared bytes"))
      local f = assert(smarm.fs.open(dir .. "/f", "r"))
      local reader = smarm.spawn_on(2, function(owner)
        local m = smarm.receive()
        smarm.send(owner, { m.file:read(6, 7), tostring(m.file) })
        m.file:close()
      end, me)
      smarm.send(reader, { file = f })
      local got = guard.receive("the reader's answer")
      local old = select(2, pcall(function() f:read(1) end))
      -- to an actor that has ended: the file is closed for it
      local gone = smarm.spawn_on(2, function() end)
      guard.ended(gone)
      for _ = 1, 20 do
        smarm.send(gone, { file = assert(smarm.fs.open(dir .. "/f", "r")) })
      end
      -- dropped on scheduler 2, their closes posted: wait until they have run
      local open = guard.wait(function() local n = fd_count(); return n <= before + 8 and n end,
        "closes of files sent to an actor that is gone", 0.01)
      return { got = got, old = old, open = open }
    end, { schedulers = 2 })
    posix.remove_tree(dir)
    assert.are.equal("bytes", r.got[1])
    assert.matches("^fs%.file", r.got[2])
    assert.matches("the file was handed to another actor", r.old)
    assert.is_true(r.open <= before + 8, before .. " descriptors before, " .. r.open .. " after")
  end)
end)
