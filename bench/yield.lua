-- bench/yield.lua: what a Lua actor's yield costs, beside a bare LuaJIT coroutine round trip
-- (coroutine.resume + coroutine.yield) measured in the same run.
--
--   lua_local      one Lua actor alone, smarm.yield() in a tight loop (the scheduler decides
--                  every time; nobody else is runnable, so no switch)
--   lua_pair       two Lua actors yielding in turn: every yield switches stacks
--   luajit_coro    the baseline: resume/yield of a plain coroutine
--
-- Method: samples are batches of SMARM_SWITCH_BATCH operations (default 1000) timed with
-- smarm.now() (the cycle counter gives p50_cyc; ghz is calibrated over 20 ms); the cost of the
-- timing calls is measured the same way with an empty batch and subtracted. Knobs:
-- SMARM_SWITCH_ROUNDS (operations per run), SMARM_SWITCH_WARMUP, SMARM_SWITCH_RUNS.
-- Each configuration prints one `scenario=switch_cost mode=... key=value` line.
-- Run: build/lua-release/smarm -s 1 bench/yield.lua   (or ./dev.sh bench)
local smarm = require("smarm")

local function knob(name, default)
  local v = tonumber(os.getenv(name) or "")
  return (v and v > 0) and v or default
end

local ROUNDS = knob("SMARM_SWITCH_ROUNDS", 2000000)
local WARMUP = knob("SMARM_SWITCH_WARMUP", 20000)
local RUNS = knob("SMARM_SWITCH_RUNS", 5)
local BATCH = knob("SMARM_SWITCH_BATCH", 1000)

local now, cycles = smarm.now, smarm.cycles

local function calibrate_ghz()
  local t0, c0 = now(), cycles()
  while now() - t0 < 0.02 do end
  return (cycles() - c0) / ((now() - t0) * 1e9)
end

local function percentile(sorted, q)
  return sorted[math.max(1, math.ceil(q * #sorted))]
end

-- Times op(n) (which performs n operations) in batches; returns per-op ns samples, sorted.
local function measure(op)
  local samples = {}
  local floor_t = math.huge
  for _ = 1, 101 do -- the timer's own cost: the cheapest of many empty brackets
    local t0 = now()
    op(0)
    floor_t = math.min(floor_t, now() - t0)
  end
  for _ = 1, RUNS do
    op(WARMUP)
    for _ = 1, math.max(1, math.floor(ROUNDS / BATCH)) do
      local t0 = now()
      op(BATCH)
      local dt = now() - t0 - floor_t
      samples[#samples + 1] = math.max(0, dt) * 1e9 / BATCH
    end
  end
  table.sort(samples)
  return samples, floor_t * 1e9
end

local function report(mode, schedulers, samples, floor_ns, ghz)
  local p50 = percentile(samples, 0.5)
  print(string.format("scenario=switch_cost mode=%s schedulers=%d rounds=%d runs=%d batch=%d " ..
    "p50_ns=%.1f p90_ns=%.1f p99_ns=%.1f max_ns=%.1f p50_cyc=%.1f ghz=%.3f floor_ns=%.1f ops=%d",
    mode, schedulers, ROUNDS, RUNS, BATCH, p50, percentile(samples, 0.9),
    percentile(samples, 0.99), samples[#samples], p50 * ghz, ghz, floor_ns, #samples * BATCH))
  io.stdout:flush()
  return p50
end

-- One loop function for every yielding actor (same return addresses: see docs/perf.md).
local yield = smarm.yield
local function yield_n(n)
  for _ = 1, n do yield() end
end

local results = {}
local ghz = calibrate_ghz()

local function body()
  -- the baseline, in the same run
  local co = coroutine.wrap(function() while true do coroutine.yield() end end)
  local samples, floor_ns = measure(function(n) for _ = 1, n do co() end end)
  results.coro = report("luajit_coro", 1, samples, floor_ns, ghz)

  samples, floor_ns = measure(yield_n)
  results.lua_local = report("lua_local", 1, samples, floor_ns, ghz)

  local done = false
  smarm.spawn(function() while not done do yield_n(1000) end end)
  yield()
  samples, floor_ns = measure(function(n) yield_n(n) end)
  -- each measured yield of this actor lets the partner yield once too: two yields per op
  for i = 1, #samples do samples[i] = samples[i] / 2 end
  results.lua_pair = report("lua_pair", 1, samples, floor_ns, ghz)
  done = true
  yield()
end

if pcall(smarm.self) then
  body() -- run by the smarm executable: already the main actor
else
  smarm.run(body, { schedulers = 1 }) -- run by plain luajit with the module
end

print(string.format("summary lua_local/luajit_coro=%.2f lua_pair/luajit_coro=%.2f",
  results.lua_local / results.coro, results.lua_pair / results.coro))
