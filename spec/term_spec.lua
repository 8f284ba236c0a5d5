-- Erlang terms (src/lua/lterm.c): smarm.atom, smarm.tuple, smarm.map, smarm.term.encode/decode/
-- type, and atoms, tuples, maps and opaque terms in messages between actors. The round trips
-- against a real Erlang run spec/fixtures/smarm_term_check.erl under `erl` (Debian's
-- erlang-base); without it they are pending with a SKIP line, the rest still runs.
local smarm = require("smarm")
local T = smarm.term

local guard = dofile("spec/support/guard.lua")
local script = dofile("spec/support/script.lua")

local function unhex(h) return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end)) end
local function hex(s) return (s:gsub(".", function(c) return string.format("%02X", c:byte()) end)) end

local erl_support = dofile("spec/support/erl.lua")
local function erl_dir() return erl_support.compile("smarm_term_check") end

-- Runs smarm_term_check with these arguments; returns its output, asserting it ended with "done".
local function erl(...)
  local cmd = "erl -noshell -pa " .. erl_dir() .. " -run smarm_term_check main " ..
    table.concat({ ... }, " ") .. " 2>&1"
  local p = assert(io.popen(cmd))
  local text = p:read("*a")
  p:close()
  assert(text:match("done %d+\n$"), "erl: " .. cmd .. "\n" .. text)
  return text
end

local function write_lines(name, strings)
  local path = erl_dir() .. "/" .. name
  local f = assert(io.open(path, "w"))
  for _, s in ipairs(strings) do f:write(hex(s), "\n") end
  f:close()
  return path
end

local function read_lines(path)
  local t = {}
  for line in io.lines(path) do t[#t + 1] = unhex(line) end
  return t
end

local function skip_without_erl()
  if erl_support.have then return false end
  pending(erl_support.SKIP)
  return true
end

-- Deep equality of a Lua value and what came back through Erlang: a table that went as a map
-- comes back marked as one; a tuple keeps its mark and arity; the atom nil comes back as nil
-- where Lua can hold a nil (the whole value, a tuple's element).
local function arity(t) return type(t.n) == "number" and t.n or #t end
local function same(a, b, path)
  path = path or "value"
  if type(a) ~= "table" then
    if a == smarm.atom("nil") and b == nil then return end
    if a ~= b then error(path .. ": " .. tostring(a) .. " ~= " .. tostring(b), 0) end
    return
  end
  if type(b) ~= "table" then error(path .. ": a table came back as " .. tostring(b), 0) end
  local ka = T.type(a)
  if ka == "tuple" then
    if T.type(b) ~= "tuple" or arity(a) ~= arity(b) then error(path .. ": not the same tuple", 0) end
    for i = 1, arity(a) do same(a[i], b[i], path .. "[" .. i .. "]") end
    return
  end
  if ka == "map" and T.type(b) ~= "map" then error(path .. ": a map came back as a list", 0) end
  local n = 0
  for k, v in pairs(a) do
    n = n + 1
    same(v, b[k], path .. "[" .. tostring(k) .. "]")
  end
  for _ in pairs(b) do n = n - 1 end
  if n ~= 0 then error(path .. ": other keys came back", 0) end
end

-- A random Lua value of what maps to Erlang (no table keys: their identity does not come back).
local function random_value(depth)
  local r = math.random(depth > 0 and 16 or 10)
  if r == 1 then return math.random(0, 255)
  elseif r == 2 then return math.random(-2 ^ 31, 2 ^ 31) * 4096 + math.random(0, 4095)
  elseif r == 3 then return (math.random() - 0.5) * 10 ^ math.random(-300, 300)
  elseif r == 4 then
    local b = {}
    for i = 1, math.random(0, 12) do b[i] = string.char(math.random(0, 255)) end
    return table.concat(b)
  elseif r == 5 then return math.random(2) == 1
  elseif r == 6 then
    return smarm.atom(({ "ok", "nil", "héllo", "with space", "", "EXIT" })[math.random(6)])
  elseif r == 7 then return 2 ^ 53 * (math.random(2) == 1 and 1 or -1)
  elseif r == 8 then return {}
  elseif r == 9 then return smarm.map({})
  elseif r == 10 then return "text"
  elseif r <= 12 then -- a list
    local t = {}
    for i = 1, math.random(0, 5) do t[i] = random_value(depth - 1) end
    return t
  elseif r <= 14 then -- a tuple, maybe with nils
    local t, n = {}, math.random(0, 5)
    for i = 1, n do if math.random(4) > 1 then t[i] = random_value(depth - 1) end end
    t.n = n
    return smarm.tuple(t)
  else -- a map: keys of every kind but tables
    local t = math.random(2) == 1 and smarm.map({}) or {}
    for _ = 1, math.random(0, 5) do
      local keys = { "k" .. math.random(9), math.random(-5, 20) + 0.5, math.random(2, 9) * 7,
        smarm.atom("key"), math.random(2) == 1 }
      t[keys[math.random(#keys)]] = random_value(depth - 1)
    end
    if next(t) == nil then t.x = 1 end
    return t
  end
end

describe("smarm.term", function()
  it("decodes what Erlang's term_to_binary made, kinds and values kept", function()
    -- term_to_binary({ok, 1.0, 2.5, [a|b], <<1:3>>, 1 bsl 70, -(1 bsl 53), #{}, "abc",
    --   'héllo', nil, [nil], {nil}}) with atoms in Latin-1 (OTP 25)
    local bin = unhex(table.concat({
      "83680D6400026F6B463FF00000000000004640040000000000006C0000000164000161640001624D00000001",
      "03206E09000000000000000000406E07010000000000002074000000006B000361626364000568E96C6C6F64",
      "00036E696C6C000000016400036E696C6A68016400036E696C",
    }))
    local v, next_pos = T.decode(bin)
    assert.are.equal(#bin + 1, next_pos)
    assert.are.equal("tuple", T.type(v))
    assert.are.equal(13, v.n)
    assert.are.equal(smarm.atom("ok"), v[1])
    assert.are.equal(1, v[2])
    assert.are.equal(2.5, v[3])
    assert.are.equal("list", T.type(v[4]))
    assert.are.equal("#Term<improper list>", tostring(v[4]))
    -- a ref with no numbers (Erlang never makes one) still prints
    assert.are.equal("#Ref<a>", tostring(T.decode("\131\90\0\0\119\1a\0\0\0\0")))
    -- a pid's numbers are unsigned 32 bits (they printed as negative numbers past 2^31)
    assert.are.equal("#Pid<a@h.4294967280.2147483648>", tostring(T.decode(
      "\131\88\119\3a@h\255\255\255\240\128\0\0\0\0\0\0\1")))
    assert.are.equal("bitstring", T.type(v[5]))
    assert.are.equal("integer", T.type(v[6]))
    assert.are.equal("1180591620717411303424", tostring(v[6]))
    assert.are.equal(-2 ^ 53, v[7])
    assert.are.equal("map", T.type(v[8]))
    assert.is_nil(next(v[8]))
    assert.are.same({ 97, 98, 99 }, v[9])
    assert.are.equal(smarm.atom("héllo"), v[10]) -- Latin-1 arrives as UTF-8: the same atom
    assert.is_nil(v[11]) -- nil where Lua can hold it
    assert.are.equal(smarm.atom("nil"), v[12][1]) -- the atom where it cannot
    assert.are.equal(1, v[13].n)
    assert.is_nil(v[13][1])
  end)

  it("encodes and decodes Lua values back to themselves", function()
    local values = {
      0, 255, 256, -1, 2 ^ 31, -2 ^ 31 - 1, 2 ^ 53, -2 ^ 53, 0.1, -1e300, 2 ^ 60, "", "a\0b",
      true, false, smarm.atom("ok"), smarm.atom("nil"), {}, { 1, 2, { 3 } }, { a = 1, [2] = "b" },
      smarm.map({}), smarm.map({ "x", "y" }), smarm.tuple({}), smarm.tuple({ n = 3, nil, 2 }),
      smarm.tuple({ smarm.tuple({ 1 }), { smarm.map({}) } }), { [smarm.atom("k")] = { true } },
    }
    for i, v in ipairs(values) do
      local back = T.decode(T.encode(v))
      same(v, back, "values[" .. i .. "]")
    end
    assert.is_nil(T.decode(T.encode(nil)))
    for _ = 1, 300 do
      local v = random_value(4)
      same(v, (T.decode(T.encode(v))))
    end
  end)

  it("makes atoms interned, printable, and refuses names Erlang refuses", function()
    assert.are.equal(smarm.atom("ok"), smarm.atom("ok"))
    assert.is_true(smarm.atom("ok") ~= smarm.atom("error"))
    assert.are.equal("ok", tostring(smarm.atom("ok")))
    assert.are.equal(true, smarm.atom("true"))
    assert.are.equal(false, smarm.atom("false"))
    assert.are.equal("atom", T.type(smarm.atom("nil")))
    local t = { [smarm.atom("k")] = 1 }
    assert.are.equal(1, t[smarm.atom("k")])
    assert.are.equal("smarm.atom", getmetatable(smarm.atom("x")))
    assert.are.equal("atom", T.type(smarm.atom(string.rep("é", 255))))
    assert.has_error(function() smarm.atom(string.rep("a", 256)) end,
      "bad argument #1 to 'atom' (an atom's name has at most 255 characters)")
    -- not well-formed UTF-8, as Erlang reads it: a stray byte; then a surrogate, two overlong
    -- forms and a code point past U+10FFFF, which only their second byte tells (Erlang's
    -- binary_to_term refuses them: sent to another node, the connection dropped)
    for _, bad in ipairs({ "\255", "\237\160\128", "\224\128\128", "\240\128\128\128",
      "\244\144\128\128" }) do
      assert.has_error(function() smarm.atom(bad) end,
        "bad argument #1 to 'atom' (an atom's name must be UTF-8)")
    end
    assert.are.equal("atom", T.type(smarm.atom("\237\159\191\244\143\191\191")))
    assert.has_error(function() smarm.atom({}) end)
    assert.has_error(function() smarm.tuple(1) end)
    assert.has_error(function() smarm.map(setmetatable({}, {})) end,
      "bad argument #1 to 'map' (the table has a metatable of its own)")
    assert.has_error(function() setmetatable(smarm.tuple({}), {}) end)
    local tup = smarm.tuple({ 1 })
    assert.are.equal(tup, smarm.map(tup)) -- marked again, as the other kind
    assert.are.equal("map", T.type(tup))
    assert.is_nil(T.type({}))
    assert.is_nil(T.type("ok"))
  end)

  it("names the place of what has no Erlang term", function()
    local cyclic = { list = {} }
    cyclic.list[1] = cyclic
    local cases = {
      { { f = print }, "smarm.term.encode: value.f is a function (it has no Erlang term)" },
      { { 1, { coroutine.create(print) } }, "smarm.term.encode: value[2][1] is a thread (it has no Erlang term)" },
      { cyclic, "smarm.term.encode: value.list[1] is a table that contains itself (a term cannot)" },
      { { x = 0 / 0 }, "smarm.term.encode: value.x is not a finite number (Erlang has no NaN or infinity)" },
      { smarm.tuple({ 1, math.huge }),
        "smarm.term.encode: value[2] is not a finite number (Erlang has no NaN or infinity)" },
      { { [print] = 1 }, "smarm.term.encode: value[function] is a function (it has no Erlang term)" },
      { io.stdout, "smarm.term.encode: value is a userdata (it has no Erlang term)" },
      -- a tuple's size is Erlang's to limit: 1e8 nils were 500 MB made in 12 s
      { smarm.tuple({ n = 1e8 }),
        "smarm.term.encode: value is a tuple of 100000000 elements (Erlang's hold 0 to 16777215)" },
      { { x = smarm.tuple({ n = 1.5 }) },
        "smarm.term.encode: value.x is a tuple of 1.5 elements (Erlang's hold 0 to 16777215)" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(T.encode, c[1])
      assert.is_false(ok)
      assert.are.equal(c[2], err)
    end
    -- distinct Lua keys of one term (Erlang refuses a map with a key twice); keys that differ
    -- as terms (a list and a tuple of the same elements) go
    local dup_msg = " is a key that another key of its table encodes to as well (an Erlang map "
      .. "has each key once)"
    local dup = { [smarm.tuple({ smarm.atom("n"), 1 })] = true, [smarm.tuple({ smarm.atom("n"), 1 })] = 2 }
    assert.are.equal("smarm.term.encode: value[table]" .. dup_msg, select(2, pcall(T.encode, dup)))
    local err = select(2, pcall(T.encode, { x = { a = 1, [smarm.binary("a")] = 2 } }))
    assert(err == "smarm.term.encode: value.x.a" .. dup_msg
      or err == "smarm.term.encode: value.x[userdata]" .. dup_msg, err)
    -- keys that are maps with the same pairs set in different orders are one Erlang term: maps
    -- inside a key are written in one order (of their keys' bytes), so they encode alike
    -- (strings hash with a seed drawn per run, so pairs() orders differ only by chance: fresh
    -- names until the two keys iterate in different orders, which the check needs)
    local function order(t)
      local ks = {}
      for k in pairs(t) do ks[#ks + 1] = k end
      return table.concat(ks, " ")
    end
    local first, second
    for try = 1, 100 do
      first, second = { z = { m = 1, n = 2 } }, { z = { n = 2 } }
      second.z.m = 1
      for i = 1, 20 do first["k" .. try .. "_" .. i] = i end
      for i = 20, 1, -1 do second["k" .. try .. "_" .. i] = i end
      if order(first) ~= order(second) then break end
    end
    assert(order(first) ~= order(second), "100 tries gave the two keys one order")
    assert.are.equal("smarm.term.encode: value[table]" .. dup_msg,
      select(2, pcall(T.encode, { [first] = 1, [second] = 2 })))
    local back = T.decode(T.encode({ [first] = "first" }))
    local key, value = next(back)
    assert.are.equal("first", value)
    assert.are.equal("map", T.type(key))
    same(first, key)
    local kept = T.decode(T.encode({ [{ 1 }] = "list", [smarm.tuple({ 1 })] = "tuple", a = 1 }))
    local kinds = {}
    for k, v in pairs(kept) do kinds[v] = T.type(k) or type(k) end
    assert.are.same({ list = "table", tuple = "tuple", [1] = "string" }, kinds)
    local shared = { 1 } -- shared, not cyclic: encoded twice
    same({ { 1 }, { 1 } }, (T.decode(T.encode({ shared, shared }))))
    local deep = {}
    for _ = 1, 300 do deep = { deep } end
    assert.has_error(function() T.encode(deep) end)
    err = smarm.run(function() return select(2, pcall(T.encode, { smarm.self() })) end)
    assert.are.equal("smarm.term.encode: value[1] is a pid or ref of this runtime, which is not an Erlang node", err)
  end)

  it("refuses malformed bytes with the place, and survives random ones", function()
    local cases = {
      { "", "no version byte (131) at byte 1" },
      { "\131", "truncated term at byte 2" },
      { "\131\108\0\0\0\5", "truncated term at byte 7" },
      { "\131\108\255\255\255\255\106", "truncated term at byte 8" },
      { "\131\109\0\0\1\0abc", "truncated term at byte 7" },
      { "\131\116\127\255\255\255", "truncated term at byte 7" },
      { "\131\1", "unknown tag at byte 2" },
      { "\131\80\0\0\0\1\0", "a compressed term (not supported) at byte 2" },
      { "\131\103\82\0\0\0\0\0\0\0\0\0\0", "an atom cache reference at byte 3" },
      { "\131" .. string.rep("\104\1", 300) .. "\106", "term nested too deeply at byte 402" },
      { "\131\110\1\2\1", "bad sign of a big integer at byte 2" },
      { "\131\82\0", "an atom cache reference at byte 2" },
      -- a tuple has at most 16777215 elements (erts' MAX_ARITY), which encode refuses to exceed
      { "\131\105\1\0\0\0", "a tuple of more than 16777215 elements at byte 2" },
      { "\131\105\0\255\255\255", "truncated term at byte 7" },
      -- no Erlang float is NaN or infinite (a NaN map key was Lua's "table index is NaN")
      { "\131\116\0\0\0\1\70\127\248\0\0\0\0\0\0\97\1", "bad float at byte 7" },
      { "\131\70\255\240\0\0\0\0\0\0", "bad float at byte 2" },
      { "\131\99" .. ("nan"):rep(10) .. "n", "bad float at byte 2" },
      { "\131\119\2\255\254", "an atom that is not UTF-8 at byte 2" },
      { "\131\119\3\237\160\128", "an atom that is not UTF-8 at byte 2" },
      -- a fun M:F/A whose M or F is no atom (Erlang refuses it) decoded, and then tostring of
      -- it raised "smarm.term.decode: not an atom"
      { "\131\113\97\1\119\1f\97\2", "not an atom at byte 3" },
      { "\131\113\119\1m\108\0\0\0\0\106\97\2", "not an atom at byte 6" },
      { "\131\108\0\0\0\1\97\1\113\119\1m\97\1\97\2", "not an atom at byte 13" },
      -- and its arity a small integer of at least 0: fun m:f/-1 printed, and went back so
      { "\131\113\119\1m\119\1f\98\255\255\255\255", "bad arity of a fun at byte 9" },
      { "\131\113\119\1m\119\1f\106", "bad arity of a fun at byte 9" },
      -- atoms have at most 255 characters (binary_to_term refuses more): 600 Latin-1 ones
      -- arrived cut to 510, and 256 UTF-8 ones made an atom smarm.atom refuses
      { "\131\100\2\88" .. ("\233"):rep(600), "an atom of more than 255 characters at byte 2" },
      { "\131\118\1\0" .. ("a"):rep(256), "an atom of more than 255 characters at byte 2" },
      { "\131\104\1\118\2\0" .. ("\195\169"):rep(256),
        "an atom of more than 255 characters at byte 4" },
      -- a bitstring's last byte holds 1 to 8 bits, none only when it has no bytes (erts
      -- refuses the rest): 200 bits in one byte printed as #Bits<200>
      { "\131\77\0\0\0\1\200\0", "bad bit count of a bitstring at byte 2" },
      { "\131\77\0\0\0\1\0\255", "bad bit count of a bitstring at byte 2" },
      { "\131\77\0\0\0\0\1", "bad bit count of a bitstring at byte 2" },
      { "\131\108\0\0\0\0\77\0\0\0\2\9\0\0", "bad bit count of a bitstring at byte 7" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(T.decode, c[1])
      assert.is_false(ok)
      assert.are.equal("smarm.term.decode: " .. c[2], err)
    end
    assert.are.equal("#Fun<m:f/2>", tostring(T.decode("\131\113\119\1m\119\1f\97\2")))
    assert.are.equal("#Bits<11>", tostring(T.decode("\131\77\0\0\0\2\3\0\224")))
    assert.are.equal(smarm.atom(("é"):rep(255)), T.decode("\131\100\0\255" .. ("\233"):rep(255)))
    assert.are.equal(smarm.atom(("é"):rep(255)), T.decode("\131\118\1\254" .. ("é"):rep(255)))
    assert.has_error(function() T.decode("\131\97\1", 5) end,
      "bad argument #2 to 'decode' (position out of the string)")
    -- a stream of terms, one after the other
    local s = T.encode(1) .. T.encode("two")
    local one, at = T.decode(s)
    assert.are.equal(1, one)
    assert.are.equal("two", (T.decode(s, at)))
    -- random bytes after a valid start: an error or a value, never a crash. Fewer under TSan:
    -- an error thrown across C frames (LuaJIT unwinds them itself) leaves them on TSan's shadow
    -- stack, which aborts past 65,536 frames.
    math.randomseed(7)
    local starts = { 104, 105, 106, 107, 108, 109, 110, 111, 116, 103, 88, 90, 112, 113, 77 }
    for _ = 1, os.getenv("SMARM_SANITIZER") == "tsan" and 1000 or 20000 do
      local b = { "\131", string.char(starts[math.random(#starts)]) }
      for i = 3, math.random(2, 40) do b[i] = string.char(math.random(0, 255)) end
      local ok, err = pcall(T.decode, table.concat(b))
      assert(ok or err:match("^smarm.term.decode: "), err)
    end
  end)

  it("refuses a term too deep for the actor's C stack, not crashing the process", function()
    -- 199 nested tuples (400 bytes, within the 200 levels) took 1 KiB of C stack a level: they
    -- reached the guard page of a 128 KiB stack (-S 128K), aborting the process, and of the
    -- default 256 KiB under ASan; and a decode from where little stack is left (inside nested
    -- gsub callbacks, which stop with 64 KiB left) overflowed with far fewer levels. Now each
    -- container below the outermost checks the room left, and the error names the decoder.
    -- The encoder's walk had no such check: it has now, as a flat table shows it is no more
    -- strict than that.
    local out, err, status = script.run([[
      local T = require("smarm").term
      local deep = "\131" .. ("\104\1"):rep(199) .. "\106"
      local ok, err = pcall(T.decode, deep)
      print(ok or err)
      local innermost = true
      local function f() -- to the last gsub callback: less than 72 KiB of stack left
        local ok2, err2 = pcall(string.gsub, "x", "x", f)
        if not ok2 and innermost then
          innermost = false
          print(select(2, pcall(T.decode, deep)))
          local nested = {} -- and its encoding, whose walk took as much stack a level
          for _ = 1, 190 do nested = { nested } end
          print(select(2, pcall(T.encode, nested)))
          print(T.decode(T.encode({ 7 }))[1]) -- a flat one takes little: its level is allowed
        end
        if not ok2 then error(err2, 0) end
        return err2
      end
      pcall(f)
      print(T.decode("\131\104\1\104\1\97\7")[1][1])
    ]], "-s 1 -S 128K")
    if not out then return pending("SMARM_EXE is not set (./dev.sh test sets it)") end
    assert.are.equal(0, status, err)
    local too_deep = "smarm.term.decode: term nested too deeply for the actor's C stack at byte %d+"
    local lines = {}
    for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
    assert.are.equal(5, #lines, out)
    assert(lines[1] == "true" or lines[1]:match("^" .. too_deep .. "$"), lines[1])
    assert.matches("^" .. too_deep .. "$", lines[2])
    assert.matches("^smarm%.term%.encode: value[%[%]1]* is nested too deeply for the actor's C "
      .. "stack$", lines[3])
    assert.are.equal("7", lines[4])
    assert.are.equal("7", lines[5])
  end)

  it("decodes integers just beyond 2^53 as opaque integers, not rounded", function()
    -- term_to_binary(1 bsl 53 + 1), its negation, and 1 bsl 53 + 2: no double holds them
    for _, case in ipairs({ { "\131\110\7\0\1\0\0\0\0\0\32", "9007199254740993" },
      { "\131\110\7\1\1\0\0\0\0\0\32", "-9007199254740993" },
      { "\131\110\7\0\2\0\0\0\0\0\32", "9007199254740994" } }) do
      local v = T.decode(case[1])
      assert.are.equal("integer", T.type(v))
      assert.are.equal(case[2], tostring(v))
      assert.are.equal(case[1], T.encode(v))
    end
    -- 2^53 itself is a number
    assert.are.equal(2 ^ 53, T.decode("\131\110\7\0\0\0\0\0\0\0\32"))
  end)

  -- What a decode leaves allocated in bytes (garbage too: the collector is stopped meanwhile),
  -- and the value.
  local function decode_allocating(s)
    collectgarbage("collect")
    collectgarbage("stop")
    local before = collectgarbage("count")
    local v = T.decode(s)
    local bytes = (collectgarbage("count") - before) * 1024
    collectgarbage("restart")
    return v, bytes
  end

  it("decodes nested opaque lists and maps in memory and time linear in their size", function()
    -- [[[... [Binary | 7] ...| 7] | 7] | 7], 150 levels around a binary of 20,000 bytes: each
    -- level decoded its elements, found its improper tail only then, and made itself an opaque
    -- term, a copy of its bytes, walked again: the binary was copied and walked 150 times (6 MB
    -- of garbage for 21 KB), where an adversary picks the shape. Now a pass that meets an
    -- improper list starts again knowing where every opaque list or map is, and decodes each
    -- byte once more at most: what it leaves is a few copies of the term, whatever its shape.
    local binary = "\109\0\0\78\32" .. ("x"):rep(20000)
    local function nest(open, inner, close, levels)
      for _ = 1, levels do inner = open .. inner .. close end
      return "\131" .. inner
    end
    -- #{1 => a, 1.0 => b, k => Inner}, a map Lua cannot hold (see the next case), the same way
    local a_b = "\97\1\119\1a\70\63\240\0\0\0\0\0\0\119\1b"
    local shapes = {
      nest("\108\0\0\0\1", binary, "\97\7", 150),
      nest("\116\0\0\0\3" .. a_b .. "\119\1k", binary, "", 150),
      nest("\108\0\0\0\1\116\0\0\0\3" .. a_b .. "\119\1k", binary, "\97\7", 75),
      -- [[1 | [[1 | ...]]]]: proper lists, each the tail of an improper one
      nest("\108\0\0\0\1\108\0\0\0\1\97\1", binary, "\106", 75),
    }
    for i, s in ipairs(shapes) do
      local v, bytes = decode_allocating(s)
      assert(bytes < 8 * #s, ("shape %d: %d bytes left by a decode of %d"):format(i, bytes, #s))
      assert.are.equal(s, T.encode(v))
    end
    assert.are.equal("list", T.type(T.decode(shapes[1])))
    assert.are.equal("map", T.type(T.decode(shapes[2])))
    assert.are.equal("list", T.type(T.decode(shapes[3])))
    local proper = T.decode(shapes[4])
    assert.are.equal("table", type(proper))
    assert.are.equal("list", T.type(proper[1]))
    -- proper lists and maps around opaque ones decode as tables, the opaque ones in their places,
    -- before and after the first improper list met: [[1 | 2], [[3 | 4]], #{k => [5 | 6]}, [7]]
    local mixed = "\131\108\0\0\0\4" .. "\108\0\0\0\1\97\1\97\2" ..
      "\108\0\0\0\1\108\0\0\0\1\97\3\97\4\106" ..
      "\116\0\0\0\1\119\1k\108\0\0\0\1\97\5\97\6" .. "\108\0\0\0\1\97\7\106" .. "\106"
    local m = T.decode(mixed)
    assert.are.equal("#Term<improper list>", tostring(m[1]))
    assert.are.equal("list", T.type(m[2][1]))
    assert.are.equal("list", T.type(m[3][smarm.atom("k")]))
    assert.are.same({ 7 }, m[4])
    assert.are.equal(4, #m)
    assert.are.equal(mixed, T.encode(m))
    -- an improper list at the top, with a stream of terms after it
    local s = "\131\108\0\0\0\1\97\1\97\2\131\97\3"
    local first, at = T.decode(s)
    assert.are.equal("list", T.type(first))
    assert.are.equal(11, at)
    assert.are.equal(3, (T.decode(s, at)))
  end)

  it("keeps a map opaque whose distinct keys are one Lua key, and refuses a key twice", function()
    -- #{1 => a, 1.0 => b} is two keys to Erlang and one number to Lua: the second pair took
    -- the first one's place, silently. Now the map stays opaque, as every other term Lua cannot
    -- hold, and goes back as the same bytes.
    local int_float = "\131\116\0\0\0\2\97\1\119\1a\70\63\240\0\0\0\0\0\0\119\1b"
    local v = T.decode(int_float)
    assert.are.equal("userdata", type(v))
    assert.are.equal("map", T.type(v))
    assert.are.equal("#Term<map>", tostring(v))
    assert.are.equal(int_float, T.encode(v))
    assert.are.equal(v, T.decode(int_float)) -- interned, as opaque terms are
    -- 0.0 and -0.0 (two keys since OTP 27), 2 and 2.0 as a big integer and an old-style float
    local zeros = "\131\116\0\0\0\2\70" .. ("\0"):rep(8) .. "\97\1\70\128" .. ("\0"):rep(7) ..
      "\97\2"
    assert.are.equal("map", T.type(T.decode(zeros)))
    local old_float = "\131\116\0\0\0\2\110\1\0\2\97\1\99" ..
      ("2.00000000000000000000e+00"):gsub("$", ("\0"):rep(5)) .. "\97\2"
    assert.are.equal(31, #("2.00000000000000000000e+00" .. ("\0"):rep(5)))
    assert.are.equal("map", T.type(T.decode(old_float)))
    -- only that map: the tuple around it, and a map of distinct numbers, decode as tables
    local t = T.decode("\131\104\3" .. int_float:sub(2) .. "\97\5" ..
      "\116\0\0\0\2\97\1\97\1\70\64\0\0\0\0\0\0\0\97\2")
    assert.are.equal("tuple", T.type(t))
    assert.are.equal(v, t[1])
    assert.are.same({ 1, 2 }, { t[3][1], t[3][2] })
    -- one number twice: binary_to_term refuses such a map (badarg), and so does the decoder
    for _, c in ipairs({
      { "\131\116\0\0\0\2\97\1\97\1\98\0\0\0\1\97\2", 11 }, -- 1, then 1 as a 32-bit integer
      { "\131\116\0\0\0\2\70\64\0\0\0\0\0\0\0\97\1\70\64\0\0\0\0\0\0\0\97\2", 18 },
      -- and where the map is opaque, or inside an opaque term: [#{1 => 1, 1 => 2} | 2] was one
      { "\131\108\0\0\0\1\116\0\0\0\2\97\1\97\1\98\0\0\0\1\97\2\97\2", 16 },
      { "\131\116\0\0\0\3\97\1\97\1\70\63\240\0\0\0\0\0\0\97\2\98\0\0\0\1\97\3", 22 },
      { "\131\116\0\0\0\3\70\63\240\0\0\0\0\0\0\97\1\97\1\97\2\70\63\240\0\0\0\0\0\0\97\3",
        22 }, -- 1.0, 1, 1.0
    }) do
      local ok, err = pcall(T.decode, c[1])
      assert.is_false(ok)
      assert.are.equal(("smarm.term.decode: a map with a key twice at byte %d"):format(c[2]), err)
    end
    -- keys that Lua keeps apart: a binary, the list of its bytes, the atom of that name
    local three = T.decode("\131\116\0\0\0\3\109\0\0\0\2ab\97\1\107\0\2ab\97\2\119\2ab\97\3")
    local n = 0
    for _ in pairs(three) do n = n + 1 end
    assert.are.equal(3, n)
    assert.are.same({ 1, 3 }, { three.ab, three[smarm.atom("ab")] })
  end)

  it("keeps atoms, tuples, maps and opaque terms what they are in messages", function()
    local big = T.decode(unhex("836E09000000000000000000" .. "01"))
    local local_copy, report, remote = smarm.run(function()
      local msg = smarm.tuple({ n = 4, smarm.atom("ok"), smarm.map({ 1 }), nil, big })
      msg.shared = msg[2]
      local here = smarm.spawn(function() smarm.send(smarm.receive(), smarm.receive()) end)
      smarm.send(here, smarm.self())
      smarm.send(here, msg)
      local local_copy = guard.receive("local echo")
      local there = smarm.spawn_on(2, function()
        local from = smarm.receive()
        local m = smarm.receive()
        smarm.send(from, {
          smarm.term.type(m), m.n, m[1] == smarm.atom("ok"), smarm.term.type(m[2]),
          rawequal(m[2], m.shared), tostring(m[4]), smarm.term.type(m[4]), m[3],
        })
        smarm.send(from, m)
      end)
      smarm.send(there, smarm.self())
      smarm.send(there, msg)
      return local_copy, guard.receive("remote report"), guard.receive("remote echo")
    end)
    assert.are.same({ "tuple", 4, true, "map", true, "18446744073709551616", "integer" },
      { report[1], report[2], report[3], report[4], report[5], report[6], report[7] })
    assert.is_nil(report[8])
    for _, m in ipairs({ local_copy, remote }) do
      assert.are.equal("tuple", T.type(m))
      assert.are.equal(smarm.atom("ok"), m[1])
      assert.are.equal(big, m[4]) -- interned: the same value again
      assert.are.equal("map", T.type(m[2]))
    end
  end)

  -- A map is walked while its keys and values are encoded, which allocates, and an allocation's
  -- GC step may run finalizers: one that took the key the walk stood on and grew the map made
  -- the encode raise "invalid key to 'next'", and one that added or took keys wrote other pairs
  -- than the count before them (a term that decodes as something else, or not at all). The
  -- finalizers here take the map's keys named f.. and add others; the keys k.. stay throughout.
  -- In a process of its own, by the executable: the GC settings below make it likely.
  it("encodes a map while finalizers change it", function()
    local out, err, status = script.run([[
      local T = require("smarm").term
      local m = {}
      for i = 1, 64 do m["k" .. i] = { i } end -- tables: each allocates as it is encoded
    ]] .. script.churn("m", "f", "{ 0 }") .. [[
      for _ = 1, 1000 do
        local back = T.decode(T.encode(m))
        for i = 1, 64 do assert(back["k" .. i][1] == i, "k" .. i) end
      end
      print(added > 0)
    ]])
    if not out then return pending("SMARM_EXE is not set (./dev.sh test sets it)") end
    assert.are.equal(0, status, err)
    assert.are.equal("true\n", out) -- the finalizers ran
  end)
end)

describe("smarm.term with Erlang", function()
  it("gives Erlang the terms it expects", function()
    if skip_without_erl() then return end
    local values = {
      nil, true, false, 0, 255, 256, -1, 2147483647, -2147483648, 2147483648,
      2 ^ 53, -2 ^ 53, 1.5, -0.25, 1e300, "", "héllo", "\0\255\n", {}, { 1, 2, 3 },
      { "a", { "b" } }, { a = 1 }, { [1] = "x", [3] = "y" }, smarm.map({}), smarm.map({ smarm.atom("one") }),
      smarm.tuple({}), smarm.tuple({ smarm.atom("ok"), 3 }), smarm.tuple({ n = 3, nil, 2 }),
      smarm.atom("ok"), smarm.atom("with space"), smarm.atom("héllo"), smarm.atom(""),
      { smarm.atom("nil") }, smarm.map({ [smarm.atom("nil")] = smarm.atom("nil") }),
      smarm.tuple({ {}, smarm.map({}) }), { smarm.tuple({ true, false }) },
    }
    local encoded = {}
    for i = 1, 36 do encoded[i] = T.encode(values[i]) end
    local out = erl("expect", write_lines("expect.hex", encoded))
    assert.are.equal("done 36\n", out)
  end)

  it("takes Erlang's random terms and gives back terms =:= to them", function()
    if skip_without_erl() then return end
    local from_erl = erl_dir() .. "/random.hex"
    erl("random", "1234", "3000", from_erl)
    local back = {}
    for i, bin in ipairs(read_lines(from_erl)) do
      local v, next_pos = T.decode(bin)
      assert.are.equal(#bin + 1, next_pos)
      back[i] = T.encode(v)
    end
    assert.are.equal(3000, #back)
    assert.are.equal("done 3000\n", erl("same", from_erl, write_lines("back.hex", back)))
  end)

  it("gets back random Lua values that went through Erlang", function()
    if skip_without_erl() then return end
    math.randomseed(99)
    local values, encoded = {}, {}
    for i = 1, 3000 do
      values[i] = random_value(4)
      encoded[i] = T.encode(values[i])
    end
    local echoed = erl_dir() .. "/echoed.hex"
    erl("echo", write_lines("lua.hex", encoded), echoed)
    for i, bin in ipairs(read_lines(echoed)) do
      same(values[i], (T.decode(bin)), "values[" .. i .. "]")
    end
  end)

  teardown(erl_support.clean)
end)
