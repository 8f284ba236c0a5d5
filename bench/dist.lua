-- bench/dist.lua: smarm as an Erlang node (smarm.node) against Erlang itself, in one run.
--   roundtrip  a small message to an echo process on another Erlang node and back: a smarm
--              actor, then (the baseline) an Erlang process of a third node
--   oneway     100-byte binaries to a counting process there, one way: time per message
-- Both sides measure the same way (batches of operations timed, per-operation quantiles), the
-- Erlang side in bench/dist/dist_peer.erl. Needs erl and erlc (Debian's erlang-base) and a
-- smarm built with erl_interface. Knobs: SMARM_DIST_ROUNDS, _WARMUP, _RUNS, _BATCH, _COUNT.
-- Run: smarm -n bench/dist.lua
local smarm = require("smarm")
local bench = require("smarm.bench")

bench.variants(arg, {}) -- no variants; takes --json and --plot

local opts = bench.measure_knobs("SMARM_DIST", 20000, 2000, 5, 100)
local count = bench.knob("SMARM_DIST_COUNT", 200000)

if os.execute("command -v erl >/dev/null 2>&1 && command -v erlc >/dev/null 2>&1") ~= 0 then
  io.stderr:write("bench/dist.lua: needs erl and erlc (Debian: erlang-base)\n")
  os.exit(1)
end
if not smarm.node.available() then
  io.stderr:write("bench/dist.lua: this smarm was built without erl_interface (Debian: erlang-dev)\n")
  os.exit(1)
end

local function shell(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  p:close()
  return out
end

local here = arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or "bench"
local dir = shell("mktemp -d"):gsub("%s+$", "")
local built = shell("erlc -o " .. dir .. " " .. here .. "/dist/dist_peer.erl 2>&1 && echo ok")
assert(built:match("ok\n$"), "erlc: " .. built)

local tag = tostring(io.open("/proc/self/stat"):read("*n"))
local COOKIE = "smarm-bench-" .. tag
local function node(alive) return alive .. tag .. "@localhost" end
local function erl(alive, ...)
  local argv = { "erl", "-sname", node(alive), "-setcookie", COOKIE, "-noshell", "-pa", dir,
    "-run", "dist_peer", ... }
  return argv
end

local rows = {}
smarm.run(function()
  local server = assert(smarm.process.spawn(erl("echo", "serve"), { group = true }))
  assert(server.stdout:receive("*l") == "ready", "the Erlang echo node did not start")
  assert(smarm.node.start({ name = node("smarm"), cookie = COOKIE }))
  local echo_node = node("echo")

  -- smarm -> Erlang
  local me = smarm.self()
  smarm.send({ "echo", echo_node }, smarm.tuple({ me, 0 }))
  local echo = smarm.receive()[1]
  local receive, send, tuple = smarm.receive, smarm.send, smarm.tuple
  local ping = tuple({ me, 1 })
  opts.label = "dist roundtrip smarm"
  local r = bench.measure(function(n)
    for _ = 1, n do
      send(echo, ping)
      receive()
    end
  end, opts)
  rows.smarm = bench.report({ scenario = "dist", variant = "roundtrip" }, r)

  local payload = string.rep("x", 100)
  local t0 = smarm.clock()
  local sink = { "sink", echo_node }
  for _ = 1, count do send(sink, payload) end
  send(sink, tuple({ smarm.atom("count"), me }))
  local counted = receive()
  local t1 = smarm.clock()
  assert(counted[2] == count, "the sink counted " .. tostring(counted[2]) .. " of " .. count)
  rows.smarm_oneway = (t1 - t0) / count
  print(string.format("scenario=dist variant=oneway per_op_ns=%.3f ops=%d", rows.smarm_oneway,
    count))

  -- Erlang -> Erlang, the baseline
  local res = assert(smarm.process.run(erl("client", "measure", echo_node, tostring(opts.rounds),
    tostring(opts.warmup), tostring(opts.runs), tostring(opts.batch), tostring(count))))
  rows.erlang = res.stdout
  server:kill("SIGKILL")
  server:wait()
end)
os.execute("rm -rf " .. dir)

local erl_rt = tonumber(rows.erlang:match("roundtrip p50_ns=([%d.]+)"))
local erl_ow = tonumber(rows.erlang:match("oneway per_op_ns=([%d.]+)"))
assert(erl_rt and erl_ow, "the Erlang baseline said: " .. rows.erlang)
for line in rows.erlang:gmatch("[^\n]+") do
  local variant, rest = line:match("^(%S+) (.*)$")
  print("scenario=dist variant=" .. variant .. " peer=erlang " .. rest)
end
print(string.format("\ndist: round trip p50 smarm %.0f ns, Erlang %.0f ns: %.2fx (target <= 1.2x)",
  rows.smarm.p50_ns, erl_rt, rows.smarm.p50_ns / erl_rt))
print(string.format("dist: one way per message smarm %.0f ns, Erlang %.0f ns: %.2fx (target <= 1x)",
  rows.smarm_oneway, erl_ow, rows.smarm_oneway / erl_ow))
bench.finish()
