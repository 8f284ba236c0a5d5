-- bench/spawn.lua: spawning a Lua actor that then waits; resident memory per waiting actor
-- (100,000 of them by default) and the time to release them all.
-- Knobs: SMARM_SPAWN_ACTORS, SMARM_SPAWN_RUNS. Run: smarm -n bench/spawn.lua
local smarm = require("smarm")
local bench = require("smarm.bench")

bench.variants(arg, {}) -- no variants; takes --json and --plot
local actors = bench.knob("SMARM_SPAWN_ACTORS", 100000)
local runs = bench.knob("SMARM_SPAWN_RUNS", 3)

local function waiter()
  smarm.receive()
end

smarm.run(function()
  local ps = smarm.histogram()
  local rss_per, release_ns = {}, {}
  -- One baseline before the first run: later runs reuse memory the earlier ones freed (to
  -- the allocator, not the system), and a per-run baseline would hide it.
  collectgarbage()
  local rss0 = bench.rss_bytes()
  for run = 1, runs do
    collectgarbage()
    local pids = {}
    local clock = smarm.clock
    local batch = 100
    for i = 1, actors, batch do
      local t0 = clock()
      for k = i, math.min(i + batch - 1, actors) do pids[k] = smarm.spawn(waiter) end
      local t1 = clock()
      ps:record((t1 - t0) * 1000 / math.min(batch, actors - i + 1))
      if i % 10000 == 1 then smarm.yield() end -- let them reach their receive
    end
    for _ = 1, 10 do smarm.yield() end
    rss_per[run] = (bench.rss_bytes() - rss0) / actors
    local t0 = clock()
    for i = 1, actors do smarm.send(pids[i], 0) end
    smarm.yield()
    for _ = 1, 10 do smarm.yield() end
    release_ns[run] = (clock() - t0) / actors
    pids = nil -- luacheck: ignore
    bench.progress("spawn: run %d of %d", run, runs)
  end
  table.sort(rss_per)
  table.sort(release_ns)
  local r = { ps = ps, ccyc = smarm.histogram(), floor_ns = 0, ghz = (bench.calibrate()),
    ops = actors * runs }
  bench.report({ scenario = "spawn", variant = "waiting", schedulers = 1, actors = actors,
    rss_per_actor_bytes = math.floor(rss_per[math.ceil(#rss_per / 2)]),
    release_ns_per_actor = release_ns[math.ceil(#release_ns / 2)] }, r)
end, { schedulers = 1 })

bench.finish()
