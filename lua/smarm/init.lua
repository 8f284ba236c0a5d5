-- smarm: actors for LuaJIT on a C runtime of stackful actors and shared-nothing schedulers.
-- The functions live in the C module smarm.core (src/lua/lsmarm.c); docs/api.md documents each.

-- A LuaJIT that lacks what smarm needs (lua/smarm/luajit_check.lua) is refused before the binding
-- is loaded into it. Where smarm.core is preloaded the check is done: the smarm executable carries
-- the LuaJIT its build checked (cmake/luajit.cmake), and a scheduler's VM is of the process whose
-- first VM checked it.
if package.preload["smarm.core"] == nil then
  local refusal = require("smarm.luajit_check").message()
  if refusal then error(refusal, 0) end
end

local modname = ... -- "smarm", as require loads this file
local core = require("smarm.core")

-- require that is safe when a module's loader parks (design rule 5). Plain require marks a
-- module as loading while its top level runs; if that top level parks (receive, sleep, yield)
-- and another actor of the same VM requires the module meanwhile, plain require fails with
-- "loop or previous error loading module". Here the second requirer waits for the first
-- loader instead, and both get the module. Outside actors and without parking it is plain
-- require. One table per VM: each scheduler's VM loads its own copy of this module.
local plain_require = require
local loaded = core._loaded
local loaders = {} -- module name -> pid of the actor whose loader runs
local waiters = {} -- pid of an actor waiting for a loader -> the name of that loader's module
local waiter_count, sweep_at = 0, 64 -- entries in waiters; the count at which dead ones are swept

local function in_actor()
  return core.is_pid(select(2, pcall(core.self)))
end

-- _need_actor(fname, level): raises "smarm.<fname>: not inside an actor (call it from
-- smarm.run)" at `level` (as for the caller of the function asking) when not called from an
-- actor: the words of the C functions, for the Lua ones that would otherwise fail deeper down,
-- naming another function at a line of their own.
function core._need_actor(fname, level)
  if not in_actor() then
    error("smarm." .. fname .. ": not inside an actor (call it from smarm.run)", level + 1)
  end
end

-- What plain require puts in package.loaded[name] while name's loader runs (LuaJIT: a special
-- number; Lua 5.1: a light userdata), read off a loader of our own rather than assumed.
local LOADING
package.preload["smarm.loading-mark"] = function(name) LOADING = package.loaded[name] end
plain_require("smarm.loading-mark")
package.preload["smarm.loading-mark"], package.loaded["smarm.loading-mark"] = nil, nil

-- A loader that ended without finishing (stopped by the end of its run, or smarm.exit in a
-- module's top level) leaves that mark behind: take it away, so the next require loads the
-- module afresh instead of failing with "loop or previous error" or waiting forever.
local function forget_loader(name)
  loaders[name] = nil
  if package.loaded[name] == LOADING then package.loaded[name] = nil end
end

-- After a run every actor is gone, loaders too (only the caller's VM outlives a run).
core._after_run(function()
  for name in pairs(loaders) do forget_loader(name) end
  for pid in pairs(waiters) do waiters[pid] = nil end
  waiter_count, sweep_at = 0, 64
end)

local function remove_waiter(pid)
  if waiters[pid] ~= nil then
    waiters[pid] = nil
    waiter_count = waiter_count - 1
  end
end

-- An actor killed while it waited leaves its entry (no Lua code of it runs again): such entries
-- are swept when the table has doubled since the last sweep, so a long run that kills waiters
-- does not grow it for good. Every waiter of this VM is an actor of its scheduler: alive() asks
-- no one.
local function add_waiter(pid, name)
  if waiters[pid] == nil then waiter_count = waiter_count + 1 end
  waiters[pid] = name
  if waiter_count >= sweep_at then
    for other in pairs(waiters) do
      if not core.alive(other) then remove_waiter(other) end
    end
    sweep_at = 2 * waiter_count + 64
  end
end

-- Whether `me` waiting for the loader of `name` would close a cycle of waits: that loader
-- waits, directly or through a chain of loaders, for a module whose loader is `me`. Each would
-- wait for the other for good; in one actor plain require raises for the same cycle. Every
-- loader and waiter of this VM is an actor of its scheduler, so the walk is local. A waiter
-- that was killed while it waited leaves its entry behind: a dead actor ends the chain. A chain
-- that loops without `me` (entries gone stale as loaders came and went) is cut by a bound
-- rather than by a set of the actors seen, so the walk allocates nothing.
local function closes_cycle(me, name)
  local who = loaders[name]
  for _ = 1, 256 do -- a chain of waits longer than that is none a program makes
    if who == nil then return false end
    if who == me then return true end
    local wanted = waiters[who]
    if wanted == nil then return false end
    if not core.alive(who) then
      remove_waiter(who)
      return false
    end
    who = loaders[wanted]
  end
  return false
end

-- Waits while `loader` is the loader of `name` (its top level parked), or until it has ended.
local function wait_for_loader(name, loader)
  local waited = 0
  while loaders[name] == loader do
    if not core.alive(loader) then
      forget_loader(name)
      return
    end
    if waited < 100 then core.yield() else core.sleep(0.001) end
    waited = waited + 1
  end
end

local function guarded_require(name)
  local loader = loaders[name]
  local me = loader ~= nil and in_actor() and core.self()
  if me and loader ~= me then
    -- A wait that cannot park (in a __gc finalizer) raises here, before the cycle's check,
    -- which must see every other waiter's entry (nothing may yield between the check and the
    -- entry).
    local can, why = pcall(core.yield)
    if not can then error(why, 0) end
    if loaders[name] ~= loader then return guarded_require(name) end -- done while we yielded
    if closes_cycle(me, name) then -- plain require's own words for a cycle, at the caller
      error(string.format("loop or previous error loading module '%s'", name), 2)
    end
    add_waiter(me, name)
    local waited, err = pcall(wait_for_loader, name, loader)
    -- whatever ended the wait: a raise (out of memory for the sleep's timer, a debug hook's
    -- error) that the caller catches must not leave an entry that makes a false cycle later
    remove_waiter(me)
    if not waited then error(err, 0) end
    return guarded_require(name) -- loaded, failed, loading by another actor, or ours to load
  end
  -- A module loaded here is recorded as require returns it (core._loaded): the functions it
  -- holds then are the ones a message may send by name (docs/api.md, "Functions in messages").
  if package.loaded[name] ~= nil then return plain_require(name) end
  if not in_actor() then return loaded(name, plain_require(name)) end
  loaders[name] = core.self()
  local ok, result = pcall(plain_require, name)
  loaders[name] = nil
  if not ok then error(result, 0) end
  return loaded(name, result)
end

_G.require = guarded_require -- luacheck: ignore (the point is to replace the global)
core.require = guarded_require -- so that a function holding it travels as smarm.require

-- Faults (docs/api.md): the Erlang-shaped sugar over the C functions of lfaults.c.
local exit_self, exit_signal = core.exit, core._exit_signal

-- exit([reason]) ends this actor; exit(pid or name, reason) sends an exit signal.
function core.exit(...)
  if select("#", ...) >= 2 then return exit_signal(...) end
  return exit_self(...)
end

-- _error_text(e) -> the text of an error value as the runtime's crash reports give it
-- (lsmarm.c, add_traceback): a string or number itself, the result of its __tostring (called
-- protected: a __tostring that raises or gives no string is said so), else its type.
function core._error_text(e)
  local t = type(e)
  if t == "string" or t == "number" then return tostring(e) end
  local mt = debug.getmetatable(e)
  local to_text = type(mt) == "table" and rawget(mt, "__tostring")
  if not to_text then return "(error object is a " .. t .. " value)" end
  local ok, text = pcall(to_text, e)
  if ok and type(text) == "string" then return text end
  return string.format("(error object is a %s value: its __tostring failed: %s)", t,
    not ok and type(text) == "string" and text or "it did not give a string")
end
local error_text = core._error_text

-- _same_data(a, b) -> whether a and b are the same data, as Erlang compares terms: a value
-- that came back in a message is a copy of the one sent. Equal values (raw: no __eq of the
-- user's runs), userdata equal by smarm's own __eq (binaries, reply handles), or tables with
-- the same keys holding the same data. Keys are compared as values, so a table whose tables
-- are keys of its tables, or that holds NaN, equals no copy of itself. `seen` maps a table
-- being compared to the set of tables it is compared with, so that cycles end. Used by
-- smarm.supervisor (child ids) and smarm.server (a stop's reason).
local function same_data(a, b, seen)
  if rawequal(a, b) then return true end
  if type(a) == "userdata" and type(b) == "userdata" then return a == b end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  seen = seen or {}
  local partners = seen[a]
  if partners == nil then
    partners = {}
    seen[a] = partners
  elseif partners[b] then
    return true
  end
  partners[b] = true
  for k, v in pairs(a) do
    if not same_data(v, rawget(b, k), seen) then return false end
  end
  for k in pairs(b) do
    if rawget(a, k) == nil then return false end
  end
  return true
end
core._same_data = function(a, b) return same_data(a, b) end

-- _spawn_failure(err, who) -> option | nil, err: spawn_opt's error, raised in a pcall by a
-- library function `who` ("server.start") that spawns for its caller, in who's words: the
-- text after "opts." of a bad option ("on must be ..."), for who to name as its own argument;
-- else the error with spawn_opt's name and its argument's path given to who.
function core._spawn_failure(err, who)
  if type(err) ~= "string" then return nil, err end
  local option = err:match("^bad argument #1 to '%?' %(opts%.(.*)%)$")
  if option then return option end
  return nil, (err:gsub("^argument%[1%]%.", who .. ": "):gsub("^smarm%.spawn_opt: ", who .. ": "))
end

-- run(fn [, opts]): opts.on_crash = f replaces the printing of crash reports with f(report)
-- (report = { pid =, name =, reason = }), called in an actor of scheduler 1 in the caller's VM,
-- one report at a time. An error in f is printed as the runtime prints a crash (its text, its
-- __tostring honoured, and the traceback), and f goes on with the next report. Each call is an
-- actor of its own, which the reporter waits for: an f that ends its actor (smarm.exit, a kill)
-- ends that call only (when f ran in the reporter itself, every later report was lost). The
-- error is printed by that actor itself: in the DOWN it would be a copy, its metatable gone.
local run = core.run
core._raw_run = run -- (the -n handler of main.c tells an error smarm.run raised by it)
function core.run(fn, opts)
  if type(fn) ~= "function" then -- (on_crash's run below starts the runtime before it calls fn)
    error("bad argument #1 to 'run' (function expected, got " .. type(fn) .. ")", 2)
  end
  local on_crash = type(opts) == "table" and opts.on_crash
  if not on_crash then return run(fn, opts) end
  if type(on_crash) ~= "function" then
    error("bad argument #2 to 'run' (opts.on_crash must be a function)", 2)
  end
  local function crash_text(e) -- its traceback ends at on_crash, as an actor's ends at its body
    local traceback = debug.traceback("", 2):sub(2)
    traceback = traceback:match("^(.*)\n\t%[C%]: in function 'xpcall'") or traceback
    return error_text(e) .. "\n" .. traceback
  end
  local function report(r)
    local ok, text = xpcall(on_crash, crash_text, r)
    if not ok then io.stderr:write("smarm: on_crash: ", text, "\n") end
  end
  return run(function(...)
    -- (no mailbox bound: opts.max_mailbox would make a burst of crashes kill the reporter)
    core._set_crash_reporter(core.spawn_opt({ max_mailbox = 2 ^ 40 }, function()
      while true do
        local _, ref = core.spawn_monitor(report, core.receive())
        core.receive(function(m)
          return type(m) == "table" and m.smarm == "DOWN" and m.ref == ref
        end)
      end
    end))
    return fn(...)
  end, opts)
end

-- demonitor(ref [, "flush"]) -> whether the monitor was active; "flush" also drops its DOWN
-- if it already arrived (from the core's mailbox and from the messages a receive set aside).
local demonitor = core._demonitor
function core.demonitor(ref, opt)
  -- checked here: raised by the C function, an error's position would be this file's
  if not core.is_ref(ref) then
    error(string.format("bad argument #1 to 'demonitor' (ref expected, got %s)", type(ref)), 2)
  end
  if opt ~= nil and opt ~= "flush" then
    error("bad argument #2 to 'demonitor' (\"flush\" expected)", 2)
  end
  local was, flush = demonitor(ref, opt)
  if flush then core._flush_down(ref) end
  return was
end

-- A call to a process of another node speaks gen_server's protocol (docs/api.md, "smarm.node"):
-- {'$gen_call', {Self, Ref}, Request} goes, and the answer is the message {Ref, Reply}. smarm.call
-- (C) hands such targets here, checked (a target of this node's own name it calls itself).
-- (smarm.reply answers a `from` that is such a {Pid, Tag} tuple in C.)
local term_type, tuple = core.term.type, core.tuple
local GEN_CALL = core.atom("$gen_call")

-- Raises an error of the monitor or send below in smarm.call's words, at the caller of
-- smarm.call (level 4: this function, the remote call, smarm.call in C, its caller):
-- "smarm.monitor: this runtime is not a node" at a line of this file named neither the function
-- nor the place. The target is argument 1 of all three.
local function as_call_error(err)
  if type(err) == "string" then
    err = err:gsub("^smarm%.monitor: ", "smarm.call: "):gsub("^smarm%.send: ", "smarm.call: ")
      :gsub("^bad argument #1 to '%a+'", "bad argument #1 to 'call'")
      :gsub("^message%[3%]", "request")
  end
  error(err, 4)
end

core._set_remote_call(function(to, request, timeout)
  -- gen_server's way: the monitor's ref is the call's tag, and its DOWN ends the wait
  local monitored, ref = pcall(core.monitor, to)
  if not monitored then as_call_error(ref) end
  -- n = 3: a nil request is the atom nil, not a missing element (a 2-tuple is no call)
  local sent, err = pcall(core.send, to, tuple({ GEN_CALL, tuple({ core.self(), ref }), request,
    n = 3 }))
  if not sent then
    core.demonitor(ref, "flush")
    as_call_error(err)
  end
  local answer = core.receive(function(m)
    return term_type(m) == "tuple" and m[1] == ref
      or type(m) == "table" and m.smarm == "DOWN" and m.ref == ref
  end, timeout == nil and 5 or timeout)
  core.demonitor(ref, "flush")
  if answer == nil then return nil, "timeout" end
  if answer.smarm == "DOWN" then return nil, answer.reason end
  return answer[2]
end)

-- processes() -> { pid, ... } and info(pid [, keys]) -> table | nil (docs/api.md). Each
-- scheduler answers for its own actors (linfo.c); another scheduler is asked by a call to an
-- actor spawned there (_answer), so nothing is read across threads, and an answer that comes
-- after the asker gave up is dropped with the call.
local local_processes, local_info = core._local_processes, core._local_info

function core._answer()
  local req = core.receive(function(m) return type(m) == "table" and m.smarm == "CALL" end,
    core._request_timeout())
  if not req then return end -- spawned too late: its asker gave up before calling
  local value
  if req.request.what == "processes" then
    value = {}
    for _, p in ipairs(local_processes()) do
      if p ~= core.self() then value[#value + 1] = p end -- not this answering actor
    end
  elseif req.request.what == "actors" then
    value = {}
    for _, p in ipairs(local_processes()) do
      local t = p ~= core.self() and local_info(p, req.request.keys)
      if t then value[#value + 1] = t end
    end
  else
    value = local_info(req.request.pid, req.request.keys)
  end
  core.reply(req.from, value)
end

-- Asks scheduler k (what: "processes" or "info"), at most opts.request_timeout as any request to
-- another scheduler: the answering actor may be queued behind one stuck in C code.
local function ask(k, what, pid, keys)
  local no_answer = "smarm." .. what .. ": scheduler " .. k .. " did not answer within "
    .. "opts.request_timeout (it is stuck in C code, a __gc finalizer or an actor with no time slice)"
  local spawned, answerer = pcall(core.spawn_on, k, "smarm._answer")
  if not spawned then -- in the asker's words: "smarm.info: cannot park inside a __gc finalizer"
    local why = tostring(answerer)
    error(why:find("did not answer", 1, true) and no_answer
      or (why:gsub("^smarm%.spawn_on: ", "smarm." .. what .. ": ")), 3)
  end
  local value, err = core.call(answerer, { what = what, pid = pid, keys = keys },
    core._request_timeout())
  if err == "timeout" then
    core.exit(answerer, "kill") -- it would answer nobody
    error(no_answer, 3)
  elseif err then -- it ended before answering (out of memory)
    error("smarm." .. what .. ": scheduler " .. k .. " could not answer (" .. tostring(
      type(err) == "table" and err.error or err) .. ")", 3)
  end
  return value
end

function core.processes()
  core._need_actor("processes", 2)
  local all, here = {}, core.scheduler()
  for k = 1, core.schedulers() do
    local some = k == here and local_processes() or ask(k, "processes")
    for _, p in ipairs(some) do all[#all + 1] = p end
  end
  return all
end

-- _actors(keys [, missing]) -> { info, ... }: smarm.info(pid, keys) of every live actor (with
-- its pid), one request per scheduler rather than one per actor (smarm.top's sample). A
-- snapshot, as processes() is. With `missing` (a table), a scheduler that does not answer
-- within opts.request_timeout is left out, its error at missing[k], instead of raising.
function core._actors(keys, missing)
  local all, here = {}, core.scheduler()
  for k = 1, core.schedulers() do
    local some
    if k == here then
      some = {}
      for _, p in ipairs(local_processes()) do
        local t = local_info(p, keys)
        if t then some[#some + 1] = t end
      end
    elseif missing then
      local answered, got = pcall(ask, k, "actors", nil, keys)
      if answered then
        some = got
      elseif tostring(got):find("did not answer", 1, true) then
        some, missing[k] = {}, got
      else
        error(got, 0)
      end
    else
      some = ask(k, "actors", nil, keys)
    end
    for _, t in ipairs(some) do all[#all + 1] = t end
  end
  return all
end

function core.info(pid, keys)
  if not core.is_pid(pid) then
    error("bad argument #1 to 'info' (pid expected, got " .. type(pid) .. ")", 2)
  end
  if keys ~= nil and type(keys) ~= "string" and type(keys) ~= "table" then
    error("bad argument #2 to 'info' (key or list of keys expected, got " .. type(keys) .. ")", 2)
  end
  core._need_actor("info", 2)
  local k = core._scheduler_of(pid) -- nil: no scheduler of this run has it (nil too)
  if k == false then error("bad argument #1 to 'info' (" .. core._target_fault(pid) .. ")", 2) end
  local t
  -- the keys go along: the owner skips the costly ones nobody asked for (a traceback...)
  if k == core.scheduler() then
    t = local_info(pid, keys)
  elseif k then
    t = ask(k, "info", pid, keys)
  end
  if t == nil or keys == nil then return t end
  local picked = {}
  for _, key in ipairs(type(keys) == "string" and { keys } or keys) do picked[key] = t[key] end
  return picked
end

-- smarm.console and smarm.top (lua/smarm/console.lua, top.lua), loaded on first use: they
-- require smarm itself.
local lazy = { console = "smarm.console", top = "smarm.top" }
setmetatable(core, {
  __index = function(t, key)
    local name = lazy[key]
    if not name then return nil end
    local m = guarded_require(name)
    if key == "top" then m = m.run end
    rawset(t, key, m)
    return m
  end,
})

-- The module as require returns it, the functions above included (smarm.require, smarm.exit,
-- ...): those a message may send by name. smarm.core's loader recorded the modules loaded
-- before it (its tables smarm.fs, smarm.tcp, ... among them).
core._loaded("smarm.core", core)
if type(modname) == "string" then core._loaded(modname, core) end

return core
