/*
** The standard library's C functions that call back into Lua for every element (string.gsub
** with a function, table.sort with a comparator), checked for C stack before they run
** (lreentry.c). Each nesting of them costs C stack (gsub: its 8 KiB buffer) that LuaJIT counts
** nowhere, so deep enough recursion through them used to reach the actor's guard page and abort
** the process; now it raises a catchable error in that actor, as LuaJIT's own stack limits do.
*/
#ifndef SMARM_LUA_LREENTRY_H
#define SMARM_LUA_LREENTRY_H

#include <lua.h>

/* C stack an actor keeps free below the checked functions: room for the function itself, the
** Lua code up to the next check, and the unwinding of the error. */
#define LREENTRY_RESERVE (64 * 1024)

/* Replaces string.gsub, table.sort, string.format (whose %s may call a __tostring that calls
** it again), coroutine.create and coroutine.wrap (a coroutine that resumes a new one nests on
** the C stack) in L's VM by checked versions (once per VM). */
void sm_lreentry_wrap(lua_State *L);

#endif
