/*
** Looking at actors from Lua (linfo.c): the scheduler-local halves of smarm.processes and
** smarm.info; init.lua asks the other schedulers through actors spawned there.
*/
#ifndef SMARM_LUA_LINFO_H
#define SMARM_LUA_LINFO_H

#include <lua.h>

#include "smarm.h"

/* The run's on_dump (smarm_config_t): an actor's traceback, indented, after its line. */
void sm_linfo_on_dump(const smarm_actor_info_t *actor, void *userdata);

/* Adds dump, _local_processes, _local_info and _scheduler_of to the module table at idx. */
void sm_linfo_register(lua_State *L, int module);

#endif
