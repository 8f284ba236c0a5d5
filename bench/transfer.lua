-- bench/transfer.lua: spawning on another scheduler with the function moving there, and the
-- wait for the new actor's message: the round trip of smarm.spawn_on (encode, spawn, decode,
-- run, reply).
--   name      spawn_on(2, "transfer_code.entry", me): the baseline (the target requires the
--             module once, then finds the function by name)
--   closure   spawn_on(2, entry, me) where entry is a closure with the same code, its three
--             nested functions travelling with it (entry -> a -> b -> c, each an upvalue of the
--             one before), bytecode and all, at every spawn
-- Knobs: SMARM_TRANSFER_ROUNDS, _WARMUP, _RUNS, _BATCH. Run: smarm -n bench/transfer.lua [variant...]
local smarm = require("smarm")
local bench = require("smarm.bench")

package.path = (arg and arg[0] and arg[0]:match("^(.*/)") or "./") .. "?.lua;" .. package.path

local want = bench.variants(arg, { "name", "closure" })
local opts = bench.measure_knobs("SMARM_TRANSFER", 20000, 500, 5, 100)

-- The same code as transfer_code.lua, as closures of this chunk.
local function c(x) return x + 1 end
local function b(x) return c(x) * 2 end
local function a(x) return b(x) - 1 end
local function entry(owner)
  smarm.send(owner, a(1))
end

local variants = {
  name = "transfer_code.entry",
  closure = entry,
}

for _, name in ipairs({ "name", "closure" }) do
  if want(name) then
    smarm.run(function()
      local me, spawn_on, receive = smarm.self(), smarm.spawn_on, smarm.receive
      local fn = variants[name]
      local loop = function(n)
        for _ = 1, n do
          spawn_on(2, fn, me)
          receive()
        end
      end
      opts.label = "transfer " .. name
      local r = bench.measure(loop, opts)
      bench.report({ scenario = "transfer", variant = name, schedulers = 2 }, r)
    end, { schedulers = 2 })
  end
end

bench.finish()
