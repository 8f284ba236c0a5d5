-- bench/server.lua: what smarm.server adds to a call, beside its baseline in the same run.
--   smarm_call    a bare smarm.call round trip to a minimal Lua loop that replies (the baseline)
--   server_call   a server.call round trip to a server.start'ed server whose handle_call
--                 returns "reply" (target: at most 1.3x smarm_call, issue #11)
-- Both on one scheduler. Knobs: SMARM_SERVER_ROUNDS, _WARMUP, _RUNS, _BATCH.
-- Run: smarm -n bench/server.lua [variant...]
local smarm = require("smarm")
local server = require("smarm.server")
local bench = require("smarm.bench")

local want = bench.variants(arg, { "smarm_call", "server_call" })
local opts = bench.measure_knobs("SMARM_SERVER", 100000, 2000, 5, 100)

local function bare_server()
  local receive, reply = smarm.receive, smarm.reply
  while true do
    local m = receive()
    if m == 0 then return end
    reply(m.from, m.request)
  end
end

local echo = {
  init = function() return "ok", 0 end,
  handle_call = function(request, _, state) return "reply", request, state end,
}

local variants = {}

variants.smarm_call = function()
  local peer = smarm.spawn(bare_server)
  local call = smarm.call
  return function(n)
    for _ = 1, n do call(peer, 1) end
  end, function() smarm.send(peer, 0) end
end

variants.server_call = function()
  local peer = assert(server.start(echo))
  local call = server.call
  return function(n)
    for _ = 1, n do call(peer, 1) end
  end, function() server.stop(peer) end
end

local results = {}
for _, name in ipairs({ "smarm_call", "server_call" }) do
  if want(name) then
    smarm.run(function()
      local loop, stop = variants[name]()
      opts.label = "server " .. name
      local r = bench.measure(loop, opts)
      stop()
      results[name] = r
      bench.report({ scenario = "server", variant = name, schedulers = 1 }, r)
    end, { schedulers = 1 })
  end
end

if results.smarm_call and results.server_call then
  local base = results.smarm_call.ps:quantile(0.5)
  local ratio = results.server_call.ps:quantile(0.5) / base
  io.stderr:write(string.format("server: server_call / smarm_call at p50 = %.2fx (target 1.3x)\n",
    ratio))
end

bench.finish()
