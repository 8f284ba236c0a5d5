/*
** Moving a function to another VM (see ltransfer.h). The function itself, its upvalues and the
** arguments are values of one message (codec.h), so sharing between them is kept and an error
** names the place: `function[upvalue 'co'] is a thread`, `argument[2].cb is a thread`. The
** rebuilding runs in the new actor, in its own VM, on its own stack: require there may park.
*/
#include "ltransfer.h"

#include <lauxlib.h>

#include <string.h>

const char *sm_ltransfer_name_dot(const char *name)
{
  const char *dot = strrchr(name, '.');
  return dot && dot != name && dot[1] != '\0' ? dot : NULL;
}

void sm_ltransfer_build(lua_State *L, int fn_idx, int first, int nargs)
{
  lua_createtable(L, 0, 2);
  lua_pushvalue(L, fn_idx);
  lua_setfield(L, -2, lua_type(L, fn_idx) == LUA_TSTRING ? "name" : "function");
  lua_createtable(L, nargs, 1);
  for (int i = 0; i < nargs; i++) {
    lua_pushvalue(L, first + i);
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushinteger(L, nargs);
  lua_setfield(L, -2, "n");
  lua_setfield(L, -2, "argument");
}

int sm_ltransfer_call(lua_State *L, int tr)
{
  lua_getfield(L, tr, "name");
  if (lua_isstring(L, -1)) {
    const char *full = lua_tostring(L, -1);
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
    lua_getfield(L, tr, "function");
  }
  int fn = lua_gettop(L);
  lua_getfield(L, tr, "argument");
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
