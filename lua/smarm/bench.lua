-- smarm.bench: the harness of the Lua benchmark scripts in bench/.
--
-- Method (the predecessor's, as in bench/c/switch_cost.c): each sample brackets a batch of
-- operations with smarm.clock(), which reads the monotonic clock and the serialised cycle
-- counter in one call that never parks; the bracket's own cost (the median of back-to-back
-- empty brackets) is subtracted; the rest, divided by the operations in the batch, goes into C
-- histograms (constant cost per sample; picoseconds and centi-cycles). Several runs after a
-- warm-up are pooled. The effective GHz (cycles per ns over a calibration interval) lets the two
-- lenses check each other.
--
-- Every measured configuration prints one line of key=value fields starting with scenario=
-- (scenario, variant, [peer,] schedulers, p50_ns, p90_ns, p99_ns, p999_ns, max_ns, per_op_ns, ops,
-- p50_cyc, ghz, ghz_spread, floor_ns, then the caller's extra fields); bench.finish() prints
-- them again as a table, writes them as JSON when the script was given `--json FILE` and plots
-- their percentiles when given `--plot FILE.svg` (smarm.plot). Progress goes to stderr.
local smarm = require("smarm")

local bench = {}

local clock, histogram = smarm.clock, smarm.histogram
local rows = {}
local json_path, plot_path

-- The running script's name, for messages (as the user typed it).
local function script_name()
  return arg and arg[0] or "the bench script"
end

-- A mistake in a script's command line: the executable prints its text alone (no traceback) and
-- exits with status 2; tostring gives the text elsewhere.
local usage_mt = { __tostring = function(e) return e.usage end }
local function usage_error(fmt, ...)
  error(setmetatable({ usage = script_name() .. ": " .. string.format(fmt, ...) }, usage_mt), 0)
end

-- Reads the harness's options from a script's arguments (`--json FILE`: the rows as JSON at
-- bench.finish(); `--plot FILE.svg`: their percentile plot, smarm.plot); returns the others.
function bench.args(argv)
  local rest = {}
  local i = 1
  while argv and argv[i] do
    local a = argv[i]
    if a == "--json" or a == "--plot" then
      local v = argv[i + 1]
      if not v then usage_error("%s needs a file name", a) end
      if a == "--json" then json_path = v else plot_path = v end
      i = i + 2
    else
      rest[#rest + 1] = a
      i = i + 1
    end
  end
  return rest
end

-- A script's variant filter. known: the names of the script's variants (empty for a script
-- that has none). The arguments (less the harness's options) name the variants to run, none
-- means all; an unknown one raises a usage error (see usage_error) whose text is
-- "<script>: unknown variant 'x' (its variants: a, b)".
-- Returns want(name) -> boolean.
function bench.variants(argv, known)
  assert(type(known) == "table", "bench.variants: the list of the script's variants expected")
  local wanted, is_known = {}, {}
  for _, v in ipairs(known) do is_known[v] = true end
  for _, v in ipairs(bench.args(argv)) do
    if not is_known[v] then
      usage_error("unknown variant '%s' (%s)", v,
        #known == 0 and "it has no variants" or "its variants: " .. table.concat(known, ", "))
    end
    wanted[v] = true
  end
  return function(name) return next(wanted) == nil or wanted[name] == true end
end

-- A positive number from the environment, or the default.
function bench.knob(name, default)
  local v = tonumber(os.getenv(name) or "")
  if v and v > 0 then return v end
  return default
end

-- bench.measure's options from the knobs <PREFIX>_ROUNDS, _WARMUP, _RUNS and _BATCH, with
-- these defaults.
function bench.measure_knobs(prefix, rounds, warmup, runs, batch)
  return {
    rounds = bench.knob(prefix .. "_ROUNDS", rounds),
    warmup = bench.knob(prefix .. "_WARMUP", warmup),
    runs = bench.knob(prefix .. "_RUNS", runs),
    batch = bench.knob(prefix .. "_BATCH", batch),
  }
end

local page_bytes -- the system's page size, asked once

-- The process's resident memory in bytes (/proc/self/statm; 0 where there is none).
function bench.rss_bytes()
  local f = io.open("/proc/self/statm")
  if not f then return 0 end
  local _, pages = f:read("*n", "*n")
  f:close()
  if not page_bytes then
    local p = io.popen("getconf PAGESIZE 2>/dev/null")
    page_bytes = p and tonumber(p:read("*a")) or 4096
    if p then p:close() end
  end
  return (pages or 0) * page_bytes
end

local function progress(fmt, ...)
  io.stderr:write(string.format("bench: " .. fmt .. "\n", ...))
end
bench.progress = progress

-- Cycles per ns over about `seconds` of wall time, as windows of 20 us: their median, and their
-- spread ((upper quartile - lower quartile) / median). A long window is worthless on a loaded
-- VM: across a switch of the thread (or of the virtual CPU) the cycle counter was seen to
-- advance at a tenth of its rate, giving 0.09 to 1.0 for 2.1 over 2 ms; a window of 20 us
-- rarely holds a switch, and the median ignores those that do.
function bench.ghz(seconds)
  local n = math.max(11, math.min(1001, math.floor((seconds or 0.01) / 20e-6)))
  local ratios = {}
  for i = 1, n do
    local t0, c0 = clock()
    local t1, c1
    repeat t1, c1 = clock() until t1 - t0 >= 20000
    ratios[i] = (c1 - c0) / (t1 - t0)
  end
  table.sort(ratios)
  local mid = ratios[math.ceil(n / 2)]
  return mid, (ratios[math.ceil(n * 3 / 4)] - ratios[math.ceil(n / 4)]) / mid
end

-- How far apart the calibration's quartiles may be before the GHz is said to be unsteady.
local GHZ_STEADY = 0.02

-- The GHz for a run: a calibration that agrees with itself, tried three times; else the last,
-- said on stderr to be unsteady. Returns ghz, spread (for bench.report's ghz_spread).
function bench.calibrate()
  local ghz, spread
  for _ = 1, 3 do
    ghz, spread = bench.ghz(0.01)
    if spread <= GHZ_STEADY then return ghz, spread end
  end
  progress("the cycle counter's rate was unsteady (quartiles %.1f%% apart): its ghz and p50_cyc "
    .. "are not to be trusted in this run", spread * 100)
  return ghz, spread
end

-- Measures op(n), which must perform n operations (and may park). opts: batch (operations per
-- sample), rounds (measured operations per run), warmup (operations before each run), runs,
-- per_call (how many operations one counted operation stands for, e.g. 2 for a yield that lets
-- a partner yield too: the reported numbers are per operation), label (for progress, which
-- goes to stderr every 2 s with an estimate of the time left).
-- Returns {ps = histogram, ccyc = histogram, floor_ns, ghz, ghz_spread, ops}.
function bench.measure(op, opts)
  local batch = opts.batch or 100
  local rounds = opts.rounds or 100000
  local warmup = opts.warmup or math.min(rounds, 10000)
  local runs = opts.runs or 5
  local per = batch * (opts.per_call or 1)
  -- the bracket's own cost
  local fns, fcyc = histogram(), histogram()
  for _ = 1, 1000 do
    local t0, c0 = clock()
    local t1, c1 = clock()
    fns:record(t1 - t0)
    fcyc:record(c1 - c0)
  end
  local floor_ns, floor_cyc = fns:quantile(0.5), fcyc:quantile(0.5)
  local ghz, ghz_spread = bench.calibrate()
  local ps, ccyc = histogram(), histogram()
  local samples = math.max(1, math.floor(rounds / batch))
  local start = clock()
  local last_note = start
  for run = 1, runs do
    op(warmup)
    for i = 1, samples do
      local t0, c0 = clock()
      op(batch)
      local t1, c1 = clock()
      local ns = t1 - t0 - floor_ns
      local cyc = c1 - c0 - floor_cyc
      ps:record(ns > 0 and ns * 1000 / per or 0)
      ccyc:record(cyc > 0 and cyc * 100 / per or 0)
      if t1 - last_note > 2e9 then
        local done = ((run - 1) * samples + i) / (runs * samples)
        progress("%s: run %d of %d, about %.0f s left", opts.label or "measuring", run, runs,
          (t1 - start) / 1e9 * (1 - done) / done)
        last_note = t1
      end
    end
  end
  return { ps = ps, ccyc = ccyc, floor_ns = floor_ns, ghz = ghz, ghz_spread = ghz_spread,
    ops = samples * per * runs }
end

-- A result as a message (histograms exported), to send to the actor that reports.
function bench.pack(r)
  return { ps = r.ps:export(), ccyc = r.ccyc:export(), floor_ns = r.floor_ns, ghz = r.ghz,
    ghz_spread = r.ghz_spread, ops = r.ops }
end

-- Merges packed results (from several schedulers) into one result.
function bench.merge(packed)
  local r = { ps = histogram(), ccyc = histogram(), floor_ns = 0, ghz = 0, ops = 0 }
  for _, p in ipairs(packed) do
    r.ps:import(p.ps)
    r.ccyc:import(p.ccyc)
    r.floor_ns = r.floor_ns + p.floor_ns / #packed
    r.ghz = r.ghz + p.ghz / #packed
    if p.ghz_spread then r.ghz_spread = math.max(r.ghz_spread or 0, p.ghz_spread) end
    r.ops = r.ops + p.ops
  end
  return r
end

local base_fields = { "scenario", "variant", "peer", "schedulers", "p50_ns", "p90_ns", "p99_ns",
  "p999_ns", "max_ns", "per_op_ns", "ops", "p50_cyc", "ghz", "ghz_spread", "floor_ns" }

-- Prints the line of one configuration. fields: scenario, variant, schedulers, peer (only in
-- bench/peers scripts; smarm's own lines have none) and any extra key = value pairs (printed
-- after the standard ones, in key order). Returns the row.
function bench.report(fields, r)
  local row = {
    scenario = fields.scenario, variant = fields.variant, peer = fields.peer,
    schedulers = fields.schedulers or 1,
    p50_ns = r.ps:quantile(0.5) / 1000, p90_ns = r.ps:quantile(0.9) / 1000,
    p99_ns = r.ps:quantile(0.99) / 1000, p999_ns = r.ps:quantile(0.999) / 1000,
    max_ns = r.ps:max() / 1000, per_op_ns = r.ps:mean() / 1000, ops = r.ops,
    p50_cyc = r.ccyc:quantile(0.5) / 100, ghz = r.ghz, ghz_spread = r.ghz_spread,
    floor_ns = r.floor_ns,
  }
  local parts = {}
  local function add(k, v)
    if type(v) == "number" and v ~= math.floor(v) then v = string.format("%.3f", v) end
    parts[#parts + 1] = k .. "=" .. tostring(v)
  end
  for _, k in ipairs(base_fields) do
    if row[k] ~= nil then add(k, row[k]) end
  end
  local extra = {}
  for k in pairs(fields) do
    if row[k] == nil then extra[#extra + 1] = k end
  end
  table.sort(extra)
  row.extra = {}
  for _, k in ipairs(extra) do
    add(k, fields[k])
    row[k] = fields[k]
    row.extra[#row.extra + 1] = k
  end
  print(table.concat(parts, " "))
  io.stdout:flush()
  rows[#rows + 1] = row
  return row
end

-- A JSON string: quotes, backslashes and control characters escaped as JSON has them (Lua's
-- %q writes \1 or \13, which JSON has not).
local JSON_ESCAPES = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r",
  ["\t"] = "\\t", ["\b"] = "\\b", ["\f"] = "\\f" }
local function json_string(s)
  return '"' .. s:gsub('[%z\1-\31"\\]', function(c)
    return JSON_ESCAPES[c] or string.format("\\u%04x", c:byte())
  end) .. '"'
end

local function json_value(v)
  if type(v) == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    return string.format("%.17g", v)
  end
  return json_string(tostring(v))
end

-- Prints the readable table of every reported row; writes the JSON file and the plot if asked
-- for.
function bench.finish()
  if #rows == 0 then return end
  print()
  print(string.format("%-14s %-18s %5s %10s %10s %10s %10s %11s", "scenario", "variant", "sched",
    "p50 ns", "p90 ns", "p99 ns", "max ns", "per op ns"))
  for _, r in ipairs(rows) do
    print(string.format("%-14s %-18s %5d %10.1f %10.1f %10.1f %10.1f %11.1f", r.scenario,
      r.variant, r.schedulers, r.p50_ns, r.p90_ns, r.p99_ns, r.max_ns, r.per_op_ns))
  end
  if json_path then
    local out = {}
    for _, r in ipairs(rows) do
      local kv = {}
      for _, k in ipairs(base_fields) do
        if r[k] ~= nil then kv[#kv + 1] = json_string(k) .. ": " .. json_value(r[k]) end
      end
      for _, k in ipairs(r.extra) do kv[#kv + 1] = json_string(k) .. ": " .. json_value(r[k]) end
      out[#out + 1] = "  {" .. table.concat(kv, ", ") .. "}"
    end
    local f = assert(io.open(json_path, "w"))
    f:write("[\n", table.concat(out, ",\n"), "\n]\n")
    f:close()
    progress("wrote %s", json_path)
  end
  if plot_path then
    assert(require("smarm.plot").write(plot_path, rows, { title = script_name() }))
    progress("wrote %s", plot_path)
  end
end

return bench
