-- bench/pingpong.lua: one round trip of a small message between two Lua actors.
--   local   both actors on one scheduler
--   remote  the actors on two schedulers (every message crosses)
-- Knobs: SMARM_PINGPONG_ROUNDS, _WARMUP, _RUNS, _BATCH. Run: smarm -n bench/pingpong.lua [local|remote]
local smarm = require("smarm")
local bench = require("smarm.bench")

-- Optional arguments name the variants to run; none: all.
local want = bench.variants(arg, { "local", "remote" })
local opts = bench.measure_knobs("SMARM_PINGPONG", 200000, 5000, 5, 100)

local function pong(owner)
  local receive, send = smarm.receive, smarm.send
  while true do
    local m = receive()
    if m == 0 then return end
    send(owner, m)
  end
end

local variants = {}
for _, v in ipairs({ "local", "remote" }) do
  if want(v) then variants[#variants + 1] = v end
end

for _, variant in ipairs(variants) do
  local schedulers = variant == "local" and 1 or 2
  smarm.run(function()
    local peer = smarm.spawn_on(schedulers, pong, smarm.self())
    local receive, send = smarm.receive, smarm.send
    opts.label = "pingpong " .. variant
    local r = bench.measure(function(n)
      for _ = 1, n do
        send(peer, 1)
        receive()
      end
    end, opts)
    send(peer, 0)
    bench.report({ scenario = "pingpong", variant = variant, schedulers = schedulers }, r)
  end, { schedulers = schedulers })
end

bench.finish()
