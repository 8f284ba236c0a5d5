/* Benchmark support for Lua (lbench.c): smarm.clock, smarm.cycles and smarm.histogram. */
#ifndef SMARM_LUA_LBENCH_H
#define SMARM_LUA_LBENCH_H

#include <lua.h>

/* Adds clock, cycles and histogram to the module table at index `module`. */
void sm_lbench_register(lua_State *L, int module);

#endif
