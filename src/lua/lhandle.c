/*
** Handles (see lhandle.h). The kinds are a process-wide list that only grows; it is written
** under a mutex by the first module load that brings a kind, and read without one afterwards by
** threads that registered the same kinds (their registration took the mutex after the write).
** The run generation is written only by smarm.run's caller while no scheduler runs (before it
** starts them, after it has joined them), so the schedulers read it without a race.
*/
#include "lhandle.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t kinds_lock = PTHREAD_MUTEX_INITIALIZER;
static const lhandle_kind_t *kinds[LHANDLE_KINDS];
static _Atomic int nkinds;

static uint32_t run_generation;

int sm_lhandle_register(const lhandle_kind_t *kind)
{
  pthread_mutex_lock(&kinds_lock);
  int n = atomic_load_explicit(&nkinds, memory_order_relaxed), i = 0;
  while (i < n && kinds[i] != kind)
    i++;
  if (i == LHANDLE_KINDS) { /* a build with more kinds than the list holds: never at run time */
    fprintf(stderr, "smarm: more handle kinds than LHANDLE_KINDS (%d)\n", LHANDLE_KINDS);
    abort();
  }
  if (i == n) {
    kinds[i] = kind;
    /* pairs with the acquire in sm_lhandle_kind_count */
    atomic_store_explicit(&nkinds, n + 1, memory_order_release);
  }
  pthread_mutex_unlock(&kinds_lock);
  return i;
}

int sm_lhandle_kind_count(void)
{
  return atomic_load_explicit(&nkinds, memory_order_acquire); /* pairs with sm_lhandle_register */
}

const lhandle_kind_t *sm_lhandle_kind(int index) { return kinds[index]; }

uint32_t sm_lhandle_run_generation(void) { return run_generation; }

void sm_lhandle_next_run(void) { run_generation++; }

void sm_lio_handle_metatable(lua_State *L, const char *name, const luaL_Reg *methods,
                             lua_CFunction gc, lua_CFunction tostring)
{
  if (luaL_newmetatable(L, name)) {
    lua_newtable(L);
    luaL_register(L, NULL, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushstring(L, name);
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
}
