/*
** The message codec: Lua values to bytes and back, so that a message means the same thing to a
** receiver in the sender's VM and in another scheduler's VM.
**
** Sendable: booleans, numbers, strings, pids, refs, calls' reply handles, timers, functions,
** and tables of those, nested up to CODEC_MAX_DEPTH levels, with shared references and cycles
** preserved (the receiver gets one table where the sender had one table). Metatables are not
** sent, but a tuple's or map's mark is, and Erlang atoms and opaque terms travel (lterm.h). nil encodes too (send refuses it: nil is not a message). A function or userdata that
** every VM finds by name (lrebind.h) travels as that name; another Lua function as its bytecode
** and upvalues (upvalue tables re-bound by name when they are modules, cells shared between
** closures kept shared). Anything else (coroutines, other userdata, cdata, C functions no
** module holds) raises `<path> is a <type>`, where path names the place, e.g.
** `message.handler`, `message.items[3]` or `message.f[upvalue 'co']`.
**
** Handles (sockets, files: lhandle.h) travel too, through the interface their modules register;
** the codec knows no kind of handle.
**
** Format: optionally HLIST, a count and that many handles (codec flags, kind index, the kind's
** bits, id, timeout, descriptor) first; then a tag byte per value (a handle is HANDLE and its
** index in the list); numbers as 8 raw bytes, strings as a varint length and bytes, tables as
** TABLE, two 4-byte counts (array-like keys, other keys: the receiver's size hints), key/value
** pairs, END; a table seen before as REF and the varint offset of its tag from the start of the
** value, whose tag the encoder then rewrites to STABLE (the receiver registers only those). A
** call's request is CALL, the caller's pid, the request's value, then the alias (8 bytes). A
** function is FUNC (SFUNC when pointed back to), its bytecode as a string, an upvalue count byte
** and each upvalue: JOIN, the varint offset of a function met before and its upvalue number, or
** a value; NAMED is a module's name and a field's (empty for the module itself), two strings.
** A transfer is VALUES, a varint count and that many values.
*/
#ifndef SMARM_LUA_CODEC_H
#define SMARM_LUA_CODEC_H

#include "smarm.h"

#include <lua.h>

/* Deeper nesting raises: the encoder and decoder recurse on the actor's C stack. */
#define CODEC_MAX_DEPTH 200

/* Handles travel at most CODEC_MAX_HANDLES per message, each once: the block then begins with
** their list and is owning (smarm_msg_set_owning), so that if nobody decodes it the drop hook
** (sm_codec_drop, installed by the binding) drops them. The sender's handles are handed over only
** when the caller commits the moves after a successful send. */
#define CODEC_MAX_HANDLES 16

/* Strings of this many bytes or more, sent again, travel as blocks of their bytes that the
** sender's VM keeps for them, not copied into each message (codec.c, "Long strings"). */
#define CODEC_SHARED_STRING 16384

typedef struct codec_moves {
  void *uds[CODEC_MAX_HANDLES]; /* the sender's handle userdata */
  int kind[CODEC_MAX_HANDLES];  /* their kinds (sm_lhandle_kind) */
  int n;
} codec_moves_t;

/* Encodes the value at idx into a new message block (owned by the caller). Raises a Lua error
** naming the path of a value that cannot be sent (nothing leaks). A handle that must be readied
** to travel (lhandle.h: before_move; an active socket) may park the caller, and the value is
** then encoded again, as it is by then. moves receives the handles in
** it: after sending the block, sm_codec_commit(moves); if it is not sent, sm_codec_abandon(block).
** */
smarm_msg_t *sm_codec_encode(lua_State *L, int idx, const char *root, codec_moves_t *moves);
/* The block sm_codec_encode_tail makes of a number, or of a string of n bytes at s copied (the
** FFI sends pass only strings under CODEC_SHARED_STRING: codec.c, "Long strings"), with `tail`
** spare bytes after it; NULL when memory is out. No Lua state: the FFI sends (lfast.c) call
** them. */
smarm_msg_t *sm_codec_number_block(double n, size_t tail);
smarm_msg_t *sm_codec_string_block(const char *s, size_t n, size_t tail);
/* The same, for plain data only: a function anywhere, or a userdata that only its name would
** carry (io.stdout), raises `<path> is a function` (exit reasons: every notice decodes them, and
** decoding a function may run the receiver's require). */
smarm_msg_t *sm_codec_encode_data(lua_State *L, int idx, const char *root, codec_moves_t *moves);
/* The same with `tail` more bytes at the end of the block, for the caller (a reply's alias). */
smarm_msg_t *sm_codec_encode_tail(lua_State *L, int idx, const char *root, codec_moves_t *moves,
                                  size_t tail);
/* A call's request: the receiver decodes it as { smarm = "CALL", from = <reply handle of caller
** and alias>, request = <the value at idx> } (smarm.call's hot path: no table is made here, and
** the receiver's uses cached field names); errors name `request`. The caller writes the alias
** into the block's last 8 bytes (tail >= 8, the convention of replies), where the decoder reads
** it. */
typedef struct codec_call {
  smarm_pid_t caller;
} codec_call_t;
smarm_msg_t *sm_codec_encode_call(lua_State *L, int idx, const codec_call_t *call,
                                  codec_moves_t *moves, size_t tail);
/* A transfer (ltransfer.h): the n values from first on (spawn_on's function, or its name, and
** arguments) as one message, their tables and upvalue cells shared as within one value; errors
** name them `function...` and `argument[i]...`. `tail` spare bytes at the end, as above. */
smarm_msg_t *sm_codec_encode_transfer(lua_State *L, int first, int n, codec_moves_t *moves,
                                      size_t tail);
/* The VM's kept transfer (codec.c, lvm_t.spawn_fn): its registry slot made at a run's start in
** each VM, and let go at its end (the bytes freed; a VM that lives on lets the function go). */
struct lvm;
void sm_codec_vm_start(struct lvm *vm);
void sm_codec_vm_stop(struct lvm *vm);
void sm_codec_commit(codec_moves_t *moves); /* the sender's handles are handed over */
/* Frees an unsent block; the handles (moves, or NULL when there are none) stay the sender's. */
void sm_codec_abandon(lua_State *L, smarm_msg_t *msg, codec_moves_t *moves);

/* Pushes the value a message holds; the receiver now owns its handles (the block is no longer
** owning). Returns 1 when it was an IO event (its table is held: sm_codec_event_taken), else 0.
** Raises on a block sm_codec_encode did not make. */
int sm_codec_decode(lua_State *L, smarm_msg_t *msg);
/* The same for a block made by sm_codec_encode_tail with that tail. */
void sm_codec_decode_head(lua_State *L, smarm_msg_t *msg, size_t tail);
/* Pushes the values of a block made by sm_codec_encode_transfer with that tail and returns
** their count (as sm_codec_decode_head, the receiver owns the handles). Raises on any other
** block. */
int sm_codec_decode_transfer(lua_State *L, smarm_msg_t *msg, size_t tail);
/* A lone number or string, as sm_codec_number_block and sm_codec_string_block make them: a block
** whose bytes, but for `tail` at the end, are one of them. Returns LUA_TNUMBER with out->n, or
** LUA_TSTRING with out->s and out->len (the bytes inside the block), or 0 for anything else. No
** Lua state: the FFI receive calls it (lfast.c, whose declaration of the struct must match). */
typedef struct codec_scalar {
  int type;
  double n;
  const char *s;
  size_t len;
} codec_scalar_t;
int sm_codec_scalar(const smarm_msg_t *msg, size_t tail, codec_scalar_t *out);

/* Pushes what sending the Lua function at idx to an actor of this same VM would give it (a new
** closure of its code, with new upvalue cells), without making a message, and returns 1, when
** that is the same function with the same upvalue values: its environment is the VM's globals
** and each upvalue holds nil, a boolean, a number, a string, or a value every VM knows by name
** (lrebind.h). Otherwise pushes nothing and returns 0 (the codec is needed). May raise "not
** enough memory". */
int sm_codec_copy_function_here(lua_State *L, int idx);
/* Whether the value at idx decodes in this VM to that very value (nil, a boolean, a number, a
** string, a pid), so that an actor of this VM may be handed it as it is. */
int sm_codec_same_here(lua_State *L, int idx);

/* Pushes the value of bytes that sm_codec_encode made without handles (an exit reason inside a
** notice). Raises on malformed bytes or a handle list. */
void sm_codec_decode_bytes(lua_State *L, const void *p, size_t n);

/* IO events: blocks the IO thread makes for a socket's owner (io.h, beginning with
** IO_EVENT_TAG) decode through the functions its module sets for their source (ltcp.c, ludp.c):
** decode pushes one value, the event's table, which it marks held (sm_codec_hold_event); taken
** is called when a receive hands a held event of that source to the actor (sm_codec_event_taken,
** with the table on top, left there), and counts it: a socket sends more once its owner has taken
** what it sent. A source without flow control (the node's messages: dist.h) has no taken and
** holds nothing; its decode pushes the message itself. Any thread may set them, at any time (every VM's module load sets its own again:
** the same functions). */
typedef struct codec_event_fns {
  void (*decode)(lua_State *L, const unsigned char *p, size_t n);
  void (*taken)(lua_State *L);
} codec_event_fns_t;
void sm_codec_set_event_fns(int source, const codec_event_fns_t *fns);

/* Per VM, which handle userdata an event names: the handle at idx is the target of source's
** socket id from now on (weak: a collected handle is forgotten). sm_codec_push_event_target pushes
** it and returns 1, or pushes nothing and returns 0 (the caller checks the whole id). */
void sm_codec_set_event_target(lua_State *L, int idx, int source, uint64_t id);
int sm_codec_push_event_target(lua_State *L, int source, uint64_t id);

/* The table on top is an event of source, decoded and not yet taken (held, in a weak set of the
** VM's). sm_codec_unhold_event: if the table on top is held, it is not any more: returns its
** source, else 0 (a socket taking back its events from the saved queue). */
void sm_codec_hold_event(lua_State *L, int source);
int sm_codec_unhold_event(lua_State *L);

/* A receive hands the value on top to the actor, which holds IO events not yet taken: 1 if it is
** one of them (its module has counted it as taken), else 0. */
int sm_codec_event_taken(lua_State *L);

/* The Erlang term (external format, version byte first) of a value the codec encoded for plain
** data (an exit reason's bytes), as smarm.term.encode would make it of the decoded value; for the
** node, which sends reasons to Erlang from where no Lua may run (an actor's last moments). Any
** thread, no Lua. Returns a malloc'd buffer and its length in *len, or NULL when the value has
** no Erlang term (a table met twice, a handle, NaN) or memory ran out. */
unsigned char *sm_codec_data_to_etf(const void *p, size_t n, size_t *len);

/* The drop hook: drops (closes) the handles of a block nobody decoded. */
void sm_codec_drop(smarm_msg_t *msg);

#endif
