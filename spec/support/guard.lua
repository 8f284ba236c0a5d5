-- Hang guards for the specs, loaded with dofile("spec/support/guard.lua") (busted and
-- spec/support/runner.lua alike). A spec waits for events: a message, smarm.alive turning
-- false, a counter reaching its value; never a sleep standing in for one. Each wait still has a
-- limit, so that a bug fails the spec with a message instead of hanging the run. The limit only
-- guards against a hang: machines differ 10x in speed (sanitizers, valgrind, qemu, busy
-- neighbours), so it is long, and reaching it is always a failure, never an expected outcome.
-- guard.HANG is a number: it travels as an upvalue into smarm.spawn_on bodies, the functions
-- here do not (use smarm.receive(HANG) there).
local smarm = require("smarm")

local guard = { HANG = 120 } -- seconds

-- Whether the specs' executable runs under an emulator (SMARM_EXE "qemu-aarch64 -L ... smarm"):
-- many times slower, so that a spec may run fewer rounds there.
guard.emulated = (os.getenv("SMARM_EXE") or ""):find("^%S*qemu%S*%s") ~= nil
-- Whether each round of a spec's loop costs 10 to 15 times a release build's: under the emulator
-- or ThreadSanitizer. Such a spec runs fewer rounds there; the release, checking and ASan
-- variants run them all.
guard.slow = guard.emulated or os.getenv("SMARM_SANITIZER") == "tsan"

local function hung(what, how)
  error(string.format("%s: %s within %d s (a hang guard: something never happened)",
    what or "spec", how, guard.HANG), 3)
end

-- smarm.receive([match]) under the guard: the message, or raises "<what>: no message ...".
function guard.receive(what, match)
  local msg, err
  if match then
    msg, err = smarm.receive(match, guard.HANG)
  else
    msg, err = smarm.receive(guard.HANG)
  end
  if msg == nil and err == "timeout" then hung(what, "no message") end
  return msg
end

-- Polls pred() (sleeping `every` seconds, default 0.001, between tries) until it returns a true
-- value, which it returns; raises "<what>: still not so ..." past the guard.
function guard.wait(pred, what, every)
  local deadline = smarm.now() + guard.HANG
  while true do
    local v = pred()
    if v then return v end
    if smarm.now() > deadline then hung(what, "still not so") end
    smarm.sleep(every or 0.001)
  end
end

-- Waits until every scheduler of the run answers a request (smarm.processes asks each one);
-- raises any error but a timeout. A run's first request to another scheduler waits for that
-- scheduler's start, which a slow machine may take longer for than a short
-- opts.request_timeout: a spec whose requests must be answered within one calls this first
-- (a request that timed out is asked again).
function guard.started(what)
  guard.wait(function()
    local answered, err = pcall(smarm.processes)
    if not answered and not tostring(err):find("did not answer", 1, true) then error(err, 0) end
    return answered
  end, what or "every scheduler's first answer")
end

-- Waits until pid's actor has ended (it may be on any scheduler).
function guard.ended(pid, what)
  guard.wait(function() return not smarm.alive(pid) end, what or ("actor " .. tostring(pid)))
end

-- Monitors pid now (before whatever ends it is sent: the caller may be switched out between
-- two calls and the actor gone by the second); the function returned waits for the DOWN and
-- gives its reason.
function guard.watch(pid)
  local ref = smarm.monitor(pid)
  return function()
    return guard.receive("DOWN of " .. tostring(pid), function(m)
      return type(m) == "table" and m.smarm == "DOWN" and m.ref == ref
    end).reason
  end
end

-- smarm.run(fn, opts) under a watchdog: should the run still be going after guard.RUN_LIMIT
-- seconds (a bug left something waiting for good), a background shell prints
-- "<file:line>: smarm.run still running after N s ..." on stderr and ends the process with
-- SIGTERM, so the spec file fails with a message naming the run instead of holding the whole
-- suite until an outer timeout.
-- One shell serves the whole process, started when this file is first loaded: the specs load it
-- before their first run, so that its fork comes before any runtime's threads exist (a process
-- that forks after libuv's pool threads exist can leave the child stuck on a futex under
-- qemu-user). A run tells it through a file, "<serial> <file:line>" while the run lasts and empty
-- between runs; the shell counts the seconds the same line stays there. It ends within a second
-- of the process's end, and removes the file.
guard.RUN_LIMIT = 600 -- seconds: far beyond any run of the specs on a 10x slower machine

local WATCHDOG = "spec/support/guard.lua: watchdog" -- package.loaded's key: once per process

local function own_pid()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("*n")
  f:close()
  return pid
end

local function start_watchdog()
  local watchdog = { file = os.tmpname(), runs = 0 } -- os.tmpname creates it, empty
  local pid = own_pid()
  os.execute(string.format([[sh -c 'last=; n=0; while [ -e %s ] && kill -0 %d 2>/dev/null; do
    run=; read -r run <%s
    if [ -z "$run" ] || [ "$run" != "$last" ]; then last=$run; n=0
    elif [ $n -ge %d ]; then
      echo "${run#* }: smarm.run still running after %d s: ended by the watchdog" \
        "(spec/support/guard.lua)" >&2
      rm -f %s; kill -TERM %d; exit 0
    fi; sleep 1; n=$((n+1)); done; rm -f %s' </dev/null >/dev/null &]], watchdog.file, pid,
    watchdog.file, guard.RUN_LIMIT, guard.RUN_LIMIT, watchdog.file, pid, watchdog.file))
  return watchdog
end

local watchdog = package.loaded[WATCHDOG] or start_watchdog()
package.loaded[WATCHDOG] = watchdog

local function tell_watchdog(line)
  local f = assert(io.open(watchdog.file, "w"))
  f:write(line)
  f:close()
end

-- The run's main actor must return: one that died of an exit signal (a linked actor's crash, a
-- kill) makes smarm.run return nothing, which a spec that asserts inside its body would take
-- for a pass (a supervisor spec did, while its body never reached its assertions).
local RETURNED = "guard.run: the body returned"

function guard.run(fn, opts)
  local info = debug.getinfo(2, "Sl")
  local where = (info.short_src .. ":" .. info.currentline):gsub("[^%w%./_:%-]", "_")
  watchdog.runs = watchdog.runs + 1
  tell_watchdog(watchdog.runs .. " " .. where .. "\n")
  local function finish(ok, first, ...)
    tell_watchdog("")
    if not ok then error(first, 0) end
    if first ~= RETURNED then
      error(where .. ": the run's main actor ended without returning (an exit signal or a kill)", 0)
    end
    return ...
  end
  return finish(pcall(smarm.run, function(...) return RETURNED, fn(...) end, opts))
end

return guard
