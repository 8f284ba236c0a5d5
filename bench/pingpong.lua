-- bench/pingpong.lua: one round trip of a small message between two Lua actors.
--   local   both actors on one scheduler
--   remote  the actors on two schedulers (every message crosses)
--   send    a send alone: a number to an actor that has ended (dropped at once), in a loop the
--           JIT compiles
--   send_interpreted  the same loop with the JIT off for it (jit.off): code the JIT left alone
--   queued  a batch of numbers sent to oneself, then received: a send and a receive that finds
--           its message queued (no park), per operation
--   queued_interpreted  the same with the JIT off for the loops
-- Knobs: SMARM_PINGPONG_ROUNDS, _WARMUP, _RUNS, _BATCH.
-- Run: smarm -n bench/pingpong.lua [variant...]
local smarm = require("smarm")
local bench = require("smarm.bench")

-- Optional arguments name the variants to run; none: all.
local want = bench.variants(arg, { "local", "remote", "send", "send_interpreted", "queued",
  "queued_interpreted" })
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

-- Loops that stay in one actor (no park), each measured compiled and under jit.off.
local solo = {
  send = function()
    local ended = smarm.spawn(function() end)
    smarm.yield()
    local send = smarm.send
    return function(n)
      for i = 1, n do send(ended, i) end
    end
  end,
  queued = function()
    local me, send, receive = smarm.self(), smarm.send, smarm.receive
    return function(n)
      for i = 1, n do send(me, i) end
      for _ = 1, n do receive() end
    end
  end,
}

for _, variant in ipairs({ "send", "send_interpreted", "queued", "queued_interpreted" }) do
  if want(variant) then
    smarm.run(function()
      local loop = solo[variant:match("^[a-z]+")]()
      if variant:find("_interpreted$") then jit.off(loop) end
      opts.label = "pingpong " .. variant
      bench.report({ scenario = "pingpong", variant = variant, schedulers = 1 },
        bench.measure(loop, opts))
    end, { schedulers = 1 })
  end
end

bench.finish()
