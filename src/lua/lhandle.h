/*
** Handles (lhandle.c): Lua values that stand for something the IO layer owns, a socket
** (ltcp.c) or a file (lfs.c). The module that owns a kind describes it here (lhandle_kind_t);
** the rest of the binding, the codec above all, works with handles through that description
** alone and knows no kind.
**
** Invariants:
** - A handle belongs to the run that made it. Every handle records sm_lhandle_run_generation() when
**   it is made; once that run has ended (the generation moved on) the handle is stale: the run's
**   end closed what it stood for, and its descriptor number may be another handle's by then. A
**   stale handle acts like a closed one ("... belongs to an earlier run") and its __gc closes
**   nothing.
** - A handle travels in a message at most once per message; the sender's handle is handed over
**   only once the message was sent, and whoever holds a block with handles nobody received drops
**   them (the kind's drop closes them).
** - A handle is owned by the actor that made it or received it in a message (Erlang's port
**   owner; actors that share it through spawn arguments or upvalues do not own it). When its
**   owner ends with a reason other than normal (an error, a kill, an exit signal, smarm.exit with
**   a reason), the handle is closed at once (the kind's close_owned); after a normal end it is
**   closed as before, by close or by its __gc. Owners are kept per VM in a registry table:
**   owner (the actor's data pointer, as a number: no light userdata, which a GC64 LuaJIT may
**   have to intern) -> { [handle userdata] = kind index }, with weak keys, so owning keeps no
**   handle from the GC.
*/
#ifndef SMARM_LUA_LHANDLE_H
#define SMARM_LUA_LHANDLE_H

#include <lauxlib.h>
#include <lua.h>

#include <stdint.h>

/* A handle as it travels inside a message: what the receiver needs to make its own userdata. The
** fields mean what the kind says (a socket: its IO id, timeout, descriptor, listener/queued
** bits; a file: its descriptor). */
typedef struct lhandle {
  uint64_t id;
  double timeout;
  int32_t fd;
  uint8_t bits;
} lhandle_t;

typedef struct sm_lhandle_kind {
  /* 1 with *ud (the userdata) and *h set if the value at idx is a handle of this kind, 0 if it
  ** is not one; raises "smarm.send: ..." if it is one that cannot travel (closed, stale, handed
  ** over, in use by a parked actor). */
  int (*test)(lua_State *L, int idx, void **ud, lhandle_t *h);
  /* The sender's userdata, after the message holding it was sent: it is the receiver's now. */
  void (*handed_over)(void *ud);
  /* Pushes the receiver's new userdata for h (the receiving actor's thread). */
  void (*push)(lua_State *L, const lhandle_t *h);
  /* Nobody received h: close it (any thread, also during shutdown). */
  void (*drop)(const lhandle_t *h);
  /* Its owner ended abnormally: close the userdata's handle now if it is open (a posted close:
  ** no parking, no raising); a no-op for one that is closed, handed over or stale. */
  void (*close_owned)(void *ud);
  /* Optional. Called by the encoder for each of a message's handles once it has encoded them all
  ** (not for exit reasons), where the sender may park: returns 1 when it changed the handle so
  ** that it must be encoded again (an active socket made passive, its messages taken back: it is
  ** then tested again), 0 when it is ready to travel. May raise. With dry set it changes
  ** nothing and does not park: it only raises for a handle that cannot be readied, so that the
  ** encoder checks every handle before it readies any (a raise after one was readied would
  ** leave it changed with nobody to undo it). */
  int (*before_move)(lua_State *L, void *ud, int dry);
  /* Optional. The message was not sent after all (sm_codec_abandon): the handle stays the
  ** sender's; undo what before_move did. Must not raise. */
  void (*kept)(lua_State *L, void *ud);
} lhandle_kind_t;

/* At most this many kinds; a kind is named in messages by its index. */
#define LHANDLE_KINDS 8

/* Registers kind (a static of its module) once per process, from any thread (every VM's module
** load registers its kinds again: a no-op). Returns its index. */
int sm_lhandle_register(const lhandle_kind_t *kind);

/* The registered kinds: index 0 .. sm_lhandle_kind_count()-1. A thread that has registered every
** kind itself (its VM loaded the module) may read them without a lock. */
int sm_lhandle_kind_count(void);
const lhandle_kind_t *sm_lhandle_kind(int index);

/* The running actor (if any) owns the handle userdata at idx, of the registered `kind`. May
** raise for memory: a kind whose close may run twice (a socket's id) calls it once the userdata
** closes by its __gc; one whose may not (a file's descriptor number) calls it while the userdata
** owns nothing yet. */
void sm_lhandle_own(lua_State *L, int idx, const lhandle_kind_t *kind);

/* The actor whose data pointer is `owner` has ended: forget what it owned, closing it first
** when `close` (an abnormal end). Never raises (out of memory: nothing is closed early). */
void sm_lhandle_end_owner(lua_State *L, void *owner, int close);

/* The generation of runs: changes when smarm.run starts a run and again when the run has ended
** (lsmarm.c, on the caller's thread while no scheduler runs). */
uint32_t sm_lhandle_run_generation(void);
void sm_lhandle_next_run(void);

/* Registers the metatable `name` of a handle type once per VM: methods as __index, gc as __gc,
** tostring as __tostring, and a locked __metatable. */
void sm_lio_handle_metatable(lua_State *L, const char *name, const luaL_Reg *methods,
                             lua_CFunction gc, lua_CFunction tostring);

#endif
