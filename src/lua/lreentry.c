/*
** Checked string.gsub and table.sort (see lreentry.h). The checked version is a C closure holding
** the original: it compares smarm_stack_headroom() with the reserve, then calls the original's C
** function directly on the same frame (both are plain lua_CFunctions of LuaJIT's library, not
** fast functions), so a call costs one more C call and no re-entry into the VM. Neither is
** compiled by LuaJIT's JIT (no recorder), so traces see no difference.
*/
#include "lreentry.h"

#include "smarm.h"

#include <lauxlib.h>

static int checked(lua_State *L)
{
  if (smarm_stack_headroom() < LREENTRY_RESERVE)
    return luaL_error(L, "stack overflow (%s nested too deeply for the actor's C stack)",
                      lua_tostring(L, lua_upvalueindex(2)));
  lua_CFunction original = lua_tocfunction(L, lua_upvalueindex(1));
  return original(L);
}

static void wrap(lua_State *L, const char *lib, const char *fn, const char *what)
{
  lua_getglobal(L, lib);
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  lua_getfield(L, -1, fn);
  if (!lua_iscfunction(L, -1) || lua_tocfunction(L, -1) == checked) { /* absent, or done */
    lua_pop(L, 2);
    return;
  }
  lua_pushstring(L, what);
  lua_pushcclosure(L, checked, 2);
  lua_setfield(L, -2, fn);
  lua_pop(L, 1);
}

void sm_lreentry_wrap(lua_State *L)
{
  wrap(L, "string", "gsub", "string.gsub callbacks");
  wrap(L, "table", "sort", "table.sort comparators");
}
