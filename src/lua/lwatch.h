/*
** smarm.fs.watch (lwatch.c): file-system change events as messages.
*/
#ifndef SMARM_LUA_LWATCH_H
#define SMARM_LUA_LWATCH_H

#include <lua.h>

/* Sets module.fs.watch (module: the stack index of the smarm.core table; fs registered). */
void sm_lwatch_register(lua_State *L, int module);

#endif
