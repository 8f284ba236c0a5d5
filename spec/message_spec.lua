-- smarm.send and smarm.receive: copying, order, timeouts, selective receive, bad input.
local smarm = require("smarm")
local script = dofile("spec/support/script.lua")
local guard = dofile("spec/support/guard.lua")

-- Runs body in the main actor with an echo actor whose pid it gets; the echo answers every
-- message with {from = its pid, msg = the message} until it receives "stop".
local function with_echo(body)
  return smarm.run(function()
    local echo = smarm.spawn(function(owner)
      while true do
        local m = smarm.receive()
        if m == "stop" then return end
        smarm.send(owner, { from = smarm.self(), msg = m })
      end
    end, smarm.self())
    local results = { body(echo) }
    smarm.send(echo, "stop")
    return unpack(results)
  end)
end

-- An actor that sends every message back to owner until it receives "stop".
local function echo_back(owner)
  while true do
    local m = smarm.receive()
    if m == "stop" then return end
    smarm.send(owner, m)
  end
end

describe("smarm.send / smarm.receive", function()
  it("carries booleans, numbers, strings, pids and nested tables", function()
    local got = with_echo(function(echo)
      local me = smarm.self()
      smarm.send(echo, { true, false, 42, -0.5, 1e300, "text", "", me, { deep = { deeper = "x" } },
        s = ("\0binary\255"):rep(3) })
      return smarm.receive().msg
    end)
    assert.are.same(true, got[1])
    assert.are.same(false, got[2])
    assert.are.equal(42, got[3])
    assert.are.equal(-0.5, got[4])
    assert.are.equal(1e300, got[5])
    assert.are.equal("text", got[6])
    assert.are.equal("", got[7])
    assert.is_true(smarm.is_pid(got[8]))
    assert.are.equal("x", got[9].deep.deeper)
    assert.are.equal(("\0binary\255"):rep(3), got.s)
  end)

  it("copies: changing a sent table changes nothing at the receiver", function()
    local got = smarm.run(function()
      local box = {}
      local p = smarm.spawn(function()
        local m = smarm.receive()
        smarm.yield()
        box.value = m.n
      end)
      local t = { n = 1 }
      smarm.send(p, t)
      t.n = 2
      smarm.yield()
      smarm.yield()
      return box.value
    end)
    assert.are.equal(1, got)
  end)

  it("keeps shared references and cycles", function()
    local ok_shared, ok_cycle = with_echo(function(echo)
      local shared = { v = 1 }
      local t = { a = shared, b = shared }
      t.self = t
      smarm.send(echo, t)
      local r = smarm.receive().msg
      return r.a == r.b and r.a.v == 1, r.self == r
    end)
    assert.is_true(ok_shared)
    assert.is_true(ok_cycle)
  end)

  -- The encoder remembers its first 16 tables in a C array and the rest in a Lua table: shared
  -- references into both, and from both, must come back as one table each.
  it("keeps shared references among many tables", function()
    local ok = with_echo(function(echo)
      local list = {}
      for i = 1, 40 do list[i] = { i = i } end
      for i = 1, 40 do list[i].next = list[i % 40 + 1]; list[i].first = list[1] end
      local t = { list = list, again = list[30], early = list[3] }
      smarm.send(echo, t)
      local r = smarm.receive().msg
      local same = r.again == r.list[30] and r.early == r.list[3]
      for i = 1, 40 do
        local x = r.list[i]
        same = same and x.i == i and x.next == r.list[i % 40 + 1] and x.first == r.list[1]
      end
      return same
    end)
    assert.is_true(ok)
  end)

  it("keeps pids equal to the receiver's own pids", function()
    local same = with_echo(function(echo)
      smarm.send(echo, { who = echo })
      local r = smarm.receive()
      return r.msg.who == r.from and r.from == echo
    end)
    assert.is_true(same)
  end)

  it("delivers in order per sender", function()
    local ordered = smarm.run(function()
      local me = smarm.self()
      smarm.spawn(function() for i = 1, 1000 do smarm.send(me, i) end end)
      for i = 1, 1000 do
        if smarm.receive() ~= i then return false end
      end
      return true
    end)
    assert.is_true(ordered)
  end)

  it("drops a message to a dead actor", function()
    local ok = smarm.run(function()
      local p = smarm.spawn(function() end)
      smarm.yield()
      smarm.send(p, "anyone?")
      return true
    end)
    assert.is_true(ok)
  end)

  it("names where an unsendable value is", function()
    local e1, e2, e3, e4, e5 = smarm.run(function()
      local me = smarm.self()
      local function err(v)
        local ok, e = pcall(smarm.send, me, v)
        assert(not ok)
        return e
      end
      local co = coroutine.create(print)
      return err({ handler = co }), err({ items = { 1, 2, co } }),
        err(co), err({ [co] = 1 }), err({ handler = string.gmatch("", "") })
    end)
    assert.matches("message%.handler is a thread", e1)
    assert.matches("message%.items%[3%] is a thread", e2)
    assert.matches("message is a thread", e3)
    assert.matches("message has a key that is a thread", e4)
    assert.matches("message%.handler is a C function that no loaded module holds", e5)
  end)

  it("names the path through nested tables and odd keys", function()
    local e1, e2 = smarm.run(function()
      local me = smarm.self()
      local function err(v)
        local ok, e = pcall(smarm.send, me, v)
        assert(not ok)
        return e
      end
      return err({ a = { ["odd key"] = { 1, { b = { [coroutine.create(print)] = true } } } } }),
        err({ list = { { ok = 1 }, { ok = 2, bad = { deeper = newproxy() } } } })
    end)
    assert.matches('message%.a%["odd key"%]%[2%]%.b has a key that is a thread', e1)
    assert.matches("message%.list%[2%]%.bad%.deeper is a userdata", e2)
  end)

  it("carries large strings and tables whole, locally and across schedulers", function()
    local ok = smarm.run(function()
      local me = smarm.self()
      local big = {}
      for i = 1, 3000 do big[i] = i * 2 end
      for i = 1, 500 do big["k" .. i] = ("v"):rep(i % 7) end
      local payloads = { ("x"):rep(65536), ("\0y"):rep(600000), { data = ("z"):rep(200000) }, big }
      for _, where in ipairs({ 1, 2 }) do
        local peer = smarm.spawn_on(where, echo_back, me)
        for _, p in ipairs(payloads) do
          smarm.send(peer, p)
          local got = smarm.receive()
          if type(p) == "string" then
            assert(got == p, "string of " .. #p .. " bytes changed")
          elseif p.data then
            assert(got.data == p.data, "table with a long string changed")
          else
            for i = 1, 3000 do assert(got[i] == i * 2, "array part changed at " .. i) end
            for i = 1, 500 do assert(got["k" .. i] == ("v"):rep(i % 7), "hash part changed") end
            assert(#got == 3000, "length " .. #got)
          end
        end
        smarm.send(peer, "stop")
      end
      return true
    end, { schedulers = 2 })
    assert.is_true(ok)
  end)

  -- Big strings cross schedulers through the FFI's send and reply (lfast.c): sizes from 16 KiB
  -- to 1 MiB and odd alignments, every byte different from its neighbours, must arrive in
  -- place. (A copy with streaming stores was tried on this path: docs/perf.md.)
  it("carries big strings to another scheduler byte for byte, by send and by reply", function()
    local text = dofile("spec/support/text.lua")
    local sizes = { 16383, 16384, 16385, 16384 + 15, 16384 + 63, 16384 + 64 + 17, 65536 + 7,
      1048576 + 3 }
    local ok, why = smarm.run(function()
      local me = smarm.self()
      local echo = smarm.spawn_on(2, echo_back, me)
      local server = smarm.spawn_on(2, function()
        while true do
          local m = smarm.receive()
          if m == "stop" then return end
          smarm.reply(m.from, m.request)
        end
      end)
      for seed, n in ipairs(sizes) do
        local s = text(n, seed)
        smarm.send(echo, s)
        if smarm.receive() ~= s then return false, "sent and echoed: " .. n end
        if smarm.call(server, s) ~= s then return false, "replied: " .. n end
      end
      smarm.send(echo, "stop")
      smarm.send(server, "stop")
      return true
    end, { schedulers = 2 })
    assert.is_true(ok, why)
  end)

  it("carries tables of every kind of key and value, holes and index 0 included", function()
    -- The encoder reads numbers, strings and booleans in place and pushes the rest: a table
    -- mixing both, with removed entries and keys LuaJIT keeps in its array part or not.
    local ok, detail = smarm.run(function()
      local me = smarm.self()
      local seed = 12345
      local function rand(n) -- a fixed sequence, so a failure repeats
        seed = seed * 16807 % 2147483647 -- exact in a double
        return seed % n + 1
      end
      local function scalar()
        local pick = rand(9)
        if pick == 1 then return rand(1000) end
        if pick == 2 then return -rand(1000) / 8 end
        if pick == 3 then return 2 ^ 40 + rand(9) end
        if pick == 4 then return ("s"):rep(rand(40) - 1) .. "\0" .. rand(99) end
        if pick == 5 then return rand(2) == 1 end
        if pick == 6 then return 0 end
        if pick == 7 then return 1 / 0 end
        if pick == 8 then return ("long"):rep(100 + rand(50)) end
        return rand(30)
      end
      local function build(depth)
        local t = {}
        for _ = 1, rand(40) do
          local k, v = scalar(), scalar()
          if depth < 3 and rand(16) == 1 then v = build(depth + 1) end
          if depth < 3 and rand(40) == 1 then k = build(depth + 1) end
          if rand(8) == 1 then v = me end
          t[k] = v
        end
        for i = 1, rand(20) do t[i] = scalar() end -- an array part, and index 0
        t[0] = scalar()
        for _ = 1, rand(10) do t[rand(20)] = nil end -- holes
        return t
      end
      local function same(a, b, path)
        if type(a) ~= "table" then
          if a == b then return true end
          return false, path .. ": " .. tostring(a) .. " became " .. tostring(b)
        end
        if type(b) ~= "table" then return false, path .. ": a table became " .. type(b) end
        local n = 0
        for k, v in pairs(a) do
          if type(k) ~= "table" then
            n = n + 1
            local ok, why = same(v, b[k], path .. "[" .. tostring(k) .. "]")
            if not ok then return false, why end
          end
        end
        local m = 0
        for k in pairs(b) do if type(k) ~= "table" then m = m + 1 end end
        if n ~= m then return false, path .. ": " .. n .. " plain keys became " .. m end
        return true
      end
      for _, where in ipairs({ 1, 2 }) do
        local peer = smarm.spawn_on(where, echo_back, me)
        for round = 1, 100 do
          local t = build(0)
          smarm.send(peer, t)
          local ok, why = same(t, smarm.receive(), "message")
          if not ok then
            return false, "scheduler " .. where .. ", round " .. round .. ": " .. why
          end
        end
        smarm.send(peer, "stop")
      end
      return true
    end, { schedulers = 2 })
    assert.is_true(ok, detail)
  end)

  it("decodes a function whole under a debug hook that would take the next message", function()
    -- A function's closure was once made by a factory of Lua code, where a count hook ran; a
    -- receive(0) there took the next message and freed the block still being decoded (ASan saw
    -- the read after free). The decode runs no Lua code now, so the hook finds no place to poll
    -- and the next message stays queued; if Lua code ever runs there again, the decode must read
    -- its own copy of the block (codec.c, detach).
    local r = smarm.run(function()
      local me = smarm.self()
      local up = 7
      local big = {}
      for i = 1, 200 do big[i] = ("x"):rep(100) .. i end
      smarm.send(me, { f = function() return up end, pad = big })
      smarm.send(me, { second = ("y"):rep(5000) })
      local polled
      local inside = false
      local actor_fn = debug.getinfo(1, "f").func
      debug.sethook(function()
        if polled or not inside then return end
        local info = debug.getinfo(2, "f")
        -- in the decode's own Lua code (smarm.receive is Lua too, around its C function)
        if info and info.func ~= actor_fn and info.func ~= smarm.receive then
          local ok, m = pcall(smarm.receive, 0)
          polled = ok and type(m) == "table" and m.second and #m.second or tostring(m)
        end
      end, "", 1)
      inside = true
      local m = smarm.receive()
      inside = false
      debug.sethook()
      local second = smarm.receive(0)
      return { polled = polled, up = m.f(), n = #m.pad, last = m.pad[200],
        second = second and #second.second }
    end)
    assert.are.same({ up = 7, n = 200, last = ("x"):rep(100) .. 200, second = 5000 }, r)
  end)

  it("refuses messages nested too deeply, and keeps working", function()
    local err, after = smarm.run(function()
      local deep = {}
      local t = deep
      for _ = 1, 1000 do t.next = {}; t = t.next end
      local ok, e = pcall(smarm.send, smarm.self(), deep)
      smarm.send(smarm.self(), "fine")
      return (not ok) and e, smarm.receive()
    end)
    assert.matches("nested too deeply", err)
    assert.are.equal("fine", after)
  end)

  -- Numbers and strings to a pid go through the FFI (src/lua/lfast.c), the rest through the
  -- classic send: one order for both, whichever the JIT compiles.
  it("keeps one order for numbers, strings and tables in a compiled loop, on 1 or 2", function()
    local function mixed(on)
      return smarm.run(function()
        local me = smarm.self()
        smarm.spawn_on(on, function(to)
          local send = smarm.send
          for i = 1, 3000 do
            send(to, i)
            send(to, "s" .. i)
            if i % 100 == 0 then send(to, { i = i }) end
          end
          send(to, "")
          send(to, "a\0b")
        end, me)
        for i = 1, 3000 do
          if smarm.receive() ~= i or smarm.receive() ~= "s" .. i then return false, i end
          if i % 100 == 0 and smarm.receive().i ~= i then return false, i end
        end
        return smarm.receive() == "" and smarm.receive() == "a\0b"
      end, { schedulers = 2 })
    end
    assert.is_true(mixed(1))
    assert.is_true(mixed(2))
  end)

  it("refuses what only says it is a pid with the classic errors, and never crashes", function()
    local errors, tried, table_error = smarm.run(function()
      local fake = newproxy(true)
      getmetatable(fake).__metatable = "smarm.pid"
      local closed = assert(io.open("/dev/null"))
      closed:close()
      local io_mt = getmetatable(closed) -- a file's metatable is not protected: a closed file
      local was = io_mt.__metatable     -- would reach C as a NULL FILE *, not as a userdata
      io_mt.__metatable = "smarm.pid"
      local targets = { fake, closed, io.stderr }
      for k in pairs(debug.getregistry()) do -- the binding's keys: light userdata
        if type(k) == "userdata" then targets[#targets + 1] = k end
      end
      local errs = 0
      for _, to in ipairs(targets) do
        for _, m in ipairs({ 1, "x" }) do
          if not pcall(smarm.send, to, m) then errs = errs + 1 end
        end
      end
      io_mt.__metatable = was
      local _, e = pcall(smarm.send, setmetatable({}, { __metatable = "smarm.pid" }), 1)
      return errs, #targets, e
    end)
    assert.is_true(tried > 3)
    assert.are.equal(2 * tried, errors)
    assert.matches("pid or name expected, got table", table_error)
  end)

  it("refuses sends from finalizers that run once an actor has ended", function()
    -- the crash reason is encoded after the actor's data is gone; finalizers that run then are
    -- outside any actor, whatever they send. This one ends in a function, which a reason
    -- cannot hold: the finalizers run as the reason is encoded or as its description is made,
    -- both in that place.
    local arrived = smarm.run(function()
      local me = smarm.self()
      smarm.spawn(function()
        local keep = {}
        for i = 1, 50 do
          local p = newproxy(true)
          getmetatable(p).__gc = function() pcall(smarm.send, me, "fin") end
          keep[i] = p
        end
        assert(#keep == 50) -- alive until the actor's end
        local big = {}
        for i = 1, 20000 do big[i] = { i, tostring(i) .. "xxxxxxxxxxxxxxxxxxxxxxxxx" } end
        big[#big + 1] = print
        collectgarbage("setpause", 50)
        collectgarbage("setstepmul", 100000)
        error(big)
      end)
      local n = 0
      while smarm.receive(0.5) == "fin" do n = n + 1 end
      collectgarbage("setpause", 200)
      collectgarbage("setstepmul", 200)
      return n
    end, { on_crash = function() end })
    assert.are.equal(0, arrived)
  end)

  it("refuses a send from outside an actor, whatever the message", function()
    local pid = smarm.run(function() return smarm.self() end)
    for _, m in ipairs({ 1, "x", {} }) do
      assert.has_error(function() smarm.send(pid, m) end)
    end
  end)

  local function same(a, b) -- the same keys, each with the same value
    for k, v in pairs(a) do if b[k] ~= v then return false end end
    for k in pairs(b) do if a[k] == nil then return false end end
    return true
  end

  -- Records (8 to 256 string keys, plain values) decode from a template of their key set
  -- (src/lua/lshape.c); others as any table. Each must arrive whole and equal.
  it("carries records of one key set again and again, and of many sets, whole", function()
    local function record(keys, i)
      local r = {}
      for k = 1, keys do
        local v = (k + i) % 3
        r["f" .. k] = v == 0 and k + i or v == 1 and ("s" .. k .. ":" .. i) or (i % 2 == 0)
      end
      return r
    end
    for _, on in ipairs({ 1, 2 }) do
      local ok, why = smarm.run(function()
        local me = smarm.self()
        local sizes = { 7, 8, 9, 100, 256, 257 }
        smarm.spawn_on(on, function()
          for i = 1, 200 do
            for _, n in ipairs(sizes) do smarm.send(me, record(n, i)) end
          end
          for set = 1, 300 do -- more key sets than the cache holds
            local r = { ["set" .. set] = set }
            for k = 1, 9 do r["k" .. k .. "_" .. set] = k end
            smarm.send(me, r)
          end
          local r = record(20, 0)
          smarm.send(me, { r, r, nested = record(10, 1) }) -- one record twice, one inside
          r = record(12, 5)
          r[1], r.t = "array", { 1 } -- not records: an array part, a table value
          smarm.send(me, r)
        end)
        for i = 1, 200 do
          for _, n in ipairs(sizes) do
            if not same(record(n, i), smarm.receive()) then return false, n .. " keys, " .. i end
          end
        end
        for set = 1, 300 do
          local r = smarm.receive()
          if r["set" .. set] ~= set or r["k9_" .. set] ~= 9 then return false, "set " .. set end
        end
        local pair = smarm.receive()
        if not (rawequal(pair[1], pair[2]) and same(pair[1], record(20, 0))
            and same(pair.nested, record(10, 1))) then
          return false, "shared"
        end
        local mixed = smarm.receive()
        return mixed[1] == "array" and mixed.t[1] == 1 and mixed.f12 ~= nil, "mixed"
      end, { schedulers = 2 })
      assert.is_true(ok, why)
    end
  end)

  -- A key set's template is found by a hash of each key's length and last 8 bytes, and taken
  -- only when every key is the same: sets that differ in one byte anywhere in a key (of 12 or
  -- 20 bytes), or in one key's length (0 to 20), must each arrive as they were sent.
  it("never takes a record's key set for another that differs in one byte", function()
    local function near(set, pos, long)
      local r = {}
      for len = 0, 20 do r[("k"):rep(len)] = len end
      local key = ("k"):rep(long and 20 or 12)
      r[key] = nil
      r[key:sub(1, pos - 1) .. string.char(64 + set) .. key:sub(pos + 1)] = -set
      return r
    end
    local ok, why = smarm.run(function()
      local me = smarm.self()
      smarm.spawn_on(2, function()
        for _, long in ipairs({ false, true }) do
          for pos = 1, long and 20 or 12 do
            for set = 1, 3 do smarm.send(me, near(set, pos, long)) end
            smarm.send(me, near(1, pos, long))
          end
        end
      end)
      for _, long in ipairs({ false, true }) do
        for pos = 1, long and 20 or 12 do
          for _, set in ipairs({ 1, 2, 3, 1 }) do
            if not same(near(set, pos, long), smarm.receive()) then
              return false, ("set %d, byte %d of %d"):format(set, pos, long and 20 or 12)
            end
          end
        end
      end
      return true
    end, { schedulers = 2 })
    assert.is_true(ok, why)
  end)

  it("keeps records whole while the collector runs at every step", function()
    local ok, why = smarm.run(function()
      local me = smarm.self()
      smarm.spawn_on(2, function()
        collectgarbage("setpause", 1)
        collectgarbage("setstepmul", 1000)
        for i = 1, 2000 do
          local r = {}
          for k = 1, 12 do r["key" .. k] = k % 2 == 0 and ("v" .. k .. "." .. i) or k * i end
          smarm.send(me, r)
        end
      end)
      collectgarbage("setpause", 1)
      collectgarbage("setstepmul", 1000)
      local kept = {}
      for i = 1, 2000 do
        local r = smarm.receive()
        kept[i % 50 + 1] = r -- some live on while later ones are decoded
        for k = 1, 12 do
          local want = k % 2 == 0 and ("v" .. k .. "." .. i) or k * i
          if r["key" .. k] ~= want then return false, i .. "/" .. k end
        end
      end
      for _, r in pairs(kept) do
        if type(r.key2) ~= "string" or not r.key2:match("^v2%.") then return false, "kept" end
      end
      collectgarbage("setpause", 200)
      collectgarbage("setstepmul", 200)
      return true
    end, { schedulers = 2 })
    assert.is_true(ok, why)
  end)

  -- Messages past the encoder's 256 bytes on the C stack grow into a buffer that the VM keeps
  -- for the next one (src/lua/codec.c, spare_key): it must never be shared by two encodes.
  it("keeps big messages whole when encodes nest, fail half-way or outgrow the spare", function()
    local ok, detail = smarm.run(function()
      local me = smarm.self()
      local function record(tag, n) -- past SEEN_FAST tables: the encoder allocates as it goes
        local t = { tag = tag }
        for i = 1, n do t[i] = { i = i, s = tag .. i } end
        return t
      end
      local function whole(t, tag, n)
        if type(t) ~= "table" or t.tag ~= tag or #t ~= n then return false end
        for i = 1, n do
          if t[i].i ~= i or t[i].s ~= tag .. i then return false end
        end
        return true
      end
      collectgarbage("setpause", 10)
      collectgarbage("setstepmul", 1000)
      smarm.send(me, record("first", 150)) -- leaves a spare big enough for what follows
      -- finalizers that send big messages run during the encodes of others
      local inner_sent = 0
      for round = 1, 50 do
        for _ = 1, 50 do
          local u = newproxy(true)
          getmetatable(u).__gc = function()
            if pcall(smarm.send, me, record("inner", 40)) then inner_sent = inner_sent + 1 end
          end
        end
        smarm.send(me, record("outer" .. round, 100))
        -- one that fails half-way (a coroutine), its buffer left to the collector
        local bad = record("bad", 100)
        bad[50] = coroutine.create(function() end)
        assert(not pcall(smarm.send, me, bad))
        -- now and then one past the spare's size limit (64 KiB)
        if round % 20 == 0 then smarm.send(me, record("huge", 3000)) end
      end
      collectgarbage()
      collectgarbage("setpause", 200)
      collectgarbage("setstepmul", 200)
      local outer, huge, inner = 0, 0, 0
      assert(whole(smarm.receive(0), "first", 150))
      while true do
        local m = smarm.receive(0)
        if m == nil then break end
        if whole(m, "inner", 40) then inner = inner + 1
        elseif whole(m, "huge", 3000) then huge = huge + 1
        elseif type(m.tag) == "string" and m.tag:match("^outer") and whole(m, m.tag, 100) then
          outer = outer + 1
        else return false, "a message came broken: " .. tostring(m.tag) end
      end
      if outer ~= 50 or huge ~= 2 or inner ~= inner_sent or inner == 0 then
        return false, ("outer %d, huge %d, inner %d of %d"):format(outer, huge, inner, inner_sent)
      end
      return true
    end)
    assert.is_true(ok, detail)
  end)

  -- The encoder reads a table's slots in place while it encodes the entries, and when that
  -- allocates (a buffer past the spare, the set of tables met past 16) a GC step may run
  -- finalizers: one that grew the table being walked moved its entries, and the walk skipped
  -- some (a key the table held throughout went missing at the receiver) or met some twice.
  -- Such an encode is done again with the collector held. The finalizers here take the keys
  -- f.. and add others, until the table grows; the keys k.. stay throughout. In a process of
  -- its own, by the executable: the GC settings below make it likely.
  it("keeps every key of a table that finalizers change while it is sent", function()
    local out, err, status = script.run([[
      local smarm = require("smarm")
      local m = {}
      for i = 1, 64 do m["k" .. i] = { i, ("x"):rep(4000) } end -- past the spare: it grows
    ]] .. script.churn("m", "f", "{ 0 }") .. [[
      local me = smarm.self()
      for _ = 1, 300 do
        smarm.send(me, m)
        local back = smarm.receive(HANG)
        for i = 1, 64 do assert(back["k" .. i] and back["k" .. i][1] == i, "k" .. i) end
      end
      print(added > 0)
    ]])
    if not out then return pending("SMARM_EXE is not set (./dev.sh test sets it)") end
    assert.are.equal(0, status, err)
    assert.are.equal("true\n", out) -- the finalizers ran
  end)

  -- The walk's check that a table's parts stayed where they were cannot see a finalizer that
  -- clears the table and puts the same keys back in another order (the same parts, sizes and
  -- free top, the keys in other nodes), nor two rehashes that land where the first ones were
  -- (the case above lost k18 once that way, in a CI run on aarch64): the walk skipped keys.
  -- Any finalizer called during a walk now counts as a move (luajit-finalizer-count.patch).
  -- Before that, this lost hundreds of keys in 40 rounds on x86-64 (15 rounds under TSan or the
  -- emulator, guard.slow, where 40 took 16 s).
  it("keeps every key of a table that finalizers clear and refill", function()
    local out, err, status = script.run((([[
      local smarm = require("smarm")
      local clear = require("table.clear")
      local me = smarm.self()
      local m, values, order = {}, {}, {}
      for i = 1, 200 do
        values[i] = { i, ("x"):rep(300) } -- past the spare with 200 of them: the buffer grows
        m["k" .. i] = values[i]
        order[i] = i
      end
      local fin, seed = 0, 1
      local function refill() -- a finalizer: the same entries again, in a shuffled order
        fin = fin + 1
        clear(m)
        for i = 200, 2, -1 do
          seed = (seed * 1103515245 + 12345) % 2147483648
          local j = seed % i + 1
          order[i], order[j] = order[j], order[i]
        end
        for i = 1, 200 do
          local k = order[i]
          m["k" .. k] = values[k]
        end
      end
      local lost, during = 0, 0
      for _ = 1, ROUNDS do
        for _ = 1, 200 do getmetatable(newproxy(true)).__gc = refill end
        local f0 = fin
        while fin == f0 do collectgarbage("step", 0) end -- the collector is finalizing now
        local f1 = fin
        smarm.send(me, m)
        if fin > f1 then during = during + 1 end
        local back = smarm.receive(HANG)
        for i = 1, 200 do
          if not (back["k" .. i] and back["k" .. i][1] == i) then lost = lost + 1 end
        end
      end
      print(lost, during > 0)
    ]]):gsub("ROUNDS", guard.slow and "15" or "40")))
    if not out then return pending("SMARM_EXE is not set (./dev.sh test sets it)") end
    assert.are.equal(0, status, err)
    -- no key lost; and finalizers ran inside the sends (inside a walk or not: that the walks
    -- met them is what the keys lost before the patch showed)
    assert.are.equal("0\ttrue\n", out)
  end)

  -- A message whose table a finalizer grows while it is walked is encoded again with the
  -- collector held, and its block made there; its sockets are readied for travel after the hold
  -- (readying may park). A socket active for another actor makes that raise: the block, with a
  -- reference to each binary in it, was lost (one binary per send here).
  it("loses no block when a socket refuses to travel after a table moved under the encode",
    function()
      local out, err, status = script.run([[
        local smarm = require("smarm")
        local me = smarm.self()
        local server = assert(smarm.tcp.listen("127.0.0.1", 0))
        local _, port = server:getsockname()
        smarm.spawn(function() local _ = server:accept(); smarm.receive() end)
        local c = assert(smarm.tcp.connect("127.0.0.1", port))
        smarm.spawn(function()
          assert(c:setactive(true))
          smarm.send(me, "armed")
          smarm.receive()
        end)
        assert(smarm.receive(HANG) == "armed")
        local m, fin = {}, 0
        for i = 1, 64 do m["k" .. i] = ("y"):rep(4000) .. i end -- past the spare: it grows
        local function grow() -- a finalizer: keys that displace entries, or a rehash
          fin = fin + 1
          for j = 1, 40 do m["g" .. fin .. "_" .. j] = j end
        end
        local base, refused = smarm.stats().binaries, 0
        for _ = 1, 20 do
          for k in pairs(m) do if k:sub(1, 1) == "g" then m[k] = nil end end
          for _ = 1, 200 do getmetatable(newproxy(true)).__gc = grow end
          local f0 = fin
          while fin == f0 do collectgarbage("step", 0) end -- the collector is finalizing now
          local ok, err = pcall(smarm.send, me, { smarm.binary(("z"):rep(1000)), m, c })
          assert(not ok and err:find("active for another actor", 1, true), err)
          refused = refused + 1
        end
        for _ = 1, 3 do collectgarbage() end
        print(refused == 20 and smarm.stats().binaries - base == 0)
        os.exit(0)
      ]])
      if not out then return pending("SMARM_EXE is not set (./dev.sh test sets it)") end
      assert.are.equal(0, status, err)
      assert.are.equal("true\n", out)
    end)

  it("rejects bad arguments", function()
    local e1, e2, e3 = smarm.run(function()
      local _, a = pcall(function() smarm.send(nil, 1) end)
      local _, b = pcall(function() smarm.send(smarm.self(), nil) end)
      local _, c = pcall(function() smarm.receive("soon") end)
      return a, b, c
    end)
    assert.matches("^spec/message_spec%.lua:%d+: bad argument #1 to 'send' %(pid or name "
      .. "expected, got nil%)$", e1)
    assert.matches("bad argument #2 to 'send' %(message expected, got nil%)", e2)
    assert.matches("bad argument #1 to 'receive' %(match function or number of seconds " ..
      "expected, got string%)", e3)
    assert.has_error(function() smarm.send(nil, 1) end)
    local _, none = pcall(smarm.run, function() smarm.send() end)
    assert.matches("bad argument #1 to 'send' %(pid or name expected, got no value%)",
      tostring(none))
    assert.has_error(function() smarm.receive() end)
  end)
end)

describe("smarm.receive timeouts", function()
  it("returns nil, 'timeout' after at least the timeout", function()
    local v, why, waited = smarm.run(function()
      local t0 = smarm.now()
      local a, b = smarm.receive(0.02)
      return a, b, smarm.now() - t0
    end)
    assert.is_nil(v)
    assert.are.equal("timeout", why)
    assert.is_true(waited >= 0.02)
  end)

  it("polls with 0", function()
    local empty, why, got = smarm.run(function()
      local a, b = smarm.receive(0)
      smarm.send(smarm.self(), "here")
      return a, b, smarm.receive(0)
    end)
    assert.is_nil(empty)
    assert.are.equal("timeout", why)
    assert.are.equal("here", got)
  end)
end)

describe("selective receive", function()
  it("takes the first match and leaves the rest in order", function()
    local picked, rest = smarm.run(function()
      local me = smarm.self()
      for i = 1, 6 do smarm.send(me, i) end
      local p = smarm.receive(function(m) return m % 3 == 0 end)
      local others = {}
      for _ = 1, 5 do others[#others + 1] = smarm.receive(0) end
      return p, table.concat(others, ",")
    end)
    assert.are.equal(3, picked)
    assert.are.equal("1,2,4,5,6", rest)
  end)

  it("waits for a match that arrives later while others keep arriving", function()
    local got, rest = smarm.run(function()
      local me = smarm.self()
      smarm.spawn(function()
        for i = 1, 5 do smarm.send(me, { kind = "noise", i = i }); smarm.yield() end
        smarm.send(me, { kind = "reply", v = 42 })
      end)
      local r = smarm.receive(function(m) return m.kind == "reply" end)
      local n = 0
      while smarm.receive(0) do n = n + 1 end
      return r.v, n
    end)
    assert.are.equal(42, got)
    assert.are.equal(5, rest)
  end)

  it("times out when nothing matches", function()
    local v, why, kept = smarm.run(function()
      smarm.send(smarm.self(), "no")
      local a, b = smarm.receive(function(m) return m == "yes" end, 0.01)
      return a, b, smarm.receive(0)
    end)
    assert.is_nil(v)
    assert.are.equal("timeout", why)
    assert.are.equal("no", kept)
  end)

  it("loses nothing when the match raises", function()
    local err, kept = smarm.run(function()
      smarm.send(smarm.self(), "m")
      local ok, e = pcall(smarm.receive, function() error("bad match") end, 0)
      return (not ok) and e, smarm.receive(0)
    end)
    assert.matches("bad match", err)
    assert.are.equal("m", kept)
  end)

  it("works with a match that yields", function()
    local got = smarm.run(function()
      smarm.send(smarm.self(), 1)
      smarm.send(smarm.self(), 2)
      return smarm.receive(function(m) smarm.yield(); return m == 2 end)
    end)
    assert.are.equal(2, got)
  end)
end)
