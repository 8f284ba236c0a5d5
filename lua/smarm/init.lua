-- smarm: actors for LuaJIT on a C runtime of stackful actors and shared-nothing schedulers.
-- The functions live in the C module smarm.core (src/lua/lsmarm.c); docs/api.md documents each.
local core = require("smarm.core")

-- require that is safe when a module's loader parks (design rule 5). Plain require marks a
-- module as loading while its top level runs; if that top level parks (receive, sleep, yield)
-- and another actor of the same VM requires the module meanwhile, plain require fails with
-- "loop or previous error loading module". Here the second requirer waits for the first
-- loader instead, and both get the module. Outside actors and without parking it is plain
-- require. One table per VM: each scheduler's VM loads its own copy of this module.
local plain_require = require
local loaders = {} -- module name -> pid of the actor whose loader runs

local function in_actor()
  return core.is_pid(select(2, pcall(core.self)))
end

local function guarded_require(name)
  local loader = loaders[name]
  if loader ~= nil and in_actor() and loader ~= core.self() then
    local waited = 0
    while loaders[name] ~= nil do -- the first loader is parked: wait for it
      if waited < 100 then core.yield() else core.sleep(0.001) end
      waited = waited + 1
    end
    return plain_require(name)
  end
  if package.loaded[name] ~= nil or not in_actor() then
    return plain_require(name)
  end
  loaders[name] = core.self()
  local ok, result = pcall(plain_require, name)
  loaders[name] = nil
  if not ok then error(result, 0) end
  return result
end

_G.require = guarded_require -- luacheck: ignore (the point is to replace the global)

return core
