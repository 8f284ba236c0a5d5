-- smarm's Lua actors: run, spawn, self, pids, yield from anywhere, sleep, exit, errors.
-- Runs under busted on the LuaJIT built by deps/luajit.sh (release and checking variants).
local smarm = require("smarm")
local guard = dofile("spec/support/guard.lua")
local HANG = guard.HANG -- seconds: limits that only guard against a hang (spec/support/guard.lua)

describe("smarm.run", function()
  it("runs the main actor and returns its results", function()
    local a, b, c = smarm.run(function() return 1, "two", nil end)
    assert.are.equal(1, a)
    assert.are.equal("two", b)
    assert.is_nil(c)
  end)

  it("can be called again after it returned", function()
    for i = 1, 5 do
      assert.are.equal(i, smarm.run(function() smarm.yield(); return i end, { schedulers = 2 }))
    end
  end)

  it("raises the main actor's own error value, its traceback kept aside", function()
    local ok, err = pcall(smarm.run, function()
      smarm.yield()
      error("main failed")
    end)
    assert.is_false(ok)
    assert.matches("^spec/actor_spec.lua:%d+: main failed$", err)
    assert.matches("main failed\nstack traceback", smarm.last_traceback())
    local value = { code = 42 }
    ok, err = pcall(smarm.run, function() error(value) end)
    assert.is_false(ok)
    assert.are.equal(value, err) -- the very table
    assert.matches("^%(error object is a table value%)\nstack traceback", smarm.last_traceback())
    local shown = setmetatable({}, { __tostring = function() return "shown error" end })
    ok, err = pcall(smarm.run, function() error(shown) end, { schedulers = 2 })
    assert.is_false(ok)
    assert.are.equal(shown, err)
    assert.matches("^shown error\nstack traceback", smarm.last_traceback())
    assert.are.equal(1, smarm.run(function() return 1 end))
    assert.is_nil(smarm.last_traceback())
  end)

  it("stops the actors still alive when the main actor returns", function()
    local started = 0
    local r = smarm.run(function()
      for _ = 1, 10 do
        smarm.spawn(function()
          started = started + 1
          smarm.sleep(3600)
        end)
      end
      smarm.yield()
      return "done"
    end, { schedulers = 2 })
    assert.are.equal("done", r)
    assert.are.equal(10, started)
  end)

  it("leaves the pids of an earlier run dead in a later one", function()
    local old = smarm.run(function()
      return { smarm.self(), smarm.spawn(function() smarm.receive() end) } -- stopped by the end
    end)
    local r = smarm.run(function()
      local me = smarm.self()
      local p = smarm.spawn(function() smarm.send(me, smarm.receive(HANG)) end)
      smarm.send(old[2], "stale") -- dropped: it does not reach p, which may sit in the same slot
      smarm.send(p, "fresh")
      return { got = guard.receive("the fresh actor's echo"), same = old[1] == me or old[2] == p,
        alive = smarm.alive(old[1]) or smarm.alive(old[2]) }
    end)
    assert.are.same({ got = "fresh", same = false, alive = false }, r)
    -- a pid of a scheduler the later run does not have is dead there too
    local far = smarm.run(function()
      return smarm.spawn_on(2, function() smarm.receive() end)
    end, { schedulers = 2 })
    local r2 = smarm.run(function()
      local ok = pcall(smarm.send, far, "dropped")
      return { sent = ok, alive = smarm.alive(far) }
    end, { schedulers = 1 })
    assert.are.same({ sent = true, alive = false }, r2)
  end)

  it("rejects bad arguments", function()
    assert.has_error(function() smarm.run(nil) end, "bad argument #1 to 'run' (function expected, got nil)")
    assert.has_error(function() smarm.run(function() end, 5) end)
    assert.has_error(function() smarm.run(function() end, { schedulers = 0 }) end)
    assert.has_error(function() smarm.run(function() end, { schedulers = 1.5 }) end)
    assert.has_error(function() smarm.run(function() end, { stack_size = 100 }) end)
  end)

  it("is an error inside an actor", function()
    local ok, err = smarm.run(function()
      return pcall(smarm.run, function() end)
    end)
    assert.is_false(ok)
    assert.matches("already inside a runtime", err)
  end)

  it("honours opts.schedulers", function()
    assert.are.equal(3, smarm.run(function() return smarm.schedulers() end, { schedulers = 3 }))
    assert.are.equal(1, smarm.run(function() return smarm.scheduler() end, { schedulers = 3 }))
  end)

  -- The numbers of opts were checked as arguments of their own: "bad argument #4 to 'run'
  -- (number expected, got boolean)" for opts.schedulers, #13 for opts.seed; strings that read as
  -- numbers passed; and with opts.on_crash a fn that is no function started a runtime and
  -- failed inside init.lua.
  it("names the option in its errors, refuses numbers given as strings, and checks fn first", function()
    local f = function() return "ran" end
    local cases = {
      { { schedulers = true }, "opts.schedulers must be an integer from 1 to 1024, got boolean" },
      { { schedulers = "2" }, "opts.schedulers must be an integer from 1 to 1024, got string" },
      { { schedulers = 1025 }, "opts.schedulers must be an integer from 1 to 1024" },
      { { stack_size = "4M" }, "opts.stack_size must be a number of bytes, got string" },
      { { seed = true }, "opts.seed must be an integer from 1 to 2^53, got boolean" },
      { { seed = "1" }, "opts.seed must be an integer from 1 to 2^53, got string" },
      -- a misspelt option was ignored without a word
      { { schedulerz = 3 }, "opts.schedulerz is not an option (options: schedulers, " ..
        "stack_size, slice, watchdog, max_mailbox, request_timeout, clock, dump_signal, " ..
        "keep_freed, seed, on_crash)" },
      { { 4 }, "opts has a key that is a number (options: schedulers, " ..
        "stack_size, slice, watchdog, max_mailbox, request_timeout, clock, dump_signal, " ..
        "keep_freed, seed, on_crash)" },
    }
    for _, case in ipairs(cases) do
      assert.has_error(function() smarm.run(f, case[1]) end,
        "bad argument #2 to 'run' (" .. case[2] .. ")")
    end
    -- spawn_opt's too (Erlang's spawn_opt refuses an unknown option): a bound or a monitor
    -- asked for under a wrong name was not there, and nothing said so
    smarm.run(function()
      for _, case in ipairs({ { { max_mailbx = 2 }, "max_mailbx" },
        { { on = 1, monitr = true }, "monitr" },
        -- (a key is its bytes: a zero byte in it made it the option it began with)
        { { ["link\0oops"] = true }, "link\\0oops" }, { { ["monitor\0"] = true }, "monitor\\0" },
        -- (an __index that gives an option must not hide a key that is none)
        { setmetatable({ monitr = true }, { __index = { link = true } }), "monitr" } }) do
        local opts, key = case[1], case[2]
        assert.has_error(function() smarm.spawn_opt(opts, function() end) end,
          "bad argument #1 to 'spawn_opt' (opts." .. key .. " is not an option (options: on, " ..
          "link, monitor, name, slice, max_mailbox))")
      end
      -- options an __index gives are taken, as the table's own are
      local pid, ref = smarm.spawn_opt(setmetatable({}, { __index = { monitor = true } }),
        function() end)
      assert.is_true(smarm.is_pid(pid))
      assert.are.equal(pid, smarm.receive(function(m) return m.ref == ref end).pid)
    end)
    for _, opts in ipairs({ { on_crash = print }, {} }) do
      local ok, e = pcall(smarm.run, nil, opts)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'run' (function expected, got nil)", e, 1, true)
    end
  end)

  it("takes opts.keep_freed: a number of bytes, or false, and nothing else", function()
    local function f() return "ran" end
    assert.are.equal("ran", smarm.run(f, { keep_freed = 64 * 1024 * 1024 }))
    assert.are.equal("ran", smarm.run(f, { keep_freed = false }))
    assert.are.equal("ran", smarm.run(f, { keep_freed = 1024 * 1024 }))
    for _, bad in ipairs({ 0, -1, -5, 1.5, 2 ^ 31, true, "32M", "1048576", {} }) do
      assert.has_error(function() smarm.run(f, { keep_freed = bad }) end,
        "bad argument #2 to 'run' (opts.keep_freed must be false or a number of bytes from 1 to "
        .. "2^31 - 1)")
    end
  end)
end)

describe("smarm.spawn and pids", function()
  it("runs fn(...) in a new actor on the same scheduler", function()
    local got = smarm.run(function()
      local result = {}
      smarm.spawn(function(a, b, t)
        result.sum = a + b
        result.t = t
        result.sched = smarm.scheduler()
      end, 2, 3, "x")
      smarm.yield()
      return result
    end, { schedulers = 2 })
    assert.are.equal(5, got.sum)
    assert.are.equal("x", got.t)
    assert.are.equal(1, got.sched)
  end)

  it("gives pids that print, compare and key tables", function()
    local s, eq, key, isp, notp = smarm.run(function()
      local seen = {}
      local p = smarm.spawn(function() seen.self = smarm.self() end)
      smarm.yield()
      local t = { [p] = "child" }
      return tostring(p), p == seen.self, t[seen.self], smarm.is_pid(p), smarm.is_pid({})
    end)
    assert.matches("^<1%.%d+%.%d+>$", s)
    assert.is_true(eq)
    assert.are.equal("child", key)
    assert.is_true(isp)
    assert.is_false(notp)
  end)

  it("gives each actor its own pid", function()
    local n = smarm.run(function()
      local seen, count = {}, 0
      for _ = 1, 1000 do
        local p = smarm.spawn(function() end)
        if not seen[p] then count = count + 1 end
        seen[p] = true
      end
      return count
    end)
    assert.are.equal(1000, n)
  end)

  -- A spawn made as a statement makes no pid (sm_ljx_results_wanted): every other way of
  -- calling it still gets one, compiled or not.
  it("gives the pid to every caller that takes it", function()
    local got = smarm.run(function()
      local function f() end
      local is = smarm.is_pid
      local r = {}
      smarm.spawn(f)
      local p = smarm.spawn(f)
      r.local_ = is(p)
      local a, ref = smarm.spawn_monitor(f)
      r.both = is(a) and tostring(ref):match("^#Ref") ~= nil
      local b, c = smarm.spawn(f)
      r.second_nil = is(b) and c == nil
      r.multret = select("#", smarm.spawn(f)) == 1
      r.args = is((select(1, smarm.spawn(f))))
      r.table = is(({ smarm.spawn(f) })[1])
      local function tail() return smarm.spawn(f) end
      r.tail = is(tail())
      tail()
      r.pcall = is(select(2, pcall(smarm.spawn, f)))
      r.wrap = is(coroutine.wrap(function() return smarm.spawn(f) end)())
      local meta = setmetatable({}, { __index = function() return smarm.spawn(f) end })
      r.index = is(meta.x)
      r.opt = is(smarm.spawn_opt({ on = 2 }, f))
      r.on = is(smarm.spawn_on(2, f))
      local ok = 0
      for _ = 1, 500 do -- hot: compiled, the calls ending the traces (stitched)
        smarm.spawn(f)
        local q = smarm.spawn(f)
        local x, y = smarm.spawn_monitor(f)
        if is(q) and is(x) and tostring(y):match("^#Ref") then ok = ok + 1 end
        smarm.yield()
      end
      r.hot = ok == 500
      return r
    end, { schedulers = 2 })
    for _, k in ipairs({ "local_", "both", "second_nil", "multret", "args", "table", "tail",
      "pcall", "wrap", "index", "opt", "on", "hot" }) do
      assert.is_true(got[k], k)
    end
  end)

  it("keeps a dead actor's pid the same key after its slot is reused, on any scheduler", function()
    local hits, distinct = smarm.run(function()
      local me = smarm.self()
      local by_pid, count = {}, 0
      -- actors on every scheduler die at once; their slots are reused by the next ones
      for round = 1, 3 do
        for k = 1, smarm.schedulers() do
          local p = smarm.spawn_on(k, function(owner) smarm.send(owner, smarm.self()) end, me)
          by_pid[p] = round
          count = count + 1
          smarm.receive()
        end
      end
      -- every pid, sent back to us through an actor on each scheduler, finds its entry
      local hits = 0
      for k = 1, smarm.schedulers() do
        local echo = smarm.spawn_on(k, function(owner)
          local list = smarm.receive()
          smarm.send(owner, list)
        end, me)
        local list = {}
        for p in pairs(by_pid) do list[#list + 1] = p end
        smarm.send(echo, list)
        for _, p in ipairs(smarm.receive()) do
          if by_pid[p] then hits = hits + 1 end
        end
      end
      local distinct = 0
      for _ in pairs(by_pid) do distinct = distinct + 1 end
      return hits, distinct, count
    end, { schedulers = 3 })
    assert.are.equal(9, distinct)
    assert.are.equal(27, hits)
  end)

  it("gives every actor its spawner's globals, also when it reuses a dead actor's coroutine", function()
    local clean = smarm.run(function()
      local me = smarm.self()
      local all = true
      for _ = 1, 5 do
        -- this actor swaps its thread's globals, then ends: its coroutine may be reused
        smarm.spawn(function() setfenv(0, { poisoned = true }) end)
        smarm.yield()
        smarm.spawn(function() smarm.send(me, getfenv(0).poisoned == nil) end)
        all = all and smarm.receive()
      end
      return all
    end, { schedulers = 1 })
    assert.is_true(clean)
  end)

  it("releases actors stopped before they ever ran", function()
    -- what the registry anchors; not its free slots (luaL_unref leaves a number in each), whose
    -- count is the most refs ever held at once, higher when actors run while others are spawned
    local function registry_size()
      collectgarbage()
      local n = 0
      for _, v in pairs(debug.getregistry()) do
        if type(v) ~= "number" then n = n + 1 end
      end
      return n
    end
    local before = registry_size()
    for _ = 1, 10 do
      smarm.run(function()
        for _ = 1, 50 do smarm.spawn(function() end) end
        for _ = 1, 5 do smarm.spawn_on(2, function() end) end
        -- returns at once: none of them has run yet
      end, { schedulers = 2 })
    end
    assert.is_true(registry_size() <= before + 5, before .. " registry entries before, "
      .. registry_size() .. " after")
  end)

  it("rejects a non-function", function()
    local ok, err = smarm.run(function()
      return pcall(function() smarm.spawn(42) end)
    end)
    assert.is_false(ok)
    assert.matches("bad argument #1 to 'spawn' %(function expected, got number%)", err)
  end)

  it("lets an actor that raises die alone", function()
    local after = smarm.run(function()
      local state = {}
      smarm.spawn(function() smarm.yield(); error("only me") end)
      smarm.spawn(function()
        for _ = 1, 10 do smarm.yield() end
        state.survivor = true
      end)
      for _ = 1, 20 do smarm.yield() end
      return state.survivor
    end)
    assert.is_true(after)
  end)

  it("tells with smarm.alive whether a pid's actor lives, on any scheduler", function()
    local r = smarm.run(function()
      local out = { self = smarm.alive(smarm.self()) }
      local here = smarm.spawn(function() smarm.receive() end)
      local there = smarm.spawn_on(2, function() smarm.receive() end)
      out.here, out.there = smarm.alive(here), smarm.alive(there)
      smarm.send(here, "end")
      smarm.send(there, "end")
      smarm.yield()
      out.here_after = smarm.alive(here)
      local deadline = smarm.now() + HANG -- a hang guard
      repeat out.there_after = smarm.alive(there) until not out.there_after or smarm.now() > deadline
      -- from inside a __gc finalizer a remote question cannot park; a local one needs not
      local p = newproxy(true)
      getmetatable(p).__gc = function()
        out.gc_local = smarm.alive(smarm.self())
        out.gc_ok, out.gc_err = pcall(smarm.alive, there)
      end
      p = nil -- luacheck: ignore
      collectgarbage()
      collectgarbage()
      out.bad_ok, out.bad_err = pcall(function() local v = smarm.alive(5); return v end)
      return out
    end, { schedulers = 2 })
    assert.are.same({ self = true, here = true, there = true, here_after = false,
      there_after = false, gc_local = true, gc_ok = false, gc_err = r.gc_err, bad_ok = false,
      bad_err = r.bad_err }, r)
    assert.matches("cannot park inside a __gc finalizer", r.gc_err)
    assert.matches("^spec/actor_spec%.lua:%d+: bad argument #1 to 'alive' %(pid or name "
      .. "expected, got number%)$", r.bad_err)
    local ok, err = pcall(smarm.alive, smarm.run(function() return smarm.self() end))
    assert.is_false(ok)
    assert.matches("smarm.alive: not inside an actor", err)
  end)

  it("tells with smarm.alive whether a name's holder lives, on any scheduler", function()
    local r = smarm.run(function()
      local out = {}
      local here = smarm.spawn_opt({ name = "here" }, function() smarm.receive() end)
      local there = smarm.spawn_opt({ on = 2, name = "there" }, function() smarm.receive() end)
      out.here, out.there, out.nobody = smarm.alive("here"), smarm.alive("there"),
        smarm.alive("nobody")
      local refs = { smarm.monitor(here), smarm.monitor(there) }
      smarm.send(here, "end")
      smarm.send(there, "end")
      for _ = 1, 2 do smarm.receive(function(m) return m.smarm == "DOWN" end) end
      out.here_after, out.there_after = smarm.alive("here"), smarm.alive("there")
      out.refs = #refs
      return out
    end, { schedulers = 2 })
    assert.are.same({ here = true, there = true, nobody = false, here_after = false,
      there_after = false, refs = 2 }, r)
    local ok, err = pcall(smarm.alive, "here")
    assert.is_false(ok)
    assert.matches("smarm.alive: not inside an actor", err)
  end)

  it("runs thousands of actors", function()
    -- TSan makes and clears a fiber state of its own for each actor (3 ms apiece): fewer there
    local N = os.getenv("SMARM_SANITIZER") == "tsan" and 1000 or 5000
    local total = smarm.run(function()
      local sum = { n = 0 }
      for i = 1, N do
        smarm.spawn(function()
          smarm.yield()
          sum.n = sum.n + i
        end)
      end
      while sum.n < N * (N + 1) / 2 do smarm.yield() end
      return sum.n
    end)
    assert.are.equal(N * (N + 1) / 2, total)
  end)
end)

describe("yield from anywhere", function()
  -- Each case runs in two actors at once, so every yield really switches to the other one.
  local function in_two_actors(body)
    return smarm.run(function()
      local results = {}
      for i = 1, 2 do
        smarm.spawn(function() results[i] = body(i) end)
      end
      while not (results[1] and results[2]) do smarm.yield() end
      return results[1], results[2]
    end)
  end

  it("inside table.sort comparators", function()
    local a, b = in_two_actors(function()
      local t = { 5, 3, 9, 1, 7, 2, 8 }
      table.sort(t, function(x, y) smarm.yield(); return x < y end)
      return table.concat(t, ",")
    end)
    assert.are.equal("1,2,3,5,7,8,9", a)
    assert.are.equal(a, b)
  end)

  it("inside string.gsub callbacks", function()
    local a = in_two_actors(function()
      return (("abc"):gsub("%w", function(c) smarm.yield(); return c:upper() end))
    end)
    assert.are.equal("ABC", a)
  end)

  it("inside __index, __lt and __call metamethods", function()
    local a = in_two_actors(function(i)
      local mt = {
        __index = function(_, k) smarm.yield(); return k .. i end,
        __lt = function(x, y) smarm.yield(); return x.v < y.v end,
        __call = function(_, v) smarm.yield(); return v * 2 end,
      }
      local o = setmetatable({ v = 1 }, mt)
      local p = setmetatable({ v = 2 }, mt)
      return o.key .. tostring(o < p) .. o(21)
    end)
    assert.matches("^key%dtrue42$", a)
  end)

  it("inside iterators", function()
    local a = in_two_actors(function()
      local function iter(_, i)
        smarm.yield()
        if i < 5 then return i + 1 end
      end
      local s = 0
      for i in iter, nil, 0 do s = s + i end
      return s
    end)
    assert.are.equal(15, a)
  end)

  it("inside pcall and xpcall", function()
    local a = in_two_actors(function()
      local ok1, e1 = pcall(function() smarm.yield(); error("e1", 0) end)
      local ok2, e2 = xpcall(function() smarm.yield(); error("e2", 0) end,
        function(m) smarm.yield(); return "handled " .. m end)
      return tostring(ok1) .. e1 .. tostring(ok2) .. e2
    end)
    assert.are.equal("falsee1falsehandled e2", a)
  end)

  it("inside user coroutines", function()
    local a = in_two_actors(function()
      local co = coroutine.wrap(function()
        smarm.yield()
        coroutine.yield(1)
        smarm.yield()
        return 2
      end)
      return co() + co()
    end)
    assert.are.equal(3, a)
  end)

  it("in JIT-hot loops", function()
    local a, b = in_two_actors(function()
      local n = 0
      for i = 1, 100000 do
        smarm.yield()
        n = n + i
      end
      return n
    end)
    assert.are.equal(5000050000, a)
    assert.are.equal(a, b)
  end)

  it("and an error raised after a switch unwinds normally", function()
    local a = in_two_actors(function()
      local ok, err = pcall(function()
        smarm.yield()
        smarm.sleep(-1) -- raises from C after nothing, then again after a real switch below
      end)
      local ok2, err2 = pcall(function()
        smarm.yield()
        error({ code = 7 })
      end)
      return tostring(ok) .. tostring(err):match("non%-negative") .. tostring(ok2) .. err2.code
    end)
    assert.are.equal("falsenon-negativefalse7", a)
  end)
end)

describe("parking where it would corrupt LuaJIT", function()
  it("is refused inside a __gc finalizer", function()
    local err = smarm.run(function()
      local result = {}
      local p = newproxy(true)
      getmetatable(p).__gc = function()
        local ok, e = pcall(smarm.yield)
        result.ok, result.err = ok, e
        result.exit_ok, result.exit_err = pcall(smarm.exit) -- ending would leave the GC off
      end
      p = nil -- luacheck: ignore
      collectgarbage()
      collectgarbage()
      -- the VM still collects and parks afterwards
      local q = newproxy(true)
      getmetatable(q).__gc = function() result.collected = true end
      q = nil -- luacheck: ignore
      collectgarbage()
      collectgarbage()
      smarm.yield()
      return result
    end)
    assert.is_false(err.ok)
    assert.matches("cannot park inside a __gc finalizer", err.err)
    assert.is_false(err.exit_ok)
    assert.matches("smarm.exit: cannot park inside a __gc finalizer", err.exit_err)
    assert.is_true(err.collected)
  end)

  it("is refused inside an FFI callback, and the callback still completes", function()
    local ffi = require("ffi")
    pcall(ffi.cdef, "void qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));")
    local err, first, last = smarm.run(function()
      local arr = ffi.new("int[5]", 4, 2, 5, 3, 1)
      local refused
      local cmp = ffi.cast("int (*)(const void *, const void *)", function(a, b)
        local ok, e = pcall(smarm.yield)
        if not ok then refused = e end
        local x, y = ffi.cast("const int *", a)[0], ffi.cast("const int *", b)[0]
        return x < y and -1 or (x > y and 1 or 0)
      end)
      smarm.spawn(function() for _ = 1, 10 do smarm.yield() end end) -- someone to switch to
      ffi.C.qsort(arr, 5, ffi.sizeof("int"), cmp)
      cmp:free()
      return refused, arr[0], arr[4]
    end)
    assert.matches("cannot park inside an FFI callback", err)
    assert.are.equal(1, first)
    assert.are.equal(5, last)
  end)

  it("refuses a receive that would wait in a hook or a callback, and any in a finalizer", function()
    local ffi = require("ffi")
    pcall(ffi.cdef, "void qsort(void *base, size_t n, size_t size, "
      .. "int (*cmp)(const void *, const void *));")
    -- Each try: receive with a timeout, a selective one with a timeout, then a poll (0: no park).
    local function tries(out)
      local function try(...)
        local ok, e = pcall(smarm.receive, ...)
        out[#out + 1] = ok and "ok" or e:match("cannot park [^(]*"):gsub("%s+$", "")
      end
      try(0.01)
      try(function() return true end, 0.01)
      local ok, a, b = pcall(smarm.receive, 0)
      out[#out + 1] = ok and (tostring(a) .. "," .. tostring(b)) or a
      -- a selective poll too (with nothing queued it once timed out before its check)
      ok, a, b = pcall(smarm.receive, function() return true end, 0)
      out[#out + 1] = ok and (tostring(a) .. "," .. tostring(b)) or a
    end
    local r = smarm.run(function()
      local out = { gc = {}, hook = {}, ffi = {} }
      local p = newproxy(true)
      getmetatable(p).__gc = function()
        tries(out.gc)
        out.remote = select(2, pcall(smarm.call, { "someone", "other@nowhere" }, "hi", 0))
      end
      p = nil -- luacheck: ignore
      collectgarbage()
      collectgarbage()
      debug.sethook(function()
        debug.sethook()
        tries(out.hook)
      end, "", 1)
      local _ = out.hook.x -- a few instructions for the count hook
      debug.sethook()
      local arr = ffi.new("int[2]", 2, 1)
      local cmp = ffi.cast("int (*)(const void *, const void *)", function(a, b)
        if #out.ffi == 0 then tries(out.ffi) end
        return ffi.cast("const int *", a)[0] - ffi.cast("const int *", b)[0]
      end)
      ffi.C.qsort(arr, 2, ffi.sizeof("int"), cmp)
      cmp:free()
      -- the VM still parks and receives afterwards
      smarm.send(smarm.self(), "after")
      out.after = smarm.receive(0.01)
      out.timeout = select(2, smarm.receive(0.001))
      return out
    end)
    -- in a finalizer, not even a poll: it may run inside a decode, whose block a message taken
    -- there would free; a call to another node's process is refused before it sends (r.remote)
    assert.are.same({ "cannot park inside a __gc finalizer", "cannot park inside a __gc finalizer",
      "smarm.receive: cannot take a message inside a __gc finalizer",
      "smarm.receive: cannot take a message inside a __gc finalizer" }, r.gc)
    assert.are.equal("smarm.call: cannot take a message inside a __gc finalizer", r.remote)
    assert.are.same({ "cannot park inside a debug hook", "cannot park inside a debug hook",
      "nil,timeout", "nil,timeout" }, r.hook)
    assert.are.same({ "cannot park inside an FFI callback", "cannot park inside an FFI callback",
      "nil,timeout", "nil,timeout" }, r.ffi)
    assert.are.equal("after", r.after)
    assert.are.equal("timeout", r.timeout)
  end)

  it("is refused outside an actor", function()
    assert.has_error(function() smarm.yield() end, "smarm.yield: not inside an actor (call it from smarm.run)")
    assert.has_error(function() smarm.sleep(0) end)
    assert.has_error(function() smarm.self() end)
    assert.has_error(function() smarm.spawn(function() end) end)
  end)
end)

describe("smarm.sleep, smarm.now, smarm.exit", function()
  it("sleeps at least the time asked", function()
    local slept = smarm.run(function()
      local t0 = smarm.now()
      smarm.sleep(0.02)
      return smarm.now() - t0
    end)
    assert.is_true(slept >= 0.02)
  end)

  it("rejects bad sleep arguments", function()
    local ok1, e1, ok2 = smarm.run(function()
      local a, b = pcall(smarm.sleep, "x")
      local c = pcall(smarm.sleep, -1)
      return a, b, c
    end)
    assert.is_false(ok1)
    assert.matches("non%-negative number of seconds expected, got string", e1)
    assert.is_false(ok2)
  end)

  it("ends the calling actor at once", function()
    local r = smarm.run(function()
      local state = {}
      smarm.spawn(function()
        state.before = true
        smarm.exit()
        state.after = true
      end)
      smarm.yield()
      return state
    end)
    assert.is_true(r.before)
    assert.is_nil(r.after)
  end)

  it("ends run when the main actor exits", function()
    local r = { smarm.run(function() smarm.exit(); return "never" end) }
    assert.are.equal(0, #r)
  end)
end)

describe("smarm.stats", function()
  it("counts spawned and live actors per scheduler, and the caller's VM memory", function()
    smarm.run(function()
      local before = smarm.stats()
      assert.are.equal(2, #before)
      assert.is_number(before.memory)
      local pids = {}
      for i = 1, 10 do
        pids[i] = smarm.spawn_opt({ on = 2, monitor = true }, function() require("smarm").receive() end)
      end
      -- spawn_on returns before scheduler 2 made the actor; a question to it comes after
      for i = 1, 10 do assert.is_true(smarm.alive(pids[i])) end
      local during = smarm.stats()
      assert.is_true(during.total.spawned >= before.total.spawned + 10)
      assert.is_true(during[2].live >= before[2].live + 10)
      for i = 1, 10 do smarm.kill(pids[i]) end
      local function is_down(m) return type(m) == "table" and m.smarm == "DOWN" end
      for _ = 1, 10 do assert.are.equal("killed", smarm.receive(is_down, 60).reason) end
      assert.are.equal(before[2].live, smarm.stats()[2].live) -- a death is counted before its DOWN
    end, { schedulers = 2 })
    assert.has_error(function() smarm.stats() end, "smarm.stats: no runtime is running")
  end)
end)
