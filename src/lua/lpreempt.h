/*
** Preempting Lua actors (lpreempt.c): the core's on_preempt arms a debug hook on the scheduler's
** VM; the hook gives way where the actor's code stands, compiled loops included (the pinned
** LuaJIT is built with LUAJIT_ENABLE_CHECKHOOK: traces test the hook mask).
*/
#ifndef SMARM_LUA_LPREEMPT_H
#define SMARM_LUA_LPREEMPT_H

#include "lvm.h"

#include <lua.h>

#include <stdatomic.h>

/* The work of smarm_config_t.on_preempt for vm, the VM of the scheduler whose thread the signal
** handler interrupted: arms the hook unless a user's hook is set or being set. */
void sm_lpreempt_arm(lvm_t *vm);
/* After a run: takes the preemption hook off L's VM if it is still there (the caller's VM lives
** on). */
void sm_lpreempt_disarm(lua_State *L);
/* Wraps the VM's debug.sethook and debug.gethook (luaopen): in an actor they set and read the
** actor's own hook (lpreempt.c); elsewhere the originals, with no arming while a hook changes. */
void sm_lpreempt_wrap_sethook(lua_State *L);
/* After every switch into a Lua actor (sm_lpark_resumed, a preemption's return): makes the VM's
** hook the incoming actor's own, or none. Costs a load and a test while no actor of the process
** has one: sm_lpreempt_hooked counts them over every VM (relaxed: a scheduler reads its own
** VM's changes, which it made itself; another VM's only make it look closer, in the call). */
extern _Atomic int sm_lpreempt_hooked;
void sm_lpreempt_reconcile(lua_State *L);
static inline void sm_lpreempt_switched_in(lua_State *L)
{
  if (__builtin_expect(atomic_load_explicit(&sm_lpreempt_hooked, memory_order_relaxed) != 0, 0))
    sm_lpreempt_reconcile(L);
}
/* Before every switch out of a Lua actor (sm_lpark_check, a preemption): what is left of its own
** count hook's count, for its next switch in (lvm_actor_head_t.hook_left). Costs a load and a
** test while no actor of the process has a hook. */
void sm_lpreempt_note_left(lua_State *L);
static inline void sm_lpreempt_leave(lua_State *L)
{
  if (__builtin_expect(atomic_load_explicit(&sm_lpreempt_hooked, memory_order_relaxed) != 0, 0))
    sm_lpreempt_note_left(L);
}
/* The actor lets go of its own hook, if it has one: debug.sethook() in it, or its state freed
** (lsmarm.c's lactor_free). */
void sm_lpreempt_drop_hook(lvm_t *vm, lvm_actor_head_t *a);

#endif
