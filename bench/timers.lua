-- bench/timers.lua: what pending message timers (smarm.send_after) cost the scheduling decisions
-- of everything else. Issue #11: 100,000 pending timers cost no more per decision than ten. Each
-- variant sets that many timers an hour away (on the main actor's scheduler) and then measures:
--   yield_N     smarm.yield of the main actor beside a second actor that yields too
--   pingpong_N  a message round trip with an actor of the same scheduler
-- for N = 10 and 100000, in the same process. The timers are cancelled at the end.
-- Knobs: SMARM_TIMERS_ROUNDS, _WARMUP, _RUNS, _BATCH. Run: smarm -n bench/timers.lua [variant...]
local smarm = require("smarm")
local bench = require("smarm.bench")

local want = bench.variants(arg, { "yield_10", "yield_100000", "pingpong_10",
  "pingpong_100000" })
local opts = bench.measure_knobs("SMARM_TIMERS", 200000, 2000, 5, 100)

local function yielder()
  local yield = smarm.yield
  while true do yield() end
end

local function pong(owner)
  local receive, send = smarm.receive, smarm.send
  while true do send(owner, receive()) end
end

local loops = {
  yield = function()
    local other = smarm.spawn(yielder)
    local yield = smarm.yield
    return function(n) for _ = 1, n do yield() end end, function() smarm.kill(other) end
  end,
  pingpong = function()
    local peer = smarm.spawn(pong, smarm.self())
    local send, receive = smarm.send, smarm.receive
    return function(n)
      for _ = 1, n do
        send(peer, 1)
        receive()
      end
    end, function() smarm.kill(peer) end
  end,
}

for _, kind in ipairs({ "yield", "pingpong" }) do
  for _, pending in ipairs({ 10, 100000 }) do
    local name = kind .. "_" .. pending
    if want(name) then
      smarm.run(function()
        local me, timers = smarm.self(), {}
        for i = 1, pending do timers[i] = smarm.send_after(3600 + i * 1e-3, me, i) end
        local loop, stop = loops[kind]()
        opts.label = "timers " .. name
        local r = bench.measure(loop, opts)
        stop()
        for i = 1, pending do smarm.cancel_timer(timers[i]) end
        bench.report({ scenario = "timers", variant = name, schedulers = 1, pending = pending }, r)
      end, { schedulers = 1 })
    end
  end
end

bench.finish()
