/*
** smarm.process (lproc.c): process.run for Lua actors through the IO thread.
*/
#ifndef SMARM_LUA_LPROC_H
#define SMARM_LUA_LPROC_H

#include <lua.h>

/* Sets module.process (module: the stack index of the smarm.core table). */
void sm_lproc_register(lua_State *L, int module);

#endif
