-- bench/send_sizes.lua: a remote send (scheduler 1 -> 2) of messages of several sizes: strings of
-- 8 B, 1 KiB and 64 KiB (copied), binaries of 1 KiB and 64 KiB (smarm.binary: shared), and a
-- table of 100 fields. One operation is one message sent and
-- received (the receiver acknowledges each batch, so the sender cannot run ahead unboundedly).
-- Knobs: SMARM_SEND_ROUNDS, SMARM_SEND_RUNS, SMARM_SEND_BATCH. Run: smarm -n bench/send_sizes.lua
local smarm = require("smarm")
local bench = require("smarm.bench")

bench.variants(arg, {}) -- no variants; takes --json and --plot
local rounds = bench.knob("SMARM_SEND_ROUNDS", 50000)
local runs = bench.knob("SMARM_SEND_RUNS", 3)
local batch = bench.knob("SMARM_SEND_BATCH", 100)

local table100 = {}
for i = 1, 100 do table100["field" .. i] = i end
local payloads = {
  { "string_8B", ("x"):rep(8) },
  { "string_1KiB", ("x"):rep(1024) },
  { "string_64KiB", ("x"):rep(65536) },
  { "binary_1KiB", smarm.binary(("x"):rep(1024)) },
  { "binary_64KiB", smarm.binary(("x"):rep(65536)) },
  { "table_100_fields", table100 },
}

for _, p in ipairs(payloads) do
  local variant, payload = p[1], p[2]
  smarm.run(function()
    local me = smarm.self()
    local sink = smarm.spawn_on(2, function(owner, per_ack)
      local receive, send = smarm.receive, smarm.send
      local got = 0
      while true do
        local m = receive()
        if m == "stop" then return end
        got = got + 1
        if got == per_ack then
          got = 0
          send(owner, "ack")
        end
      end
    end, me, batch)
    local send, receive = smarm.send, smarm.receive
    local r = bench.measure(function(n)
      for _ = 1, n do send(sink, payload) end
      -- the sink acknowledges every `batch` messages; the warm-up is a multiple of it
      for _ = 1, math.floor(n / batch) do receive() end
    end, { batch = batch, rounds = math.max(batch, rounds), warmup = batch * 10, runs = runs,
      label = "send_sizes " .. variant })
    send(sink, "stop")
    bench.report({ scenario = "send_sizes", variant = variant, schedulers = 2 }, r)
  end, { schedulers = 2 })
end

bench.finish()
