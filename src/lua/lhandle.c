/*
** Handles (see lhandle.h). The kinds are a process-wide list that only grows; it is written
** under a mutex by the first module load that brings a kind, and read without one afterwards by
** threads that registered the same kinds (their registration took the mutex after the write).
** The run generation is written only by smarm.run's caller while no scheduler runs (before it
** starts them, after it has joined them), so the schedulers read it without a race.
*/
#include "lhandle.h"

#include "lvm.h"
#include "smarm.h"

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

/* Registry keys (addresses): the owners table, and the weak-keys metatable of owners' sets. */
static const char owners_key, weak_keys_key;

/* Pushes registry[key] (nil if it was never made). */
static void push_registry(lua_State *L, const void *key)
{
  lua_pushlightuserdata(L, (void *)key);
  lua_rawget(L, LUA_REGISTRYINDEX);
}

/* Pushes registry[key], making it first (a table; with __mode = mode when mode). */
static void push_made(lua_State *L, const void *key, const char *mode)
{
  push_registry(L, key);
  if (!lua_isnil(L, -1))
    return;
  lua_pop(L, 1);
  lua_newtable(L);
  if (mode) {
    lua_pushstring(L, mode);
    lua_setfield(L, -2, "__mode");
  }
  lua_pushlightuserdata(L, (void *)key);
  lua_pushvalue(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

/* An owner's key: its address as a number, exact (user-space addresses have under 53 bits). */
static lua_Number owner_key(const void *owner) { return (lua_Number)(uintptr_t)owner; }

void sm_lhandle_own(lua_State *L, int idx, const lhandle_kind_t *kind)
{
  void *owner = smarm_actor_data();
  if (!owner)
    return;
  int index = 0, n = sm_lhandle_kind_count();
  while (index < n && kinds[index] != kind)
    index++;
  if (index == n) /* its module never registered it: cannot happen */
    return;
  if (idx < 0)
    idx = lua_gettop(L) + idx + 1;
  push_made(L, &owners_key, NULL);
  lvm_t *vm = this_vm();
  if (vm)
    vm->owners = sm_ljx_top_bits(L); /* (the registry keeps it for the VM's life) */
  lua_pushnumber(L, owner_key(owner));
  lua_rawget(L, -2);
  if (lua_isnil(L, -1)) { /* the first handle this actor owns: its set */
    lua_pop(L, 1);
    lua_newtable(L);
    push_made(L, &weak_keys_key, "k");
    lua_setmetatable(L, -2);
    lua_pushnumber(L, owner_key(owner));
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
  }
  lua_pushvalue(L, idx);
  lua_pushinteger(L, index);
  lua_rawset(L, -3);
  lua_pop(L, 2);
}

/* Only reads, lua_next and a store over an existing key (number keys and the registry's own
** light userdata keys, which the VM knows already): nothing here allocates or raises, so it runs
** unprotected at an actor's end (also for the many actors that own nothing: in a VM where no
** actor ever owned a handle, after one look per run, a test of vm->owners). */
void sm_lhandle_end_owner(lua_State *L, void *owner, int close)
{
  lvm_t *vm = this_vm();
  if (vm && vm->owners == LVM_NO_OWNERS)
    return;
  int top = lua_gettop(L);
  if (vm && vm->owners) {
    sm_ljx_push_bits(L, vm->owners);
  } else {
    push_registry(L, &owners_key);
    if (vm)
      vm->owners = lua_isnil(L, -1) ? LVM_NO_OWNERS : sm_ljx_top_bits(L);
  }
  if (lua_isnil(L, -1)) {
    lua_settop(L, top);
    return;
  }
  lua_pushnumber(L, owner_key(owner));
  lua_rawget(L, -2);
  if (lua_isnil(L, -1)) {
    lua_settop(L, top);
    return;
  }
  if (close) {
    int n = sm_lhandle_kind_count();
    lua_pushnil(L);
    while (lua_next(L, -2) != 0) {
      int kind = (int)lua_tointeger(L, -1);
      if (kind >= 0 && kind < n && kinds[kind]->close_owned)
        kinds[kind]->close_owned(lua_touserdata(L, -2));
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  lua_pushnumber(L, owner_key(owner));
  lua_pushnil(L);
  lua_rawset(L, -3);
  lua_settop(L, top);
}

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
