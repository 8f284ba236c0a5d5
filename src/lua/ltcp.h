/*
** smarm.tcp (ltcp.c): TCP sockets for Lua actors through the IO thread. Sockets travel in
** messages as handles of their own kind (lhandle.h), which sm_ltcp_register registers.
*/
#ifndef SMARM_LUA_LTCP_H
#define SMARM_LUA_LTCP_H

#include <lua.h>

/* Sets module.tcp (module: the stack index of the smarm.core table). */
void sm_ltcp_register(lua_State *L, int module);

#endif
