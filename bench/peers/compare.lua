-- bench/peers/compare.lua: puts smarm's figures beside its peers'. Reads the key=value lines
-- that bench/*.lua and bench/peers/* print (a line without peer= is smarm's), takes the median
-- over repeated rounds of each configuration's p50, and prints one row per scenario and variant
-- with every peer's figure and the ratio smarm / peer (below 1: smarm is faster), the targets of
-- issues 4 and 12 (met or missed by the medians, and round by round), and why the empty cells
-- are empty. Given smarm's lines alone (./dev.sh bench), one row per line and the targets that
-- need no peer.
-- Run: luajit bench/peers/compare.lua results.txt   (or lines on stdin)
local PEERS = { "go", "erlang", "tarantool", "luajit" }

-- smarm's own configurations that no peer runs, and why.
local SMARM_ONLY = {
  ["switch_cost/luajit_coro"] = "smarm's in-run baseline (the luajit peer's switch_cost local is the same)",
  ["switch_cost/remote"] = "a check of smarm's schedulers; pingpong remote is the peer comparison",
  ["switch_cost/parallel"] = "a check of smarm's schedulers scaling; peers are compared on one",
  ["pingpong/send"] = "a check of smarm's send alone, in compiled code (the FFI path)",
  ["pingpong/send_interpreted"] = "the same with the JIT off for the loop (the FFI path's cost)",
  ["pingpong/queued"] = "a check of smarm's receive of a queued message, with its send (FFI)",
  ["pingpong/queued_interpreted"] = "the same with the JIT off for the loops",
  ["spawn_on/spawn"] = "smarm.spawn(f): the baseline of spawn_on's targets",
  ["spawn_on/here"] = "spawn_on(1, f) from scheduler 1 (the caller's own)",
  ["spawn_on/there"] = "spawn_on(2, f) from scheduler 1",
  ["spawn_on/any"] = "spawn_on(\"any\", f)",
  ["spawn_on/spread"] = "a million waiting actors spawned with spawn_on(i % 2 + 1, f), per spawn",
}

-- Why a peer has no figure for a configuration (a peer's own variants explain themselves).
local function not_applicable(scenario, variant, peer)
  local one_thread = { tarantool = "Tarantool runs every fiber in its one tx thread",
    luajit = "plain coroutines run in one thread" }
  if (variant == "remote" or variant == "spread" or scenario == "send_sizes") and one_thread[peer] then
    return one_thread[peer] .. ": nothing crosses threads"
  end
  return "no figure (not run, or it failed: see its output)"
end

-- What the numbers of a configuration mean beside smarm's (printed once per scenario/peer).
local CAVEATS = {
  ["pingpong/go"] = "Go cannot place goroutines: 'remote' locks both to OS threads (every hop "
    .. "parks and wakes a thread), 'remote_unlocked' lets the runtime keep them on one P",
  ["ring/go"] = "Go cannot place goroutines: 'spread' runs with GOMAXPROCS=2 and lets the "
    .. "runtime place them",
  ["send_sizes/go"] = "Go passes strings and maps by reference: nothing is copied",
  ["send_sizes/erlang"] = "Erlang shares binaries over 64 bytes by reference count: the 1 KiB "
    .. "and 64 KiB strings are not copied (the 8 B one and the map are); smarm's binary_ rows, "
    .. "shared the same way, are compared with them",
  ["pingpong/luajit"] = "LuaJIT's scheduler is the smallest one that can run the scenarios "
    .. "(bench/peers/luajit.lua): one thread, no C stacks, messages shared, not copied",
  ["switch_cost/luajit"] = "a bare coroutine resume/yield round trip, no scheduler at all",
  ["pingpong/tarantool"] = "'local' passes the message through fiber.channel, 'local_cond' "
    .. "through a shared slot and fiber.cond",
  ["spawn/tarantool"] = "every fiber stack has a guard page, so vm.max_map_count (65530) caps "
    .. "Tarantool near 32k fibers: it measures as many as fit (its line's actors= field)",
  ["skynet/tarantool"] = "fiber.create runs the child at once, so the tree is walked depth first "
    .. "with a handful of fibers alive (smarm and the others spawn all ten children first)",
}

-- The targets: each a figure of smarm's at most `max`. With `peer`: its p50 over the peer's;
-- with `over`: its p50 over its own p50 of that variant of the scenario; with `bytes`: its
-- resident bytes per waiting actor; with `ns`: its p50 itself (spawn_on spread: a million
-- spawned in 3 s is 3,000 ns each). No variant: whichever the scenario ran (skynet's depth).
local TARGETS = {
  { issue = 4, scenario = "switch_cost", variant = "local", peer = "luajit", max = 1.0 },
  { issue = 4, scenario = "pingpong", variant = "local", peer = "go", max = 0.5 },
  { issue = 4, scenario = "ring", variant = "local", peer = "go", max = 0.5 },
  { issue = 4, scenario = "spawn", variant = "waiting", peer = "erlang", max = 0.5 },
  { issue = 4, scenario = "skynet", peer = "go", max = 0.5 },
  { issue = 4, scenario = "pingpong", variant = "remote", peer = "erlang", max = 0.25 },
  { issue = 12, scenario = "skynet", peer = "tarantool", max = 1.0 },
  { issue = 12, scenario = "skynet", peer = "go", max = 2.5 },
  { issue = 12, scenario = "ring", variant = "local", peer = "tarantool", max = 1.0 },
  { issue = 12, scenario = "ring", variant = "local", peer = "go", max = 1.3 },
  { issue = 12, scenario = "pingpong", variant = "local", peer = "go", max = 0.6 },
  { issue = 12, scenario = "pingpong", variant = "local", peer = "luajit", max = 1.0 },
  { issue = 12, scenario = "send_sizes", variant = "string_64KiB", peer = "erlang", max = 10 },
  { issue = 12, scenario = "send_sizes", variant = "table_100_fields", peer = "erlang", max = 1.0 },
  { issue = 12, scenario = "spawn", variant = "waiting", bytes = true, max = 2000 },
  { issue = 12, scenario = "spawn_on", variant = "here", over = "spawn", max = 1.5 },
  { issue = 12, scenario = "spawn_on", variant = "there", over = "spawn", max = 1.5 },
  -- one million actors spread in at most 3 s: per spawn, at that count only (fewer fit in caches)
  { issue = 12, scenario = "spawn_on", variant = "spread", ns = true, max = 3000, actors = 1000000 },
}

local function parse(line)
  if not line:match("^scenario=") then return nil end
  local row = {}
  for k, v in line:gmatch("(%S+)=(%S+)") do row[k] = tonumber(v) or v end
  row.peer = row.peer or "smarm"
  return row
end

local function median(t)
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  local half = #s / 2
  if half == math.floor(half) and half > 0 then return (s[half] + s[half + 1]) / 2 end
  return s[math.ceil(half)]
end

-- figures[scenario][variant][peer] = { p50s = {...}, rounds = {...}, rss = {...}, schedulers = n,
-- actors = {...} (of lines that say actors=N) }
local figures, order = {}, {}
local function add(row)
  local s = figures[row.scenario]
  if not s then
    s = { variants = {} }
    figures[row.scenario] = s
    order[#order + 1] = row.scenario
  end
  local v = s[row.variant]
  if not v then
    v = {}
    s[row.variant] = v
    s.variants[#s.variants + 1] = row.variant
  end
  local f = v[row.peer]
  if not f then
    f = { p50s = {}, rounds = {}, rss = {}, schedulers = row.schedulers, actors = {} }
    v[row.peer] = f
  end
  f.p50s[#f.p50s + 1] = row.p50_ns
  f.rounds[#f.p50s] = row.round -- (dev.sh bench-peers tags its lines round=N)
  if row.rss_per_actor_bytes then f.rss[#f.rss + 1] = row.rss_per_actor_bytes end
  f.actors[row.actors or "none"] = true -- (the spread's lines say actors=N)
end

local any_peer, smarm_rows = false, {}
local inputs = {}
for i = 1, #arg do inputs[#inputs + 1] = assert(io.open(arg[i])) end
if #inputs == 0 then inputs[1] = io.stdin end
for _, f in ipairs(inputs) do
  for line in f:lines() do
    local row = parse(line)
    if row and row.p50_ns then
      add(row)
      any_peer = any_peer or row.peer ~= "smarm"
      if row.peer == "smarm" then smarm_rows[#smarm_rows + 1] = row end
    end
  end
end

local function p50(scenario, variant, peer)
  local v = figures[scenario] and figures[scenario][variant]
  local f = v and v[peer]
  return f and median(f.p50s), f
end

local function human(ns)
  if ns >= 1e7 then return string.format("%.1f ms", ns / 1e6) end
  if ns >= 1e4 then return string.format("%.1f us", ns / 1e3) end
  return string.format("%.1f ns", ns)
end

-- smarm's variants that have no peer variant of their name: the peers' variant they are
-- compared with (smarm's binaries are shared as Erlang's binaries, and as Go's strings, are).
local COMPARED_WITH = {
  ["send_sizes/binary_1KiB"] = "string_1KiB",
  ["send_sizes/binary_64KiB"] = "string_64KiB",
}

-- smarm's variant a peer's variant is compared with: its own, or the part before the first "_"
-- (remote_unlocked -> remote, local_cond -> local).
local function smarm_variant(scenario, variant)
  if p50(scenario, variant, "smarm") then return variant end
  local base = variant:match("^([^_]+)_")
  if base and p50(scenario, base, "smarm") then return base end
  return nil
end

-- The ratio of each round: a figure of one side over the other's of the same round, which ran
-- minutes apart (bench-peers interleaves them and tags each line round=N; untagged lines pair
-- in the order read). On a guest whose speed changes for minutes at a time, the medians of the
-- two sides may come from different speeds; the rounds say whether the verdict holds in each.
-- Returns the ratios, or nil and why they cannot be paired; nil alone with a single round.
local function per_round(a, b)
  if not a or not b or (#a.p50s < 2 and #b.p50s < 2) then return nil end
  local tagged = #a.rounds == #a.p50s and #b.rounds == #b.p50s
  if not tagged and #a.p50s ~= #b.p50s then
    return nil, string.format("%d rounds against %d", #a.p50s, #b.p50s)
  end
  local of_b = {}
  for i = 1, #b.p50s do of_b[tagged and b.rounds[i] or i] = b.p50s[i] end
  local r = {}
  for i = 1, #a.p50s do
    local theirs = of_b[tagged and a.rounds[i] or i]
    if not theirs then
      return nil, string.format("round %s of one side has no pair", tostring(a.rounds[i] or i))
    end
    r[i] = a.p50s[i] / theirs
  end
  if #r ~= #b.p50s then return nil, string.format("%d rounds against %d", #r, #b.p50s) end
  return r
end

-- The variant a target without one takes: the first the scenario ran (skynet's depth) that
-- smarm, and the peer it is measured against, both have; else the first smarm has.
local function run_variant(t)
  local s, mine = figures[t.scenario], nil
  for _, v in ipairs(s and s.variants or {}) do
    if p50(t.scenario, v, "smarm") then
      if not t.peer or p50(t.scenario, v, t.peer) then return v end
      mine = mine or v
    end
  end
  return mine or (s and s.variants[1])
end

-- A target's figure (the median of its rounds), how the line names it, and the figure of each
-- round when there are several (or nil and why not); nil when a side of it has no figure.
local function target_figure(t)
  local variant = t.variant or run_variant(t)
  local mine, f = p50(t.scenario, variant, "smarm")
  local name = t.scenario .. " " .. (t.bytes and "bytes/actor" or variant or "")
  if t.peer then
    local theirs, g = p50(t.scenario, variant, t.peer)
    return mine and theirs and mine / theirs, name, "vs " .. t.peer, per_round(f, g)
  elseif t.over then
    local base, g = p50(t.scenario, t.over, "smarm")
    return mine and base and mine / base, name, "vs " .. t.over, per_round(f, g)
  end
  local each = f and (t.bytes and f.rss or f.p50s)
  if not each or #each == 0 then return nil, name, "" end
  if t.actors then
    local other = {}
    for n in pairs(f.actors) do
      if n ~= t.actors then other[#other + 1] = n == "none" and "an unknown count of" or n end
    end
    if #other > 0 then -- a line of another count, or one that does not say, is not judged
      table.sort(other, function(a, b) return tostring(a) < tostring(b) end)
      return nil, name, "", nil, string.format("run with %s actors, the target is for %d",
        table.concat(other, ", "), t.actors)
    end
  end
  return median(each), name, "", #each > 1 and each or nil
end

-- Prints the targets, met or missed; with_peers false: only those that need no peer.
local function print_targets(with_peers)
  local issue
  for _, t in ipairs(TARGETS) do
    if with_peers or not t.peer then
      if t.issue ~= issue then
        issue = t.issue
        print()
        print(string.format("targets (issue %d): smarm's figure at most", issue))
      end
      local value, name, against, rounds, unpaired = target_figure(t)
      local bound = t.bytes and string.format("%d B", t.max) or t.ns and human(t.max)
        or string.format("%.2f", t.max)
      -- a figure as printed: three decimals (bytes none, ns one), more while a missed one would
      -- print as the bound (0.6004 is not "0.600 ... missed")
      local function show(x)
        if t.ns and x >= 1e4 - 0.05 then return human(x) end
        local d = t.bytes and 0 or t.ns and 1 or 3
        while x > t.max and d < 6 and tonumber(string.format("%." .. d .. "f", x)) <= t.max do
          d = d + 1
        end
        local digits = string.format("%." .. d .. "f", x)
        if x > t.max and tonumber(digits) <= t.max then digits = ">" .. digits end
        return t.bytes and digits .. " B" or t.ns and digits .. " ns" or digits
      end
      local shown = value and show(value)
      if value then
        local by_round = unpaired and "; by round: not paired (" .. unpaired .. ")" or ""
        if rounds then
          local met, each = 0, {}
          for i, r in ipairs(rounds) do
            each[i] = show(r)
            if r <= t.max then met = met + 1 end
          end
          by_round = string.format("; by round %s: met in %d of %d", table.concat(each, " / "),
            met, #rounds)
        end
        print(string.format("  %-30s %-12s %s (target %s): %s%s", name, against, shown, bound,
          value <= t.max and "met" or "missed", by_round))
      else
        print(string.format("  %-30s %-12s %s", name, against, unpaired and "not judged: "
          .. unpaired or (t.peer or t.over) and "no figure on both sides" or "no figure"))
      end
    end
  end
end

-- Only smarm's lines (./dev.sh bench): one row per line, as read.
if not any_peer then
  print(string.format("%-12s %-18s %5s %12s %12s %12s", "scenario", "variant", "sched", "p50",
    "p99", "bytes/actor"))
  for _, row in ipairs(smarm_rows) do
    print(string.format("%-12s %-18s %5d %12s %12s %12s", row.scenario, row.variant,
      row.schedulers or 1, human(row.p50_ns), human(row.p99_ns or 0),
      row.rss_per_actor_bytes and string.format("%d B", row.rss_per_actor_bytes) or ""))
  end
  print_targets(false)
  print("(./dev.sh bench-peers puts these beside Go, Erlang, Tarantool and plain LuaJIT, with the")
  print("targets against them)")
  return
end

local header = string.format("%-12s %-18s %12s", "scenario", "variant", "smarm")
for _, peer in ipairs(PEERS) do header = header .. string.format(" %12s %6s", peer, "ratio") end
print("p50 per operation (skynet: per tree); ratio = smarm / peer, below 1: smarm is faster")
print(header)
local empty, caveats_seen, smarm_only = {}, {}, {}
for _, scenario in ipairs(order) do
  for _, variant in ipairs(figures[scenario].variants) do
    local base = smarm_variant(scenario, variant)
    local mine = base and p50(scenario, base, "smarm")
    if SMARM_ONLY[scenario .. "/" .. variant] then
      smarm_only[#smarm_only + 1] = string.format("%s %s: %s", scenario, variant,
        SMARM_ONLY[scenario .. "/" .. variant])
    else
      local line = string.format("%-12s %-18s %12s", scenario, variant,
        variant == base and human(mine) or (base and "(" .. base .. ")" or "-"))
      local missing = {}
      for _, peer in ipairs(PEERS) do
        local theirs = p50(scenario, COMPARED_WITH[scenario .. "/" .. variant] or variant, peer)
        if theirs then
          line = line .. string.format(" %12s %6s", human(theirs),
            mine and string.format("%.2f", mine / theirs) or "")
          if CAVEATS[scenario .. "/" .. peer] then caveats_seen[scenario .. "/" .. peer] = true end
        else
          line = line .. string.format(" %12s %6s", "-", "")
          if variant == base then
            local why = not_applicable(scenario, variant, peer)
            missing[why] = (missing[why] and missing[why] .. ", " or "") .. peer
          end
        end
      end
      local whys = {}
      for why in pairs(missing) do whys[#whys + 1] = why end
      table.sort(whys)
      for _, why in ipairs(whys) do -- one line per scenario, peers and reason
        local peers = missing[why]
        local key = scenario .. " | " .. peers .. ": " .. why
        if not empty[key] then
          empty[key] = {}
          empty[#empty + 1] = key
        end
        table.insert(empty[key], variant)
      end
      print(line)
    end
  end
end

-- memory per waiting actor
local mem = figures.spawn and figures.spawn.waiting
if mem then
  local line = string.format("%-12s %-18s %12s", "spawn", "bytes/actor",
    mem.smarm and #mem.smarm.rss > 0 and string.format("%.0f B", median(mem.smarm.rss)) or "-")
  for _, peer in ipairs(PEERS) do
    local f = mem[peer]
    if f and #f.rss > 0 then
      local ratio = mem.smarm and #mem.smarm.rss > 0 and median(mem.smarm.rss) / median(f.rss)
      line = line .. string.format(" %12s %6s", string.format("%.0f B", median(f.rss)),
        ratio and string.format("%.2f", ratio) or "")
    else
      line = line .. string.format(" %12s %6s", "-", "")
    end
  end
  print(line)
end

print_targets(true)

if #empty > 0 then
  print()
  print("comparisons that do not apply, or did not run:")
  for _, key in ipairs(empty) do
    local scenario, rest = key:match("^(%S+) | (.*)$")
    print(string.format("  %s %s, %s", scenario, table.concat(empty[key], "/"), rest))
  end
end
if #smarm_only > 0 then
  print()
  print("smarm's own configurations (no peer runs them):")
  for _, e in ipairs(smarm_only) do print("  " .. e) end
end
local notes = {}
for k in pairs(caveats_seen) do notes[#notes + 1] = k end
table.sort(notes)
if #notes > 0 then
  print()
  print("what the peers' figures mean:")
  for _, k in ipairs(notes) do print("  " .. k .. ": " .. CAVEATS[k]) end
end
