/*
** smarm.tcp (ltcp.c): TCP sockets for Lua actors through the IO thread.
*/
#ifndef SMARM_LUA_LTCP_H
#define SMARM_LUA_LTCP_H

#include <lua.h>

/* Sets module.tcp (module: the stack index of the smarm.core table). */
void ltcp_register(lua_State *L, int module);

#endif
