/*
** smarm.tcp (ltcp.c): TCP sockets for Lua actors through the IO thread. Sockets travel in
** messages as handles of their own kind (lhandle.h), which sm_ltcp_register registers.
*/
#ifndef SMARM_LUA_LTCP_H
#define SMARM_LUA_LTCP_H

#include <lua.h>

#include <stdint.h>

/* Sets module.tcp (module: the stack index of the smarm.core table). */
void sm_ltcp_register(lua_State *L, int module);

/* Pushes a new Unix connection's userdata for the IO socket id (descriptor fd), owned by the
** running actor (a spawned program's pipe: lproc.c). */
void sm_ltcp_push_unix_conn(lua_State *L, uint64_t id, int fd);

#endif
