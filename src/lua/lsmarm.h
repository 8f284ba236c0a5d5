/*
** What lsmarm.c (the binding's module) offers the other binding files: pids for the codec, and
** the preload that the executable and every new VM use to find `smarm.core`.
*/
#ifndef SMARM_LUA_LSMARM_H
#define SMARM_LUA_LSMARM_H

#include "smarm.h"

#include <lua.h>

/* Push the interned pid value of this VM / read one (returns 0 if idx is not a pid). */
void lsmarm_push_pid(lua_State *L, smarm_pid_t pid);
int lsmarm_to_pid(lua_State *L, int idx, smarm_pid_t *out);

/* Runs an IO request for the calling actor (io_call_timeout; SMARM_FOREVER: no limit) under the
** binding's parking rules: raises "smarm.<fname>: ..." outside an actor or where parking is
** refused; else returns 0 or the error (the call's, else the request's). */
struct io_req;
int lsmarm_io_call(lua_State *L, struct io_req *req, int64_t timeout_ns, const char *fname);

/* A timeout in seconds as nanoseconds: SMARM_FOREVER for NaN, negative or absurdly long ones. */
int64_t lsmarm_timeout_ns(lua_Number seconds);

/* Which run is going on: a number that changes when a run starts and again when it ends, so a
** handle (socket, file) stamped with it at its making is known stale once its run is over. */
uint32_t lsmarm_run_generation(void);

/* package.preload["smarm.core"] = the binding, in L's VM. */
void lsmarm_preload(lua_State *L);

int luaopen_smarm_core(lua_State *L);

#endif
