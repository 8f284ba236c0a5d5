-- bench/skynet.lua: the skynet benchmark. A tree of actors, 10 children per node, whose
-- 10^depth leaves each send their number up; every node sums its children. The full size is
-- depth 6: 1,111,111 actors and a million leaves. One operation is the whole tree; the line
-- reports its total time (and per-actor time as per_op_ns).
-- Knobs: SMARM_SKYNET_DEPTH (default 5: 111,111 actors), SMARM_SKYNET_RUNS,
-- SMARM_SKYNET_SCHEDULERS (default 2). Run: smarm -n bench/skynet.lua
local smarm = require("smarm")
local bench = require("smarm.bench")

bench.variants(arg, {}) -- no variants; takes --json and --plot
local depth = bench.knob("SMARM_SKYNET_DEPTH", 5)
local runs = bench.knob("SMARM_SKYNET_RUNS", 3)
local schedulers = bench.knob("SMARM_SKYNET_SCHEDULERS", 2)

-- The node lives in bench/skynet_node.lua, found next to this script in every VM.
package.path = (arg and arg[0] and arg[0]:match("^(.*/)") or "./") .. "?.lua;" .. package.path

local actors = 0
for l = 0, depth do actors = actors + 10 ^ l end
local leaves = 10 ^ depth

smarm.run(function()
  local ps = smarm.histogram()
  local me = smarm.self()
  for run = 1, runs do
    local t0 = smarm.clock()
    -- the top node's ten children spread over the schedulers; below them, spawns are local
    local child_size = leaves / 10
    for i = 0, 9 do
      smarm.spawn_on(i % smarm.schedulers() + 1, "skynet_node.node", me, i * child_size, depth - 1,
        child_size)
    end
    local sum = 0
    for _ = 1, 10 do sum = sum + smarm.receive() end
    local dt = smarm.clock() - t0
    assert(sum == leaves * (leaves - 1) / 2, "skynet: wrong sum " .. sum)
    ps:record(dt * 1000) -- picoseconds per tree
    bench.progress("skynet: run %d of %d: %.0f ms", run, runs, dt / 1e6)
  end
  local r = { ps = ps, ccyc = smarm.histogram(), floor_ns = 0, ghz = (bench.calibrate()), ops = runs }
  local row = bench.report({ scenario = "skynet", variant = "depth" .. depth,
    schedulers = smarm.schedulers(), actors = actors }, r)
  bench.progress("skynet: %.1f ns per actor", row.p50_ns / actors)
end, { schedulers = schedulers })

bench.finish()

