-- examples/kv_service.lua under chaos (issue #11, "A service that proves it"): client actors
-- send requests, each on its own connection, while a chaos actor kills connection workers, the
-- acceptor and the store every few milliseconds for SMARM_CHAOS_SECONDS (default 3).
--
-- Checked:
-- * Every answer is right for its own request. Each client has keys of its own, fresh for each
--   connection it opens ("c<client>.g<connection>.k<n>"), and every value it sets is unique
--   ("c<client>.g<connection>.s<seq>"), so an answer meant for another request, another
--   connection or another client shows. SET and DEL answer OK, a bad request ERR ... A GET
--   answers by the last write to that key on this connection (all earlier requests on a
--   connection succeeded: it is dropped at its first failure, and its keys with it):
--     never written, or DEL: NIL;  SET v: v, or NIL only if the chaos actor killed the store
--     after that SET was sent (a store restarts empty). Once a GET saw NIL, later ones must too.
-- * A request fails only as a connection error or a close without an answer, and only when a
--   kill came after the client sent its last request that succeeded (the clients run beside the
--   chaos actor on scheduler 1 and read its kill count directly). Counted from that request, not
--   from the connect: a store killed just before a connection opened may still be named when its
--   first request comes, and fail it. Connecting never fails (the listener is not a target).
--   Failures are counted (printed at the end).
-- * Every client gets AFTER right answers to requests sent after the chaos ended.
-- * The acceptor is killed whenever its turn comes, a connection on its way to it or not (a
--   connection accepted for a killed acceptor is closed: tcp_spec's last case).
-- * The tree never gives up: the top supervisor and the acceptors supervisor are the same
--   actors at the end (a supervisor past its intensity would have ended and been replaced), the
--   chaos actor spacing its store and acceptor kills so that their restarts stay well within
--   the intensity given (INTENSITY in PERIOD).
-- * Nothing is left over: after supervisor.stop, the process's open descriptors and the live
--   actors come back to their counts from before the service started.
-- No timing asserts: the waits are for messages and counts, under the hang guards.
package.path = "examples/?.lua;" .. package.path
local smarm = require("smarm")
local sup = require("smarm.supervisor")
local kv = require("kv_service")
local guard = dofile("spec/support/guard.lua")

-- The process's descriptors, for a failure message (read without a fork: see posix.lua).
local fd_list = dofile("spec/support/posix.lua").fd_list

-- A value for a failure message: a table one level deep.
local function show(v)
  if type(v) ~= "table" then return tostring(v) end
  local parts = {}
  for k, x in pairs(v) do parts[#parts + 1] = tostring(k) .. " = " .. tostring(x) end
  return "{ " .. table.concat(parts, ", ") .. " }"
end

local SECONDS = tonumber(os.getenv("SMARM_CHAOS_SECONDS")) or 3
local CLIENTS = 6
local KEYS = 4 -- per connection
local AFTER = 20 -- right answers each client needs after the chaos
local GAP = 0.025 -- seconds at least between two kills of the store (and of the acceptor)
-- At most 1 / GAP store restarts a second, plus those whose restart lagged; far below this.
local INTENSITY, PERIOD = 100, 1

-- The chaos actor: a kill every 2-5 ms, in turn one of the store, nine of connection workers,
-- one of the acceptor, for SECONDS and until each kind has had one. c.kills counts every kill,
-- c.store, c.acceptor and c.worker those of each kind; each is counted before the kill is sent.
local function chaos(c, top, me)
  local function child(s, id) -- nil when s does not answer (a check at the end says why)
    for _, ch in ipairs(sup.which_children(s) or {}) do
      if ch.id == id then return ch.pid end
    end
  end
  local deadline = smarm.now() + SECONDS
  local last_store, last_acceptor, i = -math.huge, -math.huge, 0
  -- SECONDS of chaos, and on past them until each kind has had a kill: a machine slow enough
  -- to fit fewer than ten turns in SECONDS never reached the store's turn (the end's check
  -- that every kind was killed then failed); not for good: a kind that cannot be killed (its
  -- child never found) still ends in that check's failure, not in the main actor's wait for
  -- the chaos's end (guard.HANG, 120 s from about when the chaos began)
  local last_chance = deadline + 60
  while smarm.now() < deadline
    or ((c.store == 0 or c.acceptor == 0 or c.worker == 0) and smarm.now() < last_chance) do
    smarm.sleep(0.002 + math.random() * 0.003)
    i = i + 1
    local now, victim, kind = smarm.now(), nil, "worker"
    if i % 10 == 0 and now - last_store >= GAP then
      victim, kind, last_store = smarm.whereis("kv.store"), "store", now
    elseif i % 10 == 5 and now - last_acceptor >= GAP then
      local acceptors = child(top, "acceptors")
      victim, kind, last_acceptor = acceptors and child(acceptors, "acceptor"), "acceptor", now
    else
      local workers = sup.which_children("kv.conns") or {}
      if #workers > 0 then victim = workers[math.random(#workers)].pid end
    end
    if victim then -- nil: the acceptor or the store is being restarted, or no connection
      c.kills = c.kills + 1
      c[kind] = c[kind] + 1
      local ended = kind == "acceptor" and guard.watch(victim)
      smarm.kill(victim)
      if ended then ended() end
    end
  end
  c.done = true
  smarm.send(me, { chaos_done = true })
end

-- A client: requests on a connection until it fails, then a new connection with fresh keys;
-- ends once it has AFTER right answers to requests sent after the chaos ended. Raises on a
-- wrong answer or an unexplained failure; reports its counts.
local function client(id, port, c, me)
  local n = { ok = 0, failed = 0, connections = 0, lost = 0, after = 0, errors = {} }
  local baseline = c.kills -- the kill count when the last request that succeeded was sent
  local gen, seq = 0, 0
  while n.after < AFTER do
    local conn, cerr = smarm.tcp.connect("127.0.0.1", port)
    if not conn then error(string.format("client %d: connect failed: %s", id, tostring(cerr))) end
    conn:settimeout(guard.HANG)
    gen = gen + 1
    n.connections = n.connections + 1
    local model = {} -- key -> { value = string | false (NIL), store_kills = at the write's send }
    while n.after < AFTER do
      seq = seq + 1
      local key = string.format("c%d.g%d.k%d", id, gen, math.random(KEYS))
      local r = math.random()
      local op, line, value
      if r < 0.4 then
        op, value = "SET", string.format("c%d.g%d.s%d", id, gen, seq)
        line = "SET " .. key .. " " .. value
      elseif r < 0.8 then
        op, line = "GET", "GET " .. key
      elseif r < 0.95 then
        op, line = "DEL", "DEL " .. key
      else
        op, line = "BAD", (seq % 2 == 0) and ("PUT " .. key) or ("SET " .. key)
      end
      local sent_kills, sent_store_kills, sent_after = c.kills, c.store, c.done
      local answer, err
      local ok, serr = conn:send(line .. "\n")
      if ok then answer, err = conn:receive("*l") else err = serr end
      if answer == nil then
        if err == "timeout" then
          error(string.format("client %d: no answer to %q within %d s", id, line, guard.HANG))
        end
        if c.kills == baseline then
          error(string.format("client %d: %q failed (%s) with no kill since its last answered request",
            id, line, tostring(err)))
        end
        n.failed = n.failed + 1
        n.errors[err] = (n.errors[err] or 0) + 1
        break
      end
      local want
      if op == "SET" or op == "DEL" then
        want = "OK"
        if answer == want then model[key] = { value = op == "SET" and value, store_kills = sent_store_kills } end
      elseif op == "BAD" then
        want = "ERR ..."
        if answer:match("^ERR ") then want = answer end
      else
        local m = model[key]
        want = m and m.value or "NIL"
        if answer == "NIL" and m and m.value and c.store > m.store_kills then
          want = "NIL" -- the store was killed after the SET was sent: it may have lost it
          n.lost = n.lost + 1
          model[key] = { value = false, store_kills = m.store_kills }
        end
      end
      if answer ~= want then
        error(string.format("client %d: %q answered %q, expected %q", id, line, answer, want))
      end
      n.ok = n.ok + 1
      baseline = sent_kills
      if sent_after then n.after = n.after + 1 end
    end
    conn:close()
  end
  smarm.send(me, { client = id, counts = n })
end

describe("kv_service under chaos", function()
  it("answers right, fails only at kills, never gives up, and leaves nothing behind", function()
    local report = guard.run(function()
      local me = smarm.self()
      -- The IO thread starts with the first IO call, and libuv opens a reserve descriptor at
      -- the first listen: both stay for the run. This listener, open across both counts, makes
      -- them come first.
      local warm = assert(smarm.tcp.listen("127.0.0.1", 0))
      local fds_before, live_before = fd_list(), smarm.stats().total.live
      local top, port = kv.start({ port = 0, link = false, intensity = INTENSITY, period = PERIOD })
      assert.is_true(smarm.is_pid(top), tostring(port))
      local function child(s, id)
        for _, ch in ipairs(assert(sup.which_children(s))) do
          if ch.id == id then return ch.pid end
        end
      end
      local acceptors = child(top, "acceptors")
      local store0 = child(top, "store")
      local c = { kills = 0, worker = 0, acceptor = 0, store = 0, done = false }
      local watched = {}
      local _, ref = smarm.spawn_monitor(chaos, c, top, me)
      watched[ref] = "the chaos actor"
      for id = 1, CLIENTS do
        _, ref = smarm.spawn_monitor(client, id, port, c, me)
        watched[ref] = "client " .. id
      end
      -- Until the chaos ended and every client reported; an actor that raised fails the spec.
      local counts, reported, chaos_done = {}, 0, false
      while reported < CLIENTS or not chaos_done do
        local m = guard.receive("the chaos' end and the clients' reports", function(x)
          return type(x) == "table" and (x.client or x.chaos_done or (x.smarm == "DOWN" and watched[x.ref]))
        end)
        if m.client then
          counts[m.client], reported = m.counts, reported + 1
        elseif m.chaos_done then
          chaos_done = true
        elseif m.reason ~= "normal" then
          local r = m.reason
          error(watched[m.ref] .. " ended: " .. (type(r) == "table" and r.traceback and tostring(r.error) ..
            "\n" .. r.traceback or show(r)), 0)
        end
      end
      -- The tree never gave up: same top and acceptors supervisors, a store running.
      assert.is_true(smarm.alive(top), "the top supervisor ended")
      assert.are.equal(acceptors, child(top, "acceptors"), "the acceptors supervisor was replaced")
      local store1 = child(top, "store")
      assert.is_true(smarm.is_pid(store1) and smarm.alive(store1), "no store at the end")
      assert.is_true(c.store > 0 and c.acceptor > 0 and c.worker > 0,
        string.format("kills: %d store, %d acceptor, %d worker", c.store, c.acceptor, c.worker))
      assert.is_true(store1 ~= store0)
      assert.is_true(sup.stop(top, nil, guard.HANG))
      -- Nothing left: descriptors close on the IO thread, actors end on their schedulers.
      -- A descriptor open now that was not before is a leak; one fewer is not (the sanitizers'
      -- runtimes open and close their own: under TSan one closed during the run).
      local function new_fds()
        local before, fresh = {}, {}
        for line in fds_before:gmatch("[^\n]+") do before[line] = true end
        for line in fd_list():gmatch("[^\n]+") do
          if not before[line] then fresh[#fresh + 1] = line end
        end
        return fresh
      end
      local fds_new, live_after
      local deadline = smarm.now() + guard.HANG
      repeat
        fds_new, live_after = new_fds(), smarm.stats().total.live
        if #fds_new == 0 and live_after == live_before then break end
        smarm.sleep(0.01)
      until smarm.now() > deadline
      assert.are.same({}, fds_new, "descriptors open after the service stopped that were not before it "
        .. "started; before:\n" .. fds_before)
      warm:close()
      assert.are.equal(live_before, live_after, "live actors before the service and after it stopped")
      return { counts = counts, kills = c }
    end, { schedulers = 2 })
    local ok, failed, lost, conns, errors = 0, 0, 0, 0, {}
    for id = 1, CLIENTS do
      local n = report.counts[id]
      ok, failed, lost, conns = ok + n.ok, failed + n.failed, lost + n.lost, conns + n.connections
      for err, k in pairs(n.errors) do errors[err] = (errors[err] or 0) + k end
    end
    local k = report.kills
    -- A worker kill fails at most its one request in flight, a store or acceptor kill at most
    -- one per client.
    assert.is_true(failed <= k.worker + CLIENTS * (k.store + k.acceptor))
    local why = {}
    for err, x in pairs(errors) do why[#why + 1] = err .. " " .. x end
    table.sort(why)
    print(string.format("\nchaos %g s: %d answered, %d failed (%s), %d connections, %d values lost " ..
      "to a store restart; kills: %d workers, %d acceptor, %d store", SECONDS, ok, failed,
      table.concat(why, ", "), conns, lost, k.worker, k.acceptor, k.store))
  end)
end)
