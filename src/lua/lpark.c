/*
** Parking from Lua (see lpark.h). The reasons to refuse come from ljx.c, the one file that reads
** LuaJIT's internals.
*/
#include "lpark.h"

#include "ljx.h"
#include "lpreempt.h"
#include "smarm.h"

#include <lauxlib.h>

#include <stdio.h>
#include <stdlib.h>

void *sm_lpark_actor(lua_State *L, const char *fname)
{
  void *la = smarm_actor_data();
  if (!la)
    luaL_error(L, "smarm.%s: not inside an actor (call it from smarm.run)", fname);
  return la;
}

void sm_lpark_check(lua_State *L, const char *fname)
{
  const char *why = sm_ljx_cannot_park(L);
  if (why)
    luaL_error(L, "smarm.%s: cannot park %s", fname, why);
  sm_lpreempt_leave(L);
  sm_ljx_before_switch(L);
}

void sm_lpark_check_taking(lua_State *L, const char *fname)
{
  if (sm_ljx_in_finalizer(L))
    luaL_error(L, "smarm.%s: cannot take a message inside a __gc finalizer", fname);
}

int sm_lpark_can(lua_State *L) { return smarm_actor_data() && !sm_ljx_cannot_park(L); }

void sm_lpark_resumed(lua_State *L)
{
  sm_ljx_after_switch(L);
  sm_lpreempt_switched_in(L);
#ifdef LUA_USE_ASSERT
  if (!sm_ljx_is_current(L)) {
    fprintf(stderr, "smarm: after a switch, the VM's current state is not the resumed actor's "
                    "(design rule 4)\n");
    abort();
  }
#endif
}

/* What keeps a scheduler from answering: whatever holds its thread (a loop preempts itself
** unless the actor has no time slice; the watchdog's words). */
#define STUCK_WHY "(it is stuck in C code, a __gc finalizer or an actor with no time slice)"

int sm_lpark_no_answer(lua_State *L, const char *fname, int sched)
{
  if (sched < 0)
    return luaL_error(L, "smarm.%s: the scheduler asked did not answer within "
                         "opts.request_timeout " STUCK_WHY, fname);
  return luaL_error(L, "smarm.%s: scheduler %d did not answer within opts.request_timeout "
                       STUCK_WHY, fname, sched + 1);
}

int64_t sm_lsmarm_timeout_ns(lua_Number seconds)
{
  if (!(seconds >= 0) || seconds >= 1e9) /* NaN, negative, or beyond 31 years: no limit */
    return SMARM_FOREVER;
  return (int64_t)(seconds * 1e9);
}

int64_t sm_lpark_opt_seconds(lua_State *L, int idx)
{
  return lua_isnoneornil(L, idx) ? SMARM_FOREVER : sm_lpark_check_seconds(L, idx);
}

lua_Number sm_lpark_check_settimeout(lua_State *L, int idx)
{
  if (lua_isnoneornil(L, idx))
    return -1;
  lua_Number s = lua_type(L, idx) == LUA_TNUMBER ? lua_tonumber(L, idx) : 0;
  if (lua_type(L, idx) != LUA_TNUMBER || s != s)
    luaL_argerror(L, idx, lua_pushfstring(L, "number of seconds or nil expected, got %s",
                                          s != s ? "nan" : luaL_typename(L, idx)));
  return s < 0 ? -1 : s;
}

int64_t sm_lpark_check_seconds(lua_State *L, int idx)
{
  lua_Number s = lua_type(L, idx) == LUA_TNUMBER ? lua_tonumber(L, idx) : -1;
  if (!(s >= 0)) {
    const char *got = lua_type(L, idx) == LUA_TNUMBER ? lua_pushfstring(L, "%f", s)
                                                      : luaL_typename(L, idx);
    luaL_argerror(L, idx, lua_pushfstring(L, "non-negative number of seconds expected, got %s",
                                          got));
  }
  return sm_lsmarm_timeout_ns(s);
}
