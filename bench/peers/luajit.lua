-- bench/peers/luajit.lua: the scenarios on plain LuaJIT coroutines, the floor a Lua programmer
-- gets without any runtime: one thread, no C stacks, no copying (messages are shared values).
--   switch_cost local  a bare coroutine resume/yield round trip (no scheduler at all)
--   pingpong, ring, spawn, skynet  on `tasks` below: the smallest round-robin scheduler with
--                      mailboxes that can run them (a FIFO of runnable coroutines)
-- Sizes and line format: bench/peers/README.md (the SMARM_* knobs). Uses smarm's harness only
-- for its clock and histograms; no smarm runtime is started.
-- Run: smarm -n bench/peers/luajit.lua [scenario...]
local bench = require("smarm.bench")
local smarm = require("smarm")

-- The scheduler: a task is {co, box = {first, last, ...}, waiting}.
local tasks = {}
do
  local runq, rq_first, rq_last = {}, 1, 0
  local current

  local function ready(t)
    rq_last = rq_last + 1
    runq[rq_last] = t
  end

  function tasks.spawn(fn, ...)
    local args = { ... }
    local t = { box = { first = 1, last = 0 }, waiting = false }
    t.co = coroutine.create(function() return fn(unpack(args)) end)
    ready(t)
    return t
  end

  function tasks.self() return current end

  function tasks.send(t, msg)
    local box = t.box
    box.last = box.last + 1
    box[box.last] = msg
    if t.waiting then
      t.waiting = false
      ready(t)
    end
  end

  function tasks.receive()
    local t = current
    local box = t.box
    while box.first > box.last do
      t.waiting = true
      coroutine.yield()
    end
    local msg = box[box.first]
    box[box.first] = nil
    box.first = box.first + 1
    return msg
  end

  -- Runs fn(...) as the first task until no task is runnable.
  function tasks.run(fn, ...)
    tasks.spawn(fn, ...)
    while rq_first <= rq_last do
      local t = runq[rq_first]
      runq[rq_first] = nil
      rq_first = rq_first + 1
      current = t
      local ok, err = coroutine.resume(t.co)
      if not ok then error(err, 0) end
    end
    current = nil
  end
end

local wanted = {}
for _, v in ipairs(bench.args(arg)) do wanted[v] = true end
local function want(s) return next(wanted) == nil or wanted[s] end

local function report(fields, r)
  fields.peer = "luajit"
  fields.schedulers = 1
  bench.report(fields, r)
end

if want("switch_cost") then
  local co = coroutine.wrap(function() while true do coroutine.yield() end end)
  local r = bench.measure(function(n) for _ = 1, n do co() end end, {
    rounds = bench.knob("SMARM_SWITCH_ROUNDS", 1000000),
    warmup = bench.knob("SMARM_SWITCH_WARMUP", 10000),
    runs = bench.knob("SMARM_SWITCH_RUNS", 5),
    batch = bench.knob("SMARM_SWITCH_BATCH", 1000),
    label = "luajit switch_cost local",
  })
  report({ scenario = "switch_cost", variant = "local" }, r)
end

if want("pingpong") then
  tasks.run(function()
    local send, receive = tasks.send, tasks.receive
    local peer = tasks.spawn(function(owner)
      while true do
        local m = receive()
        if m == 0 then return end
        send(owner, m)
      end
    end, tasks.self())
    local r = bench.measure(function(n)
      for _ = 1, n do
        send(peer, 1)
        receive()
      end
    end, {
      rounds = bench.knob("SMARM_PINGPONG_ROUNDS", 200000),
      warmup = bench.knob("SMARM_PINGPONG_WARMUP", 5000),
      runs = bench.knob("SMARM_PINGPONG_RUNS", 5),
      batch = bench.knob("SMARM_PINGPONG_BATCH", 100),
      label = "luajit pingpong local",
    })
    send(peer, 0)
    report({ scenario = "pingpong", variant = "local" }, r)
  end)
end

if want("ring") then
  local actors = bench.knob("SMARM_RING_ACTORS", 1000)
  local hops = bench.knob("SMARM_RING_HOPS", 1000000)
  tasks.run(function()
    local send, receive = tasks.send, tasks.receive
    local function member(owner)
      local next_task = receive()
      while true do
        local left = receive()
        if left == 0 then send(next_task, 0); return end
        if left == 1 then send(owner, "lap") else send(next_task, left - 1) end
      end
    end
    local ring = {}
    for i = 1, actors do ring[i] = tasks.spawn(member, tasks.self()) end
    for i = 1, actors do send(ring[i], ring[i % actors + 1]) end
    local r = bench.measure(function(n)
      for _ = 1, n do
        send(ring[1], actors)
        receive()
      end
    end, { batch = 1, rounds = math.max(1, math.floor(hops / actors)), warmup = 2,
      runs = bench.knob("SMARM_RING_RUNS", 3), per_call = actors, label = "luajit ring local" })
    send(ring[1], 0)
    report({ scenario = "ring", variant = "local", actors = actors }, r)
  end)
end

local function median(t)
  table.sort(t)
  return t[math.ceil(#t / 2)]
end

if want("spawn") then
  local actors = bench.knob("SMARM_SPAWN_ACTORS", 100000)
  local runs = bench.knob("SMARM_SPAWN_RUNS", 3)
  local clock = smarm.clock
  tasks.run(function()
    local ps = smarm.histogram()
    local rss_per, release_ns = {}, {}
    local receive = tasks.receive
    local function waiter() receive() end
    -- One baseline before the first run: later runs reuse memory the earlier ones freed (to
    -- the allocator, not the system), and a per-run baseline would hide it.
    collectgarbage()
    local rss0 = bench.rss_bytes()
    for run = 1, runs do
      collectgarbage()
      local all = {}
      for i = 1, actors, 100 do
        local last = math.min(i + 99, actors)
        local t0 = clock()
        for k = i, last do all[k] = tasks.spawn(waiter) end
        ps:record((clock() - t0) * 1000 / (last - i + 1))
        if i % 10000 == 1 then tasks.send(tasks.self(), "tick"); receive() end
      end
      tasks.send(tasks.self(), "tick")
      receive() -- every waiter ran once and is waiting
      rss_per[run] = (bench.rss_bytes() - rss0) / actors
      local t0 = clock()
      for i = 1, actors do tasks.send(all[i], 0) end
      tasks.send(tasks.self(), "tick")
      receive() -- every waiter got its message and ended
      release_ns[run] = (clock() - t0) / actors
      bench.progress("luajit spawn: run %d of %d", run, runs)
    end
    report({ scenario = "spawn", variant = "waiting", actors = actors,
      rss_per_actor_bytes = math.floor(median(rss_per)), release_ns_per_actor = median(release_ns) },
      { ps = ps, ccyc = smarm.histogram(), floor_ns = 0, ghz = (bench.calibrate()), ops = actors * runs })
  end)
end

if want("skynet") then
  local depth = bench.knob("SMARM_SKYNET_DEPTH", 5)
  local runs = bench.knob("SMARM_SKYNET_RUNS", 3)
  local actors, leaves = 0, 10 ^ depth
  for l = 0, depth do actors = actors + 10 ^ l end
  local send, receive, spawn, self = tasks.send, tasks.receive, tasks.spawn, tasks.self
  local function node(parent, num, level, size)
    if level == 0 then
      send(parent, num)
      return
    end
    local me, child_size = self(), size / 10
    for i = 0, 9 do spawn(node, me, num + i * child_size, level - 1, child_size) end
    local sum = 0
    for _ = 1, 10 do sum = sum + receive() end
    send(parent, sum)
  end
  local ps = smarm.histogram()
  for run = 1, runs do
    local t0 = smarm.clock()
    local sum
    tasks.run(function()
      spawn(node, self(), 0, depth, leaves)
      sum = receive()
    end)
    local dt = smarm.clock() - t0
    assert(sum == leaves * (leaves - 1) / 2, "skynet: wrong sum " .. tostring(sum))
    ps:record(dt * 1000)
    bench.progress("luajit skynet: run %d of %d: %.0f ms", run, runs, dt / 1e6)
  end
  report({ scenario = "skynet", variant = "depth" .. depth, actors = actors },
    { ps = ps, ccyc = smarm.histogram(), floor_ns = 0, ghz = (bench.calibrate()), ops = runs })
end
bench.finish()
