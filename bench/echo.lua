-- bench/echo.lua: TCP echo over loopback inside one runtime, through the IO thread.
--   rtt        one client actor (scheduler 2) and the server's handler (scheduler 1): one round
--              trip of a 64-byte message; compare with bench/c/echo_threads (two plain threads
--              doing blocking read/write), which ./dev.sh bench runs beside it
--   rtt_local  the same with client and server on one scheduler
--   clients    SMARM_ECHO_CLIENTS client actors (default 16, on both schedulers) against one
--              server; per round trip, and requests per second (extra field rps)
--   udp_rtt    the rtt pair over UDP: 64-byte datagrams between a client actor (scheduler 2)
--              and a server actor (scheduler 1); its baseline is bench/c/echo_threads udp
--   udp_rtt_local  the same with client and server on one scheduler
--   active_rtt, active_rtt_local  rtt and rtt_local with both ends in active "once" mode
--              (conn:setactive): each side takes the 64 bytes as messages and arms again;
--              compare with rtt and rtt_local (the passive receive path)
-- Knobs: SMARM_ECHO_ROUNDS, SMARM_ECHO_RUNS, SMARM_ECHO_BATCH, SMARM_ECHO_CLIENTS.
-- Run: smarm -n bench/echo.lua [rtt|rtt_local|clients|udp_rtt|udp_rtt_local|active_rtt|...]
local smarm = require("smarm")
local bench = require("smarm.bench")

local want = bench.variants(arg, { "rtt", "rtt_local", "active_rtt", "active_rtt_local",
  "udp_rtt", "udp_rtt_local", "clients" })
local rounds = bench.knob("SMARM_ECHO_ROUNDS", 20000)
local runs = bench.knob("SMARM_ECHO_RUNS", 3)
local batch = bench.knob("SMARM_ECHO_BATCH", 10)
local nclients = bench.knob("SMARM_ECHO_CLIENTS", 16)
local MSG = ("m"):rep(64)

-- The next n bytes of active connection c, from its messages (arming it again for each); nil
-- at its end.
local function take_active(c, n)
  local got = ""
  repeat
    c:setactive("once")
    local m = smarm.receive(function(m) return type(m) == "table" and m.socket == c end)
    if m.smarm ~= "tcp" then return nil end
    got = got .. m.data
  until #got >= n
  return got
end

-- The server: accepts forever, one handler actor per connection echoing 64-byte messages
-- (taken from active messages when active).
local function serve(server, active)
  while true do
    local c = server:accept()
    if not c then return end
    c:setoption("tcp-nodelay", true)
    smarm.spawn(function()
      while true do
        local m
        if active then m = take_active(c, 64) else m = c:receive(64) end
        if not m then break end
        c:send(m)
      end
      c:close()
    end)
  end
end

-- A client: round trips of MSG, measured by the harness; sends its packed result to owner.
-- (It moves to another scheduler's VM with spawn_on: its upvalues are modules and MSG.)
local function client(owner, port, opts, active)
  local c = assert(smarm.tcp.connect("127.0.0.1", port))
  c:setoption("tcp-nodelay", true)
  local r = bench.measure(function(n)
    for _ = 1, n do
      c:send(MSG)
      if active then take_active(c, 64) else c:receive(64) end
    end
  end, opts)
  c:close()
  smarm.send(owner, bench.pack(r))
end

for _, variant in ipairs({ "rtt", "rtt_local", "active_rtt", "active_rtt_local" }) do
  if want(variant) then
    local active = variant:match("^active") ~= nil
    smarm.run(function()
      local server = assert(smarm.tcp.listen("127.0.0.1", 0))
      local _, port = server:getsockname()
      smarm.spawn(serve, server, active)
      local me = smarm.self()
      smarm.spawn_on(variant:match("local$") and 1 or 2, client, me, port,
        { rounds = rounds, runs = runs, batch = batch, warmup = 2000, label = "echo " .. variant },
        active)
      local r = bench.merge({ smarm.receive() })
      server:close()
      bench.report({ scenario = "echo", variant = variant, schedulers = 2, bytes = 64 }, r)
    end, { schedulers = 2 })
  end
end

for _, variant in ipairs({ "udp_rtt", "udp_rtt_local" }) do
  if want(variant) then
  smarm.run(function()
    local server = assert(smarm.udp.bind("127.0.0.1", 0))
    local _, port = server:getsockname()
    smarm.spawn(function()
      while true do
        local m, host, from = server:receivefrom()
        if not m or m == "" then break end
        server:sendto(m, host, from)
      end
      server:close()
    end)
    local me = smarm.self()
    smarm.spawn_on(variant == "udp_rtt" and 2 or 1, function(owner, p, opts)
      local c = assert(smarm.udp.bind("127.0.0.1", 0))
      c:settimeout(1) -- UDP may lose a datagram: then it is sent again, and counted
      local lost = 0
      local r = bench.measure(function(n)
        for _ = 1, n do
          c:sendto(MSG, "127.0.0.1", p)
          while not c:receive() do
            lost = lost + 1
            c:sendto(MSG, "127.0.0.1", p)
          end
        end
      end, opts)
      if lost > 0 then
        bench.progress("echo %s: %d datagrams lost and sent again (each adds a 1 s wait to its "
          .. "round)", opts.label, lost)
      end
      c:sendto("", "127.0.0.1", p)
      c:close()
      smarm.send(owner, bench.pack(r))
    end, me, port, { rounds = rounds, runs = runs, batch = batch, warmup = 2000,
      label = "echo " .. variant })
    local r = bench.merge({ smarm.receive() })
    bench.report({ scenario = "echo", variant = variant, schedulers = 2, bytes = 64 }, r)
  end, { schedulers = 2 })
  end
end

if want("clients") then
  smarm.run(function()
    local server = assert(smarm.tcp.listen("127.0.0.1", 0, 1024))
    local _, port = server:getsockname()
    smarm.spawn(serve, server)
    local me = smarm.self()
    local per_client = math.max(batch, math.floor(rounds / nclients))
    local t0 = smarm.clock()
    for i = 1, nclients do
      smarm.spawn_on(i % 2 + 1, client, me, port, { rounds = per_client, runs = runs, batch = batch, warmup = 200,
        label = "echo clients" })
    end
    local packed = {}
    for i = 1, nclients do packed[i] = smarm.receive() end
    local seconds = (smarm.clock() - t0) / 1e9
    local r = bench.merge(packed)
    server:close()
    bench.report({ scenario = "echo", variant = "clients", schedulers = 2, clients = nclients,
      bytes = 64, rps = math.floor(r.ops / seconds) }, r)
  end, { schedulers = 2 })
end

bench.finish()
