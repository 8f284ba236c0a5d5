-- bench/peers/tarantool/peers.lua: smarm's benchmark scenarios for Tarantool's fibers (the
-- contract: bench/peers/README.md; the method: lua/smarm/bench.lua, measure).
--
-- Run: tarantool bench/peers/tarantool/peers.lua [scenario...]   (no box.cfg: no database)
--
-- Every fiber runs in Tarantool's one tx thread, so schedulers=1 always, and the scenarios that
-- need two threads (pingpong remote, ring spread, send_sizes) do not apply and are skipped
-- silently. Lines go to stdout, progress to stderr; the exit status is 0 on success.
--
--   switch_cost local       one fiber alone calling fiber.yield()
--   pingpong local          two fibers, a fiber.channel each (sync=channel)
--   pingpong local_cond     two fibers, a shared slot and a fiber.cond each way (sync=cond)
--   ring local              `actors` fibers, each with its own fiber.channel
--   spawn waiting           fiber.create of fibers each blocked in its own channel:get()
--   skynet depth<D>         a fiber per node, a fiber.channel(10) per inner node
--
-- A channel stands in for a mailbox: it is made with room for every message that can be in
-- flight to it at once (1; 10 for a skynet node), so a put never blocks, as a send never does.
local fiber = require('fiber')
local clock = require('clock')

local PEER = 'tarantool'

local function progress(fmt, ...)
  io.stderr:write(string.format('peers(tarantool): ' .. fmt .. '\n', ...))
end

-- A positive number from the environment, or the default (as smarm.bench.knob).
local function knob(name, default)
  local v = tonumber(os.getenv(name) or '')
  if v and v > 0 then return v end
  return default
end

-- The clock -----------------------------------------------------------------------------------

-- Candidates: a function returning monotonic nanoseconds as a Lua number. fiber.clock64() is
-- the event loop's cached time (it does not move while a fiber runs without yielding), so a
-- candidate must first show that it advances during a busy loop.
local candidates = {
  { name = 'clock.monotonic64', read = function() return tonumber(clock.monotonic64()) end,
    raw = clock.monotonic64 },
  { name = 'fiber.clock64', read = function() return tonumber(fiber.clock64()) end,
    raw = fiber.clock64 },
}

local function median_back_to_back(raw)
  local s = {}
  for i = 1, 1001 do
    local a = raw()
    local b = raw()
    s[i] = tonumber(b - a)
  end
  table.sort(s)
  return s[501]
end

local function advances(c)
  local reference = clock.monotonic()
  local t0 = c.read()
  local x = 0
  repeat
    for i = 1, 10000 do x = x + i end
  until clock.monotonic() - reference > 0.002
  return c.read() - t0 > 1e6, x
end

local now, floor_ns, clock_name
do
  local best, best_cost
  for _, c in ipairs(candidates) do
    local ok = advances(c)
    local cost = median_back_to_back(c.raw)
    progress('clock %s: back-to-back median %d ns%s', c.name, cost,
      ok and '' or ' (cached: does not advance without a yield; not used)')
    if ok and (best_cost == nil or cost < best_cost) then best, best_cost = c, cost end
  end
  assert(best, 'no usable monotonic clock')
  now, clock_name = best.read, best.name
  -- the floor as the harness uses it: the median of back-to-back reads through `now`
  local s = {}
  for i = 1, 1001 do
    local a = now()
    local b = now()
    s[i] = b - a
  end
  table.sort(s)
  floor_ns = s[501]
  progress('clock: %s, floor %d ns', clock_name, floor_ns)
end

-- Statistics and output -----------------------------------------------------------------------

-- Nearest-rank percentiles, max and mean of a list of samples (sorted in place).
local function summarize(samples)
  table.sort(samples)
  local n = #samples
  local function rank(p)
    local k = math.ceil(p * n)
    if k < 1 then k = 1 end
    if k > n then k = n end
    return samples[k]
  end
  local sum = 0
  for i = 1, n do sum = sum + samples[i] end
  return { p50 = rank(0.5), p90 = rank(0.9), p99 = rank(0.99), p999 = rank(0.999),
    max = samples[n], mean = sum / n }
end

local function fmt(v)
  if type(v) == 'number' then
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return string.format('%.0f', v) end
    return string.format('%.3f', v)
  end
  return tostring(v)
end

-- Prints one line: the contract's fields, then `extra` ({ {key, value}, ... }) in that order.
local function report(scenario, variant, samples, ops, extra)
  local s = summarize(samples)
  local parts = {
    'scenario=' .. scenario, 'variant=' .. variant, 'peer=' .. PEER, 'schedulers=1',
    'p50_ns=' .. fmt(s.p50), 'p90_ns=' .. fmt(s.p90), 'p99_ns=' .. fmt(s.p99),
    'p999_ns=' .. fmt(s.p999), 'max_ns=' .. fmt(s.max), 'per_op_ns=' .. fmt(s.mean),
    'ops=' .. fmt(ops),
  }
  for _, kv in ipairs(extra or {}) do parts[#parts + 1] = kv[1] .. '=' .. fmt(kv[2]) end
  io.stdout:write(table.concat(parts, ' '), '\n')
  io.stdout:flush()
  return s
end

-- The harness: smarm.bench.measure. op(n) performs n operations (and may yield). Before each of
-- `runs` runs, `warmup` operations unrecorded; then rounds / batch samples, each the batch's
-- time less the floor, divided by batch * per_call. Returns the pooled samples and ops.
local function measure(op, o)
  local batch, rounds, runs = o.batch, o.rounds, o.runs
  local warmup = o.warmup or math.min(rounds, 10000)
  local per = batch * (o.per_call or 1)
  local samples_per_run = math.max(1, math.floor(rounds / batch))
  local samples = {}
  local last_note = now()
  for run = 1, runs do
    op(warmup)
    for _ = 1, samples_per_run do
      local t0 = now()
      op(batch)
      local t1 = now()
      local ns = t1 - t0 - floor_ns
      samples[#samples + 1] = ns > 0 and ns / per or 0
      if t1 - last_note > 2e9 then
        progress('%s: run %d of %d', o.label, run, runs)
        last_note = t1
      end
    end
  end
  return samples, samples_per_run * per * runs
end

-- switch_cost ---------------------------------------------------------------------------------

local function switch_cost()
  local o = {
    rounds = knob('SMARM_SWITCH_ROUNDS', 1000000), warmup = knob('SMARM_SWITCH_WARMUP', 10000),
    runs = knob('SMARM_SWITCH_RUNS', 5), batch = knob('SMARM_SWITCH_BATCH', 1000),
    label = 'switch_cost local',
  }
  local yield = fiber.yield
  -- the measuring fiber itself is the one task; Tarantool's own fibers (if any are ready) are
  -- part of what a yield costs here
  local samples, ops = measure(function(n) for _ = 1, n do yield() end end, o)
  report('switch_cost', 'local', samples, ops,
    { { 'clock', clock_name }, { 'floor_ns', floor_ns } })
end

-- pingpong ------------------------------------------------------------------------------------

local function pingpong_opts(label)
  return {
    rounds = knob('SMARM_PINGPONG_ROUNDS', 200000), warmup = knob('SMARM_PINGPONG_WARMUP', 5000),
    runs = knob('SMARM_PINGPONG_RUNS', 5), batch = knob('SMARM_PINGPONG_BATCH', 100),
    label = label,
  }
end

local function pingpong_channel()
  local to_peer, to_me = fiber.channel(1), fiber.channel(1)
  local done = fiber.channel(1)
  fiber.create(function()
    while true do
      local m = to_peer:get()
      if m == 0 then break end
      to_me:put(m)
    end
    done:put(true)
  end)
  local samples, ops = measure(function(n)
    for _ = 1, n do
      to_peer:put(1)
      to_me:get()
    end
  end, pingpong_opts('pingpong local'))
  to_peer:put(0)
  done:get()
  report('pingpong', 'local', samples, ops, { { 'sync', 'channel' } })
end

local function pingpong_cond()
  -- one slot each way; a nil slot is empty
  local ping, pong
  local ping_cond, pong_cond = fiber.cond(), fiber.cond()
  local finished = false
  local done = fiber.cond()
  fiber.create(function()
    while true do
      while ping == nil do ping_cond:wait() end
      local m = ping
      ping = nil
      if m == 0 then break end
      pong = m
      pong_cond:signal()
    end
    finished = true
    done:signal()
  end)
  local samples, ops = measure(function(n)
    for _ = 1, n do
      ping = 1
      ping_cond:signal()
      while pong == nil do pong_cond:wait() end
      pong = nil
    end
  end, pingpong_opts('pingpong local_cond'))
  ping = 0
  ping_cond:signal()
  while not finished do done:wait() end
  report('pingpong', 'local_cond', samples, ops, { { 'sync', 'cond' } })
end

local function pingpong()
  pingpong_channel()
  pingpong_cond()
end

-- ring ----------------------------------------------------------------------------------------

local function ring()
  local actors = knob('SMARM_RING_ACTORS', 1000)
  local hops = knob('SMARM_RING_HOPS', 1000000)
  local runs = knob('SMARM_RING_RUNS', 3)
  local owner = fiber.channel(1)
  local chans = {}
  for i = 1, actors do chans[i] = fiber.channel(1) end
  local exited = 0
  -- each member forwards the token (the hops left) to the next; the last hop reports the lap
  local function member(mine, nxt)
    while true do
      local left = mine:get()
      if left == 0 then nxt:put(0); break end
      if left == 1 then owner:put('lap') else nxt:put(left - 1) end
    end
    exited = exited + 1
  end
  for i = 1, actors do fiber.create(member, chans[i], chans[i % actors + 1]) end
  local first = chans[1]
  local laps = math.max(1, math.floor(hops / actors))
  local samples, ops = measure(function(n)
    for _ = 1, n do
      first:put(actors) -- one lap: `actors` hops, then back to us
      owner:get()
    end
  end, { batch = 1, rounds = laps, warmup = 2, runs = runs, per_call = actors,
    label = 'ring local' })
  first:put(0)
  while exited < actors do fiber.yield() end
  report('ring', 'local', samples, ops, { { 'actors', actors }, { 'sync', 'channel' } })
end

-- spawn ---------------------------------------------------------------------------------------

local function rss_bytes()
  local f = io.open('/proc/self/statm')
  if not f then return 0 end
  local _, rss = f:read('*n', '*n')
  f:close()
  return rss * 4096
end

local function count_lines(path)
  local n = 0
  local f = io.open(path)
  if not f then return nil end
  for _ in f:lines() do n = n + 1 end
  f:close()
  return n
end

-- The default stack size of a new fiber (fiber_attr_getstacksize of a fresh attribute, from
-- Tarantool's C module API), or nil.
local function fiber_stack_bytes()
  local ok, size = pcall(function()
    local ffi = require('ffi')
    pcall(ffi.cdef, [[
      struct fiber_attr;
      struct fiber_attr *fiber_attr_new(void);
      void fiber_attr_delete(struct fiber_attr *fiber_attr);
      size_t fiber_attr_getstacksize(struct fiber_attr *fiber_attr);
    ]])
    local attr = ffi.C.fiber_attr_new()
    local s = tonumber(ffi.C.fiber_attr_getstacksize(attr))
    ffi.C.fiber_attr_delete(attr)
    return s
  end)
  return ok and size or nil
end

-- How many more fibers can be alive at once. Each fiber stack gets a PROT_NONE guard page,
-- which splits its mapping: two entries in /proc/self/maps per fiber, and the kernel caps a
-- process's mappings at vm.max_map_count (65530 by default). Past that, fiber.create fails
-- ("fiber mprotect failed") and so does every later allocation. A margin is left for the
-- allocator's own mappings.
local function fiber_capacity()
  local f = io.open('/proc/sys/vm/max_map_count')
  if not f then return math.huge end
  local max = f:read('*n')
  f:close()
  local used = count_lines('/proc/self/maps')
  if not max or not used then return math.huge end
  return math.floor((max - used) * 0.95 / 2) - 500, max
end

local function spawn()
  local requested = knob('SMARM_SPAWN_ACTORS', 100000)
  local runs = knob('SMARM_SPAWN_RUNS', 3)
  local capacity, max_map = fiber_capacity()
  local actors = requested
  if actors > capacity then
    actors = capacity
    progress('spawn: %d fibers waiting at once do not fit under vm.max_map_count=%d (two '
      .. 'mappings per fiber stack: its guard page splits it); measuring %d', requested, max_map,
      actors)
  end
  local batch = 100
  local samples = {}
  local rss_per, release_ns = {}, {}
  local alive = 0
  local function waiter(ch)
    ch:get()
    alive = alive - 1
  end
  local channel, create = fiber.channel, fiber.create
  -- Resident growth is counted from before the first run: a dead fiber goes to Tarantool's
  -- cache with its stack still resident and the next fiber.create takes it back, so growth from
  -- the start of each run would be ~0 from the second run on, although the waiting fibers hold
  -- the same memory.
  collectgarbage()
  collectgarbage()
  local rss0 = rss_bytes()
  for run = 1, runs do
    collectgarbage()
    collectgarbage()
    local chans = {}
    for i = 1, actors, batch do
      local last = math.min(i + batch - 1, actors)
      local t0 = now()
      for k = i, last do
        local ch = channel(1)
        chans[k] = ch
        create(waiter, ch) -- runs the fiber at once, until it blocks in get()
      end
      local t1 = now()
      samples[#samples + 1] = (t1 - t0) / (last - i + 1)
    end
    alive = actors
    collectgarbage()
    collectgarbage()
    rss_per[run] = (rss_bytes() - rss0) / actors
    local t0 = now()
    for i = 1, actors do chans[i]:put(0) end
    while alive > 0 do fiber.yield() end
    release_ns[run] = (now() - t0) / actors
    chans = nil -- luacheck: ignore
    progress('spawn: run %d of %d: rss %.0f B per fiber, release %.1f ns per fiber', run, runs,
      rss_per[run], release_ns[run])
  end
  table.sort(rss_per)
  table.sort(release_ns)
  local extra = {
    { 'actors', actors },
    { 'rss_per_actor_bytes', math.floor(rss_per[math.ceil(#rss_per / 2)]) },
    { 'release_ns_per_actor', release_ns[math.ceil(#release_ns / 2)] },
    { 'sync', 'channel' },
  }
  local stack = fiber_stack_bytes()
  if stack then extra[#extra + 1] = { 'fiber_stack_bytes', stack } end
  if actors ~= requested then extra[#extra + 1] = { 'requested_actors', requested } end
  report('spawn', 'waiting', samples, actors * runs, extra)
end

-- skynet --------------------------------------------------------------------------------------

local function skynet()
  local depth = knob('SMARM_SKYNET_DEPTH', 5)
  local runs = knob('SMARM_SKYNET_RUNS', 3)
  local actors = 0
  for l = 0, depth do actors = actors + 10 ^ l end
  local leaves = 10 ^ depth
  local channel, create = fiber.channel, fiber.create

  -- a node numbered `num` with `level` levels below it sends its subtree's sum to `parent`
  local function node(parent, num, level, size)
    if level == 0 then
      parent:put(num)
      return
    end
    local ch, child_size = channel(10), size / 10
    for i = 0, 9 do create(node, ch, num + i * child_size, level - 1, child_size) end
    local sum = 0
    for _ = 1, 10 do sum = sum + ch:get() end
    parent:put(sum)
  end

  -- the same, counting the node fibers alive at once (one untimed tree, after the runs)
  local live, max_live = 0, 0
  local function counted(parent, num, level, size)
    live = live + 1
    if live > max_live then max_live = live end
    if level == 0 then
      parent:put(num)
    else
      local ch, child_size = channel(10), size / 10
      for i = 0, 9 do create(counted, ch, num + i * child_size, level - 1, child_size) end
      local sum = 0
      for _ = 1, 10 do sum = sum + ch:get() end
      parent:put(sum)
    end
    live = live - 1
  end

  local function tree(fn)
    local ch, child_size = channel(10), leaves / 10
    for i = 0, 9 do create(fn, ch, i * child_size, depth - 1, child_size) end
    local sum = 0
    for _ = 1, 10 do sum = sum + ch:get() end
    assert(sum == leaves * (leaves - 1) / 2, 'skynet: wrong sum ' .. sum)
  end

  local samples = {}
  for run = 1, runs do
    collectgarbage()
    local t0 = now()
    tree(node)
    local dt = now() - t0
    samples[run] = dt
    progress('skynet: run %d of %d: %.0f ms', run, runs, dt / 1e6)
  end
  collectgarbage()
  tree(counted)
  local s = report('skynet', 'depth' .. depth, samples, runs,
    { { 'actors', actors }, { 'sync', 'channel' }, { 'max_live_fibers', max_live } })
  progress('skynet: %.1f ns per fiber; at most %d node fibers alive at once (fiber.create runs '
    .. 'each child at once, so the tree is built depth first)', s.p50 / actors, max_live)
end

-- main ----------------------------------------------------------------------------------------

local scenarios = {
  switch_cost = switch_cost, pingpong = pingpong, ring = ring, spawn = spawn, skynet = skynet,
  send_sizes = false, -- needs two threads: not applicable to Tarantool's fibers
}
-- spawn runs first: a dead fiber stays in Tarantool's cache, stack resident, and the next
-- fiber.create takes it back, so fibers left by other scenarios would hide part of the growth
local order = { 'spawn', 'switch_cost', 'pingpong', 'ring', 'skynet', 'send_sizes' }

local ok, err = pcall(function()
  local wanted = {}
  for _, a in ipairs(arg or {}) do
    if scenarios[a] == nil then error('unknown scenario: ' .. a) end
    wanted[a] = true
  end
  for _, name in ipairs(order) do
    if (next(wanted) == nil or wanted[name]) and scenarios[name] then
      progress('%s', name)
      scenarios[name]()
    end
  end
end)
io.stdout:flush()
if not ok then
  io.stderr:write('peers(tarantool): failed: ', tostring(err), '\n')
  os.exit(1)
end
os.exit(0)
