-- bench/fairness.lua: how late a 10 ms ticker wakes beside runaway actors on its scheduler
-- (issue #10). The main actor sleeps until each 10 ms deadline and records how late it woke;
-- beside it, 0, 1, 4 or 16 actors spin in compiled loops that never park or yield, so the
-- ticker runs only because they are switched out at the end of their slices (2 ms by default,
-- SMARM_FAIRNESS_SLICE seconds otherwise). Without preemption every variant but hogs_0 never
-- ends. The latencies reported are the lateness of each tick.
-- Two more variants measure the preemption itself, beside one runaway actor, one sample per
-- slice of it: preempt_wait, from the runtime's request to give way to the switch
-- (smarm.stats' preempt_wait_ns, per preemption); slice_overrun, how much longer than its slice
-- the runaway ran (the request comes at the ticker's next look after the slice's end, a tick
-- being half a slice, plus that wait).
-- Knobs: SMARM_FAIRNESS_TICKS (default 200), SMARM_FAIRNESS_SLICE.
-- Run: smarm -n bench/fairness.lua [hogs_0 hogs_1 hogs_4 hogs_16 preempt_wait slice_overrun]
--      [--json FILE]
local smarm = require("smarm")
local bench = require("smarm.bench")

local want = bench.variants(arg, { "hogs_0", "hogs_1", "hogs_4", "hogs_16",
  "preempt_wait", "slice_overrun" })
local ticks = bench.knob("SMARM_FAIRNESS_TICKS", 200)
local slice = bench.knob("SMARM_FAIRNESS_SLICE", 0.002)
local PERIOD_NS = 10e6

local function hog()
  local x = 0
  while true do x = x + 1 end
end

for _, hogs in ipairs({ 0, 1, 4, 16 }) do
  local name = "hogs_" .. hogs
  if want(name) then
    smarm.run(function()
      local ghz, ghz_spread = bench.calibrate()
      local pids = {}
      for i = 1, hogs do pids[i] = smarm.spawn(hog) end
      local ps, ccyc = smarm.histogram(), smarm.histogram()
      local due = smarm.clock() + PERIOD_NS
      for _ = 1, ticks do
        local now = smarm.clock()
        smarm.sleep(math.max(0, due - now) / 1e9)
        local late = smarm.clock() - due
        if late < 0 then late = 0 end
        ps:record(late * 1000)
        ccyc:record(late * ghz * 100)
        due = due + PERIOD_NS
      end
      for _, p in ipairs(pids) do smarm.kill(p) end
      bench.report({ scenario = "fairness", variant = name, schedulers = 1, hogs = hogs,
        slice_ms = slice * 1000, preempts = smarm.stats().total.preempts },
        { ps = ps, ccyc = ccyc, floor_ns = 0, ghz = ghz, ghz_spread = ghz_spread,
          ops = ticks })
    end, { schedulers = 1, slice = slice })
  end
end

-- preempt_wait and slice_overrun: the main actor yields to one runaway actor and is back once
-- that actor is switched out; each round with exactly one preemption gives one sample of each.
if want("preempt_wait") or want("slice_overrun") then
  smarm.run(function()
    local ghz, ghz_spread = bench.calibrate()
    local pid = smarm.spawn(hog)
    local wait, wcyc = smarm.histogram(), smarm.histogram()
    local over, ocyc = smarm.histogram(), smarm.histogram()
    local n = 0
    while n < ticks do
      local before = smarm.stats()[1]
      local t0 = smarm.clock()
      smarm.yield() -- the runaway runs its slice
      local ran = smarm.clock() - t0
      local after = smarm.stats()[1]
      if after.preempts - before.preempts == 1 then -- not this actor's own (none expected)
        n = n + 1
        local w = after.preempt_wait_ns - before.preempt_wait_ns
        wait:record(w * 1000)
        wcyc:record(w * ghz * 100)
        local o = math.max(0, ran - slice * 1e9)
        over:record(o * 1000)
        ocyc:record(o * ghz * 100)
      end
    end
    smarm.kill(pid)
    local info = { schedulers = 1, slice_ms = slice * 1000 }
    for _, v in ipairs({ { "preempt_wait", wait, wcyc }, { "slice_overrun", over, ocyc } }) do
      if want(v[1]) then
        info.scenario, info.variant = "fairness", v[1]
        bench.report(info, { ps = v[2], ccyc = v[3], floor_ns = 0, ghz = ghz,
          ghz_spread = ghz_spread, ops = n })
      end
    end
  end, { schedulers = 1, slice = slice })
end

bench.finish()
