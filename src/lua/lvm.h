/*
** A scheduler's LuaJIT VM as the binding's files share it. Scheduler 0 uses the VM that called
** smarm.run; schedulers 1..N-1 make their own on their own thread (lsmarm.c, on_sched_start) and
** close it when they stop. A VM is touched only by its scheduler's thread, so nothing here is
** atomic but the memory it tells others (lvm_t.memory); the core keeps the pointer as the scheduler's data (smarm_sched_data).
**
** The refs are integer registry refs in the VM's own registry, made once per run and VM
** (lightuserdata keys find the values once). The hottest values are pushed from their bits
** (sm_ljx_push_bits) instead: a registry ref's lookup walked a hash chain that a spawn's other
** work had pushed out of the cache (docs/perf.md, "Hot values without a lookup"). Bits are read
** at each run's start and live as long as what anchors them: a lightuserdata key of the registry
** for the VM's life (the intern table, the metatables, the message handler, the remote entry),
** or a ref of this run, let go at its end (the strings, the fixed templates).
*/
#ifndef SMARM_LUA_LVM_H
#define SMARM_LUA_LVM_H

#include "ljx.h"
#include "smarm.h"

#include <lauxlib.h>
#include <lua.h>

#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>

/* Coroutines of actors that ended cleanly, kept for new actors of the same VM: a spawn then costs
** no lua_newthread, no registry slot and no garbage. */
#define LVM_SPARE_COS 256
#define LVM_SENT 8 /* long strings an encode met last, remembered (lbinary.c) */
#define LVM_SPAWN_UPS 8 /* upvalues of a function whose spawn_on transfer is kept (codec.c) */

/* What a kept spawn_on function's bytes depend on besides its bytecode (codec.c): the index of
** names' generation they were made under (sm_lrebind_index_current) and its upvalues' values
** (as sm_ljx_top_bits gives them) and cells (lua_upvalueid: which of them share one is in the
** bytes). */
typedef struct lvm_kept {
  uint64_t gen;
  int nups;
  uint64_t up[LVM_SPAWN_UPS];
  const void *cell[LVM_SPAWN_UPS];
} lvm_kept_t;

/* Strings the hot paths push (field names of notices and calls, the reasons with a code): each
** anchored by a registry ref, so pushing one costs no hashing. The first four are the reasons of
** codes SMARM_EXIT_NORMAL..SMARM_EXIT_NOPROC, in that order; the fifth SMARM_EXIT_MAILBOX_OVERFLOW's
** and the sixth SMARM_EXIT_NOMEM's (lfaults.c maps them). */
enum lvm_str {
  LVM_STR_NORMAL, LVM_STR_KILL, LVM_STR_KILLED, LVM_STR_NOPROC, LVM_STR_MAILBOX_OVERFLOW,
  LVM_STR_NOMEM,
  LVM_STR_SMARM, LVM_STR_CALL, LVM_STR_DOWN, LVM_STR_EXIT, LVM_STR_FROM, LVM_STR_REQUEST,
  LVM_STR_PID, LVM_STR_REF, LVM_STR_REASON,
  LVM_STR_PACKAGE, LVM_STR_LOADED,
  LVM_STRS
};
extern const char *const lvm_str_text[LVM_STRS];

/* Tables of a fixed shape that the hot paths make (lshape.c): a call's request and the two
** notices, each copied from a template that holds its keys and its `smarm` field. */
enum lvm_fixed { LVM_FIXED_CALL, LVM_FIXED_DOWN, LVM_FIXED_EXIT, LVM_FIXEDS };
enum { LVM_FIXED_KEYS = 3 }; /* the most keys a fixed shape has besides `smarm` */

typedef struct lvm {
  lua_State *L; /* a state of this scheduler's VM not used by any actor (the main thread) */
  int owned;    /* created by us (schedulers >= 1): closed when the scheduler stops */
  int spare_count;
  lua_State *spare_co[LVM_SPARE_COS]; /* each with an empty stack, anchored by spare_ref */
  int spare_ref[LVM_SPARE_COS];
  /* lpid.c, as sm_ljx_push_bits pushes them (the registry keeps them for the VM's life): the
  ** intern table, the metatables of pids, refs, calls' reply handles and message timers */
  uint64_t intern, pid_mt, ref_mt, from_mt, timer_mt;
  int str_ref[LVM_STRS];       /* lvm_push_str: what keeps the strings... */
  uint64_t str_bits[LVM_STRS]; /* ...and what pushes them */
  uint64_t traceback;          /* lsmarm.c: the message handler of actors' protected calls, */
  uint64_t remote_entry;       /* and the C function that starts a spawn_on's actor (bits) */
  int encode_reason_ref;       /* lfaults.c: the protected encoder of exit reasons */
  /* codec.c: the function decoded last, as its template's bits and its bytecode (the key that
  ** keeps the template in the templates table; template 0: none): a spawn_on of the same
  ** function compares bytes instead of interning them and looking the template up. */
  uint64_t last_template;
  const char *last_code;
  size_t last_code_len;
  /* lrebind.c: the VM's index of names as it was last made in this run, which the registry
  ** keeps: its snapshot of package.loaded (NULL: none) and that one's size, and its names
  ** table's bits (0: no index); forgotten when the index is dropped (lrebind.c, vm_of) */
  const void *index_snap;
  size_t index_snap_size;
  uint64_t index_names;
  uint64_t index_gen;          /* lrebind.c: indexes made in this run (sm_lrebind_index_current) */
  /* codec.c: the function of a spawn_on's transfer, encoded, kept for the same function again
  ** (sm_codec_encode_transfer): the function (the registry keeps it; NULL: none), its encoded
  ** bytes, and what they depend on (spawn_state). spawn_seen: the function such a transfer
  ** encoded last, a hint that nothing keeps (the second encode of one function in a row keeps
  ** it). */
  const void *spawn_fn;
  unsigned char *spawn_bytes; /* (malloc'ed: sm_codec_vm_stop frees them) */
  size_t spawn_len;
  lvm_kept_t spawn_state;
  const void *spawn_seen;
  uint64_t owners;             /* lhandle.c: its owners table once looked up in this run, as
                               ** sm_ljx_top_bits gives it; LVM_NO_OWNERS: looked up, none made
                               ** yet; 0: not looked up */
  struct lshape_cache *shapes; /* lshape.c: the decoder's templates of key sets (NULL: none) */
  int shapes_ref;              /* lshape.c: their tables (0: none yet; never a registry ref) */
  int fixed_ref[LVM_FIXEDS];   /* lshape.c: the templates of the fixed shapes, kept by these */
  uint64_t fixed_bits[LVM_FIXEDS]; /* and pushed from these */
  uint32_t fixed_slot[LVM_FIXEDS][LVM_FIXED_KEYS]; /* their keys' nodes, in sm_lshape_fixed's
                                                   ** order */
  const char *sent[LVM_SENT];  /* lbinary.c: the bytes of the last long strings an encode
                               ** copied here, kept round-robin, */
  uint32_t sent_id[LVM_SENT];  /* and their ids (sm_ljx_string_id): a hint, as a string made
                               ** later at one's address may have the same */
  unsigned sent_next;
  int *receive_more;           /* lfast.c: the FFI receive's hint (NULL: not registered) */
  const void *receive_fn;      /* lfast.c: its Lua function, where preemption never switches */
  volatile sig_atomic_t no_arm; /* lpreempt.c: debug.sethook runs; its signal handler keeps off */
  int edge_tries;               /* lpreempt.c: hooks since the last switch, looking for an edge */
  /* lpreempt.c, per-actor hooks: how many of this VM's actors have a hook of their own; whose
  ** is installed in the VM now (NULL: none) with its mask and count (read by the signal
  ** handler); how a preemption is armed over it (lpreempt.c). */
  char watchdog_head[64];       /* lsmarm.c: the first line of the watchdog's traceback */
  int hooked_actors;
  struct lvm_actor_head *volatile hook_owner;
  volatile sig_atomic_t hook_mask, hook_count, hook_armed;
  /* lpreempt.c, while armed over a hook with a count: the count it is armed with, and the
  ** instructions left until the actor's own count event, which the armed events stand for. */
  volatile sig_atomic_t armed_count, own_count_left;
  /* The VM's memory in bytes as of its scheduler's last tick (lvm_publish_memory), for
  ** smarm.stats() on any scheduler: the owner stores, others load, relaxed (a number). */
  _Atomic size_t memory;
} lvm_t;

/* What every Lua actor's smarm_actor_data() starts with (lsmarm.c's lactor_t): its coroutine,
** its own debug hook (lpreempt.c): the function's registry ref (0: none), mask and count, and
** what it waits for beyond what the core can tell (linfo.c). */
typedef struct lvm_actor_head {
  lua_State *co;
  int hook_ref, hook_mask, hook_count;
  int hook_left;           /* its count hook's instructions left when it was switched out; 0:
                              the whole count (lpreempt.c) */
  const char *waiting_for; /* while parked in smarm.call: "call"; in an IO call: its name
                              ("tcp.receive": smarm.info says "io:tcp.receive"); else NULL */
} lvm_actor_head_t;

#define LVM_NO_OWNERS ((uint64_t)1) /* (no object's bits) */

/* A Lua actor's smarm_actor_data() until it starts, when spawn_on made it: its transfer block
** (the function and arguments, with the core's spawn request) with the low bit set, which blocks
** (16-byte aligned) never have. The block is all there is of the actor until then: no head, no
** coroutine; on_actor_stopped frees it. Its lines are the only ones that cross to the other
** scheduler (a state written into the block beside them made two more: docs/perf.md). */
#define LVM_DATA_BLOCK ((uintptr_t)1)

static inline void *lvm_data_of_block(smarm_msg_t *block)
{
  return (void *)((uintptr_t)block | LVM_DATA_BLOCK);
}

/* The block of data that lvm_data_of_block made, else NULL. */
static inline smarm_msg_t *lvm_block_of_data(const void *data)
{
  return (uintptr_t)data & LVM_DATA_BLOCK ? (smarm_msg_t *)((uintptr_t)data & ~LVM_DATA_BLOCK)
                                          : NULL;
}

/* The head of a Lua actor's data, NULL for one not started (or none). */
static inline const lvm_actor_head_t *lvm_head_of_data(const void *data)
{
  return lvm_block_of_data(data) ? NULL : data;
}

/* The calling scheduler's VM. Every caller runs in an actor (its scheduler started and made the
** VM's refs first), so it always has one. */
static inline lvm_t *this_vm(void) { return smarm_sched_data(); }

/* Tells the VM's memory to other threads (lvm_t.memory): at its scheduler's ticks
** (cfg.on_sched_tick: before it idles, every 64 decisions while busy) and in smarm.stats. */
static inline void lvm_publish_memory(lvm_t *vm, lua_State *L)
{
  atomic_store_explicit(&vm->memory, sm_ljx_gc_total(L), memory_order_relaxed);
}

/* Lets go of a registry ref of the VM's: one that a failed start may have left unmade (0) too. */
static inline void lvm_unref(lua_State *L, int ref)
{
  if (ref > 0)
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
}

/* Pushes one of the cached strings. */
static inline void lvm_push_str(lua_State *L, const lvm_t *vm, enum lvm_str k)
{
  sm_ljx_push_bits(L, vm->str_bits[k]);
}

/* Pushes registry[key] (a lightuserdata key: the address of a static of the caller's). */
static inline void lvm_push_registry(lua_State *L, const void *key)
{
  lua_pushlightuserdata(L, (void *)key);
  lua_rawget(L, LUA_REGISTRYINDEX);
}

/* Pushes registry[key], a table made at the first call, weak as `mode` says ("k", "v", "kv";
** NULL: strong). */
static inline void lvm_push_registry_table(lua_State *L, const void *key, const char *mode)
{
  lvm_push_registry(L, key);
  if (lua_istable(L, -1))
    return;
  lua_pop(L, 1);
  lua_newtable(L);
  if (mode) {
    lua_createtable(L, 0, 1);
    lua_pushstring(L, mode);
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
  }
  lua_pushlightuserdata(L, (void *)key);
  lua_pushvalue(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

/* registry[key] = the value on top, unless it is set already; pops it. */
static inline void lvm_set_registry_once(lua_State *L, const void *key)
{
  lvm_push_registry(L, key);
  int set = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (set) {
    lua_pop(L, 1);
    return;
  }
  lua_pushlightuserdata(L, (void *)key);
  lua_insert(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

#endif
