-- smarm.luajit_check: what smarm needs of the LuaJIT it runs on, checked in two places with this
-- one code: `require "smarm"` (lua/smarm/init.lua) before it loads the binding, and a build that
-- builds the binding (cmake/luajit-check.cmake runs it with that LuaJIT's interpreter). A LuaJIT
-- built by deps/luajit.sh has all of it:
--   1. the fix that restores cur_L when a C function raises after a stack switch (docs/design.md,
--      rule 4): without it that raise crashes the VM (Debian bookworm's LuaJIT 2.1.0-beta3 does);
--   2. LUAJIT_ENABLE_CHECKHOOK, with which compiled loops test the hook mask: without it a
--      compiled loop is never preempted and time slices do not hold (docs/design.md, "Compiled
--      code"). SMARM_LUAJIT_CHECKHOOK=0 in the environment accepts a LuaJIT without it, the one
--      `SMARM_LUAJIT_CHECKHOOK=0 deps/luajit.sh` builds for measuring what the check costs;
--   3. luaJIT_copyclosure, which smarm's patch adds (deps/patches/luajit-copy-closure.patch): a
--      spawn on the caller's scheduler and every decoded function copy a closure with it.
-- (The VM's internal headers, which the binding is compiled with, are checked by the build.)
local M = {}

-- LuaJIT 2.1's rolling releases are numbered by the Unix time of their last commit ("LuaJIT
-- 2.1.1737090214"). Upstream's cur_L fix is of 2023-09-21 (LuaJIT issue #1066, "Restore cur_L for
-- specific Lua/C API use case"); a release numbered from the next day on has it. Older 2.1
-- builds call themselves "2.1.0-beta3".
M.cur_l_fix_time = 1695340800 -- 2023-09-22 00:00 UTC

M.how_to_get_one = "Build the LuaJIT smarm pins with `deps/luajit.sh <dir>` (in smarm's source tree)"
  .. " and run on <dir>/luajit-release/bin/luajit (LuaRocks: `luarocks --lua-dir=<dir>/luajit-release make`)."

-- Whether compiled code tests the hook mask. The build leaves no mark but in the code it compiles,
-- so a numeric loop is compiled here and its trace searched for the load of the hook mask, the one
-- instruction of type u8 there (IRT_U8 = 16 in the low five bits of an instruction's type, the
-- numbering jit/dump.lua also relies on; the loop itself handles only numbers). nil when it
-- cannot tell: the JIT is off, a debug hook keeps it from recording, or jit.util is missing.
-- About half a millisecond, once a process.
local IRT_U8, IRT_TYPES = 16, 32

function M.checks_hooks()
  if not jit.status() then return nil end
  local has_util, util = pcall(require, "jit.util")
  if not (has_util and type(util.traceir) == "function") then return nil end
  local traces = {}
  local function on_trace(what, trace)
    if what == "stop" then traces[#traces + 1] = trace end
  end
  jit.attach(on_trace, "trace")
  -- a chunk of its own, so that it is compiled here whatever was compiled before
  local ok = pcall(loadstring("local x = 0 for i = 1, 1000 do x = x + i end return x"))
  jit.attach(on_trace) -- detach
  if not ok or #traces == 0 then return nil end
  for _, trace in ipairs(traces) do
    local info = util.traceinfo(trace)
    for ref = 1, info and info.nins or 0 do
      local _, ot = util.traceir(trace, ref)
      if ot and ot % IRT_TYPES == IRT_U8 then return true end
    end
  end
  return false
end

-- The list of what this LuaJIT lacks (empty when nothing).
-- Whether this LuaJIT has luaJIT_copyclosure (its interpreter and the smarm executable export
-- their C API). nil when it cannot tell: no FFI.
function M.copies_closures()
  local has_ffi, ffi = pcall(require, "ffi")
  if not has_ffi then return nil end
  pcall(ffi.cdef, "int luaJIT_copyclosure(void *L, int idx);")
  return (pcall(function() return ffi.C.luaJIT_copyclosure end))
end

function M.problems()
  if type(jit) ~= "table" or type(jit.version) ~= "string" then
    return { "smarm runs on LuaJIT 2.1, and this is " .. tostring(_VERSION) }
  end
  local problems = {}
  local release = jit.version:match("^LuaJIT 2%.1%.(%d+)$")
  if not release or tonumber(release) < M.cur_l_fix_time then
    problems[#problems + 1] = "it lacks the fix that restores cur_L when a C function raises after a stack switch"
      .. " (LuaJIT 2.1 from 2023-09-22 on has it: without it such a raise crashes the VM)"
  end
  if M.checks_hooks() == false and os.getenv("SMARM_LUAJIT_CHECKHOOK") ~= "0" then
    problems[#problems + 1] = "it is built without LUAJIT_ENABLE_CHECKHOOK, so compiled loops would never be"
      .. " preempted (SMARM_LUAJIT_CHECKHOOK=0 in the environment accepts that)"
  end
  if M.copies_closures() == false then
    problems[#problems + 1] = "it lacks luaJIT_copyclosure, which smarm's patch to LuaJIT adds"
      .. " (deps/patches/luajit-copy-closure.patch: spawns and decoded functions copy closures with it)"
  end
  return problems
end

-- The refusal, or nil when this LuaJIT has everything.
function M.message()
  local problems = M.problems()
  if #problems == 0 then return nil end
  local version = type(jit) == "table" and jit.version or tostring(_VERSION)
  return ("smarm cannot run on %s:\n  - %s\n%s"):format(version,
    table.concat(problems, "\n  - "), M.how_to_get_one)
end

return M
