-- bench/switch_cost.lua: the predecessor's switch-cost benchmark, for Lua actors.
--
--   luajit_coro   baseline: a bare LuaJIT coroutine resume/yield round trip (same run)
--   local         one Lua actor alone on one scheduler: smarm.yield() round trip
--   remote        a message round trip whose wake crosses two schedulers (actor on 1 <-> 2)
--   parallel N    N schedulers, each with one actor yielding locally (N = 1, 2, 4, 8)
--
-- Knobs: SMARM_SWITCH_ROUNDS (measured operations per run), SMARM_SWITCH_WARMUP,
-- SMARM_SWITCH_RUNS, SMARM_SWITCH_BATCH.
-- Run: smarm -n bench/switch_cost.lua [--json FILE] [variant...]
-- (plain mode: each configuration starts its own runtime).
local smarm = require("smarm")
local bench = require("smarm.bench")

-- Optional arguments name the variants to run (luajit_coro local remote parallel); none: all.
local want = bench.variants(arg, { "luajit_coro", "local", "remote", "parallel" })

local opts = bench.measure_knobs("SMARM_SWITCH", 1000000, 10000, 5, 1000)

local yield = smarm.yield
-- One loop for every yielding actor (the same return addresses for each: docs/perf.md).
local function yield_n(n)
  for _ = 1, n do yield() end
end

local function with_label(label)
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.label = label
  return o
end

-- baseline and local, in one runtime of one scheduler
smarm.run(function()
  if want("luajit_coro") then
    local co = coroutine.wrap(function() while true do coroutine.yield() end end)
    local r = bench.measure(function(n) for _ = 1, n do co() end end, with_label("luajit_coro"))
    bench.report({ scenario = "switch_cost", variant = "luajit_coro" }, r)
  end
  if want("local") then
    local r = bench.measure(yield_n, with_label("local"))
    bench.report({ scenario = "switch_cost", variant = "local" }, r)
  end
end, { schedulers = 1 })

-- remote: every round trip wakes an actor on the other scheduler and back
if want("remote") then
  local remote_opts = with_label("remote")
  remote_opts.rounds = math.max(1000, math.floor(opts.rounds / 10))
  remote_opts.batch = math.max(1, math.floor(opts.batch / 10))
  smarm.run(function()
    local me = smarm.self()
    local echo = smarm.spawn_on(2, function(owner)
      local receive, send = smarm.receive, smarm.send
      while true do
        local m = receive()
        if m == 0 then return end
        send(owner, m)
      end
    end, me)
    local receive, send = smarm.receive, smarm.send
    local r = bench.measure(function(n)
      for _ = 1, n do
        send(echo, 1)
        receive()
      end
    end, remote_opts)
    send(echo, 0)
    bench.report({ scenario = "switch_cost", variant = "remote", schedulers = 2 }, r)
  end, { schedulers = 2 })
end

-- parallel: the slope from 1 to 8 schedulers (this machine has 2 cores: 4 and 8 oversubscribe)
for _, n in ipairs(want("parallel") and { 1, 2, 4, 8 } or {}) do
  smarm.run(function()
    local me = smarm.self()
    for k = 1, n do
      smarm.spawn_on(k, function(owner, o)
        local b = require("smarm.bench")
        local s = require("smarm")
        local y = s.yield
        local r = b.measure(function(m) for _ = 1, m do y() end end, o)
        s.send(owner, b.pack(r))
      end, me, with_label("parallel " .. n))
    end
    local packed = {}
    for k = 1, n do packed[k] = smarm.receive() end
    bench.report({ scenario = "switch_cost", variant = "parallel", schedulers = n },
      bench.merge(packed))
  end, { schedulers = n })
end

bench.finish()
