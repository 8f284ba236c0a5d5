/*
** LuaJIT internals used by the binding (see ljx.h). Built against the private headers of the
** exact LuaJIT variant linked (deps/luajit.sh installs them with each build). Fields used:
**   global_State.cur_L     the lua_State the VM considers running; error unwinding and the JIT
**                          read it, so it must name the coroutine of the actor that runs.
**   global_State.jit_base  non-NULL while JIT-compiled code is on the stack (trace executing,
**                          e.g. a compiled FFI call into C that calls back into us).
**   global_State.hookmask  HOOK_ACTIVE while inside a debug hook or a __gc finalizer (HOOK_GC);
**                          a preemption clears it for the switch and sets it again after.
**   global_State.vmstate   what the VM is doing (interpreter, C, GC, a trace): saved across a
**                          preemption's switch (the unwinder and the profiler read it).
**   jit_State.state        via lj_trace_abort(): stops a trace that is being recorded.
**   global_State.ctype_state -> CTState.cb.topid   callback slots ever handed out (0: the FFI
**                          has made no callback, so none can be running).
**   the coroutine's Lua frames (L->base - 1 down to its stack bottom): an FFI callback runs
**                          above a continuation frame marked LJ_CONT_FFI_CALLBACK.
*/
#include "ljx.h"

#include "lj_obj.h"
#include "lj_jit.h"
#include "lj_trace.h"
#include "lj_frame.h"
#include "lj_bc.h"
#if LJ_HASFFI
#include "lj_ctype.h"
#endif

/* Is a frame of L's stack an FFI callback's? Only walked when callbacks exist at all. */
static int in_ffi_callback(lua_State *L)
{
#if LJ_HASFFI
  if (!sm_ljx_has_ffi_callbacks(L))
    return 0;
  cTValue *frame = L->base - 1, *bottom = tvref(L->stack) + LJ_FR2;
  while (frame > bottom) {
    if (frame_iscont(frame) && frame_iscont_fficb(frame))
      return 1;
    frame = frame_prev(frame);
  }
#else
  (void)L;
#endif
  return 0;
}

const char *sm_ljx_cannot_park(lua_State *L)
{
  global_State *g = G(L);
  if (hook_active(g) && !(g->hookmask & HOOK_GC)) /* a finalizer sets both: say finalizer */
    return "inside a debug hook";
  return sm_ljx_cannot_preempt(L); /* what a preemption, inside its own hook, checks too */
}

void sm_ljx_before_switch(lua_State *L)
{
#if LJ_HASJIT
  lj_trace_abort(G(L));
#else
  (void)L;
#endif
}

void sm_ljx_after_switch(lua_State *L) { setgcref(G(L)->cur_L, obj2gco(L)); }

int sm_ljx_is_current(lua_State *L) { return gcref(G(L)->cur_L) == obj2gco(L); }

const char *sm_ljx_cannot_preempt(lua_State *L)
{
  global_State *g = G(L);
  if (g->hookmask & HOOK_GC)
    return "inside a __gc finalizer";
  if (tvref(g->jit_base) != NULL)
    return "inside JIT-compiled code (an FFI call or callback?)";
  if (in_ffi_callback(L))
    return "inside an FFI callback";
  return NULL;
}

int sm_ljx_has_ffi_callbacks(lua_State *L)
{
#if LJ_HASFFI
  CTState *cts = ctype_ctsG(G(L));
  return cts && cts->cb.topid != 0;
#else
  (void)L;
  return 0;
#endif
}

void sm_ljx_hook_suspend(lua_State *L, ljx_hook_state_t *st)
{
  global_State *g = G(L);
  st->vmstate = g->vmstate;
  hook_leave(g);
  sm_ljx_before_switch(L);
}

void sm_ljx_hook_resume(lua_State *L, const ljx_hook_state_t *st)
{
  global_State *g = G(L);
  hook_enter(g);
  g->vmstate = st->vmstate;
  sm_ljx_after_switch(L);
}

int sm_ljx_at_loop_edge(lua_State *L)
{
  /* In a hook the frame's saved pc is one past the instruction about to run (lj_debug.c's
  ** debug_framepc reads it the same way). */
  void *cf = cframe_raw(L->cframe);
  if (!cf || !isluafunc(curr_func(L)))
    return 0;
  const BCIns *pc = cframe_pc(cf);
  if ((const char *)pc == (const char *)cframe_L(cf))
    return 0; /* no pc saved: not in the interpreter's hook */
  BCIns ins = pc[-1];
  switch (bc_op(ins)) {
  case BC_FORL: case BC_IFORL: case BC_JFORL:    /* the end of a numeric for's iteration */
  case BC_ITERL: case BC_IITERL: case BC_JITERL: /* ... of a generic for's */
    return 1;
  case BC_JMP:  /* the back jump of a while, repeat or goto loop */
  case BC_UCLO: /* the same, closing upvalues of the body on the way (LuaJIT merges them) */
    return bc_j(ins) < 0;
  default: /* not LOOP: it stands after a while loop's condition, before the body it admits */
    return 0;
  }
}
