/*
** smarm.fs (lio.c): files for Lua actors through the IO thread.
*/
#ifndef SMARM_LUA_LIO_H
#define SMARM_LUA_LIO_H

#include <lua.h>

/* Sets module.fs (module: the stack index of the smarm.core table). */
void lio_register(lua_State *L, int module);

#endif
