/*
** Parking from Lua (see lpark.h). The reasons to refuse come from ljx.c, the one file that reads
** LuaJIT's internals.
*/
#include "lpark.h"

#include "ljx.h"
#include "smarm.h"

#include <lauxlib.h>

void *lpark_actor(lua_State *L, const char *fname)
{
  void *la = smarm_actor_data();
  if (!la)
    luaL_error(L, "smarm.%s: not inside an actor (call it from smarm.run)", fname);
  return la;
}

void lpark_check(lua_State *L, const char *fname)
{
  const char *why = ljx_cannot_park(L);
  if (why)
    luaL_error(L, "smarm.%s: cannot park %s", fname, why);
  ljx_before_switch(L);
}

int64_t lsmarm_timeout_ns(lua_Number seconds)
{
  if (!(seconds >= 0) || seconds >= 1e9) /* NaN, negative, or beyond 31 years: no limit */
    return SMARM_FOREVER;
  return (int64_t)(seconds * 1e9);
}
