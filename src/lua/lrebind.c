/*
** Values found again by name in another VM (see lrebind.h). What a fresh VM has (its globals and
** its package.loaded) is learnt once per process from a throwaway state; each VM records what
** each module held when require returned it, and keeps an index of package.loaded in its
** registry made from those records, rebuilt when package.loaded changes (its snapshot), a
** module is recorded, or a run starts.
*/
#define _GNU_SOURCE
#include "lrebind.h"

#include "ljx.h"
#include "lvm.h"

#include <lauxlib.h>
#include <lualib.h>

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- What a fresh VM has (process-wide, read-only once made) ------------------------------- */

#define FRESH_MAX 128

static struct {
  const char *globals[FRESH_MAX]; /* names in _G, NULL-terminated */
  const char *modules[FRESH_MAX]; /* names in package.loaded */
  const char *preloads[FRESH_MAX]; /* names in package.preload (ffi, jit.*) */
} fresh;
static pthread_once_t fresh_once = PTHREAD_ONCE_INIT;

static void fresh_names(lua_State *L, int t, const char **out)
{
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, t) != 0) {
    if (lua_type(L, -2) == LUA_TSTRING && n < FRESH_MAX - 1) {
      char *s = strdup(lua_tostring(L, -2));
      if (s)
        out[n++] = s;
    }
    lua_pop(L, 1);
  }
  out[n] = NULL;
}

static void fresh_learn(void)
{
  lua_State *L = luaL_newstate();
  if (!L)
    return; /* nothing is known as standard: standard functions then travel as module fields */
  luaL_openlibs(L);
  lua_pushvalue(L, LUA_GLOBALSINDEX);
  fresh_names(L, lua_gettop(L), fresh.globals);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  fresh_names(L, lua_gettop(L), fresh.modules);
  lua_getfield(L, -2, "preload");
  fresh_names(L, lua_gettop(L), fresh.preloads);
  lua_close(L);
}

static int in_list(const char *const *list, const char *name)
{
  for (; *list; list++)
    if (strcmp(*list, name) == 0)
      return 1;
  return 0;
}

/* ---- What this VM knows of the run --------------------------------------------------------- */

/* registry[&paths_key] = { path, cpath }: the paths every VM of the run started with */
static const char paths_key;
/* registry[&standard_key] = { name -> the standard C function this VM started with } */
static const char standard_key;
/* registry[&index_key]: the VM's index (see "The VM's index" below) */
static const char index_key;
/* registry[&replaced_key] = { original function -> { "module", "field" } } (sm_lrebind_replaced) */
static const char replaced_key;
/* registry[&loaded_key] = { name -> { module, fields } }: each module as require returned it
** (sm_lrebind_loaded), with fields = { field -> function or userdata } as the module held them
** then (none for a module that is not a table). Keyed by name, not by module: a module that is
** unloaded and required again replaces its record, and the old one is not kept alive. */
static const char loaded_key;

/* The calling scheduler's VM state if L is of that VM, else NULL. The index is made and dropped
** by that scheduler's actors, and dropped at a run's start, where the state is new. */
static lvm_t *vm_of(lua_State *L)
{
  lvm_t *vm = this_vm();
  return vm && vm->L &&
             lua_topointer(vm->L, LUA_REGISTRYINDEX) == lua_topointer(L, LUA_REGISTRYINDEX)
           ? vm
           : NULL;
}

/* Drops the VM's index: the next message that needs it makes it anew. */
static void drop_index(lua_State *L)
{
  lua_pushlightuserdata(L, (void *)&index_key);
  lua_pushnil(L);
  lua_rawset(L, LUA_REGISTRYINDEX);
  lvm_t *vm = vm_of(L);
  if (vm)
    vm->index_names = 0;
}

/* records[name] = { module, fields } for the name and module at stack slots `name` and `mod`,
** with the records table at `records`. Leaves the stack as it found it. */
static void record(lua_State *L, int records, int name, int mod)
{
  lua_createtable(L, 2, 0);
  lua_pushvalue(L, mod);
  lua_rawseti(L, -2, 1);
  if (lua_istable(L, mod)) {
    lua_newtable(L);
    int fields = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, mod) != 0) { /* raw: no metamethod runs */
      int t = lua_type(L, -1);
      if (lua_type(L, -2) == LUA_TSTRING && (t == LUA_TFUNCTION || t == LUA_TUSERDATA)) {
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, fields);
      } else {
        lua_pop(L, 1);
      }
    }
    lua_rawseti(L, -2, 2);
  }
  lua_pushvalue(L, name);
  lua_insert(L, -2);
  lua_rawset(L, records);
}

/* (name, module): records it (sm_ljx_call_held: record walks the module) */
static int record_held(lua_State *L)
{
  lvm_push_registry_table(L, &loaded_key, NULL);
  record(L, 3, 1, 2);
  drop_index(L);
  return 0;
}

void sm_lrebind_loaded(lua_State *L, int name, int mod)
{
  lua_pushvalue(L, name);
  lua_pushvalue(L, mod < 0 ? mod - 1 : mod);
  sm_ljx_call_held(L, record_held, 2, 0);
}

/* (package.loaded): records what it holds (sm_ljx_call_held) */
static int record_all_held(lua_State *L)
{
  int loaded = 1;
  lvm_push_registry_table(L, &loaded_key, NULL);
  int records = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, loaded) != 0) {
    if (lua_type(L, -2) == LUA_TSTRING) {
      lua_pushvalue(L, -2);
      lua_rawget(L, records);
      int same = 0;
      if (lua_istable(L, -1)) {
        lua_rawgeti(L, -1, 1);
        same = lua_rawequal(L, -1, -3);
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
      if (!same)
        record(L, records, lua_gettop(L) - 1, lua_gettop(L));
    }
    lua_pop(L, 1);
  }
  drop_index(L);
  return 0;
}

void sm_lrebind_loaded_all(lua_State *L)
{
  int top = lua_gettop(L);
  lua_getglobal(L, "package");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "loaded");
    if (lua_istable(L, -1))
      sm_ljx_call_held(L, record_all_held, 1, 0);
  }
  lua_settop(L, top);
}

/* smarm._loaded(name, module) -> module: what the require smarm installs calls when it has
** loaded a module (sm_lrebind_loaded). */
static int l_loaded(lua_State *L)
{
  luaL_checkstring(L, 1);
  lua_settop(L, 2);
  sm_lrebind_loaded(L, 1, 2);
  return 1;
}

void sm_lrebind_register(lua_State *L, int module)
{
  lua_pushcfunction(L, l_loaded);
  lua_setfield(L, module, "_loaded");
}

void sm_lrebind_replaced(lua_State *L, const char *module, const char *field)
{
  lvm_push_registry_table(L, &replaced_key, NULL);
  lua_insert(L, -2);
  lua_createtable(L, 2, 0);
  lua_pushstring(L, module);
  lua_rawseti(L, -2, 1);
  lua_pushstring(L, field);
  lua_rawseti(L, -2, 2);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

void sm_lrebind_set_paths(lua_State *L, const char *path, const char *cpath)
{
  lua_createtable(L, 2, 0);
  lua_pushstring(L, path);
  lua_rawseti(L, -2, 1);
  lua_pushstring(L, cpath);
  lua_rawseti(L, -2, 2);
  lua_pushlightuserdata(L, (void *)&paths_key);
  lua_insert(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
  /* The index judged requirability by the last run's paths: drop it. (The paths table's
  ** address cannot tell: the new table may take the address of the one the index
  ** was built under, a few runs back.) */
  drop_index(L);
}

void sm_lrebind_learn_standard(lua_State *L)
{
  pthread_once(&fresh_once, fresh_learn);
  lua_pushlightuserdata(L, (void *)&standard_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  int known = lua_istable(L, -1);
  lua_pop(L, 1);
  if (known)
    return;
  lua_newtable(L);
  for (const char *const *name = fresh.globals; *name; name++) {
    lua_getglobal(L, *name);
    if (lua_iscfunction(L, -1))
      lua_setfield(L, -2, *name);
    else
      lua_pop(L, 1);
  }
  lua_pushlightuserdata(L, (void *)&standard_key);
  lua_insert(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

int sm_lrebind_push_standard(lua_State *L, const char *name)
{
  lua_pushlightuserdata(L, (void *)&standard_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  return 1;
}

/* ---- The VM's index ------------------------------------------------------------------------ */

/* registry[&index_key] = { [1] = snapshot, [2] = names } (and the VM's state, lvm_t, has the
** snapshot and names at hand while the registry keeps them), names (weak keys) mapping each value
** known by name to "module" (a module), { "module", "field", module } (a field of one: the module
** table, so that a lookup checks that the field holds the value still) or { "module", "field" }
** (a standard global, module "", and a library function smarm replaced: taken as they are).
** The snapshot (a userdata, sm_ljx_table_snap) is of what the index depends on within a run:
** package.loaded, its slots byte for byte; nil where a finalizer resized package.loaded while
** it was made (the next look makes the index again). A run's start drops the index
** (sm_lrebind_set_paths). */

/* Pushes package.loaded, or nil when there is no package table. */
static void push_loaded(lua_State *L, int package, const lvm_t *vm)
{
  if (!lua_istable(L, package)) {
    lua_pushnil(L);
    return;
  }
  lvm_push_str(L, vm, LVM_STR_LOADED); /* a cached key: no C string interned per spawn */
  lua_gettable(L, package);
}

/* package.searchpath(name, path) finds a file. */
static int on_path(lua_State *L, int package, const char *name, const char *path)
{
  int top = lua_gettop(L);
  lua_getfield(L, package, "searchpath");
  lua_pushstring(L, name);
  lua_pushstring(L, path);
  int found = lua_isfunction(L, top + 1) && lua_pcall(L, 2, 1, 0) == 0 && lua_isstring(L, -1);
  lua_settop(L, top);
  return found;
}

void sm_lrebind_submodules(lua_State *L, int module)
{
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  int loaded = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, module) != 0) {
    if (lua_type(L, -2) == LUA_TSTRING && lua_istable(L, -1)) {
      lua_pushfstring(L, "smarm.%s", lua_tostring(L, -2));
      lua_pushvalue(L, -1);
      lua_rawget(L, loaded);
      if (lua_isnil(L, -1)) { /* a module of that name that a script loaded stays */
        lua_pop(L, 1);
        lua_pushvalue(L, -2);
        lua_rawset(L, loaded);
      } else {
        lua_pop(L, 2);
      }
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
}

/* Whether name is "smarm.<x>" for the table x of this VM's smarm.core (sm_lrebind_submodules):
** every VM has it. */
static int is_submodule(lua_State *L, int package, const char *name)
{
  if (strncmp(name, "smarm.", 6) != 0)
    return 0;
  lua_getfield(L, package, "loaded");
  lua_getfield(L, -1, "smarm.core");
  int yes = 0;
  if (lua_istable(L, -1)) { /* raw: smarm.core's __index is Lua (smarm.console, .top) */
    lua_pushstring(L, name + 6);
    lua_rawget(L, -2);
    lua_getfield(L, -3, name);
    yes = lua_istable(L, -1) && lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
  }
  lua_pop(L, 2);
  return yes;
}

/* Whether every VM's require(name) finds the module: one a fresh VM has or preloads (and
** smarm.core, which every VM preloads), or one on the paths every VM of the run started with
** (not this VM's package.path or package.preload, which a script may have changed: the others
** have not). */
static int requirable(lua_State *L, int package, const char *name)
{
  if (in_list(fresh.modules, name) || in_list(fresh.preloads, name) ||
      strcmp(name, "smarm.core") == 0 || is_submodule(L, package, name))
    return 1;
  lua_pushlightuserdata(L, (void *)&paths_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (!lua_istable(L, -1)) { /* set at every run's start, before any actor can encode */
    lua_pop(L, 1);
    return 0;
  }
  lua_rawgeti(L, -1, 1);
  lua_rawgeti(L, -2, 2);
  const char *path = lua_tostring(L, -2), *cpath = lua_tostring(L, -1);
  int found = (path && on_path(L, package, name, path)) || (cpath && on_path(L, package, name, cpath));
  const char *dot = strchr(name, '.'); /* a C module inside its root's library (all-in-one) */
  if (!found && dot && cpath) {
    lua_pushlstring(L, name, (size_t)(dot - name));
    found = on_path(L, package, lua_tostring(L, -1), cpath);
    lua_pop(L, 1);
  }
  lua_pop(L, 3);
  return found;
}

/* Puts into names (at stack slot `names`) the modules of package.loaded (at `loaded`, a table)
** that every VM can require, names[module] = "name", and pushes a table of those that are tables,
** name -> module, for build_fields. Not held (sm_ljx_call_held): requirable calls
** package.searchpath, which a script may have made a Lua function, which may park or be
** preempted, and may change package.loaded (a lua_next walk whose key is gone raises "invalid key
** to 'next'"). So package.loaded's pairs are copied before any is looked at, into room made
** first, so that copying allocates nothing (no GC step, no finalizer). */
static void build_modules(lua_State *L, int package, int loaded, int names)
{
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, loaded) != 0) {
    n++;
    lua_pop(L, 1);
  }
  lua_createtable(L, 2 * n, 0);
  int pairs = lua_gettop(L), i = 0;
  lua_pushnil(L);
  while (lua_next(L, loaded) != 0) {
    if (i == 2 * n) { /* keys a finalizer added as the room was made: left out (the snapshot,
                       ** made before, differs, and the next look makes the index again) */
      lua_pop(L, 2);
      break;
    }
    lua_rawseti(L, pairs, i + 2);
    lua_pushvalue(L, -1);
    lua_rawseti(L, pairs, i + 1);
    i += 2;
  }
  lua_newtable(L); /* the requirable modules' names -> their tables (for the second pass) */
  int ok = lua_gettop(L);
  for (int k = 1; k < i; k += 2) {
    lua_rawgeti(L, pairs, k);
    lua_rawgeti(L, pairs, k + 1);
    int t = lua_type(L, -1);
    if (lua_type(L, -2) == LUA_TSTRING &&
        (t == LUA_TTABLE || t == LUA_TFUNCTION || t == LUA_TUSERDATA) &&
        requirable(L, package, lua_tostring(L, -2))) {
      lua_pushvalue(L, -1);
      lua_pushvalue(L, -3);
      lua_rawset(L, names); /* names[module] = "name" */
      if (t == LUA_TTABLE) {
        lua_pushvalue(L, -2);
        lua_pushvalue(L, -2);
        lua_rawset(L, ok);
      }
    }
    lua_pop(L, 2);
  }
  lua_remove(L, pairs);
}

/* (names, the modules build_modules found): the rest of the index, under sm_ljx_call_held, since
** it walks the modules' tables while it allocates; nothing here runs Lua code. Modules are named
** first (build_modules), so that a module that is also a field of another (string, _G.string)
** is found as itself. */
static int build_fields(lua_State *L)
{
  int names = 1, ok = 2, top = lua_gettop(L);
  /* the standard globals by identity, as { "", name }: the receiver takes its own (a script's
  ** own global functions, and a standard one it replaced, are not named: they travel) */
  lua_pushlightuserdata(L, (void *)&standard_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  int standard = lua_gettop(L);
  if (lua_istable(L, standard)) {
    lua_pushnil(L);
    while (lua_next(L, standard) != 0) {
      lua_pushvalue(L, -1);
      lua_createtable(L, 2, 0);
      lua_pushliteral(L, "");
      lua_rawseti(L, -2, 1);
      lua_pushvalue(L, -4);
      lua_rawseti(L, -2, 2);
      lua_rawset(L, names);
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  /* the library functions smarm replaced, as the field they were (sm_lrebind_replaced) */
  lvm_push_registry(L, &replaced_key);
  int replaced = lua_gettop(L);
  if (lua_istable(L, replaced)) {
    lua_pushnil(L);
    while (lua_next(L, replaced) != 0) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, names);
    }
  }
  lua_pop(L, 1);
  /* the modules' fields: of a module as require returned it, the functions and userdata it held
  ** then (a function a script puts into it later is its own: it travels); of one that no
  ** require returned, or that a script put into package.loaded since, only the C functions and
  ** userdata (which cannot travel otherwise and are no script's closures) */
  lvm_push_registry_table(L, &loaded_key, NULL);
  int records = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, ok) != 0) {
    int mod = lua_gettop(L), modname = mod - 1;
    if (strcmp(lua_tostring(L, modname), "_G") == 0) { /* its fields: the standard ones above */
      lua_pop(L, 1);
      continue;
    }
    int fields = mod, any_lua = 0;
    lua_pushvalue(L, modname);
    lua_rawget(L, records);
    if (lua_istable(L, -1)) {
      lua_rawgeti(L, -1, 1);
      if (lua_rawequal(L, -1, mod)) {
        lua_rawgeti(L, -2, 2);
        if (lua_istable(L, -1)) {
          fields = lua_gettop(L);
          any_lua = 1;
        }
      }
    }
    lua_pushnil(L);
    while (lua_next(L, fields) != 0) {
      int t = lua_type(L, -1);
      if (lua_type(L, -2) == LUA_TSTRING &&
          ((t == LUA_TFUNCTION && (any_lua || lua_iscfunction(L, -1))) || t == LUA_TUSERDATA)) {
        /* names[value] = { "module", "field", module, next }: a field that held the value; the
        ** lookup names it while the field holds it still, else tries `next`, another field that
        ** held it (string.rep and a module's rep = string.rep): whether the value travels by
        ** name is decided at each send, never by the order in which modules were walked */
        lua_createtable(L, 4, 0);
        lua_pushvalue(L, modname);
        lua_rawseti(L, -2, 1);
        lua_pushvalue(L, -3); /* the field's name */
        lua_rawseti(L, -2, 2);
        lua_pushvalue(L, mod);
        lua_rawseti(L, -2, 3);
        int entry = lua_gettop(L);
        lua_pushvalue(L, -2);
        lua_rawget(L, names);
        if (lua_isnil(L, -1)) {
          lua_pop(L, 1);
          lua_pushvalue(L, -2);
          lua_pushvalue(L, entry);
          lua_rawset(L, names);
        } else if (lua_istable(L, -1) && lua_objlen(L, -1) >= 3) { /* another field's: after it */
          for (;;) {
            lua_rawgeti(L, -1, 4);
            if (!lua_istable(L, -1))
              break;
            lua_remove(L, -2);
          }
          lua_pop(L, 1);
          lua_pushvalue(L, entry);
          lua_rawseti(L, -2, 4);
          lua_pop(L, 1);
        } else { /* a standard global's or a replaced function's name: it stays */
          lua_pop(L, 1);
        }
        lua_pop(L, 1); /* the entry */
      }
      lua_pop(L, 1);
    }
    lua_settop(L, mod - 1);
  }
  lua_settop(L, top);
  return 0;
}

/* Makes the VM's index anew from package (at `package`) and package.loaded (at `loaded`),
** { snapshot of package.loaded, names }, into the registry, and pushes its names. Only build_fields is held:
** the rest may run a script's Lua code (package.searchpath), and the hold is the VM's, not the
** actor's (ljx.h). A change to package.loaded meanwhile leaves the snapshot unlike it: the next
** look makes the index again. */
static void make_index(lua_State *L, int package, int loaded)
{
  lua_createtable(L, 2, 0);
  int ix = lua_gettop(L);
  size_t size = sm_ljx_table_snap_size(L, loaded);
  if (!sm_ljx_table_snap(L, loaded, lua_newuserdata(L, size), size)) {
    lua_pop(L, 1); /* a finalizer resized package.loaded: no snapshot, the next look rebuilds */
    lua_pushnil(L);
  }
  lua_rawseti(L, ix, 1);
  lua_newtable(L); /* weak keys: the index must not keep replaced modules alive */
  int names = lua_gettop(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, names);
  if (lua_istable(L, loaded)) { /* else no package library: nothing is known by name */
    build_modules(L, package, loaded, names);
    lua_pushvalue(L, names);
    lua_insert(L, -2);
    sm_ljx_call_held(L, build_fields, 2, 0);
  }
  lua_pushvalue(L, names);
  lua_rawseti(L, ix, 2);
  lua_pushlightuserdata(L, (void *)&index_key);
  lua_pushvalue(L, ix);
  lua_rawset(L, LUA_REGISTRYINDEX);
  lvm_t *vm = vm_of(L);
  if (vm) { /* (what the registry keeps now) */
    lua_rawgeti(L, ix, 1);
    vm->index_snap = lua_touserdata(L, -1);
    vm->index_snap_size = lua_objlen(L, -1);
    lua_pop(L, 1);
    lua_pushvalue(L, names);
    vm->index_names = sm_ljx_top_bits(L);
    lua_pop(L, 1);
    vm->index_gen++;
  }
}

uint64_t sm_lrebind_index_current(lua_State *L)
{
  const lvm_t *vm = this_vm(); /* its callers encode or copy in an actor (lvm.h) */
  if (!vm->index_names)
    return 0;
  int top = lua_gettop(L);
  lvm_push_str(L, vm, LVM_STR_PACKAGE);
  lua_rawget(L, LUA_GLOBALSINDEX);
  if (lua_istable(L, -1)) {
    lvm_push_str(L, vm, LVM_STR_LOADED);
    lua_rawget(L, -2);
  } else {
    lua_pushnil(L); /* no package library: the snapshot says "not a table" */
  }
  int same = sm_ljx_table_same(L, -1, vm->index_snap, vm->index_snap_size);
  lua_settop(L, top);
  return same ? vm->index_gen : 0;
}

int sm_lrebind_push_names_made(lua_State *L)
{
  if (!sm_lrebind_index_current(L))
    return 0;
  sm_ljx_push_bits(L, this_vm()->index_names);
  return 1;
}

int sm_lrebind_names_entry(lua_State *L, int idx)
{
  idx = idx < 0 && idx > LUA_REGISTRYINDEX ? lua_gettop(L) + idx + 1 : idx;
  sm_ljx_push_bits(L, this_vm()->index_names);
  lua_pushvalue(L, idx);
  lua_rawget(L, -2);
  int t = lua_type(L, -1);
  lua_pop(L, 2);
  return t;
}

void sm_lrebind_push_names(lua_State *L)
{
  if (sm_lrebind_push_names_made(L))
    return;
  const lvm_t *vm = this_vm();
  lvm_push_str(L, vm, LVM_STR_PACKAGE);
  lua_gettable(L, LUA_GLOBALSINDEX); /* (a script's _G may say where its package library is) */
  int package = lua_gettop(L);
  push_loaded(L, package, vm);
  pthread_once(&fresh_once, fresh_learn);
  make_index(L, package, package + 1);
  lua_replace(L, package);
  lua_settop(L, package);
}

enum lrebind_kind sm_lrebind_find(lua_State *L, int names, int idx, int tables)
{
  int t = lua_type(L, idx);
  if (!(t == LUA_TFUNCTION || t == LUA_TUSERDATA || (tables && t == LUA_TTABLE)))
    return LREBIND_NONE;
  if (idx < 0 && idx > LUA_REGISTRYINDEX)
    idx = lua_gettop(L) + idx + 1;
  lua_pushvalue(L, idx);
  lua_rawget(L, names);
  if (lua_isstring(L, -1))
    return LREBIND_MODULE;
  while (lua_istable(L, -1) && t != LUA_TTABLE &&
         sm_ljx_field_is(L, -1, idx) == 0) { /* a module's field: only while it holds the value */
    lua_rawgeti(L, -1, 4); /* else the next field that held it */
    lua_remove(L, -2);
  }
  if (lua_istable(L, -1) && t != LUA_TTABLE) {
    lua_rawgeti(L, -1, 1);
    lua_rawgeti(L, -2, 2);
    lua_remove(L, -3);
    return LREBIND_FIELD;
  }
  lua_pop(L, 1);
  return LREBIND_NONE;
}
