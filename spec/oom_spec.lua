-- Out of memory is an error or a death, never an abort (issue 10, item 8; docs/api.md, "Out of
-- memory"). A child `smarm -n` runs under `ulimit -v` and spawns parked actors with large stacks
-- until spawn raises: the stacks soon cannot all be mapped, so the actors share slots and every
-- switch between them saves a parked stack to the heap, which then runs out too. Whatever runs
-- out first, spawn raises "not enough memory", an actor whose stack cannot be saved dies alone
-- with that reason (the main actor too: then run returns nothing), and the run ends: the child
-- exits 0, never on a signal. The core's own paths
-- are driven one by one, with injected failures, in spec/c/test_oom.c.
local smarm = require("smarm")

local exe = os.getenv("SMARM_EXE")
local WAIT = 60 -- a hang guard in seconds, never a time budget

local sh = dofile("spec/support/shell.lua").run -- stdout, stderr, exit status

-- The child: spawns until spawn raises, then lets go of a ballast (so that the report itself
-- finds memory), reports, and ends its run with every other actor still parked.
local CHILD = [[
local smarm = require("smarm")
local nsched, stack, where = tonumber(arg[1]), tonumber(arg[2]), arg[3]
local ballast = string.rep("x", 4 * 1024 * 1024)
local ok, err = smarm.run(function()
  local n, pids = 0, {}
  local _, e = pcall(function()
    while true do
      if where == "any" then -- made in another VM, from a message
        pids[#pids + 1] = smarm.spawn_on("any", function() smarm.receive() end)
      else
        pids[#pids + 1] = smarm.spawn(function() smarm.receive() end)
      end
      n = n + 1
      if n % 16 == 0 then smarm.yield() end -- they run, park, and are saved to make room
    end
  end)
  ballast = nil
  collectgarbage()
  io.write("spawn raised: ", tostring(e), "\n")
end, { schedulers = nsched, stack_size = stack })
io.write("run ended: ", tostring(ok), " ", tostring(err), "\n")
]]

describe("out of memory", function()
  it("is a reason like any other: 'not enough memory' travels as itself", function()
    smarm.run(function()
      local pid, ref = smarm.spawn_monitor(function() smarm.exit("not enough memory") end)
      local d = assert(smarm.receive(function(m)
        return type(m) == "table" and m.smarm == "DOWN" and m.ref == ref
      end, WAIT))
      assert.are.equal(pid, d.pid)
      assert.are.equal("not enough memory", d.reason)
    end, { schedulers = 1 })
  end)

  it("under ulimit -v: spawn raises, and the run still ends (every run, at every limit)", function()
    if not exe then return pending("SMARM_EXE is not set (./dev.sh test sets it)") end
    if os.getenv("SMARM_SANITIZER") or os.getenv("ASAN_OPTIONS") or os.getenv("TSAN_OPTIONS") then
      return pending("ulimit -v cannot hold a sanitizer's shadow memory")
    end
    if exe:find("%s") then -- a command line: an emulator, which reserves its own address space
      return pending("ulimit -v under an emulator (" .. exe .. ")")
    end
    local base = os.tmpname()
    local script = base .. ".lua"
    local f = assert(io.open(script, "w"))
    f:write(CHILD)
    f:close()
    local failures, spawn_raised = {}, {} -- per limit: the runs where spawn raised
    -- From just above what a run needs to start to well past it: where memory runs out first
    -- (spawn, a saved stack, the stop) moves with the limit.
    local configs = { { 1, "here" }, { 2, "here" }, { 2, "any" } } -- schedulers, where to spawn
    for _, mib in ipairs({ 64, 128, 256, 512 }) do
      for _, config in ipairs(configs) do
        local nsched, where = config[1], config[2]
        for run = 1, 4 do
          local out, err, status = sh(("ulimit -v %d && exec %s -n %s %d %d %s"):format(
            mib * 1024, exe, script, nsched, 8 * 1024 * 1024, where))
          -- the main actor is parked among the others: when its own stack is the one that
          -- cannot be saved, it dies with "not enough memory" and run returns nothing
          local raised = out:match("spawn raised: [^\n]*not enough memory\n") ~= nil
          local main_died = out == "run ended: nil nil\n"
          if raised then spawn_raised[mib] = (spawn_raised[mib] or 0) + 1 end
          local ok = status == 0
            and (raised or main_died)
            and out:match("run ended: ") ~= nil
            and not err:match("check failed")
          if not ok then
            failures[#failures + 1] = ("%d MiB, %d scheduler(s), spawn %s, run %d: status %s\n%s%s")
              :format(mib, nsched, where, run, tostring(status), out, err)
          end
        end
      end
    end
    os.remove(script)
    os.remove(base)
    assert.are.same({}, failures)
    for _, mib in ipairs({ 64, 128, 256, 512 }) do -- the main actor was not the one every time
      assert.is_true((spawn_raised[mib] or 0) > 0, mib .. " MiB: spawn never raised")
    end
  end)
end)
