-- smarm.top: a live, refreshing table of the schedulers and the busiest actors, in any prompt
-- (the executable's own, an attached console) or from a shell (`smarm top PATH`, through a
-- console). Every interval it samples smarm.stats() and every actor's smarm.info (one request
-- per scheduler: smarm._actors), and shows what changed since the last sample: CPU share and
-- schedulings per second per actor, busy share, messages and switches per second per scheduler.
local smarm = require("smarm")
local repl = require("smarm.repl")

local top = {}

local KEYS = { "pid", "status", "waiting", "name", "mailbox", "cpu", "scheduled", "stack_used",
  "func" }

-- { [pid] = info } of every live actor, and the stats, now.
function top.sample()
  local actors, missing = {}, {} -- (a stuck scheduler's actors are missing; the rest is shown)
  for _, info in ipairs(smarm._actors(KEYS, missing)) do actors[info.pid] = info end
  return { actors = actors, missing = missing, stats = smarm.stats(), at = smarm.now() }
end

local function bytes(n)
  if n >= 1048576 then return string.format("%.1fM", n / 1048576) end
  if n >= 1024 then return string.format("%.1fK", n / 1024) end
  return tostring(n)
end

local function per_second(now, before, key, dt)
  return ((now[key] or 0) - (before and before[key] or 0)) / dt
end

-- The text of one screen: the change from sample `before` to `now`, at most `rows` actors;
-- `stops` says what ends the table (" (Enter stops)" unless given).
function top.render(before, now, rows, stops)
  local dt = math.max(now.at - before.at, 1e-9)
  local out = {}
  local function line(...) out[#out + 1] = string.format(...) end
  local total = now.stats.total
  line("smarm top: %d schedulers, %d actors, %.1f s between samples%s",
    #now.stats, total.live, dt, stops or " (Enter stops)")
  line("%-5s %5s %5s %7s %10s %11s %9s", "sched", "busy", "runq", "live", "msgs in/s",
    "switches/s", "memory")
  for k, s in ipairs(now.stats) do
    local b = before.stats[k]
    local wall = math.max(s.wall_ns - (b and b.wall_ns or 0), 1)
    local busy = (s.busy_ns - (b and b.busy_ns or 0)) / wall
    line("%-5d %4.0f%% %5d %7d %10.0f %11.0f %9s", k, busy * 100, s.runq, s.live,
      per_second(s, b, "received", dt), per_second(s, b, "switches", dt), bytes(s.memory))
  end
  for k = 1, #now.stats do -- (its figures above need no answer: they are read, not asked)
    if now.missing and now.missing[k] then
      line("scheduler %d did not answer: its actors are not listed (it is stuck in C code, a "
        .. "__gc finalizer or an actor with no time slice)", k)
    end
  end
  local list = {}
  for pid, a in pairs(now.actors) do
    local b = before.actors[pid]
    list[#list + 1] = {
      a = a,
      -- at most all of one core: an actor's CPU time is read when its scheduler answers, a
      -- little apart from the sample's time, so a lone spinner showed 101%
      cpu = math.min(((a.cpu or 0) - (b and b.cpu or 0)) / dt, 1),
      sched = ((a.scheduled or 0) - (b and b.scheduled or 0)) / dt,
    }
  end
  table.sort(list, function(x, y)
    if x.cpu ~= y.cpu then return x.cpu > y.cpu end
    if x.sched ~= y.sched then return x.sched > y.sched end
    return tostring(x.a.pid) < tostring(y.a.pid)
  end)
  line("")
  line("%-14s %6s %9s %8s %7s %-16s %s", "pid", "cpu%", "sched/s", "mailbox", "stack",
    "status", "name / function")
  for i = 1, math.min(rows, #list) do
    local e = list[i]
    local a = e.a
    local status = a.status == "waiting" and a.waiting and ("w:" .. a.waiting) or a.status
    line("%-14s %6.1f %9.0f %8d %7s %-16s %s", tostring(a.pid), e.cpu * 100, e.sched,
      a.mailbox or 0, bytes(a.stack_used or 0), status:sub(1, 16),
      a.name and (a.name .. " " .. (a.func or "")) or (a.func or ""))
  end
  return table.concat(out, "\n") .. "\n"
end

-- A waiter on the process's standard input: wait(seconds) is true once a line (Enter) or the
-- end of the input has come. The reader is an actor of its own, so the table goes on refreshing
-- while it waits.
local function stdin_wait()
  local me, read_line = smarm.self(), repl.stdin_reader(smarm)
  smarm.spawn(function()
    read_line()
    smarm.send(me, { smarm_top_stop = true })
  end)
  return function(seconds)
    return smarm.receive(function(m) return type(m) == "table" and m.smarm_top_stop end,
      seconds) ~= nil
  end
end

local function check(opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error("bad argument #1 to 'top' (table expected, got " .. type(opts) .. ")", 3)
  end
  for _, key in ipairs({ "interval", "rows", "count" }) do
    local v = opts[key]
    if v ~= nil and (type(v) ~= "number" or v ~= v or v <= 0) then -- (NaN: a count never reached)
      error("bad argument #1 to 'top' (opts." .. key .. " must be a positive number)", 3)
    end
  end
  for _, key in ipairs({ "write", "wait" }) do
    if opts[key] ~= nil and type(opts[key]) ~= "function" then
      error("bad argument #1 to 'top' (opts." .. key .. " must be a function, got " ..
        type(opts[key]) .. ")", 3)
    end
  end
  return opts
end

-- smarm.top([opts]): refreshes every opts.interval seconds (default 1) until opts.wait(seconds)
-- says stop (default: a line on standard input) or opts.count screens were shown; opts.rows
-- actors (default 15); opts.write(text) shows a screen (default: standard output); opts.clear:
-- clear the terminal before each screen (default: when the prompt runs on a terminal).
function top.run(opts)
  opts = check(opts)
  smarm._need_actor("top", 2)
  local interval, rows = opts.interval or 1, opts.rows or 15
  local write = opts.write or function(text) io.stdout:write(text); io.stdout:flush() end
  local clear = opts.clear
  if clear == nil then clear = repl.interactive end
  local show = clear and function(text) write("\27[H\27[2J" .. text) end or write
  local wait = opts.wait or (not opts.count and stdin_wait()) or function(seconds)
    smarm.sleep(seconds)
    return false
  end
  -- what ends it, in its header: a count alone does not wait for Enter (a console's wait does)
  local stops = opts.count and not opts.wait
    and string.format(" (%g screen%s)", opts.count, opts.count == 1 and "" or "s") or nil
  local before = top.sample()
  local shown = 0
  while true do
    if wait(interval) then return end
    local now = top.sample()
    show(top.render(before, now, rows, stops))
    before = now
    shown = shown + 1
    if opts.count and shown >= opts.count then return end
  end
end

return top
