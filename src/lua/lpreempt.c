/*
** Preempting Lua actors (see lpreempt.h and docs/design.md, "Preemption").
**
** Arming. The ticker thread (core, preempt.c) signals a scheduler whose actor overstayed its
** slice; the handler runs on that scheduler's thread, so arming the hook (lua_sethook, count 1;
** over an actor's own count hook, a line bit: see below) races with nothing but the code it
** interrupted. If that code was in the middle of changing the VM's hook state itself, the
** arming can be lost; the ticker then asks again later, and the handler arms again. Every change
** of the hook from the VM's own thread keeps the handler off while it runs (no_arm). While the VM
** is in its trace compiler, the handler sets the hook without lua_sethook's trace abort and
** dispatch table rewrite, which would break the compiler's state machine under its feet; the
** hook then runs when the recorder sees the next instruction or the compiler is done
** (sm_ljx_sethook_in_compiler).
**
** Hooks of actors. LuaJIT has one hook per VM, shared by every actor of the scheduler. So an
** actor's debug.sethook records the hook on the actor (lvm_actor_head_t: the function's registry
** ref, mask, count) and installs actor_hook, which calls the function of the actor that set it;
** after every switch into an actor (sm_lpreempt_switched_in) the VM's hook is made the incoming
** actor's, or none. Nothing is done there while no actor of the VM has a hook (hooked_actors).
** A preemption due while an actor's hook is installed is armed over it, and the actor's own
** mask and count come back when the preemption is done. If that hook counts instructions, the
** signal handler never writes the count: the interpreter decrements it with a load and a store
** on some machines (aarch64), and a store that a signal lands before overwrites the arming, so
** the actor's count went uncounted for up to a whole period; and on every machine an arming that
** lands between the count reaching 0 and its test lost that event. The handler adds line events
** to the mask instead (ARMED_LINE), and the next line or count event does the preemption's work,
** the count untouched and exact. A handler whose line bit is lost to a mask update it
** interrupted leaves it for the ticker's next ask, or for the count's own event. Any other hook
** is armed with its mask plus a count of 1 (ARMED_COUNT, set by the handler only over a hook that
** does not count). Once in the hook, the preemption steps on with count events (ARMED_COUNT, set
** from the VM's own thread): actor_hook does the preemption's work on them and hands the other
** events to the user's function; those armed events count the actor's own instructions too
** (never armed for more than what is left of its count), so its own count events come as often
** as without a preemption: stepping to a loop's edge took them all, and a count hook set just
** before straight-line code could miss every event. A hook set outside any
** actor (before smarm.run) stays VM-wide, as in plain LuaJIT, and a VM with one is not
** preempted.
**
** Where. An actor is switched out at the end of a loop's iteration (sm_ljx_at_loop_edge): a
** runaway actor is nearly always in a loop, and straight-line code, such as `count = count + 1`
** on an upvalue shared with the scheduler's other actors, or a while loop's condition and the
** body it admits, is not cut in two, as it was not before preemption existed. The hook, armed at
** any instruction, steps one instruction at a time to the next edge; after EDGE_TRIES steps
** without one (tail-call recursion, which loops without a loop) it switches where it stands,
** but never inside smarm.receive's Lua function (lfast.c), which reads the VM's one slot after
** its take: it steps out of it first.
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
#include <string.h>

#define RETRY_COUNT 1000 /* instructions until the next look when the hook could not switch */
/* Looking for a loop's edge, one instruction at a time, for this many instructions; past them
** (code that runs on without a loop: tail-call recursion, a state machine of tail calls) the
** actor is switched wherever it stands, so that nothing escapes its slice for good. */
#define EDGE_TRIES 4096

/* lvm_t.hook_armed: how a preemption is armed over the installed actor's hook (see the top). */
enum { NOT_ARMED, ARMED_COUNT, ARMED_LINE };

/* lua_sethook with the signal handler kept off: a signal landing inside it would arm the hook
** in the middle of LuaJIT rewriting its dispatch table, which is not reentrant. `armed` is the
** new hook_armed (with armed_count: the count it is armed with), and `left` the instructions
** left of the count (0: all of it), set in the same window (a signal between would leave them
** stale, or lengthen an arming's count). */
static void set_hook_armed(lvm_t *vm, lua_State *L, lua_Hook f, int mask, int count, int armed,
                           int left)
{
  vm->no_arm = 1;
  atomic_signal_fence(memory_order_seq_cst);
  vm->hook_armed = armed;
  vm->armed_count = armed == ARMED_COUNT ? count : 0;
  lua_sethook(L, f, f ? mask : 0, count);
  sm_ljx_set_hook_left(L, left);
  atomic_signal_fence(memory_order_seq_cst);
  vm->no_arm = 0;
}

/* The same, disarmed. */
static void set_hook(lvm_t *vm, lua_State *L, lua_Hook f, int mask, int count, int left)
{
  set_hook_armed(vm, L, f, mask, count, NOT_ARMED, left);
}

static void preempt_hook(lua_State *L, lua_Debug *ar);
static void actor_hook(lua_State *L, lua_Debug *ar);

/* From inside a hook: asks for the hook again after `count` instructions, over the installed
** actor's hook if there is one. */
static void rearm(lvm_t *vm, lua_State *L, int count)
{
  if (vm->hook_owner) {
    if ((vm->hook_mask & LUA_MASKCOUNT) && count > vm->own_count_left)
      count = vm->own_count_left > 0 ? vm->own_count_left : 1;
    set_hook_armed(vm, L, actor_hook, vm->hook_mask | LUA_MASKCOUNT, count, ARMED_COUNT, 0);
  } else {
    set_hook(vm, L, preempt_hook, LUA_MASKCOUNT, count, 0);
  }
}

/* From inside a hook: the preemption's hook off; the installed actor's own hook stays, with what
** was left of its count. */
static void disarm(lvm_t *vm, lua_State *L)
{
  if (vm->hook_owner) {
    set_hook(vm, L, actor_hook, vm->hook_mask, vm->hook_count, vm->own_count_left);
  } else {
    set_hook(vm, L, NULL, 0, 0, 0);
  }
}

/* Installs a's own hook in the VM (a NULL or without one: no hook). */
static void install(lvm_t *vm, lua_State *L, lvm_actor_head_t *a)
{
  if (a && a->hook_ref) {
    vm->hook_owner = a;
    vm->hook_mask = a->hook_mask;
    vm->hook_count = a->hook_count;
    vm->own_count_left = a->hook_count;
    set_hook(vm, L, actor_hook, a->hook_mask, a->hook_count, a->hook_left);
    a->hook_left = 0;
  } else {
    vm->hook_owner = NULL;
    vm->hook_armed = NOT_ARMED; /* read by the handler only while actor_hook is installed */
    if (lua_gethook(L) == actor_hook)
      set_hook(vm, L, NULL, 0, 0, 0);
  }
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

/* The preemption's work, in a hook: gives way here, or asks to be called again. */
static void preempt_step(lvm_t *vm, lua_State *L)
{
  disarm(vm, L);
  const lvm_actor_head_t *actor = smarm_actor_data();
  if (!actor || !smarm_preempt_due()) {
    vm->edge_tries = 0;
    return; /* a late hook: the actor gave way, or another one runs now */
  }
  if (must_wait(L, actor)) {
    rearm(vm, L, RETRY_COUNT);
    return;
  }
  /* The FFI receive between its take and its read of the VM's one slot (lfast.c): a switch
  ** there would let another actor's receive overwrite it. It has no loop: step out of it. */
  if (vm->receive_fn && sm_ljx_running_function(L) == vm->receive_fn) {
    rearm(vm, L, 1);
    return;
  }
  if (!sm_ljx_at_loop_edge(L) && ++vm->edge_tries < EDGE_TRIES) { /* see the top */
    rearm(vm, L, 1);
    return;
  }
  vm->edge_tries = 0;
  sm_lpreempt_leave(L); /* disarmed above: the actor's own count is LuaJIT's again */
  ljx_hook_state_t st;
  sm_ljx_hook_suspend(L, &st);
  smarm_preempt();
  sm_ljx_hook_resume(L, &st);
  sm_lpreempt_switched_in(L);
}

static void preempt_hook(lua_State *L, lua_Debug *ar)
{
  (void)ar;
  lvm_t *vm = this_vm();
  if (!vm) { /* not a scheduler's thread any more */
    lua_sethook(L, NULL, 0, 0);
    return;
  }
  preempt_step(vm, L);
}

static const char *const hook_event_names[] = {"call", "return", "line", "count", "tail return"};

/* Calls the installed actor's own hook function, as debug.sethook's hook would. */
static void call_own_hook(lvm_t *vm, lua_State *L, lua_Debug *ar)
{
  const lvm_actor_head_t *a = vm->hook_owner;
  if (!a || a != smarm_actor_data() || (unsigned)ar->event >= 5)
    return;
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->hook_ref);
  lua_pushstring(L, hook_event_names[ar->event]);
  if (ar->currentline >= 0)
    lua_pushinteger(L, ar->currentline);
  else
    lua_pushnil(L);
  lua_call(L, 2, 0);
}

/* The hook of an actor's own (see the top). */
static void actor_hook(lua_State *L, lua_Debug *ar)
{
  lvm_t *vm = this_vm();
  if (!vm) {
    lua_sethook(L, NULL, 0, 0);
    return;
  }
  if (ar->event == LUA_HOOKCOUNT && vm->hook_armed == ARMED_COUNT) {
    /* the armed events count the actor's own instructions too (see the top) */
    if ((vm->hook_mask & LUA_MASKCOUNT) &&
        (vm->own_count_left -= vm->armed_count) <= 0) {
      vm->own_count_left = vm->hook_count;
      call_own_hook(vm, L, ar); /* may turn its hook off: preempt_step looks afresh */
    }
    preempt_step(vm, L);
    return;
  }
  if (vm->hook_armed == ARMED_LINE &&
      (ar->event == LUA_HOOKCOUNT || ar->event == LUA_HOOKLINE)) {
    /* armed by the signal handler's line events: the count is LuaJIT's own, exact here */
    vm->own_count_left = sm_ljx_hook_left(L);
    if (ar->event == LUA_HOOKCOUNT || (vm->hook_mask & LUA_MASKLINE))
      call_own_hook(vm, L, ar);
    preempt_step(vm, L);
    return;
  }
  call_own_hook(vm, L, ar);
}

/* Sets the hook from the signal handler: as lua_sethook, or quietly while the trace compiler is
** busy (see the top). */
static void arm_hook(lua_State *L, lua_Hook f, int mask, int count)
{
  if (!sm_ljx_sethook_in_compiler(L, f, mask, count))
    lua_sethook(L, f, mask, count);
}

void sm_lpreempt_arm(lvm_t *vm)
{
  lua_State *L = vm->L;
  if (!L || vm->no_arm)
    return;
  atomic_signal_fence(memory_order_seq_cst);
  lua_Hook h = lua_gethook(L);
  if (h == actor_hook) { /* an actor's own hook: armed over it (see the top) */
    if (vm->hook_mask & LUA_MASKCOUNT) {
      if (vm->hook_armed == ARMED_COUNT)
        return; /* armed from the VM's thread: the hook runs within its count */
      vm->hook_armed = ARMED_LINE;
      sm_ljx_hook_add_line(L); /* again if armed so: a lost bit is set anew */
      return;
    }
    /* armed anew at every ask, even if armed so: this arming, made here, may have been lost */
    arm_hook(L, NULL, 0, 0); /* the same half-rewritten case as below */
    vm->armed_count = 1;
    vm->hook_armed = ARMED_COUNT;
    arm_hook(L, actor_hook, vm->hook_mask | LUA_MASKCOUNT, 1);
    return;
  }
  if (h == preempt_hook) /* the dispatch table may be half rewritten (an arming that was lost in
                            an update it interrupted): a change of mode rewrites all of it */
    arm_hook(L, NULL, 0, 0);
  else if (h != NULL)
    return; /* a hook set outside any actor (see the top) */
  arm_hook(L, preempt_hook, LUA_MASKCOUNT, 1);
}

void sm_lpreempt_disarm(lua_State *L)
{
  lua_Hook h = lua_gethook(L);
  if (h == preempt_hook || h == actor_hook)
    lua_sethook(L, NULL, 0, 0);
}

_Atomic int sm_lpreempt_hooked;

/* One more or one less actor with a hook of its own, in vm and in the process's count. */
static void count_hooked(lvm_t *vm, int delta)
{
  vm->hooked_actors += delta;
  atomic_fetch_add_explicit(&sm_lpreempt_hooked, delta, memory_order_relaxed);
}

void sm_lpreempt_reconcile(lua_State *L)
{
  lvm_t *vm = this_vm();
  if (!vm || vm->hooked_actors == 0)
    return;
  lvm_actor_head_t *a = smarm_actor_data();
  if (a != vm->hook_owner || (a && lua_gethook(L) != actor_hook))
    install(vm, L, a);
}

void sm_lpreempt_note_left(lua_State *L)
{
  lvm_t *vm = this_vm();
  lvm_actor_head_t *a = vm ? vm->hook_owner : NULL;
  if (!a || a != smarm_actor_data() || !(a->hook_mask & LUA_MASKCOUNT))
    return;
  /* LuaJIT's count, less what an armed count has run of its own (the handler never arms so) */
  int left = sm_ljx_hook_left(L);
  if (vm->hook_armed == ARMED_COUNT)
    left = vm->own_count_left - (vm->armed_count - left);
  a->hook_left = left > 0 ? left : 1;
}

void sm_lpreempt_drop_hook(lvm_t *vm, lvm_actor_head_t *a)
{
  if (!a->hook_ref)
    return;
  if (vm->hook_owner == a)
    install(vm, vm->L, NULL);
  luaL_unref(vm->L, LUA_REGISTRYINDEX, a->hook_ref);
  a->hook_ref = 0;
  count_hooked(vm, -1);
}

/* debug.sethook([thread,] [f, mask [, count]]) in an actor: the actor's own hook (see the top;
** a thread argument is accepted, and the hook still covers the whole actor, its coroutines
** included). Elsewhere the original, with the arming kept off while it changes the hook. */
static int sethook(lua_State *L)
{
  lvm_t *vm = this_vm();
  lvm_actor_head_t *a = vm ? smarm_actor_data() : NULL;
  if (a) {
    int arg = lua_type(L, 1) == LUA_TTHREAD ? 1 : 0;
    int mask = 0, count = 0;
    if (!lua_isnoneornil(L, arg + 1)) {
      luaL_checktype(L, arg + 1, LUA_TFUNCTION);
      const char *smask = luaL_checkstring(L, arg + 2);
      count = (int)luaL_optinteger(L, arg + 3, 0);
      mask = (strchr(smask, 'c') ? LUA_MASKCALL : 0) | (strchr(smask, 'r') ? LUA_MASKRET : 0) |
             (strchr(smask, 'l') ? LUA_MASKLINE : 0) | (count > 0 ? LUA_MASKCOUNT : 0);
    }
    if (mask == 0) { /* off, as debug.sethook() turns a VM's off */
      sm_lpreempt_drop_hook(vm, a);
      return 0;
    }
    lua_pushvalue(L, arg + 1);
    if (a->hook_ref) {
      lua_rawseti(L, LUA_REGISTRYINDEX, a->hook_ref);
    } else {
      a->hook_ref = luaL_ref(L, LUA_REGISTRYINDEX);
      count_hooked(vm, 1);
    }
    a->hook_mask = mask;
    a->hook_count = count;
    a->hook_left = 0; /* a new hook counts afresh, not from what an earlier one left */
    install(vm, L, a);
    return 0;
  }
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

/* debug.gethook([thread]) in an actor: its own hook (function, mask, count), or nothing. */
static int gethook(lua_State *L)
{
  lvm_t *vm = this_vm();
  const lvm_actor_head_t *a = vm ? smarm_actor_data() : NULL;
  if (!a) {
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
  }
  if (!a->hook_ref)
    return 0;
  char smask[4];
  int i = 0;
  if (a->hook_mask & LUA_MASKCALL)
    smask[i++] = 'c';
  if (a->hook_mask & LUA_MASKRET)
    smask[i++] = 'r';
  if (a->hook_mask & LUA_MASKLINE)
    smask[i++] = 'l';
  smask[i] = '\0';
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->hook_ref);
  lua_pushstring(L, smask);
  lua_pushinteger(L, a->hook_count);
  return 3;
}

/* debug[name] = f closing over the original, once. */
static void wrap(lua_State *L, const char *name, lua_CFunction f)
{
  lua_getfield(L, -1, name);
  if (lua_tocfunction(L, -1) == f || !lua_isfunction(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  lua_pushcclosure(L, f, 1);
  lua_setfield(L, -2, name);
}

void sm_lpreempt_wrap_sethook(lua_State *L)
{
  lua_getglobal(L, "debug");
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  wrap(L, "sethook", sethook);
  wrap(L, "gethook", gethook);
  lua_pop(L, 1);
}
