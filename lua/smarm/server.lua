-- smarm.server: a gen_server-shaped behaviour (issue #11), written on the public API only
-- (require("smarm"); docs/api.md, `require("smarm.server")`). A server is one actor that runs a
-- loop: it takes the oldest message, hands it to one of the module's callbacks, and keeps the
-- state the callback returns. Invariant: the state lives only in that loop's locals, so a
-- callback sees the state the previous one returned and nothing else changes it.
--
-- What was decided where the issue is silent (Erlang's gen_server is followed unless said):
-- * The module is a table of callbacks, or the name of a Lua module that returns one (the
--   server's VM requires it). With opts.on the server runs in another scheduler's VM: a table
--   of callbacks moves there as functions in a message do (copied, upvalues and all; docs/api.md
--   "Functions in messages"), a name is required there.
-- * init is required (as in Erlang). handle_call / handle_cast missing: the server crashes when
--   such a message comes (Erlang's undef). handle_info missing: the message is dropped and a
--   line goes to stderr (Erlang logs it). terminate missing: nothing runs.
-- * Return conventions (values, not tuples): init -> "ok", state | "stop", reason | "ignore";
--   handle_call -> "reply", reply, state | "noreply", state | "stop", reason, reply, state |
--   "stop", reason, state (the two stop forms differ by how many values are returned: four or
--   three); handle_cast / handle_info -> "noreply", state | "stop", reason, state. A nil reason
--   means "normal". Anything else ends the server with the reason
--   `smarm.server: handle_call returned x (expected ...)` (Erlang's bad_return_value), after
--   terminate ran.
-- * From another node (Erlang's gen_server:call and cast, or smarm.call across nodes), the
--   server takes gen_server's own messages: {'$gen_call', {Pid, Tag}, Request} is a call whose
--   `from` is that {Pid, Tag} tuple (smarm.reply answers it as {Tag, Reply}), {'$gen_cast', Msg}
--   a cast.
-- * Wire shapes: a call is smarm.call's `{ smarm = "CALL", from =, request = }`; a cast is
--   `{ smarm = "CAST", msg = }`; a stop is `{ smarm = "STOP", reason = }`; an EXIT message from
--   the parent (the starter, when started with opts.link) stops the server; everything else,
--   other EXITs and DOWNs included, is info. The `smarm` field values CALL, CAST, STOP are
--   therefore reserved in messages sent to a server.
-- * start is synchronous (gen_server:start_link): it returns the pid once init returned "ok".
--   When init fails (raises, returns "stop" or something else) the server unlinks from its
--   starter before it ends, so the caller gets `nil, reason` back instead of dying of the link:
--   in Lua the return value is the error channel (Erlang would also send the linked caller an
--   exit signal). terminate does not run after a failed init (as in Erlang).
-- * Outcomes are return values, misuse raises (docs/style.md): server.call returns the reply,
--   or nil and "timeout" | "noproc" | the server's exit reason, exactly as smarm.call (which it
--   is); server.stop returns true, or nil and "noproc" | "timeout" | the reason the server ended
--   with when it is not the one asked for (its terminate raised). Calling or stopping oneself
--   raises "... calling_self".
-- * server.stop monitors the server, sends the stop message and waits for the DOWN, so when it
--   returns true the server has ended and its name is free (Erlang's proc_lib:stop). On timeout
--   it gives up and leaves the server as it is (still running its terminate, say): it does not
--   kill it, as gen_server:stop does not. The default timeout is none (Erlang's infinity).
-- * A callback that raises ends the server with `{ error = <the value>, traceback = <the
--   callback's traceback> }` (the shape of any actor's crash), after terminate ran with that
--   reason. The server ends by smarm.exit(reason) rather than by raising again, so that the
--   traceback is the callback's and not this loop's; the runtime then prints no crash report,
--   so the server prints its own (Erlang's "** Generic server terminating" report) for every
--   end but "normal", "shutdown" and `{ shutdown = ... }`.
-- * terminate runs when a callback asks to stop, a callback raises or returns a bad value,
--   server.stop is used, or the parent's exit signal arrives as a message (the server traps
--   exits: init called smarm.trap_exit(true)). A kill, or an exit signal to a server that does
--   not trap exits, ends it where it stands: no terminate (no Lua code can run then). If
--   terminate raises, the server ends with that error instead.
local smarm = require("smarm")

local server = {}

local receive, send, reply, call = smarm.receive, smarm.send, smarm.reply, smarm.call
local self, exit, is_pid = smarm.self, smarm.exit, smarm.is_pid
local xpcall, select, type, tostring = xpcall, select, type, tostring

local CALLBACKS = { "init", "handle_call", "handle_cast", "handle_info", "terminate" }

-- The message handler of every callback: the reason of a raise, shaped like an actor's crash.
local function crashed(e)
  return { error = e, traceback = debug.traceback("", 2):sub(2) }
end

-- The text of an error value, as the runtime's crash report shows it (a __tostring that raises
-- is said so: the report is still written, and the server ends with the reason it had).
local error_text = smarm._error_text

-- Why a callback table cannot serve, or nil.
local function check_module(m)
  for _, k in ipairs(CALLBACKS) do
    if m[k] ~= nil and type(m[k]) ~= "function" then
      return string.format("'%s' is a %s, not a function", k, type(m[k]))
    end
  end
  if m.init == nil then return "the module has no init" end
  return nil
end

local function no_handle_call()
  error("smarm.server: a call came and the module has no handle_call", 0)
end

local function no_handle_cast()
  error("smarm.server: a cast came and the module has no handle_cast", 0)
end

-- What a server is, for its reports: "<1.4.1>" plus its name and module where known.
local function describe(ctx)
  local text = tostring(self())
  if ctx.name then text = text .. " '" .. ctx.name .. "'" end
  if ctx.module_name then text = text .. " (" .. ctx.module_name .. ")" end
  return text
end

local function normal_end(reason)
  return reason == "normal" or reason == "shutdown"
    or (type(reason) == "table" and reason.shutdown ~= nil)
end

-- Ends the server with reason: terminate(reason, state) first (its raise replaces the reason),
-- then the reply of a "stop" with a reply, then the report of an abnormal end. Never returns.
local function finish(ctx, reason, state, from, has_reply, reply_value)
  if reason == nil then reason = "normal" end
  local terminate = ctx.module.terminate
  if terminate then
    local ok, err = xpcall(terminate, crashed, reason, state)
    if not ok then reason = err end
  end
  if has_reply then
    local sent, err = xpcall(reply, crashed, from, reply_value)
    if not sent then reason = err end
  end
  if not normal_end(reason) then
    local text
    if type(reason) == "table" and reason.traceback then
      text = error_text(reason.error) .. "\n" .. tostring(reason.traceback)
    else
      text = error_text(reason)
    end
    io.stderr:write("smarm.server: ", describe(ctx), " terminating: ", text, "\n")
  end
  exit(reason)
end

local function bad_return(callback, tag, expected)
  return string.format("smarm.server: %s returned %s (expected %s)", callback,
    type(tag) == "string" and string.format("%q", tag) or tostring(tag), expected)
end

-- After handle_call: ok and its results (or false and the crash reason).
local function call_returned(ctx, from, state, ok, tag, a, b, ...)
  if not ok then return finish(ctx, tag, state) end
  if tag == "reply" then
    local sent, err = xpcall(reply, crashed, from, a) -- an unsendable reply is the server's fault
    if not sent then return finish(ctx, err, b) end
    return b
  elseif tag == "noreply" then
    return a
  elseif tag == "stop" then
    if select("#", ...) > 0 then return finish(ctx, a, (...), from, true, b) end
    return finish(ctx, a, b)
  end
  return finish(ctx, bad_return("handle_call", tag,
    '"reply", "noreply" or "stop"'), state)
end

-- After handle_cast or handle_info.
local function noreply_returned(ctx, callback, state, ok, tag, a, b)
  if not ok then return finish(ctx, tag, state) end
  if tag == "noreply" then return a end
  if tag == "stop" then return finish(ctx, a, b) end
  return finish(ctx, bad_return(callback, tag, '"noreply" or "stop"'), state)
end

-- gen_server's own messages from another node: {'$gen_call', {Pid, Tag}, Request} and
-- {'$gen_cast', Msg}.
local term_type, GEN_CALL, GEN_CAST = smarm.term.type, smarm.atom("$gen_call"), smarm.atom("$gen_cast")
local function erlang_kind(m)
  if term_type(m) ~= "tuple" then return nil end
  if m[1] == GEN_CALL and term_type(m[2]) == "tuple" then return "GEN_CALL" end
  if m[1] == GEN_CAST then return "GEN_CAST" end
  return nil
end

-- The server's loop: never returns (it ends by finish).
local function serve(ctx, state)
  local module = ctx.module
  local handle_call = module.handle_call or no_handle_call
  local handle_cast = module.handle_cast or no_handle_cast
  local handle_info = module.handle_info
  local parent = ctx.parent
  while true do
    local m = receive()
    local kind = type(m) == "table" and (m.smarm or erlang_kind(m))
    if kind == "CALL" then
      local from = m.from
      state = call_returned(ctx, from, state, xpcall(handle_call, crashed, m.request, from, state))
    elseif kind == "GEN_CALL" then -- gen_server:call from another node: from is {Pid, Tag}
      state = call_returned(ctx, m[2], state, xpcall(handle_call, crashed, m[3], m[2], state))
    elseif kind == "GEN_CAST" then
      state = noreply_returned(ctx, "handle_cast", state, xpcall(handle_cast, crashed, m[2], state))
    elseif kind == "CAST" then
      state = noreply_returned(ctx, "handle_cast", state,
        xpcall(handle_cast, crashed, m.msg, state))
    elseif kind == "STOP" then
      finish(ctx, m.reason, state)
    elseif kind == "EXIT" and parent and m.pid == parent then
      finish(ctx, m.reason, state)
    elseif handle_info then
      state = noreply_returned(ctx, "handle_info", state, xpcall(handle_info, crashed, m, state))
    else
      io.stderr:write("smarm.server: ", describe(ctx), " has no handle_info: dropped a ",
        type(m) == "table" and ("message " .. tostring(m.smarm or "table")) or type(m), "\n")
    end
  end
end

-- init did not return "ok": the starter learns why from the DOWN of its monitor. The link to
-- the starter goes first, so that the starter gets its answer instead of an exit signal.
local function fail(boot, reason)
  if boot.linked then smarm.unlink(boot.starter) end
  exit(reason)
end

-- The server's body: loads the module, runs init, answers the starter, serves. Public so that,
-- spawned on another scheduler, it travels by its name (smarm.server._enter), not as a copy.
function server._enter(boot)
  local module = boot.module
  local ctx = { name = boot.name }
  if type(module) == "string" then
    ctx.module_name = module
    local ok, loaded = xpcall(require, crashed, module)
    if not ok then fail(boot, loaded) end
    if type(loaded) ~= "table" then
      fail(boot, string.format("smarm.server: module '%s' returned a %s, not a table of callbacks",
        module, type(loaded)))
    end
    local bad = check_module(loaded)
    if bad then fail(boot, string.format("smarm.server: module '%s': %s", module, bad)) end
    module = loaded
  end
  ctx.module = module
  local ok, tag, a = xpcall(module.init, crashed, boot.args)
  if not ok then fail(boot, tag) end
  if tag == "ignore" then
    send(boot.starter, { smarm = "IGNORED", ref = boot.ref })
    fail(boot, "normal")
  elseif tag == "stop" then
    fail(boot, a == nil and "normal" or a)
  elseif tag ~= "ok" then
    fail(boot, bad_return("init", tag, '"ok", "stop" or "ignore"'))
  end
  if boot.linked then ctx.parent = boot.starter end
  send(boot.starter, { smarm = "STARTED", ref = boot.ref })
  return serve(ctx, a)
end
local enter = server._enter

-- Raises "bad argument #n to 'fn' (msg)" at `level` from the caller of argerror (2: the caller
-- of the public function that calls argerror itself).
local function argerror(level, n, fn, msg)
  error(string.format("bad argument #%d to '%s' (%s)", n, fn, msg), level + 1)
end

-- (a name too: one of 256 bytes would raise at smarm.whereis, in its words)
local function check_target(to, fn)
  local bad = not is_pid(to) and smarm._target_fault(to)
  if bad then argerror(3, 1, fn, bad) end
end

local function check_timeout(timeout, n, fn)
  if timeout ~= nil and (type(timeout) ~= "number" or timeout < 0 or timeout ~= timeout) then
    argerror(3, n, fn, "timeout in seconds expected, got " ..
      (type(timeout) == "number" and tostring(timeout) or type(timeout))) -- ("1": a string)
  end
end

-- server.start(module, args [, opts]) -> pid | nil, reason. See the top of the file.
function server.start(module, args, opts)
  local mt = type(module)
  if mt ~= "table" and mt ~= "string" then
    argerror(2, 1, "start", "table of callbacks or module name expected, got " .. mt)
  end
  if opts == nil then
    opts = {}
  elseif type(opts) ~= "table" then
    argerror(2, 3, "start", "table expected, got " .. type(opts))
  end
  local on, name, link, timeout = opts.on, opts.name, opts.link, opts.timeout
  if mt == "table" then
    local bad = check_module(module)
    if bad then argerror(2, 1, "start", bad) end
  end
  if name ~= nil and type(name) ~= "string" then
    argerror(2, 3, "start", "opts.name must be a string, got " .. type(name))
  end
  if link ~= nil and type(link) ~= "boolean" then
    argerror(2, 3, "start", "opts.link must be a boolean, got " .. type(link))
  end
  check_timeout(timeout, 3, "start")

  local ref = smarm.ref()
  local boot = { starter = self(), ref = ref, module = module, args = args,
    linked = link == true, name = name }
  local ok, pid, mref = pcall(smarm.spawn_opt,
    { on = on, link = link, name = name, monitor = true },
    enter, boot)
  if not ok then
    if type(pid) == "string" and pid:find("the name '.*' is taken") then
      return nil, string.format("server.start: the name '%s' is taken", name)
    end
    local option, why = smarm._spawn_failure(pid, "server.start") -- in start's words
    if option then error("bad argument #3 to 'start' (opts." .. option .. ")", 2) end
    error(why, 2)
  end
  local function ours(m)
    return type(m) == "table" and (m.ref == ref or m.ref == mref)
  end
  local m = receive(ours, timeout)
  if m == nil then -- init ran too long: it is killed (unlinked first: the caller lives on)
    if link then smarm.unlink(pid) end
    smarm.kill(pid)
    repeat m = receive(ours) until m.ref == mref
    receive(function(late) return type(late) == "table" and late.ref == ref end, 0)
    return nil, "timeout"
  end
  if m.smarm == "STARTED" then
    smarm.demonitor(mref, "flush")
    return pid
  elseif m.smarm == "IGNORED" then
    repeat m = receive(ours) until m.ref == mref -- it ends at once: wait until it has
    return nil, "ignore"
  end
  return nil, m.reason -- the DOWN: init failed
end

-- server.call(to, request [, timeout]) -> reply | nil, reason: smarm.call, with calling_self.
-- smarm.call's errors are raised at the caller, naming server.call ('?' in a protected call).
function server.call(to, request, timeout)
  local ok, r, why = pcall(call, to, request, timeout)
  if ok then return r, why end
  if r == "smarm.call: an actor cannot call itself" then
    error("server.call: calling_self (a server cannot call itself)", 2)
  end
  if type(r) == "string" then
    r = r:gsub("^bad argument (#%d+) to '%?'", "bad argument %1 to 'call'")
      :gsub("^smarm%.call: ", "server.call: ")
      :gsub("^request", "server.call: request") -- (a request that cannot be sent)
  end
  error(r, 2)
end

-- server.cast(to, msg): never fails for a dead pid or a name nobody holds (gen_server:cast).
function server.cast(to, msg)
  check_target(to, "cast")
  if msg == nil then argerror(2, 2, "cast", "message expected, got nil") end
  if type(to) == "string" then
    to = smarm.whereis(to)
    if to == nil then return end
  end
  local ok, err = pcall(send, to, { smarm = "CAST", msg = msg })
  if not ok then -- a msg that cannot be sent, named as the caller's: "msg.f is a thread"
    error(type(err) == "string" and err:gsub("^message%.msg", "server.cast: msg") or err, 2)
  end
end

server.reply = reply

-- Sends the STOP request to `to` (a pid or name; arguments checked) and waits up to `timeout`
-- for its end: true, or nil and "noproc" | "timeout" | the reason it ended with. Errors name
-- `fname` and are raised at `level` (the caller of the public function). The STOP protocol is
-- shared with smarm.supervisor, whose stop calls this.
function server._stop(to, reason, timeout, fname, level)
  local pid = to
  if type(to) == "string" then
    pid = smarm.whereis(to)
    if pid == nil then return nil, "noproc" end
  end
  if pid == self() then error(fname .. ": calling_self (a server cannot stop itself so)", level) end
  local mref = smarm.monitor(pid)
  local sent, err = pcall(send, pid, { smarm = "STOP", reason = reason })
  if not sent then -- a reason that cannot be sent: leave nothing behind
    smarm.demonitor(mref, "flush")
    error(type(err) == "string" and err:gsub("^message%.reason", fname .. ": reason") or err, level)
  end
  local m = receive(function(d)
    return type(d) == "table" and d.smarm == "DOWN" and d.ref == mref
  end, timeout)
  if m == nil then
    smarm.demonitor(mref, "flush")
    return nil, "timeout"
  end
  if smarm._same_data(m.reason, reason) then return true end
  return nil, m.reason
end

-- server.stop(to [, reason [, timeout]]) -> true | nil, "noproc" | "timeout" | other reason.
function server.stop(to, reason, timeout)
  check_target(to, "stop")
  check_timeout(timeout, 3, "stop")
  if reason == nil then reason = "normal" end
  local ok, why = server._stop(to, reason, timeout, "server.stop", 3) -- no tail call: level 3
  return ok, why
end

return server
