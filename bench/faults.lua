-- bench/faults.lua: what fault handling costs, each beside its baseline measured in the same run.
--   spawn_exit        smarm.spawn of a function that returns at once, and the wait for it
--                     (the spawner yields until it has run): the baseline
--   spawn_monitor     smarm.spawn_monitor of the same function and the receive of its DOWN
--   spawn_opt_monitor the same through smarm.spawn_opt({ monitor = true }, f): what reading the
--                     options table (and refusing unknown keys) adds to spawn_monitor
--   pingpong_local    a message round trip, one scheduler (the baseline of call_local)
--   call_local        smarm.call round trip to a server on the same scheduler
--   pingpong_remote   a message round trip across two schedulers
--   call_remote       smarm.call round trip to a server on the other scheduler
--   call_backlog      call_local with 100,000 unrelated messages queued in the caller's mailbox
-- Knobs: SMARM_FAULTS_ROUNDS, _WARMUP, _RUNS, _BATCH. Run: smarm -n bench/faults.lua [variant...]
local smarm = require("smarm")
local bench = require("smarm.bench")

local want = bench.variants(arg, { "spawn_exit", "spawn_monitor", "spawn_opt_monitor",
  "pingpong_local", "call_local", "call_backlog", "pingpong_remote", "call_remote" })
local opts = bench.measure_knobs("SMARM_FAULTS", 100000, 2000, 5, 100)

local function nothing() end

local function pong(owner)
  local receive, send = smarm.receive, smarm.send
  while true do
    local m = receive()
    if m == 0 then return end
    send(owner, m)
  end
end

local function server()
  local receive, reply = smarm.receive, smarm.reply
  while true do
    local m = receive()
    if m == 0 then return end
    reply(m.from, m.request)
  end
end

local variants = {}

variants.spawn_exit = function()
  local spawn, yield = smarm.spawn, smarm.yield
  return function(n)
    for _ = 1, n do
      spawn(nothing)
      yield() -- it runs and exits before the spawner goes on
    end
  end
end

variants.spawn_monitor = function()
  local spawn_monitor, receive = smarm.spawn_monitor, smarm.receive
  return function(n)
    for _ = 1, n do
      spawn_monitor(nothing)
      receive()
    end
  end
end

variants.spawn_opt_monitor = function()
  local spawn_opt, receive = smarm.spawn_opt, smarm.receive
  local o = { monitor = true }
  return function(n)
    for _ = 1, n do
      spawn_opt(o, nothing)
      receive()
    end
  end
end

local function pingpong(where)
  return function()
    local peer = smarm.spawn_on(where, pong, smarm.self())
    local send, receive = smarm.send, smarm.receive
    return function(n)
      for _ = 1, n do
        send(peer, 1)
        receive()
      end
    end, function() send(peer, 0) end
  end
end

local function caller(where, backlog)
  return function()
    local peer = smarm.spawn_on(where, server)
    local call = smarm.call
    for i = 1, backlog do smarm.send(smarm.self(), i) end
    return function(n)
      for _ = 1, n do call(peer, 1) end
    end, function() smarm.send(peer, 0) end
  end
end

variants.pingpong_local = pingpong(1)
variants.call_local = caller(1, 0)
variants.pingpong_remote = pingpong(2)
variants.call_remote = caller(2, 0)
variants.call_backlog = caller(1, 100000)

local order = { "spawn_exit", "spawn_monitor", "spawn_opt_monitor", "pingpong_local", "call_local",
  "call_backlog", "pingpong_remote", "call_remote" }

for _, name in ipairs(order) do
  if want(name) then
    local schedulers = name:find("remote") and 2 or 1
    smarm.run(function()
      local loop, stop = variants[name]()
      opts.label = "faults " .. name
      local r = bench.measure(loop, opts)
      if stop then stop() end
      bench.report({ scenario = "faults", variant = name, schedulers = schedulers }, r)
    end, { schedulers = schedulers })
  end
end

bench.finish()
