/*
** LuaJIT internals used by the binding (see ljx.h). Built against the private headers of the
** exact LuaJIT variant linked (deps/luajit.sh installs them with each build). Fields used:
**   global_State.cur_L     the lua_State the VM considers running; error unwinding and the JIT
**                          read it, so it must name the coroutine of the actor that runs.
**   global_State.jit_base  non-NULL while JIT-compiled code is on the stack (trace executing,
**                          e.g. a compiled FFI call into C that calls back into us).
**   global_State.hookmask  HOOK_ACTIVE while inside a debug hook or a __gc finalizer (HOOK_GC);
**                          a preemption clears it for the switch and sets it again after.
**   global_State.hookcount the count hook's countdown: read and set again so that an actor's
**                          own count hook keeps its count across a preemption and a switch.
**   global_State.vmstate   what the VM is doing (interpreter, C, GC, a trace): saved across a
**                          preemption's switch (the unwinder and the profiler read it).
**   jit_State.state        read, and lj_trace_abort(): stops a trace that is being recorded,
**                          at once (sm_ljx_before_switch); read by a signal handler, which
**                          then sets the hook itself:
**   global_State.hookf, hookmask, hookcount, hookcstart   what lua_sethook writes, written by
**                          the preemption's signal handler while the trace compiler is busy;
**                          and hookmask's line bit, set by that handler at any time over an
**                          actor's own count hook (sm_ljx_hook_add_line).
**   global_State.ctype_state -> CTState.cb.topid   callback slots ever handed out (0: the FFI
**                          has made no callback, so none can be running).
**   GCtab.array/asize, GCtab.node/hmask   read, for a table's snapshot (sm_ljx_table_snap, _same)
**                          and the codec's walk of a table (sm_ljx_table_next, which also
**                          reads GCtab.freetop to see an entry displaced, and
**                          global_State.gc.nfinalized, the finalizers called so far, which
**                          luajit-finalizer-count.patch adds); GCstr's
**                          bytes and length; and a string key's chain of nodes (Node.key,
**                          next), looked up as lj_tab_getstr does (sm_ljx_field_is).
**   GCstr.sid              read, to tell a string from one made later at its address
**                          (sm_ljx_string_id).
**   Node.val, GCtab.gclist, GCheader.marked, global_State.gc.grayagain   written by
**                          sm_ljx_table_set_slot: a value stored by node, and the backward
**                          write barrier lua_rawset would run (lj_gc_barrierback's steps).
**   the coroutine's Lua frames (L->base - 1 down to its stack bottom): an FFI callback runs
**                          above a continuation frame marked LJ_CONT_FFI_CALLBACK; read for a
**                          traceback from a signal handler (lj_debug_frame, lj_debug_framepc,
**                          lj_debug_line, proto_chunkname: no allocation), only in the C state
**                          (vmstate LJ_VMST_C: the interpreter stored L->base before the call).
**   global_State.gc.total, gc.threshold   read and written: bytes charged and discharged
**                          (sm_ljx_gc_charge), and the collector held by a threshold it
**                          never reaches (sm_ljx_gc_hold), the old one given back after.
**   lua_State.base, top    a classic C function's arguments, read in place (sm_ljx_args_nil).
**   TValue.u64             a value's bits, read from the top of the stack and written into a
**                          new stack slot (sm_ljx_top_bits, sm_ljx_push_bits).
*/
#define _DEFAULT_SOURCE /* mincore */
#include "ljx.h"

#include <lauxlib.h>
#include <luajit.h>

#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lj_obj.h"
#include "lj_gc.h"
#include "lj_jit.h"
#include "lj_trace.h"
#include "lj_frame.h"
#include "lj_bc.h"
#include "lj_tab.h"
#include "lj_ff.h"
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

#if LJ_HASJIT
static void finish_trace_abort(lua_State *L, global_State *g);
#endif

void sm_ljx_before_switch(lua_State *L)
{
#if LJ_HASJIT
  global_State *g = G(L);
  if (G2J(g)->state != LJ_TRACE_IDLE)
    finish_trace_abort(L, g);
#else
  (void)L;
#endif
}

#if LJ_HASJIT
/* Out of line: the check above is on every switch, and its frame stays that of a leaf. */
static __attribute__((noinline, cold)) void finish_trace_abort(lua_State *L, global_State *g)
{
  lj_trace_abort(g);
  /* Finish the stop as the interpreter's next dispatch would: while the recorder is not idle,
  ** every call goes through lj_dispatch_call, which hands the callee's first instruction to the
  ** recorder, which drops the marked trace, restores a patched instruction and sets itself idle
  ** and the dispatch table back. The binding may only call LuaJIT's exported API, so the call is
  ** of an empty chunk; HOOK_ACTIVE is set around it so that no hook sees it. */
  /* The call's frame (call_init grows the stack for it, and raises where it cannot) */
  if (!lua_checkstack(L, LUA_MINSTACK))
    return; /* no memory: the next dispatch ends it, as in LuaJIT */
  if (luaL_loadbuffer(L, "", 0, "=(smarm: end of a trace)") != 0) {
    lua_pop(L, 1);
    return;
  }
  /* The call leaves the VM state C; the caller's stays (a hook's: the interpreter's, whose
  ** recording has just ended), else the interpreter would run on marked as in C code (the
  ** profiler, sm_ljx_signal_traceback). */
  int32_t vmstate = g->vmstate;
  if (vmstate == ~LJ_VMST_RECORD)
    vmstate = ~LJ_VMST_INTERP;
  int active = hook_active(g);
  if (!active)
    hook_enter(g);
  /* Protected: an error (out of memory growing the stack) must not leave HOOK_ACTIVE set on the
  ** VM, where no hook would run again and every park would be refused. */
  if (lua_pcall(L, 0, 0, 0) != 0)
    lua_pop(L, 1); /* the next dispatch ends the trace */
  if (!active)
    hook_leave(g);
  g->vmstate = vmstate;
}
#endif

int sm_ljx_sethook_in_compiler(lua_State *L, lua_Hook f, int mask, int count)
{
#if LJ_HASJIT
  global_State *g = G(L);
  if (G2J(g)->state == LJ_TRACE_IDLE)
    return 0;
  /* lua_sethook's own writes, without its trace abort and dispatch table update */
  g->hookf = f;
  g->hookcount = g->hookcstart = (int32_t)count;
  g->hookmask = (uint8_t)((g->hookmask & ~HOOK_EVENTMASK) | (mask & HOOK_EVENTMASK));
  return 1;
#else
  (void)L, (void)f, (void)mask, (void)count;
  return 0;
#endif
}

void sm_ljx_after_switch(lua_State *L) { setgcref(G(L)->cur_L, obj2gco(L)); }

size_t sm_ljx_gc_total(lua_State *L) { return (size_t)G(L)->gc.total; }

void sm_ljx_gc_charge(lua_State *L, size_t n)
{
  global_State *g = G(L);
  g->gc.total += (GCSize)n;
  /* lj_gc_check's test. While a cycle runs, the n bytes are paid as an allocation's debt is, in
  ** steps (lj_gc_step is not exported: lua_gc's step takes the debt and pays it at once). */
  if (g->gc.total >= g->gc.threshold)
    lua_gc(L, LUA_GCSTEP, (int)(n >> 10 < INT32_MAX ? n >> 10 : INT32_MAX));
}

void sm_ljx_gc_discharge(lua_State *L, size_t n)
{
  global_State *g = G(L);
  g->gc.total = g->gc.total > (GCSize)n ? g->gc.total - (GCSize)n : 0;
}

uint64_t sm_ljx_gc_hold(lua_State *L)
{
  global_State *g = G(L);
  uint64_t threshold = (uint64_t)g->gc.threshold;
  g->gc.threshold = LJ_MAX_MEM;
  return threshold;
}

void sm_ljx_gc_release(lua_State *L, uint64_t threshold) { G(L)->gc.threshold = (GCSize)threshold; }

void sm_ljx_call_held(lua_State *L, lua_CFunction fn, int nargs, int nresults)
{
  lua_pushcfunction(L, fn); /* (before the hold: it may raise, out of memory) */
  lua_insert(L, -nargs - 1);
  uint64_t threshold = sm_ljx_gc_hold(L);
  int rc = lua_pcall(L, nargs, nresults, 0);
  sm_ljx_gc_release(L, threshold);
  if (rc != 0)
    lua_error(L);
}

int sm_ljx_hook_left(lua_State *L) { return (int)G(L)->hookcount; }

void sm_ljx_set_hook_left(lua_State *L, int left)
{
  global_State *g = G(L);
  if (left > 0 && left <= g->hookcstart)
    g->hookcount = left;
}

void sm_ljx_hook_add_line(lua_State *L) { G(L)->hookmask |= LUA_MASKLINE; }

_Static_assert(sizeof(TValue) == sizeof(uint64_t), "a TValue is not 64 bits");

uint64_t sm_ljx_top_bits(lua_State *L) { return (L->top - 1)->u64; }

/* A stack slot needs no write barrier: the collector traverses a thread's stack again in its
** atomic phase. */
void sm_ljx_push_bits(lua_State *L, uint64_t bits)
{
  lua_pushnil(L);
  (L->top - 1)->u64 = bits;
}

int sm_ljx_is_current(lua_State *L) { return gcref(G(L)->cur_L) == obj2gco(L); }

int sm_ljx_in_finalizer(lua_State *L) { return (G(L)->hookmask & HOOK_GC) != 0; }

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

const void *sm_ljx_running_function(lua_State *L) { return curr_func(L); }

int sm_ljx_args_nil(lua_State *L)
{
  for (const TValue *o = L->base; o < L->top; o++)
    if (!tvisnil(o))
      return 0;
  return 1;
}

int sm_ljx_may_receive_unparked(lua_State *L)
{
  global_State *g = G(L);
  return !hook_active(g) && !sm_ljx_in_finalizer(L) && !sm_ljx_has_ffi_callbacks(L);
}

void sm_ljx_hook_suspend(lua_State *L, ljx_hook_state_t *st)
{
  global_State *g = G(L);
  sm_ljx_before_switch(L); /* still inside the hook: no hook sees what it does */
  st->vmstate = g->vmstate;
  hook_leave(g);
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

lua_State *sm_ljx_resumed(lua_State *L)
{
  /* (a running coroutine's status is LUA_OK, or LUA_ERRERR inside an xpcall's handler) */
  if (L->status == LUA_YIELD || !L->cframe || L->base <= tvref(L->stack) + 1 + LJ_FR2)
    return NULL; /* a yielded, finished or unstarted coroutine, or no frame of a function */
  GCfunc *fn = curr_func(L);
  const TValue *co = NULL;
  if (fn->c.ffid == FF_coroutine_resume && L->top > L->base)
    co = L->base; /* resume(co, ...): its first argument */
  else if (fn->c.ffid == FF_coroutine_wrap_aux && fn->c.nupvalues >= 1)
    co = &fn->c.upvalue[0]; /* a wrap function holds its coroutine */
  if (!co || !tvisthread(co))
    return NULL;
  lua_State *inner = threadV(co);
  /* on a C stack (cframe): running, not yielded (a yielded, dead or unstarted one has none) */
  return inner != L && inner->cframe && inner->status != LUA_YIELD ? inner : NULL;
}

int sm_ljx_results_wanted(lua_State *L)
{
  const TValue *frame = L->base - 1;
  const BCIns *pc;
  if (frame_islua(frame))
    pc = frame_pc(frame);
  else if (frame_iscont(frame) && frame_contv(frame) > LJ_CONT_FFI_CALLBACK)
    pc = frame_contpc(frame); /* a continuation resumes after the instruction that made it */
  else
    return -1;
  /* Of the continuations a function is called above, only trace stitching's (a call that ended
  ** a trace; lj_cont_stitch, which a loadable module cannot name) follows a CALL: a metamethod's
  ** follows the instruction that invoked it (a hook's may follow a CALL, but it is only returned
  ** into, never called above). An iterator's call, and whatever else: all of them. */
  BCIns ins = pc[-1];
  if (bc_op(ins) != BC_CALL && bc_op(ins) != BC_CALLM)
    return -1;
  return (int)bc_b(ins) - 1;
}

/* A scalar TValue described; 0 if it is not one. (The plain forms of numberVnum and strV, whose
** checks would call lj_assert_fail, which a checking LuaJIT does not export.) */
static int scalar_of(const TValue *o, ljx_scalar_t *out)
{
  if (tvisnumber(o)) {
    out->type = LUA_TNUMBER;
#if LJ_DUALNUM
    out->n = tvisint(o) ? (double)(int32_t)o->i : o->n;
#else
    out->n = o->n;
#endif
  } else if (tvisstr(o)) {
    const GCstr *str = &gcval(o)->str;
    out->type = LUA_TSTRING;
    out->s = strdata(str);
    out->len = str->len;
  } else if (tvisbool(o)) {
    out->type = LUA_TBOOLEAN;
    out->n = tvistrue(o);
  } else {
    return 0;
  }
  return 1;
}

int sm_ljx_table_next(lua_State *L, const void *table, uint32_t *at, ljx_layout_t *layout,
                      ljx_scalar_t *key, ljx_scalar_t *value)
{
  const GCtab *t = table;
  uint32_t i = *at;
  const void *array = tvref(t->array), *node_at = noderef(t->node);
  const void *freetop = getfreetop(t, noderef(t->node));
  uint32_t finalized = G(L)->gc.nfinalized; /* luajit-finalizer-count.patch */
  if (i == 0) {
    *layout = (ljx_layout_t){array, node_at, freetop, t->asize, t->hmask, finalized};
  } else if (__builtin_expect(finalized != layout->finalized || array != layout->array ||
                                node_at != layout->node || freetop != layout->freetop ||
                                t->asize != layout->asize || t->hmask != layout->hmask, 0)) {
    return LJX_TABLE_MOVED;
  }
  for (; i < t->asize; i++) { /* the array part: key i */
    const TValue *v = &tvref(t->array)[i];
    if (tvisnil(v))
      continue;
    *at = i + 1;
    key->type = LUA_TNUMBER;
    key->n = (double)i;
    return scalar_of(v, value) ? 1 : -1;
  }
  const Node *node = noderef(t->node);
  for (uint32_t j = i - t->asize; j <= t->hmask; j++) {
    if (tvisnil(&node[j].val))
      continue;
    *at = t->asize + j + 1;
    return scalar_of(&node[j].key, key) && scalar_of(&node[j].val, value) ? 1 : -1;
  }
  *at = t->asize + t->hmask + 1;
  return 0;
}

void sm_ljx_table_push_entry(lua_State *L, int idx, uint32_t at)
{
  const GCtab *t = (const GCtab *)lua_topointer(L, idx);
  if (at < t->asize) {
    lua_pushnumber(L, (lua_Number)at);
    lua_rawgeti(L, idx, (int)at);
    return;
  }
  const Node *n = &noderef(t->node)[at - t->asize];
  luaL_checkstack(L, 2, "message");
  *L->top++ = n->key; /* what lua_pushvalue does (copyTV without its check), room made above */
  *L->top++ = n->val;
}

/* The TValue at stack slot idx of the running C function (lua_State.base; a negative idx from
** lua_State.top), as index2adr finds it; no pseudo-index. */
static const TValue *stack_slot(lua_State *L, int idx)
{
  return idx > 0 ? L->base + (idx - 1) : L->top + idx;
}

int sm_ljx_field_is(lua_State *L, int rec, int value)
{
  const TValue *r = stack_slot(L, rec);
  if (!tvistab(r))
    return -1;
  const GCtab *rt = &gcval(r)->tab;
  if (rt->asize <= 3)
    return -1;
  const TValue *tv = &tvref(rt->array)[3], *key = &tvref(rt->array)[2];
  if (!tvistab(tv) || !tvisstr(key))
    return -1;
  const GCtab *t = &gcval(tv)->tab;
  const TValue *v = stack_slot(L, value);
  const Node *n = hashstr(t, &gcval(key)->str);
  do { /* lj_tab_getstr's walk: a string key is one object, so its TValue's bits compare */
    if (n->key.u64 == key->u64)
      return n->val.u64 == v->u64;
  } while ((n = nextnode(n)));
  return 0;
}

/* A table's snapshot: a copy of its slots, compared byte for byte (exact, where a hash of them
** left a 2^-53 chance, at about its cost: docs/perf.md). First where the slots lie and how many
** there are, so that a table that moved its slots or changed its size differs there already. */
typedef struct snap_head {
  const void *t, *array, *node;
  uint32_t asize, hmask;
} snap_head_t;

static snap_head_t snap_head_of(lua_State *L, int idx)
{
  snap_head_t h = {0};
  if (!lua_istable(L, idx))
    return h;
  const GCtab *t = (const GCtab *)lua_topointer(L, idx);
  h.t = t;
  h.array = tvref(t->array);
  h.node = noderef(t->node);
  h.asize = t->asize;
  h.hmask = t->hmask;
  return h;
}

static size_t snap_slots(const snap_head_t *h, size_t *array_bytes)
{
  *array_bytes = h->t ? (size_t)h->asize * sizeof(TValue) : 0;
  return *array_bytes + (h->t ? ((size_t)h->hmask + 1) * sizeof(Node) : 0);
}

size_t sm_ljx_table_snap_size(lua_State *L, int idx)
{
  snap_head_t h = snap_head_of(L, idx);
  size_t array_bytes;
  return sizeof h + snap_slots(&h, &array_bytes);
}

int sm_ljx_table_snap(lua_State *L, int idx, void *out, size_t size)
{
  snap_head_t h = snap_head_of(L, idx);
  size_t array_bytes, n = snap_slots(&h, &array_bytes);
  if (size != sizeof h + n) /* resized since its size was read (ljx.h) */
    return 0;
  memcpy(out, &h, sizeof h);
  if (array_bytes) /* (an empty array part may have no address) */
    memcpy((char *)out + sizeof h, h.array, array_bytes);
  if (n > array_bytes)
    memcpy((char *)out + sizeof h + array_bytes, h.node, n - array_bytes);
  return 1;
}

int sm_ljx_table_same(lua_State *L, int idx, const void *snap, size_t size)
{
  snap_head_t h = snap_head_of(L, idx);
  size_t array_bytes, n = snap_slots(&h, &array_bytes);
  /* Every node, free ones too (a free node's key is a dead one's or nil: a change made there
  ** tells as well, which costs a rebuild at most). */
  const snap_head_t *was = snap;
  if (!snap || size != sizeof h + n || was->t != h.t || was->array != h.array ||
      was->node != h.node || was->asize != h.asize || was->hmask != h.hmask)
    return 0;
  const char *bytes = (const char *)(was + 1);
  return (!array_bytes || memcmp(bytes, h.array, array_bytes) == 0) &&
         (n == array_bytes || memcmp(bytes + array_bytes, h.node, n - array_bytes) == 0);
}

/* ---- A traceback from a signal handler ------------------------------------------------------ */

typedef struct outbuf {
  char *p, *end;
} outbuf_t;

static void out_str(outbuf_t *o, const char *s, size_t n)
{
  while (n-- && o->p < o->end)
    *o->p++ = *s++;
}

static void out_cstr(outbuf_t *o, const char *s) { out_str(o, s, strlen(s)); }

static void out_int(outbuf_t *o, long v)
{
  char digits[24];
  int n = 0;
  unsigned long u = v < 0 ? 0UL - (unsigned long)v : (unsigned long)v;
  do {
    digits[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0)
    out_str(o, "-", 1);
  while (n)
    out_str(o, &digits[--n], 1);
}

/* The line of bytecode position pc of pt (lj_debug_line's lookup); its first line when pc is
** not one of its positions. */
static long proto_line(const GCproto *pt, BCPos pc)
{
  const void *info = proto_lineinfo(pt);
  if (pc >= pt->sizebc || !info)
    return (long)pt->firstline;
  if (pc == 0)
    return (long)pt->firstline;
  pc--;
  if (pt->numline < 256)
    return (long)pt->firstline + ((const uint8_t *)info)[pc];
  if (pt->numline < 65536)
    return (long)pt->firstline + ((const uint16_t *)info)[pc];
  return (long)pt->firstline + (long)((const uint32_t *)info)[pc];
}

/* The page size, read outside any signal handler (sm_ljx_signal_traceback_init, by every
** scheduler's thread as it starts: each stores the same value; relaxed, lock-free). */
static _Atomic uintptr_t page_size;

void sm_ljx_signal_traceback_init(void)
{
  long n = sysconf(_SC_PAGESIZE);
  atomic_store_explicit(&page_size, n > 0 ? (uintptr_t)n : 4096, memory_order_relaxed);
}

/* Whether [p, p + n) lies in mapped memory: mincore(2), a system call, fails with ENOMEM on an
** unmapped page. A signal handler's way to read what it cannot trust without faulting. */
static int mapped(const void *p, size_t n)
{
  uintptr_t page = atomic_load_explicit(&page_size, memory_order_relaxed);
  if (!page || !p)
    return 0;
  unsigned char vec;
  uintptr_t a = (uintptr_t)p & ~(page - 1), end = (uintptr_t)p + n;
  for (; a < end; a += page)
    if (mincore((void *)a, page, &vec) != 0)
      return 0;
  return 1;
}

/* A frame's function, when the slot really holds one (tagged a function, a readable object
** of that type); else NULL. */
static GCfunc *checked_func(cTValue *frame)
{
#if LJ_FR2
  if (!tvisfunc(frame - 1))
    return NULL;
  GCfunc *fn = frame_func(frame);
  if (!mapped(fn, sizeof(GCfuncC)) || fn->c.gct != ~LJ_TFUNC)
    return NULL;
  if (isluafunc(fn)) {
    GCproto *pt = funcproto(fn);
    if (!mapped(pt, sizeof *pt) || pt->gct != ~LJ_TPROTO)
      return NULL;
  }
  return fn;
#else
  (void)frame;
  return NULL;
#endif
}

size_t sm_ljx_signal_traceback(lua_State *L, char *buf, size_t cap, int frames)
{
  outbuf_t o = {buf, buf + cap};
  global_State *g = G(L);
  int32_t st = g->vmstate;
  if (st >= 0 || tvref(g->jit_base) != NULL) {
    out_cstr(&o, "\t(inside compiled code: no traceback)\n");
    return (size_t)(o.p - buf);
  }
  if (st != ~LJ_VMST_C) {
    out_cstr(&o, st == ~LJ_VMST_GC ? "\t(inside the garbage collector: no traceback)\n"
                                   : "\t(in the interpreter: no traceback)\n");
    return (size_t)(o.p - buf);
  }
  /* Even in the C state the frames may be in flux (the VM's return to C copies results over
  ** the returning frame before it stores the caller's base): every step is checked, and the
  ** walk stops, saying so, at the first that does not hold. The walk of lj_debug_frame and the
  ** line lookup of lj_debug_line are written out (not exported to a loadable module). A Lua
  ** function's line is known when the frame above it was called from Lua (its link is the
  ** return pc into it); else its first line is given. */
  GCobj *cur = gcref(g->cur_L);
  lua_State *co = cur ? &cur->th : NULL; /* gco2th without its check (not exported) */
  if (!mapped(co, sizeof *co) || co->gct != ~LJ_TTHREAD) {
    out_cstr(&o, "\t(no traceback: the VM is between states)\n");
    return (size_t)(o.p - buf);
  }
  cTValue *stack = tvref(co->stack), *top = stack + co->stacksize;
  cTValue *bot = stack + LJ_FR2, *frame = co->base - 1, *nextframe = NULL;
  if (frame <= bot)
    out_cstr(&o, "\t(no Lua frames)\n");
  for (int level = 0; frame > bot; ) {
    if (frame >= top || !mapped(frame - LJ_FR2, (1 + LJ_FR2) * sizeof(TValue)))
      goto in_flux;
    GCfunc *fn = checked_func(frame);
    if (!fn)
      goto in_flux;
    if (obj2gco(fn) != obj2gco(co)) { /* not a dummy frame (lj_err_optype_call) */
      if (level++ == frames) {
        out_cstr(&o, "\t...\n");
        break;
      }
      out_str(&o, "\t", 1);
      if (!isluafunc(fn)) {
        out_cstr(&o, "[C]\n");
      } else {
        GCproto *pt = funcproto(fn);
        GCstr *name = proto_chunkname(pt);
        if (mapped(name, sizeof *name) && name->gct == ~LJ_TSTR && name->len < 4096 &&
            mapped(strdata(name), name->len)) {
          const char *text = strdata(name);
          if (name->len > 0 && (*text == '@' || *text == '='))
            out_str(&o, text + 1, name->len - 1);
          else
            out_cstr(&o, "[string]");
        } else {
          out_cstr(&o, "?");
        }
        const BCIns *ins = nextframe && frame_islua(nextframe) ? frame_pc(nextframe) : NULL;
        BCPos pc = ~(BCPos)0;
        if (ins > proto_bc(pt) && ins <= proto_bc(pt) + pt->sizebc)
          pc = proto_bcpos(pt, ins) - 1;
        const void *info = proto_lineinfo(pt);
        out_str(&o, ":", 1);
        out_int(&o, info && mapped(info, pt->sizebc * 4) ? proto_line(pt, pc)
                                                         : (long)pt->firstline);
        out_str(&o, "\n", 1);
      }
    }
    cTValue *prev;
    if (frame_islua(frame)) {
      const BCIns *ret = frame_pc(frame);
      if (!mapped(ret - 1, sizeof *ret))
        goto in_flux;
      prev = frame_prevl(frame);
    } else {
      prev = frame_prevd(frame);
    }
    if (prev >= frame || prev < stack)
      goto in_flux;
    nextframe = frame;
    frame = prev;
  }
  return (size_t)(o.p - buf);
in_flux:
  out_cstr(&o, "\t(the rest is in flux: the VM is between two frames)\n");
  return (size_t)(o.p - buf);
}

size_t sm_ljx_udata_size(const void *p) { return ((const GCudata *)p - 1)->len; }

int sm_ljx_table_copy_hash(lua_State *L, int dst, int src)
{
  GCtab *t = (GCtab *)lua_topointer(L, dst);
  const GCtab *kt = (const GCtab *)lua_topointer(L, src);
  if (!t || !kt || t == kt || t->hmask != kt->hmask || t->asize != 0 || kt->asize != 0)
    return -1;
  /* What lj_tab_dup does for the hash part: the nodes whole (no key is hashed again), their
  ** chains moved by the distance between the two node arrays. */
  Node *node = noderef(t->node);
  const Node *knode = noderef(kt->node);
  ptrdiff_t d = (char *)node - (const char *)knode;
  setfreetop(t, node, (Node *)((char *)getfreetop(kt, knode) + d));
  for (uint32_t i = 0; i <= kt->hmask; i++) {
    Node *n = &node[i];
    const Node *kn = &knode[i];
    const Node *next = nextnode(kn);
    n->val = kn->val;
    n->key = kn->key;
    setmref(n->next, next == NULL ? NULL : (Node *)((char *)next + d));
  }
  return 0;
}

int sm_ljx_table_key_slot(lua_State *L, int t_idx, int key_idx)
{
  const GCtab *t = (const GCtab *)lua_topointer(L, t_idx);
  const char *k = lua_tostring(L, key_idx);
  if (!t || !k)
    return -1;
  const GCstr *s = (const GCstr *)k - 1; /* lua_tostring's bytes follow their GCstr */
  const Node *node = noderef(t->node);
  for (uint32_t i = 0; i <= t->hmask; i++)
    if (tvisstr(&node[i].key) && strV(&node[i].key) == s)
      return (int)i;
  return -1;
}

void sm_ljx_table_set_scalar(lua_State *L, int t_idx, uint32_t slot, int type, double n)
{
  GCtab *t = (GCtab *)lua_topointer(L, t_idx);
  TValue *v = &noderef(t->node)[slot].val;
  if (type == LUA_TBOOLEAN)
    setboolV(v, n != 0);
  else
    setnumV(v, n);
}

void sm_ljx_table_set_slot(lua_State *L, int t_idx, uint32_t slot)
{
  GCtab *t = (GCtab *)lua_topointer(L, t_idx);
  noderef(t->node)[slot].val = L->top[-1]; /* copyTV without the asserting builds' check */
  /* lua_rawset's barrier (the table may have turned black meanwhile): lj_gc_barrierback's steps,
  ** written out because its inline asserts with lj_assert_fail, which the asserting builds of
  ** LuaJIT keep hidden */
  GCobj *o = obj2gco(t);
  if (isblack(o)) {
    global_State *g = G(L);
    black2gray(o);
    setgcrefr(t->gclist, g->gc.grayagain);
    setgcref(g->gc.grayagain, o);
  }
  L->top--;
}

uint32_t sm_ljx_string_id(const char *bytes)
{
  return (uint32_t)((const GCstr *)bytes - 1)->sid;
}
