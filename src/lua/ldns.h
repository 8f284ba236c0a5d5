/*
** smarm.dns (ldns.c): getaddrinfo for Lua actors through the IO thread.
*/
#ifndef SMARM_LUA_LDNS_H
#define SMARM_LUA_LDNS_H

#include <lua.h>

/* Sets module.dns (module: the stack index of the smarm.core table). */
void sm_ldns_register(lua_State *L, int module);

#endif
