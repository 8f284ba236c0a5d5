/*
** Checked string.gsub, table.sort and string.format (see lreentry.h). The checked gsub and sort
** are C closures holding the original: each compares smarm_stack_headroom() with the reserve,
** then calls the original's C function directly on the same frame (both are plain
** lua_CFunctions of LuaJIT's library, not fast functions), so a call costs one more C call and
** no re-entry into the VM. Neither is compiled by LuaJIT's JIT (no recorder), so traces see no
** difference.
**
** string.format has a recorder: the JIT compiles its calls, and a C closure around it would
** make every compiled call a trace exit (+45% on a loop of format calls, measured). Its checked
** version is a Lua function that asks smarm_stack_headroom() through an FFI function pointer,
** which the JIT compiles to a direct call, then calls the original: compiled code pays a call
** and a compare. (It recurses through C only when a %s argument's __tostring calls format.)
*/
#include "lreentry.h"

#include "smarm.h"

#include <lauxlib.h>

#include <stdint.h>

static int checked(lua_State *L)
{
  if (smarm_stack_headroom() < LREENTRY_RESERVE)
    return luaL_error(L, "stack overflow (%s nested too deeply for the actor's C stack)",
                      lua_tostring(L, lua_upvalueindex(2)));
  lua_CFunction original = lua_tocfunction(L, lua_upvalueindex(1));
  return original(L);
}

static void wrap(lua_State *L, const char *lib, const char *fn, const char *what)
{
  lua_getglobal(L, lib);
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  lua_getfield(L, -1, fn);
  if (!lua_iscfunction(L, -1) || lua_tocfunction(L, -1) == checked) { /* absent, or done */
    lua_pop(L, 2);
    return;
  }
  lua_pushstring(L, what);
  lua_pushcclosure(L, checked, 2);
  lua_setfield(L, -2, fn);
  lua_pop(L, 1);
}

/* The checked string.format, made from the original, the headroom function (an FFI function
** pointer), the reserve and error. */
static const char format_maker[] =
  "local format, headroom, reserve, error = ...\n"
  "return function(...)\n"
  "  if headroom() < reserve then\n"
  "    error(\"stack overflow (string.format: __tostring nested too deeply for the actor's C \""
  " ..\n"
  "      \"stack)\", 2)\n"
  "  end\n"
  "  local s = format(...) -- not a tail call: its errors name 'format'\n"
  "  return s\n"
  "end\n";

static int wrap_format_protected(lua_State *L)
{
  lua_getglobal(L, "string");
  if (!lua_istable(L, -1))
    return 0;
  lua_getfield(L, -1, "format");
  if (!lua_iscfunction(L, -1)) /* absent, or done */
    return 0;
  lua_getglobal(L, "require");
  lua_pushliteral(L, "ffi");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "cast"); /* ffi.cast("size_t (*)(void)", smarm_stack_headroom) */
  lua_pushliteral(L, "size_t (*)(void)");
  lua_pushlightuserdata(L, (void *)(uintptr_t)smarm_stack_headroom);
  lua_call(L, 2, 1);
  if (luaL_loadbuffer(L, format_maker, sizeof format_maker - 1, "=string.format") != 0)
    return lua_error(L);
  lua_pushvalue(L, -4);                     /* the original */
  lua_pushvalue(L, -3);                     /* headroom */
  lua_pushnumber(L, LREENTRY_RESERVE);
  lua_getglobal(L, "error");
  lua_call(L, 4, 1);
  lua_setfield(L, -5, "format");
  return 0;
}

void sm_lreentry_wrap(lua_State *L)
{
  wrap(L, "string", "gsub", "string.gsub callbacks");
  wrap(L, "table", "sort", "table.sort comparators");
  /* without the FFI (a LuaJIT built without it) format stays as it is */
  if (lua_cpcall(L, wrap_format_protected, NULL) != 0)
    lua_pop(L, 1);
}
