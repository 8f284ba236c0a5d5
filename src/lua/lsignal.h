/*
** smarm.signal (lsignal.c): signal.wait for Lua actors through the IO thread.
*/
#ifndef SMARM_LUA_LSIGNAL_H
#define SMARM_LUA_LSIGNAL_H

#include <lua.h>

/* The signal named `name` ("SIGTERM"), or 0 when smarm does not know it: the names that
** smarm.signal.wait takes, and with `any` also those only sent (SIGKILL, SIGSTOP, SIGCONT,
** SIGALRM, SIGPIPE: process:kill). */
int sm_lsignal_number(const char *name, int any);

/* Sets module.signal (module: the stack index of the smarm.core table). */
void sm_lsignal_register(lua_State *L, int module);

#endif
