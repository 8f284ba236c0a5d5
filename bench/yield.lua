-- bench/yield.lua: what a Lua actor's yield costs, beside a bare LuaJIT coroutine round trip
-- (coroutine.resume + coroutine.yield) measured in the same run.
--
--   mode=luajit_coro   the baseline: resume/yield of a plain coroutine
--   mode=lua_local     one Lua actor alone, smarm.yield() in a tight loop (the scheduler decides
--                      every time; nobody else is runnable, so no switch)
--   mode=lua_pair      two Lua actors yielding in turn: every yield switches stacks
--
-- Measured with the harness (lua/smarm/bench.lua): batches of SMARM_SWITCH_BATCH operations
-- (default 1000), the bracket's cost subtracted, runs pooled. Knobs: SMARM_SWITCH_ROUNDS,
-- SMARM_SWITCH_WARMUP, SMARM_SWITCH_RUNS. Each configuration prints one
-- `scenario=switch_cost ... mode=...` line.
-- Run: build/lua-release/smarm -s 1 bench/yield.lua   (or ./dev.sh bench)
local smarm = require("smarm")
local bench = require("smarm.bench")

bench.variants(arg, {}) -- no variants; takes --json and --plot
local opts = bench.measure_knobs("SMARM_SWITCH", 2000000, 20000, 5, 1000)

-- One loop function for every yielding actor (same return addresses: see docs/perf.md).
local yield = smarm.yield
local function yield_n(n)
  for _ = 1, n do yield() end
end

local function run(mode, op, per_call)
  opts.label, opts.per_call = mode, per_call
  local r = bench.measure(op, opts)
  return bench.report({ scenario = "switch_cost", variant = mode, mode = mode }, r).p50_ns
end

local function body()
  local co = coroutine.wrap(function() while true do coroutine.yield() end end)
  local coro = run("luajit_coro", function(n) for _ = 1, n do co() end end)
  local alone = run("lua_local", yield_n)
  local done = false
  smarm.spawn(function() while not done do yield_n(1000) end end)
  yield()
  -- each measured yield lets the partner yield once too: two yields per call
  local pair = run("lua_pair", yield_n, 2)
  done = true
  yield()
  print(string.format("summary lua_local/luajit_coro=%.2f lua_pair/luajit_coro=%.2f",
    alone / coro, pair / coro))
end

if pcall(smarm.self) then
  body() -- run by the smarm executable: already the main actor
else
  smarm.run(body, { schedulers = 1 }) -- run by plain luajit with the module, or smarm -n
end
bench.finish()
