-- bench/chat.lua: examples/chat.lua under load (issue #15).
--   SMARM_CHAT_CLIENTS clients (default 1000; fewer where the descriptor limit is lower) connect
--   from a second smarm process. Once they have all joined and wait, the server's resident
--   memory per connection is the growth of this process's RSS since before they connected,
--   divided by their number (the kernel's socket buffers are not in it; the listener, the hub
--   and the pipes to the clients' process are). Then SMARM_CHAT_SPEAKERS
--   clients (default 10) each say SMARM_CHAT_LINES lines (default 20), one at a time, stamped with
--   CLOCK_MONOTONIC (smarm.clock: one clock for both processes); every client takes the time of
--   each line's arrival: the fan-out latency, from a speaker's send to a client's receipt of the
--   broadcast, over all of them (p50/p90/p99/max).
-- Run: smarm -n bench/chat.lua (./dev.sh bench runs it)
local here = debug.getinfo(1, "S").source:match("^@(.*)/bench/[^/]*$") or "."
package.path = here .. "/examples/?.lua;" .. package.path
local smarm = require("smarm")
local bench = require("smarm.bench")

bench.variants(arg, {}) -- no variants (it prints its own line: no --json, no --plot)
local chat = require("chat")
local ffi = require("ffi")

ffi.cdef([[
long readlink(const char *path, char *buf, size_t size);
struct smarm_bench_rlimit { uint64_t cur, max; };
int getrlimit(int resource, struct smarm_bench_rlimit *r);
]])

-- This executable, for the clients' process.
local function self_exe()
  local buf = ffi.new("char[4096]")
  local n = ffi.C.readlink("/proc/self/exe", buf, 4096)
  assert(n > 0, "bench/chat.lua: cannot read /proc/self/exe")
  return ffi.string(buf, n)
end

local function fd_limit()
  local r = ffi.new("struct smarm_bench_rlimit")
  if ffi.C.getrlimit(7, r) ~= 0 then return 1024 end -- RLIMIT_NOFILE
  return r.cur > 1e6 and 1e6 or tonumber(r.cur)
end

local clients = math.min(bench.knob("SMARM_CHAT_CLIENTS", 1000), fd_limit() - 64)
local speakers = math.min(bench.knob("SMARM_CHAT_SPEAKERS", 10), clients)
local lines = bench.knob("SMARM_CHAT_LINES", 20)

-- The clients' process: connects them all (in waves, so the listen queue keeps up), then each
-- reads the lines; a speaker first waits for the "go" line and says its lines, one each time one
-- of its own comes back. Prints "lat <ns> ..." per client, then "done".
local CLIENT = [[
local smarm = require("smarm")
local port, n, speakers, lines = tonumber(arg[1]), tonumber(arg[2]), tonumber(arg[3]),
  tonumber(arg[4])
local me = smarm.self()
local pids = {}
for first = 1, n, 250 do
  for k = first, math.min(n, first + 249) do
    pids[k] = smarm.spawn_on(k % 2 + 1, function(k)
      local c = assert(smarm.tcp.connect("127.0.0.1", port))
      smarm.send(me, "in")
      local lat, want = {}, speakers * lines
      local said = 0
      local function say()
        said = said + 1
        c:send(string.format("%d %d\n", k, smarm.clock()))
      end
      while #lat < want do
        local line = assert(c:receive())
        local who, stamp = line:match(": (%d+) (%d+)$")
        if who then
          lat[#lat + 1] = smarm.clock() - tonumber(stamp)
          if tonumber(who) == k and said < lines then say() end
        elseif line:match(": go$") and k <= speakers then
          say()
        end
      end
      c:close()
      smarm.send(me, table.concat(lat, " "))
    end, k)
  end
  for _ = first, math.min(n, first + 249) do
    assert(smarm.receive() == "in")
  end
end
for _ = 1, n do io.write("lat ", smarm.receive(), "\n") end
io.write("done\n")
]]

smarm.run(function()
  collectgarbage()
  local rss0, st0 = bench.rss_bytes(), smarm.stats().total
  local room = assert(chat.start({ port = 0 }))
  local me = smarm.self()
  smarm.spawn(function()
    local r, err = smarm.process.run({ self_exe(), "-s", "2", "-e", CLIENT, tostring(room.port),
      tostring(clients), tostring(speakers), tostring(lines) })
    smarm.send(me, { result = r, err = err })
  end)
  while chat.members(room) < clients do smarm.sleep(0.01) end
  -- Measured in the steady state of waiting connections: every session's stack out of its slot
  -- (an actor that waited across two of its scheduler's idle passes, a second apart, leaves it:
  -- docs/design.md; waited for up to 20 s), and each VM's garbage collected.
  local deadline = smarm.clock() + 20e9
  while smarm.stats().total.saved_stacks - st0.saved_stacks < clients and smarm.clock() < deadline do
    smarm.sleep(0.1)
  end
  for k = 1, smarm.schedulers() do
    smarm.call(smarm.spawn_on(k, function()
      local m = smarm.receive()
      collectgarbage()
      smarm.reply(m.from, true)
    end), "gc")
  end
  local per_conn = (bench.rss_bytes() - rss0) / clients
  local st = smarm.stats().total
  bench.progress("chat: %d clients joined; server RSS per connection %.0f B (Lua %.0f B; stacks "
    .. "%d, saved %d)", clients, per_conn, (st.memory - st0.memory) / clients, st.stacks - st0.stacks,
    st.saved_stacks - st0.saved_stacks)
  smarm.send(room.hub, { say = "bench: go" })
  local m = smarm.receive(function(x) return type(x) == "table" and x.result ~= nil or x.err end)
  chat.stop(room)
  assert(m.result and m.result.status == 0,
    "bench/chat.lua: the clients' process failed: " .. tostring(m.err or m.result.stderr))
  local h = smarm.histogram()
  local count = 0
  for v in m.result.stdout:gmatch("%d+") do
    h:record(tonumber(v))
    count = count + 1
  end
  local r = { p50_ns = h:quantile(0.5), p90_ns = h:quantile(0.9), p99_ns = h:quantile(0.99),
    max_ns = h:quantile(1) }
  print(string.format("scenario=chat variant=fanout clients=%d speakers=%d lines=%d samples=%d "
    .. "p50_ns=%.0f p90_ns=%.0f p99_ns=%.0f max_ns=%.0f rss_per_conn_bytes=%.0f", clients, speakers,
    lines, count, r.p50_ns, r.p90_ns, r.p99_ns, r.max_ns, per_conn))
end, { schedulers = 2 })
