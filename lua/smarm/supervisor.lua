-- smarm.supervisor: Erlang's supervisor (issue #11), written on the public API only
-- (require("smarm"); docs/api.md, `require("smarm.supervisor")`). A supervisor is one actor
-- that traps exits, links to each child it starts, and restarts children when their EXIT
-- messages say so. Invariant: the list of children (in start order) and the map from a
-- running child's pid to its record live only in the supervisor's loop, and a record's `pid`
-- is set exactly while the supervisor is linked to that child and has not yet seen it end.
--
-- What was decided where the issue is silent (Erlang/OTP's supervisor is followed unless said):
-- * The loop is built on smarm.receive and smarm.reply directly, not on smarm.server: the
--   supervisor needs selective receives of its own (waiting for one child's DOWN during a
--   shutdown) and its own handling of EXITs, which a server would route through handle_info.
-- * A child's `start` is a function or a "module.fn" string (resolved with require in the
--   supervisor's VM at each start). It runs inside the supervisor, so that the supervisor is
--   the child's starter (server.start with opts.link then makes the supervisor the server's
--   parent, whose "shutdown" runs the server's terminate). It is called as
--   start(args[1], ..., args[n]) and, for the dynamic strategy, the extra arguments of
--   start_child after those (Erlang's simple_one_for_one). When the child spec has `on`, that
--   value is passed as one more, last, argument: the supervisor cannot choose where a child it
--   does not spawn itself lives, so the start function hands it to spawn_opt / server.start's
--   opts.on. Children may live on any scheduler; links and monitors work across them.
-- * start returns the child's pid; nil, "ignore" (server.start's answer to init's "ignore")
--   leaves the child not running but kept (Erlang's ignore), except a temporary one, whose
--   record goes (it could never run again); nil, reason or a raise is a
--   failed start with that reason (`{ error =, traceback = }` for a raise); anything else is a
--   failed start with a string reason. A reason goes into a reply or the supervisor's exit
--   reason, so one that cannot be sent is replaced as the runtime replaces an exit reason (the
--   supervisor never dies of its own reply). The supervisor links to the pid it gets (a no-op
--   when the start already linked it; a dead pid's link gives an EXIT "noproc", a normal child
--   end).
-- * Stopping a child (Erlang's shutdown/2): monitor it, unlink it (an EXIT of it already queued
--   is removed), then "brutal_kill" kills it; a number sends the exit signal "shutdown" and
--   kills it if its DOWN has not come after that many seconds; "infinity" sends "shutdown" and
--   waits. Defaults: 5 s for a worker, "infinity" for a supervisor. Children stop one at a time
--   in reverse start order; the dynamic strategy's children are all sent their signal first and
--   then waited for together (Erlang stops them asynchronously), against the template's timeout.
-- * Restart types per Erlang: permanent always; transient unless the reason is "normal",
--   "shutdown" or { shutdown = ... }; temporary never, and its record is removed when it ends.
--   A transient child that is not restarted keeps its record, not running (restart_child can
--   start it). With the dynamic strategy a child that is not restarted is removed.
-- * Intensity: each restart (and each retry of a restart that failed) is stamped with
--   smarm.now(); when a stamp would make more than `intensity` within `period` seconds, the
--   supervisor stops every child (reverse start order) and ends with reason "shutdown". A
--   restart whose start fails is retried through a message the supervisor sends itself (so
--   calls in between are answered), as Erlang's try_again_restart; one_for_all and rest_for_one
--   stop the children they had restarted in that round before retrying. Until the retry, the
--   record is marked restarting: terminate_child clears the mark (the child stays stopped, and
--   the retry finds nothing to do), restart_child and delete_child answer "restarting".
-- * one_for_all / rest_for_one: the children stopped because a sibling died are stopped as by
--   terminate_child: temporary ones are then removed, not restarted (as in Erlang).
-- * spec.link (default true: Erlang's start_link is how trees are built) links the supervisor
--   to the caller of start. An EXIT from that parent stops every child and ends the supervisor
--   with the parent's reason. Other EXITs from pids that are not children are ignored, and
--   other unknown messages are dropped with a line on stderr (Erlang logs both).
-- * start is synchronous: it returns the pid once every child has started. If one fails, the
--   ones started are stopped (reverse order), the supervisor unlinks from its starter (so the
--   caller gets an answer, not an exit signal, as server.start does) and ends with
--   { shutdown = { failed_to_start_child = id, reason = r } }; start returns nil and the inner
--   { failed_to_start_child = id, reason = r }.
-- * Requests to a running supervisor are smarm.call's with no timeout (Erlang's infinity)
--   unless a timeout is given. Child specs travel in messages, a function `start` with them
--   (copied like any function in a message: docs/api.md, "Functions in messages"); a
--   supervisor in the caller's VM gets the caller's own spec instead (through a table of this
--   module), so that a start function shares its upvalues with the caller there, as
--   smarm.spawn's functions do. With spec.on the supervisor and its children's start
--   functions move to that scheduler's VM as spawn_on moves a function.
-- * Outcomes are return values (nil, reason: "not_found", "running", "restarting", "already_present",
--   "already_started", "dynamic", "not_dynamic", or a start's reason); misuse (a bad spec,
--   wrong argument types, a request from the supervisor itself) raises at the caller's line
--   with a message that names the field. A child id must be data an exit reason can carry: it
--   travels in which_children's answer and in a failed start's { failed_to_start_child = id }.
--   Ids are compared as data (same_id): a table id, which every request copies, names the
--   child whose id has the same contents, as Erlang compares terms.
local smarm = require("smarm")

local supervisor = {}

local receive, send, reply, self, exit = smarm.receive, smarm.send, smarm.reply, smarm.self, smarm.exit
local link, unlink, monitor, kill, now, is_pid = smarm.link, smarm.unlink, smarm.monitor, smarm.kill,
  smarm.now, smarm.is_pid
local type, tostring, unpack = type, tostring, unpack

local STRATEGIES = { one_for_one = true, one_for_all = true, rest_for_one = true, dynamic = true }
local RESTARTS = { permanent = true, transient = true, temporary = true }
local TYPES = { worker = true, supervisor = true }
local FOREVER = math.huge

-- Child specs that hold functions, handed from start_child to a supervisor of the same VM (in
-- another VM the copy in the request is used): ref -> { spec =, sup = pid }. The supervisor
-- takes its entry; a caller whose request failed removes it, but not one that timed out (the
-- request may still be taken, and start the child, as Erlang's does); entries of supervisors
-- that ended first are dropped every 64 handoffs. (Not weak: a collection would drop an
-- entry whose request is still queued.) An actor that is no supervisor and never answers
-- keeps the entry of a request to it that timed out.
local handoff, handoffs = {}, 0

local function crashed(e)
  return { error = e, traceback = debug.traceback("", 2):sub(2) }
end

local function down_of(ref)
  return function(m) return type(m) == "table" and m.smarm == "DOWN" and m.ref == ref end
end

-- v as an exit reason carries it: v itself for a string, number or boolean, else a copy, and
-- for a value that cannot be one (a function, a coroutine, a socket, a table holding one) the
-- runtime's replacement, "tostring(v) (an exit reason that cannot be sent: <why>)", of only the
-- error of a crash's { error =, traceback = } (docs/api.md, "Faults"). Asked of the runtime
-- itself, through an actor that ends with v, so that the rule is the runtime's own.
local function as_reason(v)
  local t = type(v)
  if t == "string" or t == "number" or t == "boolean" then return v end
  local _, ref = smarm.spawn_monitor(exit, v)
  return receive(down_of(ref)).reason
end

-- Why v cannot be a child id (a text that follows the field's name), or nil. An id travels in
-- replies (which_children) and in the supervisor's exit reason ({ failed_to_start_child = id }),
-- so it must be data that an exit reason can carry. NaN is checked apart: it travels.
local function id_problem(v)
  local t = type(v)
  if t == "string" or t == "number" or t == "boolean" then return nil end
  local r = as_reason({ v })
  if type(r) ~= "string" then return nil end
  local why = r:match("%(an exit reason that cannot be sent: (.*)%)$") or r
  return (why:gsub("^reason%[1%]", ""):gsub("^reason ", " "))
end

-- Whether child ids a and b are the same data (an id comes as a copy in every request).
local same_id = smarm._same_data

local function spec_error(level, where, msg)
  error(string.format("supervisor.%s: %s", where, msg), level + 1)
end

local function check_on(on, level, where, field)
  if on ~= nil and on ~= "any" and (type(on) ~= "number" or on < 1 or on % 1 ~= 0) then
    spec_error(level + 1, where, field .. ".on must be a scheduler index or \"any\", got " .. tostring(on))
  end
end

-- Checks one child spec and returns a fresh record with the defaults filled in.
local function child_record(c, level, where, field)
  if type(c) ~= "table" then
    spec_error(level + 1, where, field .. " must be a table, got " .. type(c))
  end
  local st = type(c.start)
  if st == "string" then
    if not c.start:find("^[%w_%.]+%.[%w_]+$") then
      spec_error(level + 1, where, field .. ".start '" .. c.start .. "' is not of the form module.fn")
    end
  elseif st ~= "function" then
    spec_error(level + 1, where, field .. ".start must be a function or \"module.fn\", got " .. st)
  end
  if c.args ~= nil and type(c.args) ~= "table" then
    spec_error(level + 1, where, field .. ".args must be a table, got " .. type(c.args))
  end
  local restart = c.restart == nil and "permanent" or c.restart
  if not RESTARTS[restart] then
    spec_error(level + 1, where, field .. ".restart must be \"permanent\", \"transient\" or " ..
      "\"temporary\", got " .. tostring(c.restart))
  end
  local kind = c.type == nil and "worker" or c.type
  if not TYPES[kind] then
    spec_error(level + 1, where, field .. ".type must be \"worker\" or \"supervisor\", got " ..
      tostring(c.type))
  end
  local shutdown = c.shutdown
  if shutdown == nil then shutdown = kind == "supervisor" and "infinity" or 5 end
  if shutdown ~= "brutal_kill" and shutdown ~= "infinity" and
    (type(shutdown) ~= "number" or shutdown < 0 or shutdown ~= shutdown) then
    spec_error(level + 1, where, field .. ".shutdown must be seconds, \"brutal_kill\" or " ..
      "\"infinity\", got " .. tostring(c.shutdown))
  end
  if c.id ~= c.id then -- NaN: no table holds it as a key, and no id equals it
    spec_error(level + 1, where, field .. ".id is NaN, which can name no child")
  end
  local unsendable = c.id ~= nil and id_problem(c.id)
  if unsendable then
    spec_error(level + 1, where, field .. ".id" .. unsendable .. " (an id must be data that can " ..
      "be sent)")
  end
  check_on(c.on, level + 1, where, field)
  return { id = c.id, start = c.start, args = c.args or {}, restart = restart,
    shutdown = shutdown, on = c.on, type = kind }
end

-- Checks a supervisor spec; returns the checked copy that the supervisor runs.
local function check_spec(spec, level)
  if type(spec) ~= "table" then
    spec_error(level + 1, "start", "spec must be a table, got " .. type(spec))
  end
  local strategy = spec.strategy == nil and "one_for_one" or spec.strategy
  if not STRATEGIES[strategy] then
    spec_error(level + 1, "start", "spec.strategy must be \"one_for_one\", \"one_for_all\", " ..
      "\"rest_for_one\" or \"dynamic\", got " .. tostring(spec.strategy))
  end
  local intensity = spec.intensity == nil and 1 or spec.intensity
  if type(intensity) ~= "number" or intensity < 0 or intensity % 1 ~= 0 then
    spec_error(level + 1, "start", "spec.intensity must be a non-negative integer, got " ..
      tostring(spec.intensity))
  end
  local period = spec.period == nil and 5 or spec.period
  if type(period) ~= "number" or period ~= period or period <= 0 then
    spec_error(level + 1, "start", "spec.period must be a positive number of seconds, got " ..
      tostring(spec.period))
  end
  if spec.name ~= nil and type(spec.name) ~= "string" then
    spec_error(level + 1, "start", "spec.name must be a string, got " .. type(spec.name))
  end
  if spec.link ~= nil and type(spec.link) ~= "boolean" then
    spec_error(level + 1, "start", "spec.link must be a boolean, got " .. type(spec.link))
  end
  check_on(spec.on, level + 1, "start", "spec")
  local children = spec.children == nil and {} or spec.children
  if type(children) ~= "table" or (#children == 0 and next(children) ~= nil) then
    spec_error(level + 1, "start", "spec.children must be a list, got " ..
      (type(children) == "table" and "a table with no element 1" or type(children)))
  end
  if strategy == "dynamic" and #children ~= 1 then
    spec_error(level + 1, "start", "the dynamic strategy needs exactly one child spec (the " ..
      "template), got " .. #children)
  end
  local checked, plain_ids, table_ids = {}, {}, {} -- (ids seen: one lookup, or tables compared)
  for i = 1, #children do
    local field = "spec.children[" .. i .. "]"
    local c = child_record(children[i], level + 1, "start", field)
    if strategy ~= "dynamic" then
      if c.id == nil then spec_error(level + 1, "start", field .. ".id is missing") end
      -- tables and userdata (binaries: equal by value, not by identity) are compared
      local compared = type(c.id) == "table" or type(c.id) == "userdata"
      local before = not compared and plain_ids[c.id]
      for j = 1, compared and #table_ids or 0 do
        if same_id(checked[table_ids[j]].id, c.id) then before = table_ids[j] end
      end
      if before then
        spec_error(level + 1, "start", field .. ".id " .. tostring(c.id) ..
          " is used twice (spec.children[" .. before .. "] has it)")
      end
      if compared then table_ids[#table_ids + 1] = i else plain_ids[c.id] = i end
    end
    checked[i] = c
  end
  return { strategy = strategy, intensity = intensity, period = period, children = checked,
    link = spec.link ~= false, name = spec.name, on = spec.on }
end

-- The start function of a record: the function itself, or "module.fn" required here.
local function resolve(start)
  if type(start) == "function" then return start end
  local mod, fn = start:match("^(.+)%.([^%.]+)$")
  local m = require(mod)
  local f = type(m) == "table" and m[fn]
  if type(f) ~= "function" then
    error(string.format("supervisor: '%s' is not a function", start), 0)
  end
  return f
end

local function call_start(c, extra)
  local f = resolve(c.start)
  local args = c.args
  local n = #args
  local all = { unpack(args, 1, n) }
  if extra then
    for i = 1, #extra do all[n + i] = extra[i] end
    n = n + #extra
  end
  if c.on ~= nil then
    n = n + 1
    all[n] = c.on
  end
  return f(unpack(all, 1, n))
end

-- Runs a record's start in the supervisor: pid | nil (ignored) | false, reason. The reason of a
-- failed start goes into a reply or the supervisor's exit reason: one that cannot be sent is
-- replaced as an exit reason is.
local function start_one(st, c, extra)
  local ok, pid, why = xpcall(call_start, crashed, c, extra)
  if not ok then return false, as_reason(pid) end
  if pid == nil then
    if why == "ignore" then
      c.restarting = nil -- settled: a retry still queued has nothing to do
      return nil
    end
    return false, why == nil and "supervisor: start returned nil" or as_reason(why)
  end
  if not is_pid(pid) then
    return false, string.format("supervisor: child %s's start returned a %s, not a pid",
      tostring(c.id), type(pid))
  end
  link(pid)
  c.pid = pid
  c.restarting = nil -- started (by a sibling's restart, say): a retry still queued does nothing
  st.by_pid[pid] = c
  return pid
end

local function is_shutdown(reason)
  return reason == "normal" or reason == "shutdown"
    or (type(reason) == "table" and reason.shutdown ~= nil)
end

local function exit_of(pid)
  return function(m) return type(m) == "table" and m.smarm == "EXIT" and m.pid == pid end
end

-- Begins stopping a running child: monitor, unlink (dropping a queued EXIT of it), signal.
local function begin_stop(st, c)
  local pid = c.pid
  st.by_pid[pid] = nil
  c.pid = nil
  local ref = monitor(pid)
  unlink(pid)
  receive(exit_of(pid), 0)
  if c.shutdown == "brutal_kill" then kill(pid) else exit(pid, "shutdown") end
  return pid, ref
end

-- Stops one running child and waits until it has ended (Erlang's shutdown/2).
local function stop_child(st, c)
  local pid, ref = begin_stop(st, c)
  local limit = c.shutdown
  if limit == "brutal_kill" or limit == "infinity" then limit = nil end
  if receive(down_of(ref), limit) == nil then
    kill(pid)
    receive(down_of(ref))
  end
end

-- Removes record c from the list.
local function remove(st, c)
  local list = st.children
  for i = 1, #list do
    if list[i] == c then
      table.remove(list, i)
      return
    end
  end
end

-- Stops the running children from last to `first`, in reverse start order; temporary ones
-- stopped so are removed.
local function stop_from(st, first)
  local list = st.children
  for i = #list, first, -1 do
    local c = list[i]
    if c.pid then
      stop_child(st, c)
      if c.restart == "temporary" then table.remove(list, i) end
    end
  end
end

-- Stops every dynamic child: signals all, then waits for all against the template's timeout.
local function stop_dynamic(st)
  local waiting, left = {}, 0
  local list = st.children
  for i = 1, #list do
    if list[i].pid then
      local pid, ref = begin_stop(st, list[i])
      waiting[ref] = pid
      left = left + 1
    end
  end
  st.children = {}
  local limit = st.template.shutdown
  if limit == "brutal_kill" or limit == "infinity" then limit = nil end
  local deadline = limit and now() + limit
  local function any_down(m)
    return type(m) == "table" and m.smarm == "DOWN" and waiting[m.ref] ~= nil
  end
  while left > 0 do
    local m = receive(any_down, deadline and math.max(0, deadline - now()))
    if m == nil then
      for _, pid in pairs(waiting) do kill(pid) end
      deadline = nil
    else
      waiting[m.ref] = nil
      left = left - 1
    end
  end
end

local function stop_all(st)
  if st.strategy == "dynamic" then stop_dynamic(st) else stop_from(st, 1) end
end

-- Ends the supervisor after stopping every child. Never returns.
local function shut_down(st, reason)
  stop_all(st)
  exit(reason)
end

-- Records a restart; false when it is one more than intensity allows within period. The
-- stamps are a queue (st.first .. st.last) of at most intensity + 1 entries, oldest first, so a
-- restart costs O(1) amortised however many restarts the period holds.
local function add_restart(st)
  local t = now()
  local stamps, first, last = st.restarts, st.first, st.last
  while first <= last and t - stamps[first] > st.period do
    stamps[first] = nil
    first = first + 1
  end
  if first > last then -- empty: start the queue over so that its indices stay small
    first, last = 1, 0
  end
  last = last + 1
  stamps[last] = t
  st.first, st.last = first, last
  return last - first + 1 <= st.intensity
end

local function index_of(st, c)
  local list = st.children
  for i = 1, #list do
    if list[i] == c then return i end
  end
end

-- Starts the not-running, non-temporary children from index `first` on, in order; on a failed
-- start stops the ones started in this round and returns false.
local function restart_from(st, first)
  local list = st.children
  for i = first, #list do
    local c = list[i]
    if c.pid == nil and c.restart ~= "temporary" then
      local pid = start_one(st, c, c.extra)
      if pid == false then
        for j = i - 1, first, -1 do
          if list[j].pid then stop_child(st, list[j]) end
        end
        return false
      end
    end
  end
  return true
end

-- Restarts c (which has ended) by the strategy; counts against intensity.
local function restart(st, c)
  if not add_restart(st) then shut_down(st, "shutdown") end
  local ok
  if st.strategy == "one_for_one" or st.strategy == "dynamic" then
    ok = start_one(st, c, c.extra) ~= false
  else
    -- c is not running and not temporary, so stopping the ones after it keeps its index
    local first = st.strategy == "rest_for_one" and index_of(st, c) or 1
    stop_from(st, first)
    ok = restart_from(st, first)
  end
  if not ok then
    c.restarting = true -- until the retry (or a request that settles the child first)
    send(self(), { smarm = "SUP_RETRY", child = c.key })
  end
end

-- A child ended with reason: restart it (and its siblings) or forget it, per its restart type.
local function child_ended(st, c, reason)
  st.by_pid[c.pid] = nil
  c.pid = nil
  if c.restart == "temporary" or (c.restart == "transient" and is_shutdown(reason)) then
    if c.restart == "temporary" or st.strategy == "dynamic" then remove(st, c) end
    return
  end
  restart(st, c)
end

-- The child whose `field` is `value` (its id, or the key a restart retry names).
local function find(st, value, field)
  local list = st.children
  if field then
    for i = 1, #list do
      if list[i][field] == value then return list[i] end
    end
    return nil
  end
  for i = 1, #list do
    if same_id(list[i].id, value) then return list[i] end
  end
end

local next_key = 0
local function keyed(c)
  next_key = next_key + 1
  c.key = next_key
  return c
end

local requests = {}

function requests.start_child(st, r)
  local handed -- a spec handed over in this VM: its entry taken first, whatever the answer
  if r.handoff ~= nil then
    handed = handoff[r.handoff]
    handoff[r.handoff] = nil
  end
  if st.strategy == "dynamic" then
    if r.spec ~= nil or r.handoff ~= nil then return nil, "dynamic" end
    local t = st.template
    local c = keyed({ id = t.id, start = t.start, args = t.args, restart = t.restart,
      shutdown = t.shutdown, on = t.on, type = t.type, extra = r.extra or {} })
    local pid, why = start_one(st, c, c.extra)
    if pid == false then return nil, why end
    if pid == nil then return nil, "ignore" end
    st.children[#st.children + 1] = c
    return pid
  end
  if r.extra ~= nil then return nil, "not_dynamic" end
  -- the caller's own spec in this VM (its start function shared, as smarm.spawn shares it),
  -- the copy that travelled from another
  local c = r.spec
  if r.handoff ~= nil then c = handed and handed.spec end -- (a request given up on starts it too)
  if type(c) ~= "table" then return nil, "supervisor: a start_child request without its spec" end
  local old = find(st, c.id)
  if old then return nil, old.pid and "already_started" or "already_present" end
  c = keyed(c)
  local pid, why = start_one(st, c)
  if pid == false then return nil, why end
  -- an ignored start keeps its record (Erlang's {ok, undefined}), but a temporary child's
  if pid ~= nil or c.restart ~= "temporary" then st.children[#st.children + 1] = c end
  if pid == nil then return nil, "ignore" end
  return pid
end

function requests.terminate_child(st, r)
  local c
  if st.strategy == "dynamic" then
    c = is_pid(r.id) and st.by_pid[r.id]
    if not c then return nil, "not_found" end
    stop_child(st, c)
    remove(st, c)
    return true
  end
  c = find(st, r.id)
  if not c then return nil, "not_found" end
  c.restarting = nil -- a restart still to be tried is not: the child stays stopped
  if c.pid then stop_child(st, c) end
  if c.restart == "temporary" then remove(st, c) end
  return true
end

function requests.restart_child(st, r)
  if st.strategy == "dynamic" then return nil, "dynamic" end
  local c = find(st, r.id)
  if not c then return nil, "not_found" end
  if c.pid then return nil, "running" end
  if c.restarting then return nil, "restarting" end
  local pid, why = start_one(st, c)
  if pid == false then return nil, why end
  if pid == nil then return nil, "ignore" end
  return pid
end

function requests.delete_child(st, r)
  if st.strategy == "dynamic" then return nil, "dynamic" end
  local c = find(st, r.id)
  if not c then return nil, "not_found" end
  if c.pid then return nil, "running" end
  if c.restarting then return nil, "restarting" end
  remove(st, c)
  return true
end

function requests.which_children(st)
  local out = {}
  for i, c in ipairs(st.children) do
    out[i] = { id = c.id, pid = c.pid, type = c.type, restart = c.restart }
  end
  return out
end

function requests.count_children(st)
  local n = { specs = #st.children, active = 0, workers = 0, supervisors = 0 }
  if st.strategy == "dynamic" then n.specs = 1 end
  for _, c in ipairs(st.children) do
    if c.pid then n.active = n.active + 1 end
    if c.type == "supervisor" then n.supervisors = n.supervisors + 1 else n.workers = n.workers + 1 end
  end
  return n
end

-- Answers a call with the handler's results. A supervisor never dies of its own answer: one that
-- cannot be sent (the checks of ids and start reasons leave none) becomes nil and why, and a
-- `from` that is not a call's (a CALL message made by hand) drops it with a line on stderr.
local function answer(from, ...)
  local ok, why = pcall(reply, from, { ... })
  if ok then return end
  local instead = "supervisor: the answer cannot be sent (" .. tostring(why) .. ")"
  ok = pcall(reply, from, { nil, instead })
  if not ok then
    io.stderr:write("smarm.supervisor: ", tostring(self()), " dropped the answer to a CALL whose ",
      "from is not a call's\n")
  end
end

-- The supervisor's loop: never returns.
local function supervise(st)
  local by_pid, parent = st.by_pid, st.parent
  while true do
    local m = receive()
    local kind = type(m) == "table" and m.smarm
    if kind == "EXIT" then
      local c = by_pid[m.pid]
      if c then
        child_ended(st, c, m.reason)
      elseif parent and m.pid == parent then
        shut_down(st, m.reason)
      end
    elseif kind == "CALL" then
      local r = m.request
      local handler = type(r) == "table" and requests[r.op]
      if handler then
        answer(m.from, handler(st, r))
      else
        answer(m.from, nil, "supervisor: unknown request")
      end
    elseif kind == "SUP_RETRY" then
      local c = find(st, m.child, "key")
      if c and c.restarting and c.pid == nil then
        c.restarting = nil
        restart(st, c)
      end
    elseif kind == "STOP" then
      shut_down(st, m.reason)
    else
      io.stderr:write("smarm.supervisor: ", tostring(self()), " dropped an unexpected ",
        type(m) == "table" and ("message " .. tostring(m.smarm or "table")) or type(m), "\n")
    end
  end
end

-- The supervisor's body. Public only so that spawn_opt can start it on another scheduler as
-- "smarm.supervisor._enter".
function supervisor._enter(boot)
  smarm.trap_exit(true)
  local spec = boot.spec
  local st = { strategy = spec.strategy, intensity = spec.intensity, period = spec.period,
    children = {}, by_pid = {}, restarts = {}, first = 1, last = 0 }
  if spec.strategy == "dynamic" then
    st.template = spec.children[1]
  else
    for _, c in ipairs(spec.children) do
      st.children[#st.children + 1] = keyed(c)
      local pid, why = start_one(st, c)
      if pid == false then
        stop_from(st, 1)
        if boot.linked then unlink(boot.starter) end
        exit({ shutdown = { failed_to_start_child = c.id, reason = why } })
      end
      if pid == nil and c.restart == "temporary" then st.children[#st.children] = nil end
    end
  end
  if boot.linked then st.parent = boot.starter end
  send(boot.starter, { smarm = "STARTED", ref = boot.ref })
  return supervise(st)
end
local enter = supervisor._enter

-- supervisor.start(spec) -> pid | nil, reason. See the top of the file.
function supervisor.start(spec)
  local checked = check_spec(spec, 2)
  local ref = smarm.ref()
  local boot = { starter = self(), ref = ref, spec = checked, linked = checked.link }
  local ok, pid, mref = pcall(smarm.spawn_opt,
    { on = checked.on, link = checked.link, name = checked.name, monitor = true },
    checked.on ~= nil and "smarm.supervisor._enter" or enter, boot)
  if not ok then
    if type(pid) == "string" and pid:find("the name '.*' is taken") then
      return nil, string.format("supervisor.start: the name '%s' is taken", checked.name)
    end
    local option, why = smarm._spawn_failure(pid, "supervisor.start") -- as the spec's
    if option then error("supervisor.start: spec." .. option, 2) end
    error(why, 2)
  end
  local m = receive(function(x) return type(x) == "table" and (x.ref == ref or x.ref == mref) end)
  if m.smarm == "STARTED" then
    smarm.demonitor(mref, "flush")
    return pid
  end
  local reason = m.reason
  if type(reason) == "table" and type(reason.shutdown) == "table"
    and reason.shutdown.failed_to_start_child ~= nil then
    return nil, reason.shutdown
  end
  return nil, reason
end

-- (a name too: one of 256 bytes would raise at smarm.whereis or smarm.call, in their words)
local function check_sup(sup, fn)
  local bad = not is_pid(sup) and smarm._target_fault(sup)
  if bad then error(string.format("bad argument #1 to '%s' (%s)", fn, bad), 3) end
end

local function check_timeout(timeout, n, fn)
  if timeout ~= nil and (type(timeout) ~= "number" or timeout < 0 or timeout ~= timeout) then
    error(string.format("bad argument #%d to '%s' (timeout in seconds expected, got %s)", n, fn,
      type(timeout) == "number" and tostring(timeout) or type(timeout)), 3)
  end
end

-- A request to a running supervisor from public function `fn`: its answers, or nil and the
-- call's failure. smarm.call's errors are raised at the caller of fn, in fn's words; fn must not
-- tail-call this (a tail call would take its level away).
local function request(sup, r, timeout, fn, level)
  level = level or 3 -- the caller of fn, which called this
  local ok, answers, why = pcall(smarm.call, sup, r, timeout or FOREVER)
  if not ok then
    if answers == "smarm.call: an actor cannot call itself" then
      error(string.format("supervisor.%s: calling_self (a supervisor cannot call itself)", fn), level)
    end
    if type(answers) == "string" then -- a request that cannot be sent names the caller's field
      local own = "supervisor." .. fn .. ": "
      answers = answers:gsub("^request%.extra", own .. "extra_args"):gsub("^request%.", own)
        :gsub("^bad argument (#%d+) to 'call' %(", "bad argument %1 to '" .. fn .. "' (")
        :gsub("^smarm%.call: ", own)
    end
    error(answers, level)
  end
  if answers == nil then return nil, why end
  return unpack(answers, 1, 2)
end

-- supervisor.start_child(sup, spec_or_extra_args [, timeout]) -> pid | nil, reason.
function supervisor.start_child(sup, what, timeout)
  check_sup(sup, "start_child")
  check_timeout(timeout, 3, "start_child")
  if type(what) ~= "table" then
    error("bad argument #2 to 'start_child' (child spec or list of extra arguments expected, got " ..
      type(what) .. ")", 2)
  end
  local a, b
  if what.start == nil and what.id == nil then -- the dynamic strategy's extra arguments
    a, b = request(sup, { op = "start_child", extra = what }, timeout, "start_child")
    return a, b
  end
  local c = child_record(what, 2, "start_child", "spec")
  if c.id == nil then spec_error(2, "start_child", "spec.id is missing") end
  if type(c.start) ~= "function" then
    a, b = request(sup, { op = "start_child", spec = c }, timeout, "start_child")
    return a, b
  end
  -- A supervisor of this scheduler (this VM) takes the caller's own spec through `handoff`,
  -- and nothing of it is encoded (an upvalue that cannot be sent is no matter, as for a
  -- spawn here); one of another scheduler gets a copy. A name is resolved once, here, so that
  -- the request goes to the actor whose scheduler was looked at.
  local to = sup
  if type(sup) == "string" then
    to = smarm.whereis(sup)
    if to == nil then return nil, "noproc" end -- (as the request would answer)
  end
  if smarm._scheduler_of(to) ~= smarm.scheduler() then
    a, b = request(to, { op = "start_child", spec = c }, timeout, "start_child")
    return a, b
  end
  -- A table id is copied, as a request copies it (marks of smarm.tuple and map kept): the
  -- caller may change its own table later.
  if type(c.id) == "table" then c.id = as_reason({ c.id })[1] end
  if to == self() then -- (refused before an entry is made, which nothing would take)
    error("supervisor.start_child: calling_self (a supervisor cannot call itself)", 2)
  end
  handoffs = handoffs + 1
  if handoffs % 64 == 0 then -- entries of supervisors that ended before taking them
    for k, entry in pairs(handoff) do
      if not smarm.alive(entry.sup) then handoff[k] = nil end
    end
  end
  local key = smarm.ref()
  handoff[key] = { spec = c, sup = to }
  -- (level 4 through the pcall: the caller of start_child) a raise before the request went
  -- (parking refused here) leaves no entry either
  local ok
  ok, a, b = pcall(request, to, { op = "start_child", handoff = key }, timeout, "start_child", 4)
  if not ok or b ~= "timeout" then handoff[key] = nil end -- (taken already, or never to be)
  if not ok then error(a, 0) end
  return a, b
end

local function by_id(op)
  return function(sup, id, timeout)
    check_sup(sup, op)
    if id == nil then error(string.format("bad argument #2 to '%s' (child id expected, got nil)", op), 2) end
    check_timeout(timeout, 3, op)
    local a, b = request(sup, { op = op, id = id }, timeout, op)
    return a, b
  end
end

supervisor.terminate_child = by_id("terminate_child")
supervisor.restart_child = by_id("restart_child")
supervisor.delete_child = by_id("delete_child")

function supervisor.which_children(sup, timeout)
  check_sup(sup, "which_children")
  check_timeout(timeout, 2, "which_children")
  local list, why = request(sup, { op = "which_children" }, timeout, "which_children")
  return list, why
end

function supervisor.count_children(sup, timeout)
  check_sup(sup, "count_children")
  check_timeout(timeout, 2, "count_children")
  local counts, why = request(sup, { op = "count_children" }, timeout, "count_children")
  return counts, why
end

-- supervisor.stop(sup [, reason [, timeout]]) -> true | nil, "noproc" | "timeout" | its reason:
-- stops every child, then the supervisor, and returns once it has ended. The default reason is
-- "normal", as Erlang's supervisor:stop/1 (gen:stop): the supervisor's linked parent, which is
-- usually the caller, lives on.
function supervisor.stop(sup, reason, timeout)
  check_sup(sup, "stop")
  check_timeout(timeout, 3, "stop")
  if reason == nil then reason = "normal" end
  local ok, why = require("smarm.server")._stop(sup, reason, timeout, "supervisor.stop", 3)
  return ok, why -- not a tail call, so that level 3 is the caller's
end

return supervisor
