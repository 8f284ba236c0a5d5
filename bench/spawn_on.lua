-- bench/spawn_on.lua: spawning on a chosen scheduler, beside a plain spawn, on two schedulers.
-- Each operation spawns `function() end` (an actor that ends at once); the spawner yields after
-- each batch, so the children run and end as they would in a loop of a real program.
--   spawn    smarm.spawn(f): the baseline
--   here     smarm.spawn_on(1, f) from scheduler 1: a copy of f, made here
--   there    smarm.spawn_on(2, f) from scheduler 1: f moves to scheduler 2's VM
--   any      smarm.spawn_on("any", f)
--   spread   one million actors that wait in receive, spawned with spawn_on(i % 2 + 1, f): the
--            time per spawn of the whole loop (then each gets one message and ends)
-- Each line also has busy1_ns and busy2_ns (below). Knobs: SMARM_SPAWN_ON_ROUNDS, _WARMUP,
-- _RUNS, _BATCH; SMARM_SPAWN_ON_SPREAD (actors of `spread`).
-- Run: smarm -n bench/spawn_on.lua [variant...]
local smarm = require("smarm")
local bench = require("smarm.bench")

local want = bench.variants(arg, { "spawn", "here", "there", "any", "spread" })
local opts = bench.measure_knobs("SMARM_SPAWN_ON", 20000, 2000, 5, 100)
local spread = bench.knob("SMARM_SPAWN_ON_SPREAD", 1000000)
-- A spawn on another scheduler asks it for pids when those it set aside run out, and waits
-- behind the spawns queued there: on a slow machine (a sanitizer's build under load) longer than
-- the default opts.request_timeout. A benchmark measures; it does not give up.
local run_opts = { schedulers = 2, request_timeout = math.huge }

local spawners = {
  spawn = function(f) return smarm.spawn(f) end,
  here = function(f) return smarm.spawn_on(1, f) end,
  there = function(f) return smarm.spawn_on(2, f) end,
  any = function(f) return smarm.spawn_on("any", f) end,
}

-- busy1_ns / busy2_ns: each scheduler's busy time (smarm.stats) per spawn, warm-ups included:
-- where the time goes when one side waits for the other (the p50 is the spawner's view).
for _, name in ipairs({ "spawn", "here", "there", "any" }) do
  if want(name) then
    smarm.run(function()
      local spawn, yield = spawners[name], smarm.yield
      local f = function() end
      local spawned, s0 = 0, nil
      local loop = function(n)
        s0 = s0 or smarm.stats() -- (from the first spawn: not the harness's calibration)
        for _ = 1, n do spawn(f) end
        spawned = spawned + n
        yield()
      end
      opts.label = "spawn_on " .. name
      local r = bench.measure(loop, opts)
      local s1 = smarm.stats()
      bench.report({ scenario = "spawn_on", variant = name, schedulers = 2,
        busy1_ns = (s1[1].busy_ns - s0[1].busy_ns) / spawned,
        busy2_ns = (s1[2].busy_ns - s0[2].busy_ns) / spawned }, r)
    end, run_opts)
  end
end

if want("spread") then
  smarm.run(function()
    local spawn_on, clock = smarm.spawn_on, smarm.clock
    local f = function() smarm.receive() end
    local pids, ps = {}, smarm.histogram()
    collectgarbage()
    local t0 = clock()
    for i = 1, spread do pids[i] = spawn_on(i % 2 + 1, f) end
    local dt = clock() - t0
    ps:record(dt * 1000 / spread)
    for i = 1, spread do smarm.send(pids[i], 0) end
    local r = { ps = ps, ccyc = smarm.histogram(), floor_ns = 0, ghz = (bench.calibrate()),
      ops = spread }
    bench.report({ scenario = "spawn_on", variant = "spread", schedulers = 2, actors = spread,
      total_s = dt / 1e9 }, r)
  end, run_opts)
end

bench.finish()
