-- bench/ring.lua: one hop of a token around a ring of actors (1,000 actors, 1M hops by default).
-- A sample is one trip around the ring, divided by its hops.
--   local   the whole ring on one scheduler
--   spread  neighbours on alternating schedulers of two: every hop crosses
-- Knobs: SMARM_RING_ACTORS, SMARM_RING_HOPS, SMARM_RING_RUNS.
-- Run: smarm -n bench/ring.lua [local|spread]
local smarm = require("smarm")
local bench = require("smarm.bench")

-- Optional arguments name the variants to run; none: all.
local want = bench.variants(arg, { "local", "spread" })
local actors = bench.knob("SMARM_RING_ACTORS", 1000)
local hops = bench.knob("SMARM_RING_HOPS", 1000000)
local runs = bench.knob("SMARM_RING_RUNS", 3)

-- Each member forwards every token to the next; a token is the number of hops left.
local function member(owner)
  local receive, send = smarm.receive, smarm.send
  local next_pid = receive()
  while true do
    local left = receive()
    if left == 0 then send(next_pid, 0); return end
    if left == 1 then send(owner, "lap") else send(next_pid, left - 1) end
  end
end

local variants = {}
for _, v in ipairs({ "local", "spread" }) do
  if want(v) then variants[#variants + 1] = v end
end

for _, variant in ipairs(variants) do
  local schedulers = variant == "local" and 1 or 2
  smarm.run(function()
    local me = smarm.self()
    local pids = {}
    for i = 1, actors do
      pids[i] = smarm.spawn_on(variant == "local" and 1 or (i % 2 + 1), member, me)
    end
    for i = 1, actors do smarm.send(pids[i], pids[i % actors + 1]) end
    local receive, send = smarm.receive, smarm.send
    local laps = math.max(1, math.floor(hops / actors))
    local r = bench.measure(function(n)
      for _ = 1, n do
        send(pids[1], actors) -- one lap: actors hops, then back to us
        receive()
      end
    end, { batch = 1, rounds = laps, warmup = 2, runs = runs, per_call = actors,
      label = "ring " .. variant })
    send(pids[1], 0)
    bench.report({ scenario = "ring", variant = variant, schedulers = schedulers,
      actors = actors }, r)
  end, { schedulers = schedulers })
end

bench.finish()
