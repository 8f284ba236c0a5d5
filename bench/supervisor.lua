-- bench/supervisor.lua: what a restart costs, from a crash to the new child running.
--   bare_restart  a hand-written loop that traps exits and spawn_links a new child on each EXIT
--                 (the baseline: what any restart must do)
--   exit_signal   a one_for_one supervisor restarting a permanent child that an exit signal
--                 ("boom") ended (target: p50 at most 5 us, issue #11)
--   raise         the same, the child ending by raising (the crash pays for its traceback)
-- One operation: the bench actor ends the current child (a message "crash" for raise) and
-- waits for the new child's first message, which carries its pid. The supervisor's intensity
-- is set high (1e9 in 1 s) so that it keeps restarting. One scheduler.
-- Knobs: SMARM_SUP_ROUNDS, _WARMUP, _RUNS, _BATCH. Run: smarm -n bench/supervisor.lua [variant...]
local smarm = require("smarm")
local supervisor = require("smarm.supervisor")
local bench = require("smarm.bench")

local want = bench.variants(arg, { "bare_restart", "exit_signal", "raise" })
local opts = bench.measure_knobs("SMARM_SUP", 50000, 2000, 5, 100)

local function child(report)
  smarm.send(report, smarm.self())
  if smarm.receive() == "crash" then error("crash") end
end

local function start_child(report) return smarm.spawn_link(child, report) end

local variants = {}

variants.bare_restart = function(me)
  local keeper = smarm.spawn(function()
    smarm.trap_exit(true)
    start_child(me)
    while true do
      local m = smarm.receive()
      if m == "stop" then return end
      if m.smarm == "EXIT" then start_child(me) end
    end
  end)
  local receive, exit = smarm.receive, smarm.exit
  local current = receive()
  return function(n)
    for _ = 1, n do
      exit(current, "boom")
      current = receive()
    end
  end, function() smarm.send(keeper, "stop") end
end

local function supervised(how)
  return function(me)
    local sup = assert(supervisor.start({ link = false, intensity = 1e9, period = 1,
      children = { { id = "c", start = start_child, args = { me } } } }))
    local receive, exit, send = smarm.receive, smarm.exit, smarm.send
    local current = receive()
    local op
    if how == "exit_signal" then
      op = function(n)
        for _ = 1, n do
          exit(current, "boom")
          current = receive()
        end
      end
    else
      op = function(n)
        for _ = 1, n do
          send(current, "crash")
          current = receive()
        end
      end
    end
    return op, function() supervisor.stop(sup) end
  end
end
variants.exit_signal = supervised("exit_signal")
variants.raise = supervised("raise")

local results = {}
for _, name in ipairs({ "bare_restart", "exit_signal", "raise" }) do
  if want(name) then
    smarm.run(function()
      local loop, stop = variants[name](smarm.self())
      opts.label = "supervisor " .. name
      local r = bench.measure(loop, opts)
      stop()
      results[name] = r
      bench.report({ scenario = "supervisor", variant = name, schedulers = 1 }, r)
    end, { schedulers = 1 })
  end
end

if results.bare_restart and results.exit_signal then
  local ratio = results.exit_signal.ps:quantile(0.5) / results.bare_restart.ps:quantile(0.5)
  io.stderr:write(string.format("supervisor: exit_signal p50 = %.2f us (target 5 us), %.2fx bare_restart\n",
    results.exit_signal.ps:quantile(0.5) / 1e6, ratio))
end

bench.finish()
