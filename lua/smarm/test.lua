-- smarm.test: actor code as a test under busted, or any runner (docs/api.md, "smarm.test").
-- test.run(fn [, opts]) runs fn as an actor of a fresh runtime and fails the test when that
-- actor raises, ends other than normally, or outlives opts.timeout, and when any other actor
-- crashes unseen (no link, no monitor heard of it) unless opts.allow_crashes. Failures are
-- busted's when busted runs (its `fail`), plain errors otherwise.
local smarm = require "smarm"

local test = {}

local DEFAULT_TIMEOUT = 10
local DEFAULT_EXPECT_TIMEOUT = 5     -- test.expect_message: paid only when the test fails
local DEFAULT_NO_MESSAGE_TIMEOUT = 0.1 -- test.expect_no_message

local function pack(...) return { n = select("#", ...), ... } end

-- busted's fail(message, level), once busted has set itself up in this VM (scheduler 1's, the
-- runner's own); nil otherwise (another scheduler's VM, another runner).
local function busted_fail()
  local busted = package.loaded.busted
  local ok, fail = pcall(function() return busted.fail end)
  return ok and type(fail) == "function" and fail or nil
end

-- Fails the test with text, placed (file:line: ) at the function `level` levels up (1: fail's
-- caller, 2: its caller), so that busted names the test's own line.
local function fail(text, level)
  local at = debug.getinfo(level + 1, "Sl")
  if at and at.currentline and at.currentline > 0 then
    text = at.short_src .. ":" .. at.currentline .. ": " .. text
  end
  local f = busted_fail()
  if f then f(text, 0) end
  error(text, 0)
end

-- A traceback without the frames of test.run's own wrapper below the test's function.
local function trim(traceback)
  return (traceback:gsub("\n\t%[C%]: in function 'xpcall'.*$", ""))
end

-- A short, readable rendering of a value for failure messages (tables one level deep).
local function show(v, depth)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) ~= "table" then return tostring(v) end
  local mt = getmetatable(v)
  if mt and mt.__tostring then return tostring(v) end
  if (depth or 0) >= 2 then return "{...}" end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local parts = {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = (type(k) == "string" and k:match("^[%a_][%w_]*$") and k or
      "[" .. show(k, 2) .. "]") .. " = " .. show(v[k], (depth or 0) + 1)
  end
  return "{ " .. table.concat(parts, ", ") .. " }"
end
test.show = show

-- The text of an error value: a string itself, a table's __tostring or message (busted's
-- failures arrive in reasons as plain tables: a copy keeps no metatable), else a rendering.
local function error_text(e)
  if type(e) == "string" then return e end
  local mt = type(e) == "table" and getmetatable(e)
  if mt and mt.__tostring then return tostring(e) end
  if type(e) == "table" and type(e.message) == "string" then return e.message end
  return show(e)
end

-- The text of an exit reason ({ error =, traceback = } for a crash).
local function reason_text(r)
  if type(r) == "table" and r.error ~= nil then
    return error_text(r.error) .. (r.traceback and "\n" .. r.traceback or "")
  end
  return "it ended with reason " .. show(r)
end

local function check_opts(opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    error("bad argument #2 to 'run' (table expected, got " .. type(opts) .. ")", 3)
  end
  local t = opts.timeout
  if t ~= nil and (type(t) ~= "number" or t ~= t or t <= 0) then
    error("smarm.test.run: opts.timeout must be a positive number of seconds", 3)
  end
  if opts.on_crash ~= nil then
    error("smarm.test.run: opts.on_crash is test.run's own (use allow_crashes, or a monitor)", 3)
  end
  return opts
end

-- Every live actor but the caller and `skip`, with where it stands and its traceback.
local function describe_actors(skip)
  local lines, me = {}, smarm.self()
  local answered, pids = pcall(smarm.processes)
  if not answered then -- a scheduler stuck in C code: list what this one knows, and say why
    lines[1] = "(not every scheduler answered: " .. error_text(pids) .. ")"
    pids = smarm._local_processes()
  end
  for _, pid in ipairs(pids) do
    if pid ~= me and not skip[pid] then
      local ok, i = pcall(smarm.info, pid)
      if ok and i then
        lines[#lines + 1] = string.format("actor %s (%s%s%s, scheduler %d, %d in its mailbox)\n%s",
          tostring(pid), i.status, i.waiting and " in " .. i.waiting or "",
          i.name and ", name " .. i.name or "", i.scheduler, i.mailbox, trim(i.traceback))
      end
    end
  end
  return #lines > 0 and table.concat(lines, "\n") or "(no actor is alive)"
end

-- Waits until every crash report sent before this call has reached the collector: a round trip
-- to each other scheduler (its answer comes after the reports its actors sent before: one
-- inbox, in order), then a marker through the collector's mailbox behind them.
local function flush_crashes(collector)
  for k = 1, smarm.schedulers() do
    if k ~= smarm.scheduler() then smarm.alive(smarm.spawn_on(k, function() end)) end
  end
  local tag, mref = smarm.ref(), smarm.monitor(collector)
  smarm.send(collector, { smarm_test_flush = tag, from = smarm.self() })
  local m = smarm.receive(function(m)
    return type(m) == "table" and (m.smarm_test_flushed == tag or m.ref == mref)
  end)
  smarm.demonitor(mref, "flush")
  if m.smarm_test_flushed ~= tag then return m.reason end -- the collector died
end

-- A match as expect_message takes it: a function(msg) -> boolean, a table whose fields the
-- message must have with equal values (a subset), or a value the message must equal.
local function matcher(match)
  if type(match) == "function" then return match end
  if type(match) == "table" and not smarm.is_pid(match) and not smarm.is_ref(match) then
    return function(m)
      if type(m) ~= "table" then return false end
      for k, v in pairs(match) do
        if m[k] ~= v then return false end
      end
      return true
    end
  end
  return function(m) return m == match end
end

local function check_timeout(fname, t, default)
  if t == nil then return default end
  if type(t) ~= "number" or t ~= t or t < 0 then
    error("bad argument #2 to '" .. fname .. "' (seconds expected, got " .. show(t) .. ")", 3)
  end
  return t
end

-- expect_message(match [, timeout]) -> msg: the first message that matches, received within
-- timeout seconds (default 5); the test fails otherwise.
function test.expect_message(match, timeout)
  timeout = check_timeout("expect_message", timeout, DEFAULT_EXPECT_TIMEOUT)
  local m = smarm.receive(matcher(match), timeout)
  if m == nil then
    fail(string.format("smarm.test: no message matching %s came within %g s", show(match),
      timeout), 2)
  end
  return m
end

-- expect_no_message(match [, timeout]): the test fails if a message that matches comes within
-- timeout seconds (default 0.1); one that comes is taken from the mailbox.
function test.expect_no_message(match, timeout)
  timeout = check_timeout("expect_no_message", timeout, DEFAULT_NO_MESSAGE_TIMEOUT)
  local m = smarm.receive(matcher(match), timeout)
  if m ~= nil then
    fail(string.format("smarm.test: a message matching %s came: %s", show(match), show(m)), 2)
  end
end

-- One run of the test (test.run below); `level` places its failures.
local function run_once(fn, opts, level)
  local timeout = opts.timeout or DEFAULT_TIMEOUT
  local run_opts = {}
  for k, v in pairs(opts) do
    if k ~= "timeout" and k ~= "allow_crashes" and k ~= "seeds" then run_opts[k] = v end
  end

  local crashes = {}  -- crash reports nothing heard of, in the order they came
  local body_error    -- { value =, traceback = }: what fn raised, as raised
  local results       -- fn's results, packed
  local verdict       -- the failure's text, when the test failed otherwise
  local finished      -- the run's main actor got to judge the test (not killed on the way)

  smarm.run(function()
    -- (no mailbox bound: opts.max_mailbox is the test's, and a burst of crashes must all count)
    local collector = smarm.spawn_opt({ max_mailbox = 2 ^ 40 }, function()
      while true do
        local m = smarm.receive()
        if type(m) == "table" and m.smarm_test_flush then
          smarm.send(m.from, { smarm_test_flushed = m.smarm_test_flush })
        else
          crashes[#crashes + 1] = m
        end
      end
    end)
    smarm._set_crash_reporter(collector)
    local body, ref = smarm.spawn_monitor(function(...)
      local r = pack(xpcall(fn, function(e)
        body_error = { value = e, traceback = trim(debug.traceback("", 2):sub(2)) }
        return e
      end, ...))
      if not r[1] then error(r[2], 0) end -- it dies with its error: its links hear of it
      results = r
    end)
    local down = smarm.receive(function(m)
      return type(m) == "table" and m.smarm == "DOWN" and m.ref == ref
    end, timeout)
    if not down then
      finished = true
      local virtual = opts.clock == "virtual" or (opts.clock == nil and opts.seed ~= nil)
      verdict = string.format("smarm.test: the test did not end within %g s (opts.timeout%s); "
        .. "its actors:\n%s", timeout, virtual and ", on the virtual clock" or "",
        describe_actors({ [collector] = true }))
      return
    end
    local lost = flush_crashes(collector)
    if lost ~= nil then
      verdict = "smarm.test: test.run's crash collector died (" .. show(lost) .. "): crash "
        .. "reports may be lost (a small opts.max_mailbox, or the test killed it)"
      return
    end
    finished = true
    if body_error then return end
    if down.reason ~= "normal" then
      verdict = "smarm.test: the test's actor " .. tostring(body) .. " died: "
        .. reason_text(down.reason)
    end
  end, run_opts)

  local others = {}
  if not opts.allow_crashes then
    for _, report in ipairs(crashes) do
      others[#others + 1] = string.format("actor %s%s crashed: %s", tostring(report.pid),
        report.name and " (" .. report.name .. ")" or "", reason_text(report.reason))
    end
  end
  local also = #others > 0 and "\n" .. table.concat(others, "\n") or ""
  if body_error then
    local e = body_error.value
    local mt = type(e) == "table" and getmetatable(e)
    if mt and mt.__type == "failure" and type(e.message) == "string" then -- busted's own
      e.message = e.message .. "\n" .. body_error.traceback .. also
      error(e, 0)
    elseif type(e) == "string" then
      error(e .. "\n" .. body_error.traceback .. also, 0)
    end
    error(e, 0) -- any other value as it was raised (a table stays the same table)
  end
  if verdict then fail(verdict .. also, level + 1) end
  if not finished then
    fail("smarm.test: test.run's own actor was killed before the test ended", level + 1)
  end
  if #others > 0 then
    fail("smarm.test: " .. #others .. (#others == 1 and " actor" or " actors")
      .. " crashed with nothing to hear of it (opts.allow_crashes allows it):\n"
      .. table.concat(others, "\n"), level + 1)
  end
  if not results then return end -- the test's actor ended by smarm.exit()
  return unpack(results, 2, results.n)
end

-- The error e of a run under seed, with the way to run it again appended to its text.
local function with_seed(e, seed)
  local again = string.format("\n(seed %d: run it again with opts.seed = %d, or SMARM_TEST_SEED=%d)",
    seed, seed, seed)
  if type(e) == "string" then return e .. again end
  if type(e) == "table" and type(e.message) == "string" then
    e.message = e.message .. again
  else -- another value stays itself: the seed goes to stderr
    io.stderr:write("smarm.test: the test failed under seed ", seed, again, "\n")
  end
  return e
end

local function check_seeds(opts)
  local n = opts.seeds
  if n ~= nil and (type(n) ~= "number" or n < 1 or n ~= math.floor(n)) then
    error("smarm.test.run: opts.seeds must be an integer from 1", 3)
  end
  local env = os.getenv("SMARM_TEST_SEED")
  if env and (n or opts.seed) then -- reproducing one seed: that one alone
    local seed = tonumber(env)
    if not seed or seed < 1 or seed ~= math.floor(seed) then
      error("smarm.test.run: SMARM_TEST_SEED must be an integer from 1", 3)
    end
    return seed, seed
  end
  if n then return 1, n end
  if opts.seed then return opts.seed, opts.seed end
end

function test.run(fn, opts)
  if type(fn) ~= "function" then
    error("bad argument #1 to 'run' (function expected, got " .. type(fn) .. ")", 2)
  end
  if smarm.schedulers() > 0 then
    error("smarm.test.run: a runtime is running already (test.run starts its own: call it from"
      .. " the test, not from an actor)", 2)
  end
  opts = check_opts(opts)
  local first, last = check_seeds(opts)
  if not first then
    local r = pack(run_once(fn, opts, 2)) -- not a tail call: fail() counts test.run's frame
    return unpack(r, 1, r.n)
  end
  local seeded = {}
  for k, v in pairs(opts) do seeded[k] = v end
  local results
  for seed = first, last do
    seeded.seed = seed
    results = pack(pcall(run_once, fn, seeded, 3)) -- (pcall is a level of its own)
    if not results[1] then error(with_seed(results[2], seed), 0) end
  end
  return unpack(results, 2, results.n)
end

return test
