-- bench/loops.lua: what compiled Lua loops cost per iteration inside an actor, for measuring the
-- hook check LUAJIT_ENABLE_CHECKHOOK adds to every trace (issue #10): run it on a smarm built
-- against the LuaJIT with and without it (deps/luajit.sh, SMARM_LUAJIT_CHECKHOOK=0), interleaved.
--   numeric   x = x + i over a numeric for loop (the tightest loop there is)
--   array     a[i] = a[i] + i over a 1000-element array (a loop in a loop, short traces)
-- These two run with no time slice (slice = math.huge), so preemption itself costs nothing;
--   numeric_sliced   the numeric loop with the default 2 ms slice: preempted (alone, so it
--                    resumes at once) every 2 ms, the whole cost of preemption on a busy loop
-- Knobs: SMARM_LOOPS_ROUNDS, _WARMUP, _RUNS, _BATCH (iterations). Run: smarm -n bench/loops.lua
local smarm = require("smarm")
local bench = require("smarm.bench")

local want = bench.variants(arg, { "numeric", "array", "numeric_sliced" })
local opts = bench.measure_knobs("SMARM_LOOPS", 20000000, 2000000, 5, 100000)

local sink = 0
local loops = {
  numeric = function(n)
    local x = 0
    for i = 1, n do x = x + i end
    sink = sink + x
  end,
  array = function(n)
    local a = {}
    for i = 1, 1000 do a[i] = 0 end
    for _ = 1, n / 1000 do
      for i = 1, 1000 do a[i] = a[i] + i end
    end
    sink = sink + a[1000]
  end,
}

loops.numeric_sliced = loops.numeric
for _, name in ipairs({ "numeric", "array", "numeric_sliced" }) do
  if want(name) then
    smarm.run(function()
      opts.label = "loops " .. name
      local r = bench.measure(loops[name], opts)
      bench.report({ scenario = "loops", variant = name, schedulers = 1,
        preempts = smarm.stats().total.preempts }, r)
    end, { schedulers = 1, slice = name ~= "numeric_sliced" and math.huge or nil })
  end
end

bench.finish()
