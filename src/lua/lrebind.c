/*
** Values found again by name in another VM (see lrebind.h). What a fresh VM has (its globals and
** its package.loaded) is learnt once per process from a throwaway state; each VM keeps its own
** index of package.loaded in its registry, rebuilt when a fingerprint of package.loaded,
** package.preload, package.path and package.cpath changes.
*/
#define _GNU_SOURCE
#include "lrebind.h"

#include "ljx.h"

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
  lua_close(L);
}

static int in_list(const char *const *list, const char *name)
{
  for (; *list; list++)
    if (strcmp(*list, name) == 0)
      return 1;
  return 0;
}

/* ---- The VM's index ------------------------------------------------------------------------ */

/* registry[&index_key] = { [1] = fingerprint, [2] = names }, names (weak keys) mapping each value
** known by name to "module" (a module) or { "module", "field" } (a field of one). */
static const char index_key;

/* A fingerprint of what the index depends on: the contents of package.loaded and
** package.preload (sm_ljx_table_print: no walk through the API), and the path strings (interned:
** a new path is a new pointer). Leaves the stack as it found it. */
static lua_Number fingerprint(lua_State *L, int package)
{
  uint64_t h = 0;
  static const char *const fields[4] = {"loaded", "preload", "path", "cpath"};
  for (int i = 0; i < 4; i++) {
    lua_getfield(L, package, fields[i]);
    uint64_t v = i < 2 ? sm_ljx_table_print(L, -1) : (uint64_t)(uintptr_t)lua_tostring(L, -1);
    h = (h ^ v) * 1099511628211u + (uint64_t)i;
    lua_pop(L, 1);
  }
  return (lua_Number)(h >> 11); /* 53 bits: exact in a double */
}

/* package.searchpath(name, package[field]) finds a file. */
static int on_path(lua_State *L, int package, const char *name, const char *field)
{
  int top = lua_gettop(L);
  lua_getfield(L, package, "searchpath");
  lua_pushstring(L, name);
  lua_getfield(L, package, field);
  int found = lua_isfunction(L, top + 1) && lua_isstring(L, top + 3) &&
              lua_pcall(L, 2, 1, 0) == 0 && lua_isstring(L, -1);
  lua_settop(L, top);
  return found;
}

/* Whether another VM's require(name) finds the module as this one did. */
static int requirable(lua_State *L, int package, const char *name)
{
  if (in_list(fresh.modules, name))
    return 1;
  int top = lua_gettop(L);
  lua_getfield(L, package, "preload");
  int preloaded = lua_istable(L, -1) && (lua_getfield(L, -1, name), !lua_isnil(L, -1));
  lua_settop(L, top);
  if (preloaded)
    return 1;
  if (on_path(L, package, name, "path") || on_path(L, package, name, "cpath"))
    return 1;
  const char *dot = strchr(name, '.'); /* a C module inside its root's library (all-in-one) */
  if (dot) {
    lua_pushlstring(L, name, (size_t)(dot - name));
    int found = on_path(L, package, lua_tostring(L, -1), "cpath");
    lua_pop(L, 1);
    return found;
  }
  return 0;
}

/* Fills names (at stack slot `names`) from package.loaded: modules first, so that a module that
** is also a field of another (string, _G.string) is found as itself. */
static void build(lua_State *L, int package, int names)
{
  lua_getfield(L, package, "loaded");
  int loaded = lua_gettop(L);
  if (!lua_istable(L, loaded)) {
    lua_pop(L, 1);
    return;
  }
  lua_newtable(L); /* the requirable modules' names -> their tables (for the second pass) */
  int ok = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, loaded) != 0) {
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
    lua_pop(L, 1);
  }
  lua_pushnil(L);
  while (lua_next(L, ok) != 0) {
    int mod = lua_gettop(L), modname = mod - 1;
    int is_g = strcmp(lua_tostring(L, modname), "_G") == 0;
    lua_pushnil(L);
    while (lua_next(L, mod) != 0) {
      int t = lua_type(L, -1);
      if (lua_type(L, -2) == LUA_TSTRING && (t == LUA_TFUNCTION || t == LUA_TUSERDATA) &&
          (!is_g || in_list(fresh.globals, lua_tostring(L, -2)))) {
        lua_pushvalue(L, -1);
        lua_rawget(L, names);
        int known = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (!known) {
          lua_pushvalue(L, -1);
          lua_createtable(L, 2, 0);
          lua_pushvalue(L, modname);
          lua_rawseti(L, -2, 1);
          lua_pushvalue(L, -4); /* the field's name */
          lua_rawseti(L, -2, 2);
          lua_rawset(L, names); /* names[value] = { "module", "field" } */
        }
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  lua_settop(L, loaded - 1);
}

void sm_lrebind_push_names(lua_State *L)
{
  lua_pushlightuserdata(L, (void *)&index_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  int ix = lua_gettop(L);
  lua_getglobal(L, "package");
  int package = lua_gettop(L);
  lua_Number fp = lua_istable(L, package) ? fingerprint(L, package) : -1;
  if (lua_istable(L, ix)) {
    lua_rawgeti(L, ix, 1);
    int same = lua_tonumber(L, -1) == fp;
    lua_pop(L, 1);
    if (same) {
      lua_rawgeti(L, ix, 2);
      lua_replace(L, ix);
      lua_settop(L, ix);
      return;
    }
  }
  pthread_once(&fresh_once, fresh_learn);
  lua_createtable(L, 2, 0);
  lua_replace(L, ix);
  lua_pushnumber(L, fp);
  lua_rawseti(L, ix, 1);
  lua_newtable(L); /* weak keys: the index must not keep replaced modules alive */
  int names = lua_gettop(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, names);
  if (lua_istable(L, package)) /* else no package library: nothing is known by name */
    build(L, package, names);
  lua_pushvalue(L, names);
  lua_rawseti(L, ix, 2);
  lua_pushlightuserdata(L, (void *)&index_key);
  lua_pushvalue(L, ix);
  lua_rawset(L, LUA_REGISTRYINDEX);
  lua_replace(L, ix);
  lua_settop(L, ix);
}

enum lrebind_kind sm_lrebind_find(lua_State *L, int names, int idx, int tables)
{
  int t = lua_type(L, idx);
  if (!(t == LUA_TFUNCTION || t == LUA_TUSERDATA || (tables && t == LUA_TTABLE)))
    return LREBIND_NONE;
  lua_pushvalue(L, idx);
  lua_rawget(L, names);
  if (lua_isstring(L, -1))
    return LREBIND_MODULE;
  if (lua_istable(L, -1) && t != LUA_TTABLE) {
    lua_rawgeti(L, -1, 1);
    lua_rawgeti(L, -2, 2);
    lua_remove(L, -3);
    return LREBIND_FIELD;
  }
  lua_pop(L, 1);
  return LREBIND_NONE;
}
