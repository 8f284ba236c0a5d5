-- smarm.binary: immutable byte strings that messages share instead of copying.
local smarm = require("smarm")
local guard = dofile("spec/support/guard.lua")
local HANG = guard.HANG -- seconds: receive limits in spawned bodies only guard against a hang

-- Collects garbage on every scheduler (a binary's block goes with the last userdata of it, in
-- whichever VM that is), then returns smarm.stats()'s binaries and binary_bytes.
local function collect_everywhere()
  local me = smarm.self()
  for k = 1, smarm.schedulers() do
    smarm.spawn_on(k, function()
      collectgarbage()
      collectgarbage()
      smarm.send(me, "collected")
    end)
  end
  for _ = 1, smarm.schedulers() do
    guard.receive("a collection", function(m) return m == "collected" end)
  end
  collectgarbage()
  collectgarbage()
  local st = smarm.stats()
  return st.binaries, st.binary_bytes
end

describe("smarm.binary", function()
  it("reads like the string it was made from", function()
    local r = guard.run(function()
      local b = smarm.binary("hello, world")
      local out = {
        len = #b, len2 = b:len(), sub = b:sub(1, 5), tail = b:sub(-5), whole = tostring(b),
        same = b:tostring(), empty = b:sub(5, 2), byte = { b:byte(1, 3) }, last = b:byte(-1),
        cat = "<" .. b .. ">", eq = b == smarm.binary("hello, world"),
        ne = b == smarm.binary("hello"), is = smarm.is_binary(b), str_is = smarm.is_binary("x"),
        again = smarm.binary(b) == b, mt = getmetatable(b), fmt = string.format("%s!", b),
      }
      return out
    end)
    assert.are.equal(12, r.len)
    assert.are.equal(12, r.len2)
    assert.are.equal("hello", r.sub)
    assert.are.equal("world", r.tail)
    assert.are.equal("hello, world", r.whole)
    assert.are.equal("hello, world", r.same)
    assert.are.equal("", r.empty)
    assert.are.same({ 104, 101, 108 }, r.byte)
    assert.are.equal(100, r.last)
    assert.are.equal("<hello, world>", r.cat)
    assert.is_true(r.eq)
    assert.is_false(r.ne)
    assert.is_true(r.is)
    assert.is_false(r.str_is)
    assert.is_true(r.again)
    assert.are.equal("smarm.binary", r.mt)
    assert.are.equal("hello, world!", r.fmt)
  end)

  it("raises for what is not a string, and a binary's methods for what is not a binary", function()
    local r = guard.run(function()
      local _, e1 = pcall(smarm.binary, 42)
      local _, e2 = pcall(smarm.binary)
      local b = smarm.binary("x")
      local _, e3 = pcall(b.sub, "x", 1)
      local _, e4 = pcall(function() return b .. {} end)
      return { e1 = e1, e2 = e2, e3 = e3, e4 = e4 }
    end)
    assert.matches("bad argument #1 to '.-' %(string expected, got number%)", r.e1)
    assert.matches("string expected, got no value", r.e2)
    assert.matches("smarm.binary expected, got string", r.e3)
    assert.matches("attempt to concatenate a table value", r.e4)
  end)

  it("travels in messages on one scheduler and across two, its block shared, not copied", function()
    local r = guard.run(function()
      local me = smarm.self()
      local before = collect_everywhere()
      local big = smarm.binary(("0123456789abcdef"):rep(65536)) -- 1 MiB
      local near = smarm.spawn_on(1, function()
        local m = smarm.receive(HANG)
        smarm.send(me,
          { kind = "near", is = smarm.is_binary(m), len = #m, tail = m:sub(-4), m = m })
      end)
      local far = smarm.spawn_on(2, function()
        for _ = 1, 100 do
          local m = smarm.receive(HANG)
          assert(smarm.is_binary(m.b) and m.b == m.again)
        end
        local m = smarm.receive(HANG)
        smarm.send(me, { kind = "far", is = smarm.is_binary(m), len = #m, tail = m:sub(-4), m = m })
      end)
      smarm.send(near, big)
      for _ = 1, 100 do smarm.send(far, { b = big, again = big }) end
      smarm.send(far, big)
      local got = {}
      for _ = 1, 2 do
        local m = guard.receive("a binary back")
        got[m.kind] = m
      end
      local st = smarm.stats()
      local out = { near = got.near, far = got.far, count = st.binaries - before,
        bytes = st.binary_bytes, back = got.far.m == big }
      got.near.m, got.far.m = nil, nil
      return out
    end, { schedulers = 2 })
    for _, k in ipairs({ "near", "far" }) do
      assert.is_true(r[k].is)
      assert.are.equal(1048576, r[k].len)
      assert.are.equal("cdef", r[k].tail)
    end
    assert.is_true(r.back)
    -- 102 messages and their decoded values later, still one block of 1 MiB
    assert.are.equal(1, r.count)
    assert.is_true(r.bytes >= 1048576 and r.bytes < 2 * 1048576, tostring(r.bytes))
  end)

  it("keeps its place among many in one message", function()
    local r = guard.run(function()
      local me = smarm.self()
      local function reader()
        local m = smarm.receive(HANG)
        local out = {}
        for i, b in ipairs(m.list) do out[i] = smarm.is_binary(b) and tostring(b) or "?" end
        smarm.send(me, { out = out, solo = smarm.is_binary(m.solo) and tostring(m.solo) })
      end
      for _, n in ipairs({ 3, 16, 17, 40, 1000 }) do
        local list = {}
        for i = 1, n do list[i] = smarm.binary("v" .. i) end
        smarm.send(smarm.spawn_on(2, reader), { list = list, solo = smarm.binary("solo") })
      end
      local res = {}
      for _ = 1, 5 do
        local m = guard.receive("a list back")
        res[#m.out] = m
      end
      return res
    end, { schedulers = 2 })
    for _, n in ipairs({ 3, 16, 17, 40, 1000 }) do
      assert.is_table(r[n], "list of " .. n)
      for i = 1, n do assert.are.equal("v" .. i, r[n].out[i]) end
      assert.are.equal("solo", r[n].solo)
    end
  end)

  it("goes as a spawn's argument and upvalue, and in a call and its reply", function()
    local r = guard.run(function()
      local me = smarm.self()
      local up = smarm.binary("upvalue")
      smarm.spawn_on(2, function(arg)
        smarm.send(me, { arg = smarm.is_binary(arg) and tostring(arg),
          up = smarm.is_binary(up) and tostring(up) })
      end, smarm.binary("argument"))
      local got = guard.receive("the spawned actor's report")
      local server = smarm.spawn_on(2, function()
        local m = smarm.receive(HANG)
        smarm.reply(m.from, smarm.binary(tostring(m.request) .. "!"))
      end)
      local reply = smarm.call(server, smarm.binary("request"), HANG)
      got.reply = smarm.is_binary(reply) and tostring(reply)
      return got
    end, { schedulers = 2 })
    assert.are.same({ arg = "argument", up = "upvalue", reply = "request!" }, r)
  end)

  it("is an exit reason like any value: its bytes reach links and monitors", function()
    local r = guard.run(function()
      local p = smarm.spawn_on(2, function()
        smarm.receive(HANG)
        smarm.exit(smarm.binary("gone"))
      end)
      local down = guard.watch(p)
      smarm.send(p, "go")
      local reason = down()
      return { is = smarm.is_binary(reason), text = tostring(reason) }
    end, { schedulers = 2 })
    assert.is_true(r.is)
    assert.are.equal("gone", r.text)
  end)

  it("frees its block once no value and no message holds it, delivered or not", function()
    local r = guard.run(function()
      local before, before_bytes = collect_everywhere()
      local me = smarm.self()
      -- delivered and dropped; queued at an actor that ends without receiving them; sent to
      -- actors that are gone; a send that raises part-way through its message
      local sink = smarm.spawn_on(2, function()
        for _ = 1, 10 do smarm.receive(HANG) end
        smarm.send(me, "sunk")
      end)
      local ender = smarm.spawn_on(2, function() smarm.receive(HANG) end)
      local dead_near = smarm.spawn(function() end)
      local dead_far = smarm.spawn_on(2, function() end)
      guard.ended(dead_near)
      guard.ended(dead_far)
      for i = 1, 10 do
        local b = smarm.binary(("x"):rep(1000 + i))
        smarm.send(sink, { b, b })
        smarm.send(ender, b)
        smarm.send(dead_near, b)
        smarm.send(dead_far, { b })
        pcall(smarm.send, sink, { b, function() end, b })
      end
      guard.receive("the sink", function(m) return m == "sunk" end)
      smarm.send(ender, "end")
      guard.ended(ender)
      local mid = smarm.stats().binaries - before
      local after, after_bytes = collect_everywhere()
      return { mid = mid, left = after - before, left_bytes = after_bytes - before_bytes }
    end, { schedulers = 2 })
    assert.is_true(r.mid >= 0)
    assert.are.equal(0, r.left)
    assert.are.equal(0, r.left_bytes)
  end)

  it("stays alive while a finalizer changes the message it is in during its encoding", function()
    -- The encoder allocates (each function's bytecode, each upvalue's name); a finalizer run
    -- there drops the message's last hold on the binary, and aggressive collection settings
    -- finish it off before the block is made, unless the encoder keeps it (it did not at
    -- first: a freed block arrived, #m[1] read as 1.97e18). The binary is a function's first
    -- upvalue, functions the others: a function's upvalues are no table walk, which the
    -- encoder does again with the collector held when a finalizer moves the table's entries.
    local r = guard.run(function()
      local b = smarm.binary(("z"):rep(100000))
      local fns = {}
      for i = 1, 20 do fns[i] = load("return function() return " .. i .. " end")() end
      local f1, f2, f3, f4, f5, f6, f7, f8, f9, f10 = unpack(fns, 1, 10)
      local f11, f12, f13, f14, f15, f16, f17, f18, f19, f20 = unpack(fns, 11, 20)
      local function msg() -- upvalues: b first, then the functions
        return b, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10,
          f11, f12, f13, f14, f15, f16, f17, f18, f19, f20
      end
      local me = smarm.self()
      smarm.send(me, msg) -- the names and the bytecode made before: they allocate
      guard.receive("the first message")
      b = smarm.binary(("z"):rep(100000)) -- (the first one is in that message's block too)
      local ran = false
      local function arm() -- in a frame of its own: no dead register of ours keeps it alive
        local p = newproxy(true)
        getmetatable(p).__gc = function() b = nil; ran = true end
      end
      local pause = collectgarbage("setpause", 0)
      local stepmul = collectgarbage("setstepmul", 100000)
      collectgarbage() -- its end sets the threshold from the pause: each allocation now steps
      arm()
      smarm.send(me, msg) -- nothing allocates before its encoder reads b
      local ran_in_send = ran
      collectgarbage("setpause", pause)
      collectgarbage("setstepmul", stepmul)
      local m = guard.receive("the message")()
      return { ran = ran_in_send, len = m and #m, tail = m and m:sub(-3) }
    end)
    assert.is_true(r.ran)
    assert.are.equal(100000, r.len)
    assert.are.equal("zzz", r.tail)
  end)

  it("loses no reference while actors on both schedulers pass binaries around and die", function()
    -- A stress of the reference counts: 16 relays (8 per scheduler) forward lists of binaries
    -- to random relays for 4,000 hops in all; half of them end with messages still queued. Every
    -- binary read on the way has its bytes intact, and once every VM has collected, not one
    -- block is left.
    local r = guard.run(function()
      local before = collect_everywhere()
      local me = smarm.self()
      local pool = {}
      for i = 1, 50 do pool[i] = smarm.binary(("%02d"):format(i):rep(100 * i)) end
      local function relay(index)
        local peers, seed = nil, index
        while true do
          local m = smarm.receive(HANG)
          if m == nil or m == "stop" then return end
          if m.peers then
            peers = m.peers
          else
            for _, b in ipairs(m.list) do
              local k = tonumber(b:sub(1, 2))
              assert(#b == 200 * k and b:sub(-2) == ("%02d"):format(k), "a binary changed")
            end
            if m.hops == 0 then
              smarm.send(me, "done")
            else
              seed = (seed * 16807) % 2147483647
              smarm.send(peers[seed % #peers + 1], { list = m.list, hops = m.hops - 1 })
            end
            if index % 2 == 0 and m.hops % 97 == 0 then return end -- dies, mail queued
          end
        end
      end
      local relays = {}
      for i = 1, 16 do relays[i] = smarm.spawn_on(i % 2 + 1, relay, i) end
      for _, p in ipairs(relays) do smarm.send(p, { peers = relays }) end
      local sent = 0
      for i = 1, 40 do
        local list = {}
        for j = 1, i % 7 + 1 do list[j] = pool[(i * 13 + j * 7) % 50 + 1] end
        smarm.send(relays[i % 16 + 1], { list = list, hops = 100 })
        sent = sent + 1
      end
      -- the chains that reach a dead relay end there; wait for the rest, then stop every relay
      local done = 0
      while smarm.receive(function(m) return m == "done" end, 0.5) do done = done + 1 end
      for _, p in ipairs(relays) do smarm.send(p, "stop") end
      for _, p in ipairs(relays) do guard.ended(p) end
      pool = nil -- luacheck: ignore
      local after = collect_everywhere()
      return { left = after - before, done = done, sent = sent }
    end, { schedulers = 2 })
    assert.are.equal(0, r.left)
    assert.is_true(r.done <= r.sent)
  end)

  it("counts toward its VM's memory, so that dropping binaries keeps memory bounded", function()
    local r = guard.run(function()
      local peak = 0
      local chunk = ("y"):rep(65536)
      collectgarbage() -- a cycle starts once the VM's counted memory doubles from here
      local heap = collectgarbage("count") * 1024
      for i = 1, 4000 do -- 256 MiB made and dropped, with little else to count
        local b = smarm.binary(chunk)
        assert(#b == 65536)
        if i % 500 == 0 then
          local bytes = smarm.stats().binary_bytes
          if bytes > peak then peak = bytes end
        end
      end
      return { peak = peak, heap = heap }
    end)
    -- The collector paces itself on them as on strings: about the heap again, not all 256 MiB
    -- (uncounted, the 40-byte userdata alone would not have started a cycle).
    assert.is_true(r.peak < 2 * r.heap + 8 * 1048576,
      string.format("peak %d bytes of binaries, heap %d bytes", r.peak, r.heap))
  end)

  it("encodes as an Erlang binary", function()
    local r = guard.run(function()
      return { smarm.term.encode(smarm.binary("abc")) == smarm.term.encode("abc") }
    end)
    assert.is_true(r[1])
  end)
end)

describe("long strings in messages", function()
  -- A string of 16 KiB or more that an actor's VM sends a second time (soon enough: it
  -- remembers the last few) travels as a block of its bytes that the VM keeps for it, as a
  -- binary's, and is not copied again (docs/api.md, "smarm.send"). Receivers get strings.
  local LONG = 16384

  local text = dofile("spec/support/text.lua")

  -- Whether m is the string s (a string, not a binary, with the same bytes), or what it is.
  local function same(m, s)
    if type(m) ~= "string" then return false, type(m) end
    return m == s, #m
  end

  it("arrive as strings byte for byte however often they travel, and by every way", function()
    local r = guard.run(function()
      local me = smarm.self()
      local function echo()
        while true do
          local m = smarm.receive()
          if m == "stop" then return end
          smarm.send(me, m)
        end
      end
      local echo_near, echo_far = smarm.spawn(echo), smarm.spawn_on(2, echo)
      local server = smarm.spawn_on(2, function()
        local last
        while true do
          local m = smarm.receive()
          if m == "stop" then return end
          last = m.request == "again" and last or m.request -- replies its own string again
          smarm.reply(m.from, last)
        end
      end)
      local bad = {}
      local function check(what, m, s)
        local ok, detail = same(m, s)
        if not ok then bad[#bad + 1] = what .. ": " .. tostring(detail) end
      end
      for seed, n in ipairs({ LONG - 1, LONG, LONG + 1, 65536 + 7, 1048576 + 3 }) do
        local s = text(n, seed)
        for round = 1, 3 do
          local tag = n .. " round " .. round
          smarm.send(echo_near, s)
          check("here " .. tag, guard.receive("the near echo"), s)
          smarm.send(echo_far, s)
          check("there " .. tag, guard.receive("the far echo"), s)
          smarm.send(echo_far, { s, s, x = s, n = n }) -- twice in one message, and as a value
          local t = guard.receive("the far echo of a table")
          check("in a table " .. tag, t[1], s)
          check("twice in a table " .. tag, t[2], s)
          check("as a field " .. tag, t.x, s)
          check("called " .. tag, smarm.call(server, round == 1 and s or "again"), s)
          smarm.spawn_on(2, function(v) smarm.send(me, { v = v }) end, s)
          check("spawned with " .. tag, guard.receive("a spawned child's argument").v, s)
          smarm.send_after(0, me, { later = s })
          check("after " .. tag, guard.receive("a message timer").later, s)
        end
      end
      -- More long strings than the VM remembers, each sent twice, in one message and alone.
      local many = {}
      for i = 1, 20 do many[i] = text(LONG + i, 100 + i) end
      for _ = 1, 2 do
        smarm.send(echo_far, many)
        local got = guard.receive("the far echo of many")
        for i = 1, 20 do check("many " .. i, got[i], many[i]) end
        for i = 1, 20 do
          smarm.send(echo_far, many[i])
          check("many alone " .. i, guard.receive("the far echo of one of many"), many[i])
        end
      end
      for _, p in ipairs({ echo_near, echo_far, server }) do smarm.send(p, "stop") end
      return bad
    end, { schedulers = 2 })
    assert.are.same({}, r)
  end)

  it("are shared from their second send, and their blocks go when nothing holds them", function()
    local r = guard.run(function()
      local before, before_bytes = collect_everywhere()
      local me = smarm.self()
      local sink = smarm.spawn_on(2, function()
        while true do
          local m = smarm.receive()
          if m == "stop" then return end
          smarm.send(me, "got")
        end
      end)
      local s, key = text(65536, 7), text(LONG, 8)
      -- The VM keeps a string's block only until its collection cycle ends: none while counting.
      collectgarbage("stop")
      smarm.send(sink, s)
      guard.receive("the sink", function(m) return m == "got" end)
      local first = smarm.stats().binaries - before
      smarm.send(sink, s)
      guard.receive("the sink", function(m) return m == "got" end)
      local second = smarm.stats().binaries - before
      smarm.send(sink, { s, [key] = 1 }) -- in a table, as a value and as a key
      smarm.send(sink, { s, [key] = 1 })
      guard.receive("the sink", function(m) return m == "got" end)
      guard.receive("the sink", function(m) return m == "got" end)
      local third = smarm.stats().binaries - before
      collectgarbage("restart")
      -- Dropped unread: to an actor gone, left in a mailbox at its end, on a timer cancelled.
      local gone = smarm.spawn_on(2, function() end)
      guard.ended(gone)
      smarm.send(gone, s)
      local ender = smarm.spawn_on(2, function() smarm.receive(function(m) return m == "end" end) end)
      smarm.send(ender, { s })
      smarm.send(ender, "end")
      guard.ended(ender)
      smarm.cancel_timer(smarm.send_after(3600, sink, s))
      smarm.send(sink, "stop")
      guard.ended(sink)
      s, key = nil, nil -- luacheck: ignore (the sender's holds on blocks go with the strings)
      local after, after_bytes = collect_everywhere()
      return { first = first, second = second, third = third, left = after - before,
        left_bytes = after_bytes - before_bytes }
    end, { schedulers = 2 })
    assert.are.equal(0, r.first) -- copied
    assert.are.equal(1, r.second) -- shared: one block, the sender's
    assert.are.equal(2, r.third) -- and the key's
    assert.are.equal(0, r.left)
    assert.are.equal(0, r.left_bytes)
  end)

  it("stay plain data in exit reasons", function()
    local r = guard.run(function()
      local s = text(LONG * 2, 3)
      local reasons = {}
      for i = 1, 3 do -- the same string each time: an exit reason is never a shared block
        local pid, ref = smarm.spawn_monitor(function() smarm.exit(s) end)
        local down = guard.receive("a DOWN", function(m)
          return type(m) == "table" and m.smarm == "DOWN" and m.ref == ref
        end)
        reasons[i] = same(down.reason, s) and "same" or tostring(pid)
      end
      return reasons
    end)
    assert.are.same({ "same", "same", "same" }, r)
  end)
end)
