/*
** smarm.signal (lsignal.c): signal.wait for Lua actors through the IO thread.
*/
#ifndef SMARM_LUA_LSIGNAL_H
#define SMARM_LUA_LSIGNAL_H

#include <lua.h>

/* Sets module.signal (module: the stack index of the smarm.core table). */
void sm_lsignal_register(lua_State *L, int module);

#endif
