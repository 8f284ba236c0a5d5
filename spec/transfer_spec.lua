-- smarm.spawn_on: functions moving between VMs, messages across schedulers, require safety.
local smarm = require("smarm")
local guard = dofile("spec/support/guard.lua")
local HANG = guard.HANG -- seconds: receive limits below only guard against a hang
local script = dofile("spec/support/script.lua")

package.path = "spec/fixtures/?.lua;" .. package.path

describe("smarm.spawn_on", function()
  it("starts an actor on the scheduler asked, with copied arguments and upvalues", function()
    local r = guard.run(function()
      local me = smarm.self()
      local config = { factor = 10, name = "cfg" }
      local p = smarm.spawn_on(2, function(a, t)
        t.changed = true
        smarm.send(me, { sched = smarm.scheduler(), v = a * config.factor, name = config.name,
          self = smarm.self() })
      end, 4, { changed = false })
      local got = guard.receive("the spawned actor's report")
      got.pid_matches = got.self == p
      got.pid_sched = tostring(p):match("^<(%d+)%.")
      return got
    end, { schedulers = 2 })
    assert.are.equal(2, r.sched)
    assert.are.equal(40, r.v)
    assert.are.equal("cfg", r.name)
    assert.is_true(r.pid_matches)
    assert.are.equal("2", r.pid_sched)
  end)

  it("copies to the caller's own scheduler too, whichever way it is spawned there", function()
    -- A function whose environment is the VM's globals and whose upvalues hold plain values,
    -- pids and modules is copied there without a message (busted gives this file's functions
    -- an environment of their own, so `plain` is made by a chunk that has the globals); one with
    -- a table upvalue, or a table argument, goes through one. Either way the child has its own
    -- upvalue cells and copies, as on another scheduler.
    local make_plain = assert(load([[
      local smarm, me, str = ...
      local count = 1
      return function(tag)
        smarm.receive()
        smarm.send(me, { tag, count, str == string })
      end, function(v) count = v end
    ]]))
    local r = guard.run(function()
      local me = smarm.self()
      local plain, set_count = make_plain(smarm, me, string)
      local shared = { n = 1 }
      local with_table = function(t) smarm.receive(); smarm.send(me, { shared.n, t.n }) end
      local a = smarm.spawn_on(1, plain, "plain")
      local any = smarm.spawn_on("any", plain, "any") -- here or there, a copy
      local b, ref = smarm.spawn_opt({ on = 1, monitor = true }, with_table, shared)
      set_count(2)
      shared.n = 2
      for _, p in ipairs({ a, any, b }) do smarm.send(p, "go") end
      local got = { plain = guard.receive("the plain child's report",
          function(m) return m[1] == "plain" end),
        any = guard.receive("the 'any' child's report", function(m) return m[1] == "any" end),
        with_table = guard.receive("the other child's report"),
        down = guard.receive("the DOWN", function(m) return type(m) == "table" and m.ref == ref end),
        same_sched = tostring(a):match("^<(%d+)%.") }
      return got
    end, { schedulers = 2 })
    assert.are.same({ "plain", 1, true }, r.plain) -- not 2: its own cell, copied at the spawn
    assert.are.same({ "any", 1, true }, r.any)
    assert.are.same({ 1, 1 }, r.with_table)
    assert.are.equal("normal", r.down.reason)
    assert.are.equal("1", r.same_sched)
  end)

  it("passes every argument, nil ones included, in their places", function()
    local r = guard.run(function()
      local me = smarm.self()
      smarm.spawn_on(2, function(...) smarm.send(me, { n = select("#", ...), ... }) end, nil, 3,
        nil, { 4 })
      return guard.receive("the child's arguments")
    end, { schedulers = 2 })
    assert.are.same({ n = 4, nil, 3, nil, { 4 } }, r)
  end)

  it("passes hundreds of arguments to a spawn here, there and on its own scheduler", function()
    -- More than a new coroutine holds without growing its stack (LUA_MINSTACK), nil ones kept
    -- in their places.
    local r = guard.run(function()
      local me = smarm.self()
      local args = {}
      for i = 1, 300 do args[i] = (i % 7 ~= 0) and i or nil end
      local function report(...)
        smarm.send(me, { select("#", ...), (select(150, ...)), (select(300, ...)) })
      end
      smarm.spawn(report, unpack(args, 1, 300))
      smarm.spawn_on(1, report, unpack(args, 1, 300))
      smarm.spawn_on(2, report, unpack(args, 1, 300))
      return { guard.receive("a spawn's report"), guard.receive("a spawn_on(1)'s report"),
        guard.receive("a spawn_on(2)'s report") }
    end, { schedulers = 2 })
    for i = 1, 3 do assert.are.same({ 300, 150, 300 }, r[i]) end
  end)

  it("re-binds loaded modules and globals by name in the target VM", function()
    local r = guard.run(function()
      local me = smarm.self()
      local fmt = string.format
      smarm.spawn_on(2, function()
        smarm.send(me, fmt("%s-%d", type(smarm.receive), smarm.scheduler()))
      end)
      return guard.receive("the spawned actor's report")
    end, { schedulers = 2 })
    assert.are.equal("function-2", r)
  end)

  -- smarm.tcp, smarm.fs and the others are tables of smarm's: not in package.loaded, their
  -- functions could not be found by name, and `local fs = smarm.fs` stopped a closure moving.
  it("re-binds smarm's own tables (smarm.fs, smarm.tcp, ...) and their functions", function()
    local r = guard.run(function()
      local me = smarm.self()
      local fs, connect = smarm.fs, smarm.tcp.connect
      smarm.spawn_on(2, function()
        smarm.send(me, { fs == smarm.fs, connect == smarm.tcp.connect, smarm.scheduler() })
      end)
      return guard.receive("the spawned actor's report")
    end, { schedulers = 2 })
    assert.are.same({ true, true, 2 }, r)
    assert.are.equal(smarm.fs, require("smarm.fs"))
  end)

  it("names an upvalue that cannot move, through nested functions", function()
    local e1, e2 = guard.run(function()
      local co = coroutine.create(print)
      local function helper() return co end
      local _, a = pcall(smarm.spawn_on, 2, function() helper() end)
      local iter = string.gmatch("", "")
      local _, b = pcall(smarm.spawn_on, 2, function() return iter end)
      return a, b
    end, { schedulers = 2 })
    assert.matches("function%[upvalue 'helper'%]%[upvalue 'co'%] is a thread$", e1)
    assert.matches("function%[upvalue 'iter'%] is a C function that no loaded module holds$", e2)
  end)

  it("names an argument that cannot move", function()
    local err = guard.run(function()
      local ok, e = pcall(smarm.spawn_on, 2, function() end, 1, { cb = coroutine.create(print) })
      return (not ok) and e
    end, { schedulers = 2 })
    assert.matches("argument%[2%]%.cb is a thread$", err)
  end)

  it("spawns by 'module.function' name", function()
    local r = guard.run(function()
      smarm.spawn_on(2, "smarm_slow_module.where", smarm.self(), "named")
      return guard.receive("the named function's report")
    end, { schedulers = 2 })
    assert.are.equal("named", r.tag)
    assert.are.equal(2, r.sched)
  end)

  it("balances with 'any'", function()
    local counts = guard.run(function()
      local me = smarm.self()
      local c = { 0, 0 }
      for _ = 1, 40 do
        -- each stays alive (parked) until the run ends, so that it counts for the balance
        smarm.spawn_on("any", function() smarm.send(me, smarm.scheduler()); smarm.receive() end)
        local k = guard.receive("a spawned actor's scheduler")
        c[k] = c[k] + 1
      end
      return c
    end, { schedulers = 2 })
    assert.is_true(counts[1] > 0)
    assert.is_true(counts[2] > 0)
  end)

  it("takes turns with 'any' between schedulers equally loaded", function()
    -- one actor waits on each scheduler (the main actor, and this one), and each child is gone
    -- (its DOWN came: its death is counted) before the next spawn: every spawn is a tie
    local counts = guard.run(function()
      assert(smarm.alive(smarm.spawn_on(2, function() smarm.receive() end))) -- counted there
      -- made by a chunk with the globals (busted gives this file's functions an environment of
      -- their own), so that it can be copied without a message
      local child = assert(load("return function(t) return t end"))()
      local function spawn_one(i) -- copied without a message (odd i), or with one (a table)
        local pid, ref = smarm.spawn_opt({ on = "any", monitor = true }, child,
          i % 2 == 0 and {} or nil)
        guard.receive("a child's DOWN", function(m) return type(m) == "table" and m.ref == ref end)
        return tonumber(tostring(pid):match("^<(%d+)%."))
      end
      local c = {}
      for round = 1, 2 do -- the second round starts with the other scheduler's turn
        c[round] = { 0, 0 }
        for i = 1, 40 do
          local k = spawn_one(i)
          c[round][k] = c[round][k] + 1
        end
        spawn_one(1)
      end
      return c
    end, { schedulers = 2 })
    assert.are.same({ { 20, 20 }, { 20, 20 } }, counts)
  end)

  it("rejects bad arguments", function()
    local e1, e2, e3, e4, e5 = guard.run(function()
      local _, a = pcall(function() smarm.spawn_on(3, function() end) end)
      local _, b = pcall(function() smarm.spawn_on(1, 42) end)
      local _, c = pcall(function() smarm.spawn_on(2, coroutine.wrap(print)) end)
      local _, d = pcall(function() smarm.spawn_on(2, "nodot") end)
      local _, e = pcall(function() smarm.spawn_on(2, "trailing.") end)
      return a, b, c, d, e
    end, { schedulers = 2 })
    assert.matches("bad argument #1 to 'spawn_on'", e1)
    assert.matches("bad argument #2 to 'spawn_on' %(function or \"module.function\" expected, got number%)", e2)
    assert.matches("function is a C function that no loaded module holds", e3)
    assert.matches("bad argument #2 to 'spawn_on' %('nodot' is not of the form module.function%)", e4)
    assert.matches("'trailing%.' is not of the form module.function", e5)
  end)

  it("reports a bad 'module.function' in the new actor, which dies alone", function()
    local still = guard.run(function()
      local a = smarm.spawn_on(2, "no_such_module_here.fn")
      local b = smarm.spawn_on(2, "smarm_slow_module.nothing")
      guard.ended(a, "the actor of a missing module")
      guard.ended(b, "the actor of a missing function")
      return "alive"
    end, { schedulers = 2 })
    assert.are.equal("alive", still)
  end)

  it("runs thousands of actors across schedulers, messages crossing both ways", function()
    local n = 2000
    local total, by = guard.run(function()
      local me = smarm.self()
      local pids = {}
      for i = 1, n do
        -- no wall-clock budget: an actor may wait as long as the other spawns take
        pids[i] = smarm.spawn_on(i % 2 + 1, function(v)
          local m = smarm.receive(HANG)
          smarm.send(me, { v = v * m, sched = smarm.scheduler() })
        end, i)
      end
      for i = 1, n do smarm.send(pids[i], 2) end
      local sum, per = 0, { 0, 0 }
      for _ = 1, n do
        local r = guard.receive("an actor's answer")
        sum = sum + r.v
        per[r.sched] = per[r.sched] + 1
      end
      return sum, per
    end, { schedulers = 2 })
    assert.are.equal(n * (n + 1), total)
    assert.are.equal(n / 2, by[1])
    assert.are.equal(n / 2, by[2])
  end)

  it("keeps what waits on a busy scheduler bounded, however fast the spawner", function()
    -- Each child works far longer than a spawn takes, so the spawner outruns scheduler 2; that
    -- scheduler hands out no more pids while over 1,024 actors wait in its run queue, which
    -- then grows past that by at most the 255 pids one spawner holds and its one spawn of a
    -- round trip (docs/api.md). Never switched out (slice = math.huge), a child ends at each
    -- pass: a child preempted on a loaded machine would let one more spawn in per slice.
    local n = 1500
    local peak, done = guard.run(function()
      local me = smarm.self()
      local child = function()
        local x = 0
        for i = 1, 100000 do x = x + i % 7 end
        smarm.send(me, x)
      end
      local most = 0
      for i = 1, n do
        smarm.spawn_opt({ on = 2, slice = math.huge }, child)
        if i % 25 == 0 then most = math.max(most, smarm.stats()[2].runq) end
      end
      for _ = 1, n do guard.receive("a child's end") end
      return most, n
    end, { schedulers = 2 })
    assert.are.equal(1500, done)
    assert.is_true(peak <= 1024 + 255 + 1, "peak run queue " .. peak)
  end)
end)

describe("closures that travel", function()
  -- Everything here crosses to scheduler 2's VM, where nothing of the caller's VM is shared.
  it("moves nested function upvalues, recursion and shared upvalue cells", function()
    local r = guard.run(function()
      local me = smarm.self()
      local count = 0
      local function inc(n) count = count + n; return count end
      local function get() return count end
      local function fact(n) return n <= 1 and 1 or n * fact(n - 1) end
      local scale = { by = 3 }
      local function times(v) return v * scale.by end
      local function twice(v) return times(times(v)) end -- a function upvalue of one
      local function thrice(v) return twice(v) + fact(3) end -- and one more level
      smarm.spawn_on(2, function(arg, same_scale)
        inc(5)
        inc(arg)
        smarm.send(me, { sched = smarm.scheduler(), count = get(), fact = fact(5),
          thrice = thrice(2), same = same_scale == scale, local_count = nil })
      end, 7, scale)
      local got = guard.receive("the closure's report")
      got.local_count = count
      return got
    end, { schedulers = 2 })
    assert.are.same({ sched = 2, count = 12, fact = 120, thrice = 24, same = true,
      local_count = 0 }, r)
  end)

  -- The decoder keeps a template per distinct function (256, then it starts over) and the one
  -- it decoded last at hand: every closure must be its own function's, on this scheduler and on
  -- another, through a start over and back, and in turns.
  it("decodes each of many distinct functions as itself, again after the templates start over", function()
    local wrong = smarm.run(function()
      local me = smarm.self()
      local fs = {}
      for i = 1, 300 do fs[i] = load("return function() return " .. i .. " end")() end
      local echo = smarm.spawn_on(2, function()
        while true do
          local m = smarm.receive()
          smarm.send(m[1], m[2])
        end
      end)
      local out = {}
      local function check(i, f)
        if f() ~= i then out[#out + 1] = i .. " gave " .. tostring(f()) end
      end
      for _ = 1, 2 do
        for i = 1, 300 do
          smarm.send(me, fs[i])
          smarm.send(me, fs[i])
          check(i, smarm.receive())
          check(i, smarm.receive())
          smarm.send(echo, { me, fs[i] })
          check(i, smarm.receive())
        end
        for i = 1, 100 do
          local k = i % 2 == 0 and 1 or 299
          smarm.send(me, fs[k])
          check(k, smarm.receive())
        end
        collectgarbage()
      end
      smarm.exit(echo, "kill")
      return out
    end, { schedulers = 2 })
    assert.are.same({}, wrong)
  end)

  it("keeps one function one function, and its upvalues' sharing, within a transfer", function()
    local r = guard.run(function()
      local me = smarm.self()
      local n = 0
      local function bump() n = n + 1; return n end
      local a, b = bump, bump
      smarm.spawn_on(2, function(c)
        smarm.send(me, { a == b, b == c, a(), b(), c() })
      end, bump)
      return guard.receive("the report")
    end, { schedulers = 2 })
    assert.are.same({ true, true, 1, 2, 3 }, r)
  end)

  it("keeps a table shared by arguments and upvalues one table", function()
    local r = guard.run(function()
      local me = smarm.self()
      local t = { n = 1 }
      smarm.spawn_on(2, function(a, b)
        a.n = a.n + 1
        smarm.send(me, { a == b, b == t, t.n, b.n, smarm.scheduler() })
      end, t, t)
      return guard.receive("the report")
    end, { schedulers = 2 })
    assert.are.same({ true, true, 2, 2, 2 }, r)
  end)

  it("moves what lives only in the caller's globals by value, never as nil", function()
    local r = guard.run(function()
      local me = smarm.self()
      _G.smarm_spec_script_fn = function(v) return v + 100 end
      _G.smarm_spec_script_data = { k = "v" }
      local h, d = _G.smarm_spec_script_fn, _G.smarm_spec_script_data
      package.loaded.smarm_spec_handmade = { base = 5, add = function(x) return x + 1 end }
      local hm = require("smarm_spec_handmade") -- in package.loaded only: no VM can require it
      smarm.spawn_on(2, function()
        smarm.send(me, { h(1), d.k, hm.add(hm.base), type(_G.smarm_spec_script_fn) })
      end)
      local got = guard.receive("the report")
      _G.smarm_spec_script_fn, _G.smarm_spec_script_data = nil, nil
      package.loaded.smarm_spec_handmade = nil
      return got
    end, { schedulers = 2 })
    assert.are.same({ 101, "v", 6, "nil" }, r)
  end)

  it("re-binds modules, their functions and userdata, and standard globals by name", function()
    local r = guard.run(function()
      local me = smarm.self()
      local slow = require("smarm_slow_module")
      local insert, out, p, req = table.insert, io.stdout, print, require
      smarm.spawn_on(2, function()
        local t = {}
        insert(t, "x")
        smarm.send(me, { t[1], slow == require("smarm_slow_module"), out == io.stdout,
          p == print, req == require, type(slow.where) })
      end)
      return guard.receive("the report")
    end, { schedulers = 2 })
    assert.are.same({ "x", true, true, true, true, "function" }, r)
  end)

  it("re-binds the library functions smarm replaced, captured before it replaced them", function()
    -- `local format = string.format` at the top of a module loaded before smarm: the original
    -- C function, which smarm's checked string.format (and coroutine.create, string.gsub) hold
    local function original(f, name)
      for i = 1, math.huge do
        local n, v = debug.getupvalue(f, i)
        if not n then return nil end
        if n == name then return v end
      end
    end
    local format, create = original(string.format, "format"), original(coroutine.create, "create")
    local _, gsub = debug.getupvalue(string.gsub, 1) -- a C closure: the original is its upvalue
    assert.is_true(type(format) == "function" and format ~= string.format)
    local r = guard.run(function()
      local me = smarm.self()
      smarm.spawn_on(2, function()
        smarm.send(me, { format("%d", 7), type(create(print)), (gsub("a", "a", "b")),
          format == string.format, create == coroutine.create })
      end)
      return guard.receive("the report")
    end, { schedulers = 2 })
    assert.are.same({ "7", "thread", "b", true, true }, r)
  end)

  it("carries functions in messages, here and to another scheduler", function()
    local r = guard.run(function()
      local me = smarm.self()
      local function serve()
        local m = smarm.receive(HANG)
        smarm.send(m.from, { m.f(3), m.g(3), m[m.f] })
      end
      local out = {}
      for i, p in ipairs({ smarm.spawn(serve), smarm.spawn_on(2, serve) }) do
        local k = 10 * i
        local function add(x) return x + k end
        smarm.send(p, { from = me, f = add, g = function(x) return add(x) * 2 end, [add] = "key" })
        out[i] = guard.receive("a server's answer")
      end
      return out
    end, { schedulers = 2 })
    assert.are.same({ { 13, 26, "key" }, { 23, 46, "key" } }, r)
  end)
end)

-- A spawn_on of the same function again copies the function's bytes kept from the spawn before
-- (codec.c, keep_transfer) when its upvalues hold nil, booleans, numbers or modules. The
-- children below report by a registered name: the spawner's pid in an upvalue would keep them
-- from being kept.
describe("a spawn of one function again", function()
  -- A kept transfer served once the function became a module's (a later index of names) sent
  -- its bytecode where the module's field should go by name.
  it("goes by name once a module holds the function, and as a copy once none does", function()
    local r = guard.run(function()
      smarm.register("spawn_kept", smarm.self())
      local fn = function() require("smarm").send("spawn_kept", "a copy") end
      local out = {}
      local function spawn_there(times)
        for _ = 1, times do
          smarm.spawn_on(2, fn)
          out[#out + 1] = guard.receive("the child's report")
        end
      end
      spawn_there(3)
      rawset(_G, "smarm_spawn_kept", fn)
      require("smarm_spawn_kept")
      rawset(_G, "smarm_spawn_kept", nil)
      spawn_there(2)
      package.loaded.smarm_spawn_kept = nil
      spawn_there(2)
      return out
    end, { schedulers = 2 })
    package.loaded.smarm_spawn_kept = nil
    assert.are.same({ "a copy", "a copy", "a copy", "the module's own", "the module's own",
      "a copy", "a copy" }, r)
  end)

  -- A function whose upvalues hold numbers, booleans and modules is kept too: a spawn after one
  -- of them changed must send what it holds now.
  it("sends a kept function's upvalues as they are at each spawn", function()
    local r = guard.run(function()
      smarm.register("spawn_kept", smarm.self())
      local n, flag = 1, true
      local fn = function() smarm.send("spawn_kept", { n = n, flag = flag }) end
      local out = {}
      local function spawn_there(times)
        for _ = 1, times do
          smarm.spawn_on(2, fn)
          local got = guard.receive("the child's report")
          out[#out + 1] = tostring(got.n) .. " " .. tostring(got.flag)
        end
      end
      spawn_there(3)
      n = 2
      spawn_there(2)
      flag = false
      spawn_there(2)
      n = "two" -- (a string: not kept)
      spawn_there(2)
      n = nil
      spawn_there(2)
      return out
    end, { schedulers = 2 })
    assert.are.same({ "1 true", "1 true", "1 true", "2 true", "2 true", "2 false", "2 false",
      "two false", "two false", "nil false", "nil false" }, r)
  end)

  -- Which upvalues share a cell is in the bytes too (JOIN): two upvalues joined into one cell
  -- after the function was kept, holding the same values, must arrive sharing it.
  it("sends a kept function's upvalues joined into one cell as one cell", function()
    local r = guard.run(function()
      smarm.register("spawn_kept", smarm.self())
      local a, b = 1, 1
      local fn = function()
        b = b + 4
        require("smarm").send("spawn_kept", a)
      end
      local out = {}
      local function spawn_there(times, ...)
        for _ = 1, times do
          smarm.spawn_on(2, fn, ...)
          out[#out + 1] = guard.receive("the child's report")
        end
      end
      spawn_there(3)
      debug.upvaluejoin(fn, 1, fn, 2) -- (a and b hold 1 still: the child's b = 5 was its own)
      spawn_there(2)
      spawn_there(1, {}) -- (a table argument: the whole encode)
      return out
    end, { schedulers = 2 })
    assert.are.same({ 1, 1, 1, 5, 5, 5 }, r)
  end)

  -- Arguments that encode on their own (nil, booleans, numbers, pids, short strings) ride after
  -- a kept function's bytes: each spawn must carry its own.
  it("sends each spawn's own arguments after a kept function", function()
    local r = guard.run(function()
      smarm.register("spawn_kept", smarm.self())
      local fn = function(...)
        smarm.send("spawn_kept", { n = select("#", ...), ... })
      end
      local long = ("x"):rep(100000) -- (travels shared: not an argument a kept function takes)
      local cases = {
        { n = 3, 1, "one", true }, { n = 3, 2, "two", false }, { n = 3, 3, nil, smarm.self() },
        { n = 0 }, { n = 4, 4.5, "" }, { n = 2, long, 5 }, { n = 1, { 6 } },
        { n = 3, -0.0, 1 / 0, "seven" },
      }
      local out = {}
      for _, args in ipairs(cases) do
        local n = args.n
        for _ = 1, 2 do
          smarm.spawn_on(2, fn, unpack(args, 1, n))
          local got = guard.receive("the child's report")
          local same = got.n == n
          for i = 1, n do
            local a, b = args[i], got[i]
            if type(a) == "table" then a, b = a[1], b and b[1] end
            if a ~= b and not (smarm.is_pid(a) and tostring(a) == tostring(b)) then same = false end
          end
          out[#out + 1] = same
        end
      end
      return out
    end, { schedulers = 2 })
    assert.are.same({ true, true, true, true, true, true, true, true, true, true, true, true,
      true, true, true, true }, r)
  end)

  -- Each function is spawned twice (the second keeps it) and dropped: a kept function that was
  -- not kept alive could be collected and a new one made at its address, then served the old
  -- one's bytes.
  it("spawns each of many functions made and dropped in turn as itself", function()
    local wrong = guard.run(function()
      smarm.register("spawn_kept", smarm.self())
      local out = {}
      for i = 1, 100 do
        local fn = load("require('smarm').send('spawn_kept', " .. i .. ")")
        for _ = 1, 2 do
          smarm.spawn_on(2, fn)
          local got = guard.receive("the child's report")
          if got ~= i then out[#out + 1] = i .. " gave " .. tostring(got) end
        end
        fn = nil -- luacheck: ignore (dropped before the collection)
        collectgarbage()
      end
      return out
    end, { schedulers = 2 })
    assert.are.same({}, wrong)
  end)
end)

describe("closures that travel, in corners", function()
  it("decodes a function whose module's top level receives while it loads", function()
    local r = guard.run(function()
      local me = smarm.self()
      local mod = require("smarm_recv_module") -- not yet loaded on scheduler 2
      local p = smarm.spawn_on(2, function(m)
        local f = smarm.receive(HANG)
        smarm.send(m, f())
      end, me)
      local pad = {}
      for i = 1, 50 do pad[i] = "padding " .. i end
      smarm.send(p, function() return #pad + mod.v end)
      return guard.receive("the decoded function's result")
    end, { schedulers = 2 })
    assert.are.equal(92, r)
  end)

  it("starts a function whose module's top level receives while the new actor loads it", function()
    local r = guard.run(function()
      local me = smarm.self()
      local mod = require("smarm_recv_module") -- not yet loaded on scheduler 2
      smarm.spawn_on(2, function(a, b)
        smarm.send(me, { mod.v, a, b, smarm.scheduler() })
      end, "one", { "two" })
      return guard.receive("the new actor's report")
    end, { schedulers = 2 })
    assert.are.same({ 42, "one", { "two" }, 2 }, r)
  end)

  it("gives a decoded function the receiving actor's environment", function()
    local a, b = guard.run(function()
      local me = smarm.self()
      local function probe() return tostring(rawget(getfenv(1), "marker")) end
      local function receiver(sandboxed)
        return smarm.spawn_on(2, function(m)
          if sandboxed then setfenv(0, setmetatable({ marker = "sandbox" }, { __index = _G })) end
          local f = smarm.receive(HANG)
          smarm.send(m, f())
        end, me)
      end
      smarm.send(receiver(true), probe)
      local first = guard.receive("the sandboxed actor's answer")
      smarm.send(receiver(false), probe)
      return first, guard.receive("the plain actor's answer")
    end, { schedulers = 2 })
    assert.are.equal("sandbox", a)
    assert.are.equal("nil", b)
  end)

  it("copies a module found only on the caller's later package.path, names one every VM finds", function()
    -- a module file beside os.tmpname()'s (no mkdir: forking a process whose libuv threads run
    -- can hang under qemu-user, where the aarch64 specs run)
    local tmp = os.tmpname()
    local dir = tmp:match("^(.*)/[^/]*$")
    os.remove(tmp)
    local name = "smarm_spec_late_lib_" .. tmp:match("([^/]*)$"):gsub("%W", "_")
    local fh = assert(io.open(dir .. "/" .. name .. ".lua", "w"))
    fh:write("return { twice = function(x) return 2 * x end }\n")
    fh:close()
    local r = guard.run(function()
      local me = smarm.self()
      local saved = package.path
      package.path = dir .. "/?.lua;" .. package.path -- this VM's only: not the run's
      local lib = require(name)
      package.path = saved
      smarm.spawn_on(2, function() smarm.send(me, lib.twice(21)) end)
      local got = guard.receive("the closure's answer")
      package.loaded[name] = nil
      return got
    end, { schedulers = 2 })
    os.remove(dir .. "/" .. name .. ".lua")
    assert.are.equal(42, r)
  end)

  it("sends a pid that a module holds as the pid, a replaced standard global as the script's", function()
    local r = guard.run(function()
      local me = smarm.self()
      package.loaded.smarm_spec_pidmod = { server = me }
      local server = package.loaded.smarm_spec_pidmod.server
      local real_tostring = tostring
      local function mine(v) return "<" .. real_tostring(v) .. ">" end
      _G.tostring = mine
      local ts, old = tostring, real_tostring -- the script's function, and the standard one
      smarm.spawn_on(2, function() smarm.send(server, { ts(1), old(2), old == tostring }) end)
      _G.tostring = real_tostring
      local got = guard.receive("the closure's report")
      package.loaded.smarm_spec_pidmod = nil
      return got
    end, { schedulers = 2 })
    assert.are.same({ "<1>", "2", true }, r)
  end)
end)

-- A function a module holds travels by name only when it is one the module had when require
-- returned it and the field still holds it at the send: the receiver's own require(module).field
-- is then the same code. Any other (a script's function put into a module's table, before or
-- after the first send; one the field no longer holds) travels as a copy. Each test asks a
-- server on scheduler 1 (the sender's VM) and on scheduler 2 to call what it is sent.
describe("functions a module holds", function()
  local NAME = "smarm_rebind_module" -- spec/fixtures: own() and other() of its own

  -- before(mod) runs before anything is sent in the run; body(mod, ask) then asks the servers.
  local function run_case(before, body)
    package.loaded[NAME] = nil
    local r = guard.run(function()
      local me = smarm.self()
      local mod = require(NAME)
      before(mod)
      local servers = {}
      for k = 1, 2 do
        servers[k] = smarm.spawn_on(k, function()
          while true do
            local ok, m = pcall(smarm.receive, HANG) -- a name that does not resolve raises here
            if ok and m == "stop" then return end
            local called, v
            if ok then called, v = pcall(m[1]) end
            smarm.send(me, ok and (called and v or "raised: " .. tostring(v))
              or "not decoded: " .. tostring(m))
          end
        end)
      end
      local function ask(k, f)
        smarm.send(servers[k], { f })
        return guard.receive("scheduler " .. k .. "'s answer")
      end
      local out = body(mod, ask)
      for k = 1, 2 do smarm.send(servers[k], "stop") end
      return out
    end, { schedulers = 2 })
    package.loaded[NAME] = nil
    return r
  end

  -- A function that several modules hold (string.rep, and a module's `rep = string.rep`) was
  -- indexed under whichever of them came first in package.loaded's order; once that module let
  -- go of it (before the index was built, or after), string.rep could not be sent at all (the
  -- receiver could not resolve the module's field). Eight such modules at each step: one of
  -- them comes before `string` unless the hash order is one in nine.
  it("names a function by another module that holds it once the first one lets go", function()
    local tmp = os.tmpname()
    local dir = tmp:match("^(.*)/[^/]*$")
    os.remove(tmp)
    local base = "smarm_spec_holder_" -- fixed names: one hash order, whichever it is
    local files = {}
    for i = 1, 16 do
      files[i] = dir .. "/" .. base .. i .. ".lua"
      local fh = assert(io.open(files[i], "w"))
      fh:write("return { rep = string.rep, format = string.format }\n")
      fh:close()
    end
    local saved = package.path
    package.path = dir .. "/?.lua;" .. package.path -- the run's: every VM finds them
    local r = guard.run(function()
      local me = smarm.self()
      local echo = smarm.spawn_on(2, function()
        while true do
          local ok, m = pcall(smarm.receive) -- (a name that does not resolve raises here)
          smarm.send(me, ok and (m.f == string.rep and m.g == string.format) or tostring(m))
        end
      end)
      local out = {}
      for i = 1, 8 do require(base .. i).rep, require(base .. i).format = nil, nil end
      out[1] = { pcall(smarm.send, echo, { f = string.rep, g = string.format }) }
      out[2] = out[1][1] and guard.receive("the first answer")
      -- and after the index was built with modules that hold them (the first send above)
      for i = 9, 16 do require(base .. i) end
      out[3] = { pcall(smarm.send, echo, { f = string.rep, g = string.format }) }
      out[4] = out[3][1] and guard.receive("the second answer")
      for i = 9, 16 do require(base .. i).rep, require(base .. i).format = nil, nil end
      out[5] = { pcall(smarm.send, echo, { f = string.rep, g = string.format }) }
      out[6] = out[5][1] and guard.receive("the third answer")
      smarm.kill(echo)
      return out
    end, { schedulers = 2 })
    package.path = saved
    for i = 1, 16 do
      os.remove(files[i])
      package.loaded[base .. i] = nil
    end
    assert.are.same({ { true }, true, { true }, true, { true }, true }, r)
  end)

  it("sends a script's function put into a module before the first send as itself", function()
    local r = run_case(function(mod)
      mod.added = function() return "added" end
      mod.own = function() return "script's own" end
    end, function(mod, ask)
      return { ask(2, mod.added), ask(2, mod.own), ask(1, mod.own), ask(2, mod.other) }
    end)
    assert.are.same({ "added", "script's own", "script's own", "other" }, r)
  end)

  it("sends a script's function put into a module after the first send as itself", function()
    local r = run_case(function() end, function(mod, ask)
      local first = ask(2, mod.own)
      mod.added = function() return "added" end
      mod.own = function() return "script's own" end
      return { first, ask(2, mod.added), ask(2, mod.own), ask(1, mod.own) }
    end)
    assert.are.same({ "own", "added", "script's own", "script's own" }, r)
  end)

  -- Sends mod.private (whose coroutine cannot travel: only its name can) to scheduler 2 before
  -- change(mod), after it, and after undo(mod), and checks that it went by name, as a copy
  -- (which fails), and by name again.
  local function private_by_name_around(change, undo)
    local r = run_case(function() end, function(mod, ask)
      local f = mod.private
      local out = { ask(2, f) }
      change(mod)
      out[2] = select(2, pcall(ask, 2, f))
      undo(mod, f)
      out[3] = ask(2, f)
      return out
    end)
    assert.are.equal("suspended", r[1])
    assert.matches("is a thread", r[2])
    assert.are.equal("suspended", r[3])
  end

  -- A send while the field was cleared dropped the function from the index for the rest of
  -- the run: restored (a test's stub reverted), it still went as a copy, and private(), whose
  -- coroutine cannot travel, could not be sent at all.
  it("sends a field's function by name again once the field holds it again", function()
    private_by_name_around(function(mod) mod.private = function() return "stub" end end,
      function(mod, f) mod.private = f end)
  end)

  it("sends a reassigned field's old and new functions each as itself", function()
    local r = run_case(function() end, function(mod, ask)
      local first = ask(2, mod.own)
      local old = mod.own
      mod.own = function() return "replacement" end
      local out = { first, ask(2, mod.own), ask(2, old), ask(1, old), ask(1, mod.own) }
      package.loaded.smarm_spec_rebind_other = {} -- package.loaded changes (another module)
      for _, k in ipairs({ 2, 1 }) do
        out[#out + 1] = ask(k, mod.own)
        out[#out + 1] = ask(k, old)
      end
      package.loaded.smarm_spec_rebind_other = nil
      return out
    end)
    assert.are.same({ "own", "replacement", "own", "own", "replacement",
      "replacement", "own", "replacement", "own" }, r)
  end)

  -- Whether a module is loaded is read from package.loaded at each send (the index of names is
  -- made again when it changes): a module it lets go of is no longer known by name, and one put
  -- back is known again, with no require in between.
  it("names a module's functions only while package.loaded holds the module", function()
    private_by_name_around(function() package.loaded[NAME] = nil end,
      function(mod) package.loaded[NAME] = mod end)
  end)

  -- Runs `text` (a script that ends printing "true" once its finalizers or hooks have run) in a
  -- process of its own, by the executable: a small package.loaded makes the index quickly, so
  -- that the changes below land while it is made (busted's takes longer than the whole run).
  local function run_script(text)
    local out, err, status = script.run(text)
    if not out then return pending("SMARM_EXE is not set (./dev.sh test sets it)") end
    assert.are.equal(0, status, err)
    assert.are.equal("true\n", out)
  end

  -- Every send of a function here finds package.loaded changed and makes the index again, while
  -- garbage piles up whose finalizers take away every key of package.loaded named PREFIX.. and
  -- add others, until it grows to another size. VALUE: what those keys hold; ROUNDS: sends (each
  -- finds package.loaded changed, and modules that are tables each cost a package.searchpath;
  -- a third of them under guard.slow, where the second case below took 43 s of the spec's 70).
  local function churned_loaded(value, rounds)
    return ([[
      local smarm = require("smarm")
      local PREFIX = "finalized_"
      local loaded, added = package.loaded, 0
      local function churn() -- a finalizer: package.loaded rehashed to another size
        for k in pairs(loaded) do
          if type(k) == "string" and k:sub(1, #PREFIX) == PREFIX then loaded[k] = nil end
        end
        for _ = 1, 1 + added %% 200 do
          added = added + 1
          loaded[PREFIX .. added] = %s
        end
      end
      collectgarbage("setpause", 10)
      collectgarbage("setstepmul", 1000)
      local me = smarm.self()
      local function g() end
      for i = 1, %d do
        for _ = 1, 4 do getmetatable(newproxy(true)).__gc = churn end
        smarm.send(me, { g, i })
        assert(smarm.receive(HANG)[2] == i)
      end
      print(added > 0)
    ]]):format(value, rounds)
  end

  -- The index's snapshot of package.loaded was sized, its userdata made, then written: the
  -- allocation may run a GC step and with it finalizers, and one that stored into
  -- package.loaded could resize it in between, so that the snapshot was written past its end
  -- (a heap overflow under ASan; a segfault in a release build).
  it("makes its index while finalizers resize package.loaded", function()
    run_script(churned_loaded("true", guard.slow and 700 or 2000))
  end)

  -- The walk of package.loaded asked smarm.core for a submodule through its __index (a Lua
  -- function: smarm.console and smarm.top load lazily), whose trace exits drive a GC cycle's
  -- end even with the collector held, and a finalizer took the key the walk stood on: the send
  -- raised "invalid key to 'next'" (modules that are tables are the keys it looks up).
  it("makes its index while finalizers take away the module it stands on", function()
    run_script(churned_loaded("{}", guard.slow and 100 or 300))
  end)

  -- The walk of package.loaded called package.searchpath for each module, and a script's own
  -- searchpath (a Lua function) may change package.loaded: it is walked in a copy.
  it("makes its index while package.searchpath changes package.loaded", function()
    run_script([[
      local smarm = require("smarm")
      local loaded, searchpath, n = package.loaded, package.searchpath, 0
      for i = 1, 50 do loaded["walked_" .. i] = {} end
      package.searchpath = function(name, path) -- every key the walk may stand on goes
        for k in pairs(loaded) do
          if type(k) == "string" and k:match("^walked_") then loaded[k] = nil end
        end
        for _ = 1, 64 do
          n = n + 1
          loaded["walked_" .. n] = {}
        end
        return searchpath(name, path)
      end
      local me = smarm.self()
      local function g() end
      for i = 1, 20 do
        smarm.send(me, { g, i })
        assert(smarm.receive(HANG)[2] == i)
      end
      package.searchpath = searchpath
      print(n > 0)
    ]])
  end)

  -- The names were looked up when the encoder first met a function, in the middle of the walk
  -- of the table holding it, and remaking them calls package.searchpath: a script's (a Lua
  -- function) that changed that table moved its entries, and the walk skipped some (a key the
  -- table held throughout went missing at the receiver). Such a message is encoded again with
  -- the names looked up before anything is walked.
  it("keeps every key of a table that package.searchpath changes while it is sent", function()
    run_script([[
      local smarm = require("smarm")
      local searchpath, m, n = package.searchpath, {}, 0
      for i = 1, 64 do m["k" .. i] = i end
      m.g = function() end
      package.searchpath = function(name, path) -- the keys f.. go, others come
        for k in pairs(m) do
          if k:sub(1, 1) == "f" then m[k] = nil end
        end
        for _ = 1, 1 + n % 100 do
          n = n + 1
          m["f" .. n] = n
        end
        return searchpath(name, path)
      end
      local me = smarm.self()
      for i = 1, 100 do
        package.loaded.churn_round = i -- package.loaded changes: each send makes the index
        smarm.send(me, m)
        local back = smarm.receive(HANG)
        for j = 1, 64 do assert(back["k" .. j] == j, "k" .. j) end
      end
      package.searchpath = searchpath
      print(n > 0)
    ]])
  end)

  -- The hold on the collector is the VM's, which every actor of the scheduler shares: a script's
  -- package.searchpath, called while the index is made, parked with the hold taken (and a kill
  -- there never released it), so that the VM stopped collecting for good (250 MB kept of the
  -- garbage below). The searchpath calls are made outside the hold now.
  it("keeps collecting after an actor is killed in package.searchpath while it makes its index",
    function()
      run_script([[
        local smarm = require("smarm")
        local searchpath, me = package.searchpath, smarm.self()
        package.searchpath = function(name, path)
          if name == "parked_module" then
            smarm.send(me, "in")
            smarm.receive() -- parks while the index is made
          end
          return searchpath(name, path)
        end
        package.loaded.parked_module = {}
        local victim = smarm.spawn(function() smarm.send(me, { function() end }) end)
        assert(smarm.receive(HANG) == "in")
        smarm.monitor(victim)
        smarm.kill(victim)
        assert(smarm.receive(HANG).reason == "killed")
        package.searchpath = searchpath
        local before, keep = collectgarbage("count"), nil
        for i = 1, 2e6 do keep = { i, tostring(i) } end
        print(keep ~= nil and collectgarbage("count") - before < 65536) -- KB: the garbage is 170 MB
      ]])
    end)

  -- The index walks each module's fields while it allocates, and an allocation's GC step may
  -- run finalizers: one that emptied the module being walked and grew it made the next step of
  -- the walk raise "invalid key to 'next'". The collector is held while the index is made.
  it("makes its index while finalizers change a module it walks", function()
    run_script([[
      local smarm = require("smarm")
      local m, added = {}, 0
      for i = 1, 100 do m["u" .. i] = newproxy() end
      package.loaded.bit = m -- a module every VM has: its userdata are named by the index
      local churn
      function churn() -- a finalizer: the module loses its fields and grows
        getmetatable(newproxy(true)).__gc = churn -- another for the next cycle
        for k in pairs(m) do m[k] = nil end
        for _ = 1, 200 do
          added = added + 1
          m["u" .. added] = newproxy()
        end
      end
      collectgarbage("setpause", 10)
      collectgarbage("setstepmul", 1000)
      getmetatable(newproxy(true)).__gc = churn
      local me = smarm.self()
      local function g() end
      for i = 1, 300 do
        package.loaded.churn_round = i -- package.loaded changes: each send makes the index
        smarm.send(me, { g, i })
        assert(smarm.receive(HANG)[2] == i)
      end
      print(added > 0)
    ]])
  end)
end)

describe("require while a loader is parked", function()
  it("gives the module to every requirer, loading it once", function()
    local same, loads = guard.run(function()
      package.loaded.smarm_slow_module = nil
      _G.smarm_slow_module_loads = 0
      local got = {}
      for i = 1, 3 do
        smarm.spawn(function() got[i] = require("smarm_slow_module") end)
      end
      guard.wait(function() return got[1] and got[2] and got[3] end, "three requirers")
      return got[1] == got[2] and got[2] == got[3], _G.smarm_slow_module_loads
    end)
    assert.is_true(same)
    assert.are.equal(1, loads)
  end)

  it("loads a module afresh after a run stopped its loader half-way", function()
    package.loaded.smarm_stuck_module = nil
    _G.smarm_stuck_module_mode = "park"
    guard.run(function()
      smarm.spawn(require, "smarm_stuck_module") -- parks in the top level until the run ends
      smarm.yield() -- the loader (this scheduler) runs until it parks
    end)
    _G.smarm_stuck_module_mode = nil
    local got = guard.run(function()
      local me = smarm.self()
      smarm.spawn(function() smarm.send(me, require("smarm_stuck_module")) end)
      return guard.receive("the requirer's module")
    end)
    assert.are.same({}, got) -- loaded (mode nil), not "timeout" or a loop error
    -- and outside a run, too
    package.loaded.smarm_stuck_module = nil
    _G.smarm_stuck_module_mode = "park"
    guard.run(function()
      smarm.spawn(require, "smarm_stuck_module")
      smarm.yield() -- the loader (this scheduler) runs until it parks
    end)
    _G.smarm_stuck_module_mode = "plain"
    assert.are.equal("plain", require("smarm_stuck_module").mode)
  end)

  it("lets a waiting requirer load a module whose loader exited in its top level", function()
    local got = guard.run(function()
      package.loaded.smarm_stuck_module = nil
      _G.smarm_stuck_module_mode = "exit"
      smarm.spawn(require, "smarm_stuck_module") -- ends its actor half-way through loading
      local me = smarm.self()
      smarm.spawn(function()
        _G.smarm_stuck_module_mode = "second"
        smarm.send(me, require("smarm_stuck_module"))
      end)
      return guard.receive("the second requirer's module")
    end)
    _G.smarm_stuck_module_mode = nil
    assert.are.same({ mode = "second" }, got)
  end)

  -- Two modules that require each other, loaded by two actors of one VM at once: each actor
  -- used to wait for the other's parked loader for good, and every later require of them too.
  -- The wait that would close the cycle raises plain require's error for a cycle instead.
  it("raises for a require cycle split across two actors instead of hanging", function()
    -- module files beside os.tmpname()'s, as above
    local tmp = os.tmpname()
    local dir = tmp:match("^(.*)/[^/]*$")
    os.remove(tmp)
    local base = "smarm_spec_cycle_" .. tmp:match("([^/]*)$"):gsub("%W", "_")
    local a, b = base .. "_a", base .. "_b"
    for _, m in ipairs({ { a, b }, { b, a } }) do
      local fh = assert(io.open(dir .. "/" .. m[1] .. ".lua", "w"))
      -- each loader parks until both have begun, then requires the other module
      fh:write(string.format([[
local smarm = require("smarm")
smarm.send(%q, { loading = %q })
smarm.receive(function(m) return m == "go" end)
require(%q)
return {}
]], base, m[1], m[2]))
      fh:close()
    end
    local function remove_modules()
      os.remove(dir .. "/" .. a .. ".lua")
      os.remove(dir .. "/" .. b .. ".lua")
    end
    local results = {}
    for _, case in ipairs({ { schedulers = 1, on = 1 }, { schedulers = 2, on = 2 } }) do
      -- (no busted `finally`: the aarch64 variant's runner has none) the files go either way:
      -- the runs first, then the files, then the assertions
      local ran, got = pcall(guard.run, function()
        local me, saved = smarm.self(), package.path
        smarm.register(base, me)
        local function load_one(name, coordinator, path) -- runs on scheduler case.on
          package.path = path .. "/?.lua;" .. package.path
          smarm.send(coordinator, { name = name, pcall(require, name) })
        end
        local x = smarm.spawn_on(case.on, load_one, a, me, dir)
        local y = smarm.spawn_on(case.on, load_one, b, me, dir)
        for _ = 1, 2 do guard.receive("a loader's start", function(m) return type(m) == "table" and m.loading end) end
        smarm.send(x, "go")
        smarm.send(y, "go")
        local out = {}
        for _ = 1, 2 do
          local m = guard.receive("a requirer's outcome", function(m) return type(m) == "table" and m.name end)
          out[m.name] = { m[1], m[2] }
        end
        -- and a later require of either ends at once, with the previous error
        smarm.spawn_on(case.on, load_one, a, me, dir)
        local later = guard.receive("a later requirer's outcome", function(m) return type(m) == "table" and m.name end)
        out.later = { later[1], later[2] }
        package.loaded[a], package.loaded[b] = nil, nil -- this VM's (scheduler 1's) marks
        package.path = saved
        return out
      end, { schedulers = case.schedulers })
      if not ran then
        remove_modules()
        error(got, 0)
      end
      results[case.on] = got
    end
    remove_modules()
    for on, got in pairs(results) do
      for _, name in ipairs({ a, b, "later" }) do
        assert.is_false(got[name][1], on)
        assert.matches("loop or previous error loading module '" .. base .. "_[ab]'", got[name][2])
      end
    end
  end)

  -- A waiter whose wait raised (here its debug hook's error, as out of memory for the sleep's
  -- timer would) and who caught it is alive and waits for nothing: it used to leave its entry,
  -- and a later wait for a module it then loaded was taken for a cycle (L1, parked loading m,
  -- requires n, whose loader X waits for nothing) and raised, which also poisoned n.
  it("leaves no false cycle behind a waiter whose wait raised", function()
    local m, n = "smarm_spec_wait_raised_m", "smarm_spec_wait_raised_n"
    package.preload[m] = function()
      smarm.receive(function(x) return x == "go_m" end)
      return { n = require(n) }
    end
    package.preload[n] = function()
      smarm.receive(function(x) return x == "go_n" end)
      return { n = true }
    end
    local got = guard.run(function()
      local me = smarm.self()
      local l1 = smarm.spawn(function() smarm.send(me, { "L1", pcall(require, m) }) end)
      smarm.yield() -- L1 parks in m's top level
      local boom = false
      local x = smarm.spawn(function()
        debug.sethook(function() if boom then boom = false; error("boom") end end, "", 1)
        local ok, e = pcall(require, m) -- waits for L1 until its hook raises
        debug.sethook()
        smarm.send(me, { "X's wait", ok, e })
        smarm.send(me, { "X loads n", pcall(require, n) }) -- parks in n's top level
      end)
      smarm.yield()
      smarm.yield() -- X waits in its loop
      boom = true
      local out = {}
      local r = guard.receive("X's wait", function(v) return type(v) == "table" end)
      out[r[1]] = r
      while smarm.info(x, "status").status ~= "waiting" do smarm.yield() end -- X in n's top level
      smarm.send(l1, "go_m") -- L1 requires n, loaded by X: a wait, no cycle (it raised here)
      for _ = 1, 10 do smarm.yield() end -- one scheduler: L1 runs into its wait for X
      smarm.send(x, "go_n")
      for _ = 1, 2 do
        r = guard.receive("a loader's outcome", function(v) return type(v) == "table" end)
        out[r[1]] = r
      end
      return out
    end, { schedulers = 1 })
    package.preload[m], package.preload[n] = nil, nil
    package.loaded[m], package.loaded[n] = nil, nil
    assert.is_false(got["X's wait"][2])
    assert.matches("boom", got["X's wait"][3])
    assert.is_true(got["X loads n"][2], tostring(got["X loads n"][3]))
    assert.is_true(got.L1[2], tostring(got.L1[3]))
    assert.is_true(got.L1[3].n.n)
  end)
end)

describe("handing sockets and files over", function()
  -- The sender's handles are handed over as soon as smarm.send (or spawn_on) returns: every
  -- call on them raises at once (docs/api.md, smarm.tcp and smarm.fs), while the receivers'
  -- handles work. Nothing here waits on the sender's handles, so a hand-over that did not
  -- happen fails these checks instead of hanging on a socket two actors think is theirs.
  it("refuses the sender's handles at once, on this scheduler and another", function()
    local path = os.tmpname()
    local fh = assert(io.open(path, "w"))
    fh:write("file bytes")
    fh:close()
    local r = guard.run(function()
      local me = smarm.self()
      local server = assert(smarm.tcp.listen("127.0.0.1", 0))
      local _, port = server:getsockname()
      local function pair()
        local c = assert(smarm.tcp.connect("127.0.0.1", port))
        return c, assert(server:accept())
      end
      local out = {}
      local function refused(fn, ...)
        local ok, e = pcall(fn, ...)
        return ok and "not refused" or tostring(e):gsub("^[^:]*:%d+: ", "")
      end
      -- receivers: each reads a line from its socket, the file from offset 0, and answers
      local function serve(owner, m)
        smarm.send(owner, { m.tag, m.conn:receive(), m.file:read(4, 0) })
        m.conn:close()
        m.file:close()
      end
      local here = smarm.spawn(function() serve(me, smarm.receive()) end)
      local there = smarm.spawn_on(2, function(owner) -- serve, on scheduler 2
        local m = smarm.receive()
        smarm.send(owner, { m.tag, m.conn:receive(), m.file:read(4, 0) })
        m.conn:close()
        m.file:close()
      end, me)
      local peers = {}
      for i, to in ipairs({ here, there }) do
        local c, peer = pair()
        local f = assert(smarm.fs.open(path, "r"))
        peers[i] = peer
        smarm.send(to, { tag = i, conn = c, file = f })
        -- harmless probes first; should a handle still work, the run ends here (two owners of
        -- one socket or file would go on to fail in less clear ways)
        out[i] = { conn = tostring(c), conn_name = refused(c.getsockname, c),
          file_read = refused(f.read, f, 1, 0) }
        if out[i].conn_name == "not refused" or out[i].file_read == "not refused" then
          return out
        end
        out[i].conn_send = refused(c.send, c, "x")
        out[i].conn_close = refused(c.close, c)
        out[i].file_close = refused(f.close, f)
        out[i].resend = refused(smarm.send, me, { f })
      end
      -- a spawn_on argument is handed over the same way
      local c3, peer3 = pair()
      smarm.spawn_on(2, function(owner, conn)
        smarm.send(owner, { 3, conn:receive() })
        conn:close()
      end, me, c3)
      out[3] = { conn = tostring(c3) }
      if out[3].conn ~= "tcp.conn (handed over)" then return out end
      out[3].conn_receive = refused(c3.receive, c3)
      for i = 1, 3 do peers[i] = peers[i] or peer3; peers[i]:send("line " .. i .. "\n") end
      out.served = {}
      for _ = 1, 3 do
        local m = guard.receive("a receiver's answer")
        out.served[m[1]] = m
      end
      for i = 1, 3 do peers[i]:close() end
      server:close()
      return out
    end, { schedulers = 2 })
    os.remove(path)
    for i = 1, 2 do
      assert.are.same({
        conn = "tcp.conn (handed over)",
        conn_name = "smarm.tcp.getsockname: the socket was handed to another actor",
        conn_send = "smarm.tcp.send: the socket was handed to another actor",
        conn_close = "smarm.tcp.close: the socket was handed to another actor",
        file_read = "smarm.fs.read: the file was handed to another actor",
        file_close = "smarm.fs.close: the file was handed to another actor",
        resend = "smarm.send: the file is handed to another actor",
      }, r[i])
    end
    assert.are.same({ conn = "tcp.conn (handed over)",
      conn_receive = "smarm.tcp.receive: the socket was handed to another actor" }, r[3])
    assert.are.same({ { 1, "line 1", "file" }, { 2, "line 2", "file" }, { 3, "line 3" } }, r.served)
  end)
end)
