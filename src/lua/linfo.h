/*
** Looking at actors from Lua (linfo.c): the scheduler-local halves of smarm.processes and
** smarm.info; init.lua asks the other schedulers through actors spawned there.
*/
#ifndef SMARM_LUA_LINFO_H
#define SMARM_LUA_LINFO_H

#include <lua.h>

/* Adds _local_processes and _local_info to the module table at idx. */
void sm_linfo_register(lua_State *L, int module);

#endif
