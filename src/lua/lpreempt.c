/*
** Preempting Lua actors (see lpreempt.h and docs/design.md, "Preemption").
**
** Arming. The ticker thread (core, preempt.c) signals a scheduler whose actor overstayed its
** slice; the handler runs on that scheduler's thread, so arming the hook (lua_sethook, count 1)
** races with nothing but the code it interrupted. If that code was in the middle of changing the
** VM's hook state itself, the arming can be lost; the ticker then asks again later. A user's hook
** wins: a VM with a hook set by debug.sethook is not armed (its actors are not preempted while
** it is set), and debug.sethook tells the handler to keep off while it runs (no_arm).
**
** Where. An actor is switched out at the end of a loop's iteration (sm_ljx_at_loop_edge): a
** runaway actor is nearly always in a loop, and straight-line code, such as `count = count + 1`
** on an upvalue shared with the scheduler's other actors, or a while loop's condition and the
** body it admits, is not cut in two, as it was not before preemption existed. The hook, armed at
** any instruction, steps one instruction at a time to the next edge; after EDGE_TRIES steps
** without one (tail-call recursion, which loops without a loop) it switches where it stands.
**
** Giving way. The hook runs where the interpreter stands (compiled code exits to it at its next
** hook check). It disarms itself, then switches only if the request is still for this slice
** (smarm_preempt_due) and the VM may switch here (ljx: never inside an FFI callback or compiled
** code, nor in a coroutine of the actor's once the VM has callbacks; hooks never run inside __gc
** finalizers): otherwise it is armed again for a little later.
** Around the switch the VM's hook flag and state are put aside (ljx), so that the other actors'
** code and hooks run as if no hook were active, and restored when the actor runs again. A kill
** taken in while it gives way ends the actor there, like one taken in smarm.yield.
*/
#include "lpreempt.h"

#include "ljx.h"
#include "smarm.h"

#include <lauxlib.h>

#include <stdatomic.h>

#define RETRY_COUNT 1000 /* instructions until the next look when the hook could not switch */
/* Looking for a loop's edge, one instruction at a time, for this many instructions; past them
** (code that runs on without a loop: tail-call recursion, a state machine of tail calls) the
** actor is switched wherever it stands, so that nothing escapes its slice for good. */
#define EDGE_TRIES 4096

/* lua_sethook with the signal handler kept off: a signal landing inside it would arm the hook
** in the middle of LuaJIT rewriting its dispatch table, which is not reentrant. */
static void set_hook(lvm_t *vm, lua_State *L, lua_Hook f, int count)
{
  vm->no_arm = 1;
  atomic_signal_fence(memory_order_seq_cst);
  lua_sethook(L, f, f ? LUA_MASKCOUNT : 0, count);
  atomic_signal_fence(memory_order_seq_cst);
  vm->no_arm = 0;
}

/* Why this actor must not switch here, beyond what ljx sees: a coroutine of the actor other than
** its own may run above an FFI callback of an outer frame (the walk of L's frames cannot see it),
** so once the VM has callbacks only the actor's own coroutine is switched from. */
static int must_wait(lua_State *L, const lvm_actor_head_t *actor)
{
  if (sm_ljx_cannot_preempt(L))
    return 1;
  return L != actor->co && sm_ljx_has_ffi_callbacks(L);
}

static void preempt_hook(lua_State *L, lua_Debug *ar)
{
  (void)ar;
  lvm_t *vm = this_vm();
  if (!vm) { /* not a scheduler's thread any more */
    lua_sethook(L, NULL, 0, 0);
    return;
  }
  set_hook(vm, L, NULL, 0);
  const lvm_actor_head_t *actor = smarm_actor_data();
  if (!actor || !smarm_preempt_due()) {
    vm->edge_tries = 0;
    return; /* a late hook: the actor gave way, or another one runs now */
  }
  if (must_wait(L, actor)) {
    set_hook(vm, L, preempt_hook, RETRY_COUNT);
    return;
  }
  if (!sm_ljx_at_loop_edge(L) && ++vm->edge_tries < EDGE_TRIES) { /* see the top */
    set_hook(vm, L, preempt_hook, 1);
    return;
  }
  vm->edge_tries = 0;
  ljx_hook_state_t st;
  sm_ljx_hook_suspend(L, &st);
  smarm_preempt();
  sm_ljx_hook_resume(L, &st);
}

void sm_lpreempt_arm(lvm_t *vm)
{
  lua_State *L = vm->L;
  if (!L || vm->no_arm)
    return;
  atomic_signal_fence(memory_order_seq_cst);
  lua_Hook h = lua_gethook(L);
  if (h == preempt_hook) /* the dispatch table may be half rewritten (an arming that was lost in
                            an update it interrupted): a change of mode rewrites all of it */
    lua_sethook(L, NULL, 0, 0);
  else if (h != NULL)
    return; /* a user's hook */
  lua_sethook(L, preempt_hook, LUA_MASKCOUNT, 1);
}

void sm_lpreempt_disarm(lua_State *L)
{
  if (lua_gethook(L) == preempt_hook)
    lua_sethook(L, NULL, 0, 0);
}

/* debug.sethook(...) with the arming kept off while it changes the hook. */
static int sethook(lua_State *L)
{
  lvm_t *vm = this_vm();
  if (vm)
    vm->no_arm = 1;
  atomic_signal_fence(memory_order_seq_cst);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  int status = lua_pcall(L, lua_gettop(L) - 1, 0, 0);
  atomic_signal_fence(memory_order_seq_cst);
  if (vm)
    vm->no_arm = 0;
  if (status != 0)
    return lua_error(L);
  return 0;
}

void sm_lpreempt_wrap_sethook(lua_State *L)
{
  lua_getglobal(L, "debug");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  lua_getfield(L, -1, "sethook");
  if (lua_tocfunction(L, -1) == sethook || !lua_isfunction(L, -1)) {
    lua_pop(L, 2);
    return;
  }
  lua_pushcclosure(L, sethook, 1);
  lua_setfield(L, -2, "sethook");
  lua_pop(L, 1);
}
