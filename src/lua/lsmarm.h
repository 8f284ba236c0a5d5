/*
** The binding's module `smarm.core` (lsmarm.c), the top of the binding: what the executable
** (main.c) and every new VM use to find it. The other binding files sit below it (see lsmarm.c's
** opening comment for the map).
*/
#ifndef SMARM_LUA_LSMARM_H
#define SMARM_LUA_LSMARM_H

#include <lua.h>

/* package.preload["smarm.core"] = the binding, in L's VM. */
void sm_lsmarm_preload(lua_State *L);

__attribute__((visibility("default"))) int luaopen_smarm_core(lua_State *L);

#endif
