/*
** Message timers in Lua (ltimer.c): smarm.send_after and smarm.cancel_timer over the core's
** smarm_send_after / smarm_cancel_timer.
*/
#ifndef SMARM_LUA_LTIMER_H
#define SMARM_LUA_LTIMER_H

#include <lua.h>

/* Sets module.send_after and module.cancel_timer (module: the stack index of smarm.core). */
void sm_ltimer_register(lua_State *L, int module);

#endif
