/*
** The binding's only window into LuaJIT's internals (design rule 6). Everything that must know
** LuaJIT's private structures to keep stack switching safe lives in ljx.c; the rest of the binding
** uses the public Lua C API only.
*/
#ifndef SMARM_LUA_LJX_H
#define SMARM_LUA_LJX_H

#include <lua.h>

#include <stdint.h>

/* Why the running code must not park here, or NULL if it may: inside a __gc finalizer or a
** debug hook (the VM holds state for them that another actor's Lua code would clobber), inside
** an FFI callback (the FFI keeps one callback state per VM), or with JIT-compiled code on the
** stack (a compiled FFI call: switching there corrupts the VM). */
const char *sm_ljx_cannot_park(lua_State *L);

/* Right before a switch: stop recording a trace (a trace must not span actors), and finish the
** stop there and then. LuaJIT's own abort (lj_trace_abort, which every hook call and hook change
** makes) only marks the trace; the next instruction the interpreter dispatches cleans it up. Left
** marked, the actor switched to would meet it: one resumed in its preemption hook at a loop's
** edge enters compiled code with the recorder still busy (a hot side exit there asserts
** "hot side exit while recording", and in a release build starts a trace over a half-dropped
** one). Calls into the VM (an empty chunk) when a trace was being recorded; otherwise nothing. */
void sm_ljx_before_switch(lua_State *L);

/* For the preemption's signal handler, on the VM's thread: while the trace compiler is busy
** (recording a trace, between its instructions or inside the recorder, optimising, assembling),
** sets the hook as lua_sethook would but without aborting the trace and rewriting the dispatch
** table, which in the middle of the compiler's state machine break it (seen: "unbalanced stack
** after tracing of instruction"), and returns 1. The hook then runs at the next instruction the
** recorder sees, or once the compiler is done, since it updates the dispatch table itself when
** it ends. Returns 0, changing nothing, while the compiler is idle: use lua_sethook. */
int sm_ljx_sethook_in_compiler(lua_State *L, lua_Hook f, int mask, int count);

/* The size of the full userdata whose payload (lua_touserdata's pointer, or what the FFI passes
** for a userdata argument) is at p. */
size_t sm_ljx_udata_size(const void *p);

/* Right after a switch back into L's actor: make L the VM's current state again (other actors
** ran Lua code of this VM in between, and error handling and the JIT read it). */
void sm_ljx_after_switch(lua_State *L);

/* The instructions left until the count hook of L's VM fires next (global_State.hookcount), and
** setting them (1 .. the hook's count; other values change nothing). */
int sm_ljx_hook_left(lua_State *L);
void sm_ljx_set_hook_left(lua_State *L, int left);

/* Adds line events to the VM's hook mask, and nothing else: no write of the count, no dispatch
** table rewrite (for a signal handler, while a count hook keeps the interpreter in its
** instruction-hook mode). */
void sm_ljx_hook_add_line(lua_State *L);

/* The bytes the VM of L has allocated (what collectgarbage("count") tells, in bytes). */
size_t sm_ljx_gc_total(lua_State *L);
/* Counts n bytes the collector does not see (a binary's block, lbinary.h) as the VM's memory,
** stepping the collector as an allocation of n would; discharge takes them off again (from a
** __gc too). */
void sm_ljx_gc_charge(lua_State *L, size_t n);
void sm_ljx_gc_discharge(lua_State *L, size_t n);
/* Holds the VM's collector: no step runs (so no finalizer) until sm_ljx_gc_release gives back
** the threshold hold returned, as it was (lua_gc's stop and restart would lose it, and restart a
** collector the script had stopped). */
uint64_t sm_ljx_gc_hold(lua_State *L);
void sm_ljx_gc_release(lua_State *L, uint64_t threshold);
/* Calls fn with the nargs values on the top as its arguments, leaving nresults, with the
** collector held: for a C walk of a table a script can reach (lua_next, sm_ljx_table_next) while
** it allocates, whose GC step could run a finalizer that changes the table under the walk (the
** next lua_next raises "invalid key to 'next'"; entries are skipped or repeated). fn must run
** no Lua code and never park or yield: the hold is the VM's, which every actor of the scheduler
** shares, not the caller's (a switch would leave the others uncollected, and holds released out
** of order, or one whose actor is killed where it parked, would leave the VM so for good); and
** Lua code is not covered anyway (a trace exit drives a cycle's end, finalizers too, whatever
** the threshold). Errors pass on, the collector given back. */
void sm_ljx_call_held(lua_State *L, lua_CFunction fn, int nargs, int nresults);

/* Whether a __gc finalizer is running (of this VM: the actor's own code or not). */
int sm_ljx_in_finalizer(lua_State *L);

/* Preemption from a debug hook (lpreempt.c). Why the hook must not switch here, or NULL: inside
** an FFI callback, or with compiled code on the stack (hooks never run inside __gc finalizers). */
const char *sm_ljx_cannot_preempt(lua_State *L);
/* Whether the VM has ever handed out an FFI callback (one may be running below L's coroutine,
** which the frame walk of L alone cannot see). */
int sm_ljx_has_ffi_callbacks(lua_State *L);

/* The function whose frame runs in L (in a hook: the one the hook stopped in), as
** lua_topointer gives it. */
const void *sm_ljx_running_function(lua_State *L);

/* Whether a receive that takes its message without parking (lfast.c, from compiled code too) may
** leave out the classic receive's checks, because they would not raise here: not inside a debug
** hook or a __gc finalizer, and no FFI callback (the VM has never handed one out: the frame walk
** that finds one running cannot be made from compiled code). */
int sm_ljx_may_receive_unparked(lua_State *L);

/* Whether every argument of the running classic C function is nil, or there is none: one look
** at L->base..L->top for what a chain of lua_type calls would tell, on receive's hot path. Call
** it before the function pushes anything. */
int sm_ljx_args_nil(lua_State *L);

/* Whether the instruction the hook stands before ends a loop's iteration (the FORL or ITERL of a
** for loop, the backward JMP or UCLO of a while, repeat or goto loop): where a preemption
** switches, so that straight-line code, a read-modify-write of a shared upvalue or a while
** loop's condition and the body it admits included, is not cut in two. */
int sm_ljx_at_loop_edge(lua_State *L);

/* How many results the Lua code that called the running classic C function takes from it: 0 for
** a call made as a statement, n for `local a, b = f()`; -1 when that cannot be known (all of them
** are taken, or the caller is C, pcall, a metamethod or a tail call out of one). Read, as the
** VM's own return does, from the B operand of the CALL the frame returns to. */
int sm_ljx_results_wanted(lua_State *L);

/* The coroutine that L, suspended in coroutine.resume or in a coroutine.wrap function, is
** running (and which is parked inside it, for an actor's L that is parked), or NULL: where an
** actor really waits, for its traceback (linfo.c). L must not be running. */
lua_State *sm_ljx_resumed(lua_State *L);

/* What a switch from inside a hook must put aside: the hook's HOOK_ACTIVE flag (while set, no
** hook runs in the whole VM, so other actors would never be preempted) and the VM state. */
typedef struct ljx_hook_state {
  int vmstate;
} ljx_hook_state_t;
/* In the hook, right before the switch: clears HOOK_ACTIVE, saves the VM state, stops recording. */
void sm_ljx_hook_suspend(lua_State *L, ljx_hook_state_t *st);
/* Right after: sets HOOK_ACTIVE again (the VM's hook caller clears it when the hook returns),
** the VM state, and L as the current state. */
void sm_ljx_hook_resume(lua_State *L, const ljx_hook_state_t *st);

/* From a signal handler on the VM's thread, in the middle of whatever it runs (the watchdog's
** report): writes the Lua frames of the VM's current coroutine into buf, one
** "\t<chunk>:<line>" (or "\t[C]") line each, innermost first, at most `frames` of them, without
** allocating or calling into the VM. Only while a C function runs (a blocking C call, where the
** frames are as the interpreter left them), and every step is checked against the stack's
** bounds, the slots' tags and mapped memory (mincore), for the moments when they are not;
** otherwise writes why not ("inside compiled code",
** "inside the garbage collector", "in the interpreter"). Returns the bytes written. */
size_t sm_ljx_signal_traceback(lua_State *L, char *buf, size_t cap, int frames);
/* Once, outside any signal handler, before the first sm_ljx_signal_traceback (the page size it
** checks memory by). */
void sm_ljx_signal_traceback_init(void);

/* A snapshot of the table at idx (or of "not a table"): where its slots lie, their count and their
** bytes (keys and values as the VM stores them: references for objects, bits for numbers), read
** without calling into the VM. sm_ljx_table_snap writes it to out, `size` bytes, and returns 1
** when size is still sm_ljx_table_snap_size(L, idx); else 0, writing nothing: an allocation made
** between the two may run a finalizer (__gc, ffi.gc), and one that stores into the table may
** resize it. sm_ljx_table_same says 1 while the table at idx is the one snapped and unchanged,
** else 0 (lrebind.c rebuilds its index when package.loaded changes). A table rehashed with the
** same contents differs. */
size_t sm_ljx_table_snap_size(lua_State *L, int idx);
int sm_ljx_table_snap(lua_State *L, int idx, void *out, size_t size);
int sm_ljx_table_same(lua_State *L, int idx, const void *snap, size_t size);
/* For the table at stack slot `rec` (lrebind.c's index entry { "module", "field", module }):
** whether rec[3][rec[2]] is the value at stack slot `value`, read raw without calling into the
** VM: 1 or 0, or -1 when rec[3] is not a table or rec[2] not a string (nothing to check). */
int sm_ljx_field_is(lua_State *L, int rec, int value);

/* A table's entries read in place, for the codec's walk (no call into the VM per entry): an entry
** whose key and value are each a number, a string or a boolean is described here; any other is
** left for the caller to push (sm_ljx_table_push_entry). */
typedef struct ljx_scalar {
  int type;      /* LUA_TNUMBER, LUA_TSTRING or LUA_TBOOLEAN */
  double n;      /* a number's value, a boolean's 0 or 1 */
  const char *s; /* a string's bytes (valid while the table holds it) and length */
  size_t len;
} ljx_scalar_t;

/* Where a walked table's entries lie (sm_ljx_table_next keeps it): its parts and the top of its
** free nodes, which a new key that displaces another moves; and the finalizers the VM had called
** (luajit-finalizer-count.patch). */
typedef struct ljx_layout {
  const void *array, *node, *freetop;
  uint32_t asize, hmask, finalized;
} ljx_layout_t;
#define LJX_TABLE_MOVED (-2)
/* The entry at or after *at (0 to begin) of the table t (lua_topointer of it, while it is on
** L's stack): returns 1 with *key and *value set when both are scalars, -1 when one is not (the
** caller pushes it with sm_ljx_table_push_entry(L, idx, *at - 1)), 0 at the end; *at moves past
** the entry. Empty slots are skipped. *layout is the walk's: written when *at is 0, compared
** after. Gives LJX_TABLE_MOVED, where the walk could skip or repeat entries, once a finalizer
** of the VM has run since the walk began (a GC step of the walker's allocations runs them, and
** one may change the table in any way: grow or rehash it, clear and refill it in another
** order), or when the table's parts, sizes or free top changed; the codec then encodes again
** with the collector held. Nothing is read out of bounds either way. */
int sm_ljx_table_next(lua_State *L, const void *t, uint32_t *at, ljx_layout_t *layout,
                      ljx_scalar_t *key, ljx_scalar_t *value);
/* Pushes the key and the value of the entry at `at` (one sm_ljx_table_next stopped on). */
void sm_ljx_table_push_entry(lua_State *L, int idx, uint32_t at);

/* The id LuaJIT gave the string whose bytes are at `bytes` (as lua_tolstring gives them) when
** it made it: a string made later at the same address has another (until the 32-bit count
** wraps, or, with LuaJIT's LUAJIT_SECURITY_STRID, most likely). */
uint32_t sm_ljx_string_id(const char *bytes);

/* Makes the table at dst, new and empty, with no array part and a hash part of the same size as
** the table at src's, hold src's entries, as LuaJIT's own table copy does (its nodes copied
** whole: no key hashed or inserted again). 0, or -1 when the two differ in shape (nothing
** changed). No allocation; the caller keeps src alive as long as the keys it shares matter
** (they are what src holds: strings a template anchors, lshape.c). */
int sm_ljx_table_copy_hash(lua_State *L, int dst, int src);

/* The node of the table at t_idx that holds the string at key_idx as its key, or -1. */
int sm_ljx_table_key_slot(lua_State *L, int t_idx, int key_idx);
/* Sets the value of node `slot` (sm_ljx_table_key_slot's; it holds a key) of the table at t_idx
** to a number, or to a boolean (type LUA_TBOOLEAN, n 0 or 1). No GC object is stored, so no
** write barrier is due, whatever the GC made of the table meanwhile. */
void sm_ljx_table_set_scalar(lua_State *L, int t_idx, uint32_t slot, int type, double n);
/* Pops the value on top into node `slot` (one that holds a key) of the table at t_idx, as
** lua_rawset of that key would store it (the write barrier included), without finding the key. */
void sm_ljx_table_set_slot(lua_State *L, int t_idx, uint32_t slot);


/* A value as the VM stores it (its TValue's 64 bits), read from the top of L's stack, and
** pushed again from them: no table is looked up. Only for a GC object that something else keeps
** alive (the registry) for as long as its bits are pushed: they are no reference of their own
** (code that clears the binding's registry entries through the debug library frees what they
** name, as it would break any C library's state). */
uint64_t sm_ljx_top_bits(lua_State *L);
void sm_ljx_push_bits(lua_State *L, uint64_t bits);

/* Whether the VM's current state is L (design rule 4's invariant, checked by sm_lpark_resumed in
** the checking builds). */
int sm_ljx_is_current(lua_State *L);

#endif
