/*
** smarm.send through the FFI for a number or a string to a pid, so that compiled code stays
** compiled across it (lfast.c); everything else goes to the classic send.
*/
#ifndef SMARM_LUA_LFAST_H
#define SMARM_LUA_LFAST_H

#include <lua.h>

/* Replaces module.send (the classic l_send) by the Lua function that tries the FFI path first. */
void sm_lfast_register(lua_State *L, int module);

#endif
