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
** version is a Lua function that asks stack_low() (below) through an FFI function pointer,
** which the JIT compiles to a direct call, then calls the original: compiled code pays a call
** and a compare. (It recurses through C only when a %s argument's __tostring calls format.)
**
** coroutine.resume nests on the C stack too (a coroutine that resumes another, a recursive
** generator over a deep tree), but a check in resume would cost every resume a call (1.8x a
** resume, measured). The check sits instead at the start of every coroutine's body:
** coroutine.create and coroutine.wrap give the original a function that checks (a plain C
** call: a coroutine starts in the interpreter), then calls the caller's. A nesting of new
** coroutines raises in the innermost one, where its resumer sees it (resume returns false and
** the error; wrap raises it). Resumes cost nothing more; a create and its first resume cost
** 230 ns instead of 140 (measured). Nesting by resuming existing coroutines deeper and deeper
** is not checked.
*/
#include "lreentry.h"

#include "lrebind.h"

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
  lua_pushvalue(L, -1);
  sm_lrebind_replaced(L, lib, fn);
  lua_pushstring(L, what);
  lua_pushcclosure(L, checked, 2);
  lua_setfield(L, -2, fn);
  lua_pop(L, 1);
}

/* The checked string.format, made from the original, stack_low (an FFI function pointer) and
** error. */
static const char format_maker[] =
  "local format, stack_low, error = ...\n"
  "return function(...)\n"
  "  if stack_low() ~= 0 then\n"
  "    error(\"stack overflow (string.format: __tostring nested too deeply for the actor's C \""
  " ..\n"
  "      \"stack)\", 2)\n"
  "  end\n"
  "  return format(...) -- a tail call: its errors read as the original's\n"
  "end\n";

/* The checked coroutine.create and coroutine.wrap, made from the originals and the same. */
static const char coroutine_maker[] =
  "local create, wrap, check, type = ...\n"
  "local function checked(f)\n"
  "  return function(...)\n"
  "    check()\n"
  "    return f(...)\n"
  "  end\n"
  "end\n"
  "return function(f)\n"
  "  return create(type(f) == 'function' and checked(f) or f) -- else its own error\n"
  "end, function(f)\n"
  "  return wrap(type(f) == 'function' and checked(f) or f)\n"
  "end\n";

/* 1 when less than the reserve is left below the caller: what the Lua-side checks call (an int,
** which the FFI returns as a plain number; a size_t would come back as a boxed 64-bit cdata). */
static int stack_low(void) { return smarm_stack_headroom() < LREENTRY_RESERVE; }

/* Pushes ffi.cast("int (*)(void)", stack_low): a call the JIT compiles. */
static void push_stack_low(lua_State *L)
{
  lua_getglobal(L, "require");
  lua_pushliteral(L, "ffi");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "cast");
  lua_remove(L, -2);
  lua_pushliteral(L, "int (*)(void)");
  lua_pushlightuserdata(L, (void *)(uintptr_t)stack_low);
  lua_call(L, 2, 1);
}

/* A new coroutine's first step (not compiled: a coroutine's start is the interpreter's, where a
** plain C call costs less than an FFI one). */
static int coroutine_check(lua_State *L)
{
  if (smarm_stack_headroom() < LREENTRY_RESERVE) {
    lua_pushliteral(L, "stack overflow (coroutines nested too deeply for the actor's C stack)");
    return lua_error(L);
  }
  return 0;
}

static int wrap_coroutine_protected(lua_State *L)
{
  lua_getglobal(L, "coroutine");
  if (!lua_istable(L, -1))
    return 0;
  lua_getfield(L, -1, "create");
  lua_getfield(L, -2, "wrap");
  if (!lua_iscfunction(L, -2) || !lua_iscfunction(L, -1)) /* absent, or done */
    return 0;
  lua_pushvalue(L, -2);
  sm_lrebind_replaced(L, "coroutine", "create");
  lua_pushvalue(L, -1);
  sm_lrebind_replaced(L, "coroutine", "wrap");
  if (luaL_loadbuffer(L, coroutine_maker, sizeof coroutine_maker - 1, "=coroutine") != 0)
    return lua_error(L);
  lua_insert(L, -3);
  lua_pushcfunction(L, coroutine_check);
  lua_getglobal(L, "type");
  lua_call(L, 4, 2);
  lua_setfield(L, -3, "wrap");
  lua_setfield(L, -2, "create");
  return 0;
}

static int wrap_format_protected(lua_State *L)
{
  lua_getglobal(L, "string");
  if (!lua_istable(L, -1))
    return 0;
  lua_getfield(L, -1, "format");
  if (!lua_iscfunction(L, -1)) /* absent, or done */
    return 0;
  lua_pushvalue(L, -1);
  sm_lrebind_replaced(L, "string", "format");
  push_stack_low(L);
  if (luaL_loadbuffer(L, format_maker, sizeof format_maker - 1, "=string.format") != 0)
    return lua_error(L);
  lua_pushvalue(L, -3);                     /* the original */
  lua_pushvalue(L, -3);                     /* stack_low */
  lua_getglobal(L, "error");
  lua_call(L, 3, 1);
  lua_setfield(L, -4, "format");
  return 0;
}

void sm_lreentry_wrap(lua_State *L)
{
  wrap(L, "string", "gsub", "string.gsub callbacks");
  wrap(L, "table", "sort", "table.sort comparators");
  /* without the FFI (a LuaJIT built without it) format stays as it is */
  if (lua_cpcall(L, wrap_format_protected, NULL) != 0)
    lua_pop(L, 1);
  if (lua_cpcall(L, wrap_coroutine_protected, NULL) != 0)
    lua_pop(L, 1);
}
