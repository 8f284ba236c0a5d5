/*
** Pids and refs in Lua (lpid.c): full userdata interned per VM, so that == and table keys work:
** one VM never holds two userdata for the same pid (or ref) while either is reachable. A pid
** names an actor on any scheduler; a ref is a value unique in the process (smarm_make_ref). Both
** are only ever copied (between VMs: by the codec, as their 64 bits).
*/
#ifndef SMARM_LUA_LPID_H
#define SMARM_LUA_LPID_H

#include "lvm.h"
#include "smarm.h"

#include <lua.h>

/* Push the interned pid value of this VM / read one (returns 0 if idx is not a pid). Only from
** a scheduler's thread whose VM has its bits (sm_lpid_cache_bits). */
void sm_lsmarm_push_pid(lua_State *L, smarm_pid_t pid);
int sm_lsmarm_to_pid(lua_State *L, int idx, smarm_pid_t *out);
/* The same from a userdata's payload (p: what the FFI passes for a userdata argument). */
int sm_lpid_payload_pid(const void *p, smarm_pid_t *out);
/* Pushes the metatable of pids, or of reply handles (the binding's own: no other value gets
** them). */
void sm_lpid_push_pid_mt(lua_State *L);
void sm_lpid_push_from_mt(lua_State *L);

/* The same for refs (smarm.ref(), monitors): printed #Ref<0.high.low>. */
void sm_lsmarm_push_ref(lua_State *L, smarm_ref_t ref);
int sm_lsmarm_to_ref(lua_State *L, int idx, smarm_ref_t *out);
/* Pushes a ref that this VM has never seen (one just made by smarm_make_ref): no lookup. */
void sm_lsmarm_push_new_ref(lua_State *L, smarm_ref_t ref);

/* A call's reply handle (the request's `from`): the caller's pid and the call's alias, in a
** userdata that is not interned; from.pid and from.ref read them. */
void sm_lsmarm_push_from(lua_State *L, smarm_pid_t caller, smarm_ref_t alias);
int sm_lsmarm_to_from(lua_State *L, int idx, smarm_pid_t *caller, smarm_ref_t *alias);
/* The same from a userdata's payload (what the FFI passes for a userdata argument). */
int sm_lpid_payload_from(const void *p, smarm_pid_t *caller, smarm_ref_t *alias);

/* A message timer (smarm.send_after): its target and ref, in a userdata interned as pids are (one
** per timer in a VM: a table key), printed #Timer<...>, equal by value, sendable. `fresh`: a
** timer just made, which cannot be interned yet (no lookup). */
void sm_lsmarm_push_timer(lua_State *L, smarm_pid_t to, smarm_ref_t ref, int fresh);
int sm_lsmarm_to_timer(lua_State *L, int idx, smarm_pid_t *to, smarm_ref_t *ref);

/* Makes the pids' metatable and intern table in L's VM, once per VM (module load). */
void sm_lpid_open(lua_State *L);

/* Reads what pushes them into vm (a run's start, on the scheduler's thread): the registry keeps
** them for the VM's life, so nothing is let go at the run's end. */
void sm_lpid_cache_bits(lvm_t *vm);

#endif
