/*
** Looking at actors from Lua: what this scheduler tells of its own actors (smarm.h, "Looking at
** actors"). init.lua builds smarm.processes and smarm.info on these two, asking each other
** scheduler from an actor spawned there, so every answer is read by the owner's thread.
*/
#include "linfo.h"

#include "lfaults.h"
#include "ljx.h"
#include "lpark.h"
#include "lpid.h"
#include "lterm.h"
#include "lvm.h"

#include <errno.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* _local_processes() -> { pid, ... }: the live actors of the caller's scheduler, itself included. */
static int l_local_processes(lua_State *L)
{
  sm_lpark_actor(L, "processes");
  smarm_pid_t some[64], *pids = some;
  long n = smarm_local_actors(some, 64);
  if (n > 64) { /* read them again into a block of their size: nothing else runs here meanwhile */
    pids = malloc((size_t)n * sizeof *pids);
    if (!pids)
      return luaL_error(L, "not enough memory");
    long again = smarm_local_actors(pids, (size_t)n);
    n = again < n ? again : n;
  }
  lua_createtable(L, (int)n, 0);
  for (long i = 0; i < n; i++) {
    sm_lsmarm_push_pid(L, pids[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  if (pids != some)
    free(pids);
  return 1;
}

static const char *const status_text[] = {
  [SMARM_ACTOR_RUNNING] = "running",   [SMARM_ACTOR_RUNNABLE] = "runnable",
  [SMARM_ACTOR_RECEIVING] = "waiting", [SMARM_ACTOR_SLEEPING] = "waiting",
  [SMARM_ACTOR_ASKING] = "waiting",    [SMARM_ACTOR_AWAITING] = "waiting",
};
static const char *const waiting_text[] = {
  [SMARM_ACTOR_RECEIVING] = "receive", [SMARM_ACTOR_SLEEPING] = "sleep",
  [SMARM_ACTOR_ASKING] = "answer",     [SMARM_ACTOR_AWAITING] = "io",
};

/* Sets t[key] (t on top) to the list of pids pid is tied to (smarm_actor_ties). */
static void set_ties(lua_State *L, smarm_pid_t pid, int which, const char *key)
{
  smarm_pid_t some[16], *pids = some;
  long n = smarm_actor_ties(pid, which, some, 16);
  if (n > 16) { /* read them again into a block of their size: nothing else runs here meanwhile */
    pids = malloc((size_t)n * sizeof *pids);
    if (!pids)
      luaL_error(L, "not enough memory");
    long again = smarm_actor_ties(pid, which, pids, (size_t)n);
    n = again < n ? again : n;
  }
  lua_createtable(L, n > 0 ? (int)n : 0, 0);
  for (long i = 0; i < n; i++) {
    sm_lsmarm_push_pid(L, pids[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  if (pids != some)
    free(pids);
  lua_setfield(L, -2, key);
}

/* Sets t.func (t on top) to "source:line" of the function the actor was spawned with: the
** bottom Lua frame of its coroutine (below it, only the binding's C entry of a spawn from another
** scheduler; a tail call from that function replaces it: the called function then), or before
** it first runs the function waiting there. Nothing for a spawn from
** another scheduler that has not started (its function is still a message). */
static void set_function(lua_State *L, lua_State *co, int started)
{
  lua_Debug ar;
  if (started) {
    /* the deepest level, found as luaL_traceback finds a stack's end: doubling, then halving
    ** (lua_getstack walks from the top, so a walk one level at a time costs depth squared) */
    int lo = 0, hi = 1;
    while (lua_getstack(co, hi, &ar)) {
      lo = hi;
      hi *= 2;
    }
    while (hi - lo > 1) { /* lo exists, hi does not */
      int mid = lo + (hi - lo) / 2;
      if (lua_getstack(co, mid, &ar))
        lo = mid;
      else
        hi = mid;
    }
    int level = lo;
    for (; level >= 0; level--)
      if (lua_getstack(co, level, &ar) && lua_getinfo(co, "S", &ar) && ar.what[0] != 'C')
        break;
    if (level < 0)
      return;
  } else {
    if (lua_gettop(co) < 1 || !lua_isfunction(co, 1))
      return;
    lua_pushvalue(co, 1);
    lua_xmove(co, L, 1);
    if (!lua_getinfo(L, ">S", &ar))
      return;
  }
  if (ar.linedefined > 0)
    lua_pushfstring(L, "%s:%d", ar.short_src, ar.linedefined);
  else
    lua_pushstring(L, ar.short_src); /* a main chunk */
  lua_setfield(L, -2, "func");
}

/* Whether info's caller asked for key: keys (at index 2) is none, a key, or a list of keys. */
static int wanted(lua_State *L, const char *key)
{
  if (lua_isnoneornil(L, 2))
    return 1;
  if (lua_type(L, 2) == LUA_TSTRING)
    return strcmp(lua_tostring(L, 2), key) == 0;
  for (int i = 1;; i++) {
    lua_rawgeti(L, 2, i);
    const char *k = lua_tostring(L, -1);
    int found = k && strcmp(k, key) == 0, end = lua_isnil(L, -1);
    lua_pop(L, 1);
    if (found || end)
      return found;
  }
}

/* Pushes the traceback of co, an actor's coroutine that is not running: where it waits, first
** the frames of the coroutines it resumed and parked inside (a receive in a coroutine.wrap),
** innermost first, then its own; "(not started)" when it has no frame yet (or, spawned from
** another scheduler, no coroutine). */
static void push_parked_traceback(lua_State *L, lua_State *co)
{
  lua_Debug ar;
  if (!co || !lua_getstack(co, 0, &ar)) {
    lua_pushliteral(L, "stack traceback:\n\t(not started)");
    return;
  }
  lua_State *chain[16]; /* the outermost 15 and the innermost; a longer chain is cut between */
  int n = 0, cut = 0;
  for (lua_State *c = co; c; c = sm_ljx_resumed(c)) {
    if (n < 16)
      chain[n++] = c;
    else {
      chain[15] = c; /* a VM in a consistent state has no cycle: the walk ends */
      cut = 1;
    }
  }
  luaL_traceback(L, chain[n - 1], NULL, 0);
  if (cut)
    lua_pushliteral(L, "\n\t...\t(coroutines that resumed it, left out)");
  if (cut)
    lua_concat(L, 2);
  for (int i = n - 2; i >= 0; i--) { /* each resumer's frames after those it resumed */
    luaL_traceback(L, chain[i], NULL, 0);
    const char *frames = strchr(lua_tostring(L, -1), '\n'); /* past "stack traceback:" */
    lua_pushstring(L, frames ? frames : "");
    lua_remove(L, -2);
    lua_concat(L, 2);
  }
}

/* _local_info(pid [, keys]) -> table | nil: an actor of the caller's scheduler (see docs/api.md,
** smarm.info); nil when it is not alive. With keys, the costly parts (traceback, func, the ties)
** only if asked for; init.lua keeps the keys asked for. */
static int l_local_info(lua_State *L)
{
  smarm_pid_t pid;
  if (!sm_lsmarm_to_pid(L, 1, &pid))
    return luaL_argerror(L, 1, lua_pushfstring(L, "pid expected, got %s", luaL_typename(L, 1)));
  sm_lpark_actor(L, "info");
  smarm_actor_info_t info;
  int rc = smarm_actor_info(pid, &info);
  if (rc == -ESRCH)
    return 0;
  if (rc < 0)
    return luaL_error(L, "smarm.info: the actor is not this scheduler's");
  /* Every actor of a Lua run is the binding's: its data begins with its head (lvm.h). A remote
  ** spawn not yet started has no coroutine, hence no traceback or function yet. */
  const lvm_actor_head_t *head = lvm_head_of_data(info.data);
  lua_createtable(L, 0, 20);
  lua_pushvalue(L, 1);
  lua_setfield(L, -2, "pid");
  lua_pushstring(L, status_text[info.status]);
  lua_setfield(L, -2, "status");
  const char *more = head ? head->waiting_for : NULL;
  if (info.status == SMARM_ACTOR_AWAITING && more)
    lua_pushfstring(L, "io:%s", more);
  else if (info.status == SMARM_ACTOR_RECEIVING && more)
    lua_pushstring(L, more); /* "call" */
  else if (waiting_text[info.status])
    lua_pushstring(L, waiting_text[info.status]);
  else
    lua_pushnil(L);
  lua_setfield(L, -2, "waiting");
  lua_pushinteger(L, smarm_pid_sched(pid) + 1);
  lua_setfield(L, -2, "scheduler");
  if (info.name) {
    lua_pushstring(L, info.name);
    lua_setfield(L, -2, "name");
  }
  lua_pushnumber(L, (lua_Number)info.mailbox);
  lua_setfield(L, -2, "mailbox");
  lua_pushnumber(L, (lua_Number)info.stack_size);
  lua_setfield(L, -2, "stack_size");
  lua_pushnumber(L, (lua_Number)info.stack_used);
  lua_setfield(L, -2, "stack_used");
  lua_pushnumber(L, (lua_Number)info.scheduled);
  lua_setfield(L, -2, "scheduled");
  lua_pushnumber(L, (lua_Number)info.cpu_ns / 1e9);
  lua_setfield(L, -2, "cpu");
  if (info.spawner) {
    sm_lsmarm_push_pid(L, info.spawner);
    lua_setfield(L, -2, "spawned_by");
  }
  lua_pushnumber(L, (lua_Number)(smarm_now_ns() - info.spawned_ns) / 1e9);
  lua_setfield(L, -2, "age");
  if (wanted(L, "links"))
    set_ties(L, pid, SMARM_TIES_LINKS, "links");
  if (wanted(L, "monitors"))
    set_ties(L, pid, SMARM_TIES_MONITORS, "monitors");
  if (wanted(L, "monitored_by"))
    set_ties(L, pid, SMARM_TIES_MONITORED_BY, "monitored_by");
  if (head && head->co && wanted(L, "func"))
    set_function(L, head->co, info.scheduled > 0);
  if (!wanted(L, "traceback"))
    return 1;
  if (info.status == SMARM_ACTOR_RUNNING)
    luaL_traceback(L, L, NULL, 2); /* from the caller of smarm.info */
  else
    push_parked_traceback(L, head ? head->co : NULL);
  lua_setfield(L, -2, "traceback");
  return 1;
}

/* _scheduler_of(pid) -> k (1-based) | nil | false: the scheduler that owns pid, nil when none of
** this run does (a pid of an earlier run with more schedulers, or a pid term of this node that
** names nobody), false for another node's pid. */
static int l_scheduler_of(lua_State *L)
{
  smarm_pid_t pid;
  if (!sm_lsmarm_to_pid(L, 1, &pid)) {
    if (sm_lfaults_own_stale_pid(L, 1))
      return 0;
    const char *node;
    size_t n;
    if (sm_lterm_pid_node(L, 1, &node, &n)) {
      lua_pushboolean(L, 0);
      return 1;
    }
    return luaL_argerror(L, 1, lua_pushfstring(L, "pid expected, got %s", luaL_typename(L, 1)));
  }
  unsigned k = smarm_pid_sched(pid);
  if (k >= smarm_sched_count())
    return 0;
  lua_pushinteger(L, (lua_Integer)k + 1);
  return 1;
}

/* dump() asks for a dump (smarm_dump): every scheduler writes its actors to stderr. */
static int l_dump(lua_State *L)
{
  (void)L;
  smarm_dump();
  return 0;
}

/* The traceback lines of one actor of a dump, on its scheduler's thread between its actors, so
** on the VM's own state (vm->L), not an actor's: in a protected call (out of memory is then an
** error, not a panic) with the collector stopped, so that no __gc finalizer runs outside an
** actor. A finalizer cannot be under way: a switch inside one is refused (design rule 3). */
static int dump_traceback(lua_State *L)
{
  push_parked_traceback(L, lua_touserdata(L, 1));
  luaL_gsub(L, lua_tostring(L, -1), "\n", "\n    ");
  fprintf(stderr, "    %s\n", lua_tostring(L, -1));
  return 0;
}

void sm_linfo_on_dump(const smarm_actor_info_t *actor, void *userdata)
{
  (void)userdata;
  lvm_t *vm = smarm_sched_data();
  const lvm_actor_head_t *head = lvm_head_of_data(actor->data);
  if (!vm || !vm->L)
    return;
  lua_State *L = vm->L;
  int top = lua_gettop(L);
  uint64_t threshold = sm_ljx_gc_hold(L);
  if (lua_cpcall(L, dump_traceback, head ? head->co : NULL) != 0)
    fprintf(stderr, "    (no traceback: %s)\n", lua_tostring(L, -1));
  sm_ljx_gc_release(L, threshold);
  lua_settop(L, top);
}

static const luaL_Reg functions[] = {
  {"dump", l_dump},
  {"_scheduler_of", l_scheduler_of},
  {"_local_processes", l_local_processes},
  {"_local_info", l_local_info},
  {NULL, NULL},
};

void sm_linfo_register(lua_State *L, int module)
{
  for (const luaL_Reg *f = functions; f->name; f++) {
    lua_pushcfunction(L, f->func);
    lua_setfield(L, module, f->name);
  }
}
