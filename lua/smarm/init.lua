-- smarm: actors for LuaJIT on a C runtime of stackful actors and shared-nothing schedulers.
-- The functions live in the C module smarm.core (src/lua/lsmarm.c); docs/api.md documents each.
local core = require("smarm.core")

return core
