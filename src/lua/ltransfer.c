/*
** Moving a function to another VM (see ltransfer.h). The function itself, its upvalues and the
** arguments are the values of one message (codec.h: a transfer), so sharing between them is
** kept and an error names the place: `function[upvalue 'co'] is a thread`, `argument[2].cb is a
** thread`. The rebuilding runs in the new actor, in its own VM, on its own stack: require there
** may park.
*/
#include "ltransfer.h"

#include <lauxlib.h>

#include <string.h>

const char *sm_ltransfer_name_dot(const char *name)
{
  const char *dot = strrchr(name, '.');
  return dot && dot != name && dot[1] != '\0' ? dot : NULL;
}

int sm_ltransfer_call(lua_State *L, int first)
{
  int nargs = lua_gettop(L) - first;
  if (lua_type(L, first) == LUA_TSTRING) {
    const char *full = lua_tostring(L, first);
    const char *dot = sm_ltransfer_name_dot(full);
    if (!dot) /* spawn_on checked it: only a malformed block gets here */
      return luaL_error(L, "smarm.spawn_on: '%s' is not of the form module.function", full);
    luaL_checkstack(L, 4, "too many arguments");
    lua_getglobal(L, "require");
    lua_pushlstring(L, full, (size_t)(dot - full));
    lua_call(L, 1, 1);
    if (!lua_istable(L, -1))
      return luaL_error(L, "smarm.spawn_on: the module of '%s' is not a table", full);
    lua_getfield(L, -1, dot + 1);
    if (!lua_isfunction(L, -1))
      return luaL_error(L, "smarm.spawn_on: %s is not a function", full);
    lua_replace(L, first);
    lua_pop(L, 1);
  }
  lua_call(L, nargs, LUA_MULTRET);
  return lua_gettop(L) - first + 1;
}
