/*
** Moving a function to another VM (see ltransfer.h). Building runs in the spawner's VM and only
** reads it; the upvalues that travel by value are checked with the codec right away, so an
** error names the upvalue rather than "argument". Rebuilding runs in the new actor, in its own
** VM, on its own stack: require there may park.
*/
#include "ltransfer.h"

#include "codec.h"

#include <lauxlib.h>

#include <stdio.h>
#include <string.h>

const char *sm_ltransfer_name_dot(const char *name)
{
  const char *dot = strrchr(name, '.');
  return dot && dot != name && dot[1] != '\0' ? dot : NULL;
}

void sm_ltransfer_build(lua_State *L, int fn_idx, int first, int nargs)
{
  lua_createtable(L, 0, 3);
  int tr = lua_gettop(L);
  if (lua_type(L, fn_idx) == LUA_TSTRING) {
    lua_pushvalue(L, fn_idx);
    lua_setfield(L, tr, "name");
  } else {
    if (lua_iscfunction(L, fn_idx))
      luaL_argerror(L, fn_idx, "a C function cannot move to another scheduler");
    /* bytecode, with debug info so tracebacks keep names and lines */
    lua_getglobal(L, "string");
    lua_getfield(L, -1, "dump");
    lua_remove(L, -2);
    lua_pushvalue(L, fn_idx);
    lua_call(L, 1, 1);
    lua_setfield(L, tr, "code");
    /* upvalues: modules by name, data by value */
    lua_newtable(L);
    int ups = lua_gettop(L);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaded");
    lua_remove(L, -2);
    int loaded = lua_gettop(L);
    lua_pushvalue(L, LUA_GLOBALSINDEX);
    int globals = lua_gettop(L);
    const char *name;
    for (int i = 1; (name = lua_getupvalue(L, fn_idx, i)) != NULL; i++) {
      int v = lua_gettop(L);
      lua_createtable(L, 0, 1);
      int entry = v + 1;
      int found = 0;
      int t = lua_type(L, v);
      if (t == LUA_TTABLE || t == LUA_TFUNCTION || t == LUA_TUSERDATA) {
        /* A loaded module (by its package.loaded name) or a global (by its name): re-bound
        ** in the target VM rather than copied. */
        static const char *const how[2] = {"module", "global"};
        int where[2] = {loaded, globals};
        for (int w = 0; w < 2 && !found; w++) {
          lua_pushnil(L);
          while (lua_next(L, where[w]) != 0) {
            if (lua_type(L, -2) == LUA_TSTRING && lua_rawequal(L, -1, v)) {
              lua_pop(L, 1);
              lua_setfield(L, entry, how[w]); /* pops the key */
              found = 1;
              break;
            }
            lua_pop(L, 1);
          }
        }
      }
      if (!found && t == LUA_TFUNCTION) {
        /* A function of a loaded module (local insert = table.insert): module + field. */
        lua_pushnil(L);
        while (!found && lua_next(L, loaded) != 0) {
          if (lua_type(L, -2) == LUA_TSTRING && lua_istable(L, -1)) {
            int mod = lua_gettop(L);
            lua_pushnil(L);
            while (lua_next(L, mod) != 0) {
              if (lua_type(L, -2) == LUA_TSTRING && lua_rawequal(L, -1, v)) {
                lua_pop(L, 1);
                lua_setfield(L, entry, "field"); /* pops the field name */
                lua_pushvalue(L, mod - 1);
                lua_setfield(L, entry, "module");
                found = 1;
                break;
              }
              lua_pop(L, 1);
            }
          }
          lua_settop(L, entry + (found ? 0 : 1)); /* keep the outer key while iterating */
        }
        lua_settop(L, entry);
      }
      if (!found) {
        /* Data: check now that it can travel, naming the upvalue if not. */
        char root[96];
        snprintf(root, sizeof root, "upvalue '%s'", name[0] ? name : "?");
        codec_moves_t moves;
        sm_codec_abandon(sm_codec_encode(L, v, root, &moves));
        lua_pushvalue(L, v);
        lua_setfield(L, entry, "v");
      }
      lua_pushvalue(L, entry);
      lua_rawseti(L, ups, i);
      lua_settop(L, globals);
    }
    lua_pop(L, 1); /* globals */
    lua_pop(L, 1); /* loaded */
    lua_setfield(L, tr, "up");
  }
  lua_createtable(L, nargs, 1);
  for (int i = 0; i < nargs; i++) {
    lua_pushvalue(L, first + i);
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushinteger(L, nargs);
  lua_setfield(L, -2, "n");
  lua_setfield(L, tr, "args");
}

int sm_ltransfer_call(lua_State *L, int tr)
{
  lua_getfield(L, tr, "name");
  if (lua_isstring(L, -1)) {
    size_t n;
    const char *full = lua_tolstring(L, -1, &n);
    const char *dot = sm_ltransfer_name_dot(full);
    if (!dot) /* spawn_on checked it: only a malformed block gets here */
      return luaL_error(L, "smarm.spawn_on: '%s' is not of the form module.function", full);
    lua_getglobal(L, "require");
    lua_pushlstring(L, full, (size_t)(dot - full));
    lua_call(L, 1, 1);
    if (!lua_istable(L, -1))
      return luaL_error(L, "smarm.spawn_on: the module of '%s' is not a table", full);
    lua_getfield(L, -1, dot + 1);
    if (!lua_isfunction(L, -1))
      return luaL_error(L, "smarm.spawn_on: %s is not a function", full);
  } else {
    lua_pop(L, 1);
    lua_getfield(L, tr, "code");
    size_t n;
    const char *code = lua_tolstring(L, -1, &n);
    if (!code || luaL_loadbuffer(L, code, n, "=spawn_on") != 0)
      return luaL_error(L, "smarm.spawn_on: cannot load the function: %s",
                        code ? lua_tostring(L, -1) : "no code");
    int fn = lua_gettop(L);
    lua_getfield(L, tr, "up");
    int ups = lua_gettop(L);
    for (int i = 1;; i++) {
      lua_rawgeti(L, ups, i);
      if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        break;
      }
      lua_getfield(L, -1, "module");
      if (lua_isstring(L, -1)) {
        lua_getglobal(L, "require");
        lua_insert(L, -2);
        lua_call(L, 1, 1);
        lua_getfield(L, -2, "field");
        if (lua_isstring(L, -1)) {
          lua_gettable(L, -2);
          lua_remove(L, -2);
        } else {
          lua_pop(L, 1);
        }
      } else {
        lua_pop(L, 1);
        lua_getfield(L, -1, "global");
        if (lua_isstring(L, -1)) {
          lua_rawget(L, LUA_GLOBALSINDEX);
        } else {
          lua_pop(L, 1);
          lua_getfield(L, -1, "v");
        }
      }
      lua_setupvalue(L, fn, i);
      lua_pop(L, 1);
    }
    lua_settop(L, fn);
  }
  int fn = lua_gettop(L);
  lua_getfield(L, tr, "args");
  int args = lua_gettop(L);
  lua_getfield(L, args, "n");
  int nargs = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  luaL_checkstack(L, nargs + 2, "too many arguments");
  lua_pushvalue(L, fn);
  for (int i = 1; i <= nargs; i++)
    lua_rawgeti(L, args, i);
  lua_call(L, nargs, LUA_MULTRET);
  return lua_gettop(L) - args;
}
