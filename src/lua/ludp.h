/*
** smarm.udp (ludp.c): UDP sockets for Lua actors through the IO thread. Sockets travel in
** messages as handles of their own kind (lhandle.h), which sm_ludp_register registers.
*/
#ifndef SMARM_LUA_LUDP_H
#define SMARM_LUA_LUDP_H

#include <lua.h>

/* Sets module.udp (module: the stack index of the smarm.core table). */
void sm_ludp_register(lua_State *L, int module);

#endif
