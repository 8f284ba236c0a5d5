/*
** smarm.send of a number or a string to a pid, smarm.reply of one to a call, and smarm.receive()
** of one already queued, through the FFI (see lfast.h).
**
** A classic C function (lua_CFunction) ends the compiled trace around its call: LuaJIT leaves
** compiled code, the interpreter makes the call, and compiled code is entered again after it.
** Around the short calls of message passing that costs about as much as the call (docs/perf.md,
** "Where smarm's own time goes"). A call through an FFI function pointer is compiled into the
** trace as a plain C call. Rule 1 of the design allows it for C code that never switches
** stacks, and a send never does: it appends the block to the receiver's mailbox or pushes it
** onto another scheduler's inbox (and may wake that scheduler), and returns; a reply is a send
** that the receiving scheduler drops once its call has ended.
**
** So smarm.send and smarm.reply are Lua functions that send a number or a string to a pid (to a
** call's reply handle) through these entry points, and hand every other case to the classic
** function (l_send, l_reply): other values, names, other nodes' processes, and every failure
** (outside an actor, out of memory), so that errors read exactly as before. The entry points
** take the userdata as the FFI passes it, a pointer to its payload (the Lua side lets only pids
** and reply handles through), and check its size and magic (lpid.c) before they read it; the
** block is the one the codec makes of the value (sm_codec_number_block, sm_codec_string_block).
** What the classic functions do around the encode (moving sockets, binaries) concerns no number
** or short string: a long one (CODEC_SHARED_STRING) goes to the classic function, which looks
** up its block (codec.c, "Long strings"; a copy of 16 KiB costs more than the call).
*/
#include "lfast.h"

#include "codec.h"
#include "lpid.h"
#include "lvm.h"
#include "smarm.h"

#include <lauxlib.h>

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* What became of block m, which smarm_send or smarm_send_reply answered rc for (m NULL: none
** could be made): 0 when it was sent, or dropped as the classic function drops it (a dead
** receiver, or a caller gone); 1 when the classic function must take over. */
static int outcome(smarm_msg_t *m, int rc)
{
  if (rc >= 0)
    return 0;
  smarm_msg_free(m);
  return rc != -ESRCH;
}

static int send_block(smarm_pid_t to, smarm_msg_t *m)
{
  return m ? outcome(m, smarm_send(to, m)) : 1;
}

/* Whether the classic send would get this far: called from an actor of the binding (what
** self_or_raise asks), to a pid (p: the payload the FFI passes for it). */
static int may_send(const void *p, smarm_pid_t *to)
{
  return p && smarm_actor_data() && sm_lpid_payload_pid(p, to);
}

/* The entry points: int, which the FFI returns as a plain number. */
static int send_number(const void *p, double n)
{
  smarm_pid_t to;
  return may_send(p, &to) ? send_block(to, sm_codec_number_block(n, 0)) : 1;
}

static int send_string(const void *p, const char *s, size_t len)
{
  smarm_pid_t to;
  return len < CODEC_SHARED_STRING && may_send(p, &to)
           ? send_block(to, sm_codec_string_block(s, len, 0))
           : 1;
}

/* Whether the classic reply would get this far: called from an actor of the binding, to a
** reply handle (p: its payload). */
static int may_reply(const void *p, smarm_pid_t *caller, smarm_ref_t *alias)
{
  return p && smarm_actor_data() && sm_lpid_payload_from(p, caller, alias);
}

/* The reply m (its value's block, the room for the alias at its end) to caller through alias. */
static int reply_block(smarm_pid_t caller, smarm_ref_t alias, smarm_msg_t *m)
{
  if (!m)
    return 1;
  memcpy((char *)smarm_msg_data(m) + smarm_msg_size(m) - sizeof alias, &alias, sizeof alias);
  return outcome(m, smarm_send_reply(caller, m));
}

static int reply_number(const void *p, double n)
{
  smarm_pid_t caller;
  smarm_ref_t alias;
  return may_reply(p, &caller, &alias)
           ? reply_block(caller, alias, sm_codec_number_block(n, sizeof alias))
           : 1;
}

static int reply_string(const void *p, const char *s, size_t len)
{
  smarm_pid_t caller;
  smarm_ref_t alias;
  return len < CODEC_SHARED_STRING && may_reply(p, &caller, &alias)
           ? reply_block(caller, alias, sm_codec_string_block(s, len, sizeof alias))
           : 1;
}

/* smarm.send and smarm.reply, each made from its classic function, its two entry points and
** the metatable of what it sends to (pids, reply handles). The checks compile to guards. Only
** such a userdata may reach an entry point, which reads the LuaJIT header before the payload it
** is given: the check compares the value's real metatable (debug.getmetatable, past any
** __metatable field) with that metatable, which the binding gives only to its own userdata;
** only the debug library could give it to another value (a light userdata would reach C as its
** bare pointer), and what that breaks is the debug library's doing. The entry point checks the
** size and magic again, and refuses NULL. Arguments pass through as they came, so the classic
** function's errors read as before ("got no value"). */
static const char maker[] =
  "local classic, number, string, type, getmetatable, mt = ...\n"
  "return function(...)\n"
  "  local to, v = ...\n"
  "  if getmetatable(to) == mt then\n"
  "    local t = type(v)\n"
  "    if t == 'number' then\n"
  "      if number(to, v) == 0 then return end\n"
  "    elseif t == 'string' then\n"
  "      if string(to, v, #v) == 0 then return end\n"
  "    end\n"
  "  end\n"
  "  return classic(...)\n"
  "end\n";

/* smarm.receive() (no match, no timeout), when a lone number or string is first in the mailbox:
** receive_take takes it into the VM's slot, and a string's bytes are copied by ffi.string, then
** their block is released. The slot is the VM's, so no other actor may run between the take and
** the reads: the preemption steps out of this function before it switches (lpreempt.c; it has
** no loop edge, so only a switch forced after EDGE_TRIES instructions could otherwise land
** there). Anything else goes to the classic receive, which parks or raises as before, given the
** two arguments it reads (receive() and receive(nil, nil) are the same call to it).
** A receive that parks would pay for a look at an empty mailbox (8% of a ping-pong's round
** trip), so the slot's `more` says whether to look: the classic receive sets it to whether
** messages are left when it returns one (sm_lfast_cache_refs), and a look that takes nothing
** clears it. It is only a hint: a message it hides is taken by the classic receive, a look it
** wastes finds nothing. The classic receive is a tail call: compiled code then leaves no frame
** of this function to rebuild when it exits to the interpreter for the call (a plain call, its
** results then returned, cost as much as the look, measured). */
typedef struct fast_receive {
  codec_scalar_t v; /* what was taken (the Lua side reads v and more, declared in SLOT_CTYPE) */
  int more;
  smarm_msg_t *block; /* a taken string's block, until its release (or the next take, or the
                         slot's collection at the VM's end: a hook that raised in between) */
  smarm_match_fn is_scalar; /* lfast.h */
} fast_receive_t;

/* The entry points: 1, a number in slot->v.n; 2, a string at slot->v.s and slot->v.len, bytes
** of slot->block, which stay until release (the actor's own receives, a hook's included, never
** touch it); 0, the classic receive. */
static int receive_take(fast_receive_t *slot)
{
  smarm_msg_t *m;
  if (smarm_receive_first(slot->is_scalar, &slot->v, &m) < 0) /* -EPERM outside an actor */
    return 0;
  if (slot->v.type == LUA_TNUMBER) {
    smarm_msg_free(m);
    return 1;
  }
  smarm_msg_free(slot->block);
  slot->block = m;
  return 2;
}

static void receive_release(fast_receive_t *slot)
{
  smarm_msg_free(slot->block);
  slot->block = NULL;
}

/* The slot's __gc: a block a raising hook left behind. */
static int slot_gc(lua_State *L)
{
  receive_release(lua_touserdata(L, 1));
  return 0;
}

static const char receive_maker[] =
  "local classic, take, release, slot, ffistring = ...\n"
  "return function(match, timeout)\n"
  "  if match == nil and timeout == nil and slot.more ~= 0 then\n"
  "    local k = take(slot)\n"
  "    if k == 1 then return slot.v.n end\n"
  "    if k == 2 then\n"
  "      local s = ffistring(slot.v.s, slot.v.len)\n"
  "      release(slot)\n"
  "      return s\n"
  "    end\n"
  "    slot.more = 0\n"
  "  end\n"
  "  return classic(match, timeout)\n"
  "end\n";

/* fast_receive_t as the FFI is told it (the layout both compilers give it on LP64). */
#define SLOT_CTYPE                                                                            \
  "struct { struct { int type; double n; const char *s; size_t len; } v; int more; } *"
_Static_assert(offsetof(codec_scalar_t, n) == 8 && offsetof(codec_scalar_t, s) == 16 &&
                 offsetof(codec_scalar_t, len) == 24 && offsetof(fast_receive_t, more) == 32,
               "fast_receive_t is not laid out as SLOT_CTYPE");

/* registry[&slot_key]: the VM's fast_receive_t (a userdata, which the registry keeps);
** registry[&receive_key]: the function receive_maker made in the VM. Both are made once per VM,
** for its life: a module loaded again shares them, so the preemption knows the one function
** that reads the one slot. */
static const char slot_key, receive_key;

void sm_lfast_cache_refs(lvm_t *vm)
{
  lua_State *L = vm->L;
  lvm_push_registry(L, &slot_key);
  fast_receive_t *slot = lua_touserdata(L, -1);
  vm->receive_more = slot ? &slot->more : NULL;
  lvm_push_registry(L, &receive_key);
  vm->receive_fn = lua_topointer(L, -1);
  lua_pop(L, 2);
}

/* Pushes ffi.cast(ctype, p): an entry point, or the slot. */
static void push_cast(lua_State *L, int cast, const char *ctype, void *p)
{
  lua_pushvalue(L, cast);
  lua_pushstring(L, ctype);
  lua_pushlightuserdata(L, p);
  lua_call(L, 2, 1);
}

/* Replaces module[name] by what maker makes of it, the two entry points, type,
** debug.getmetatable and the metatable that push_mt pushes. */
static void wrap(lua_State *L, int module, int cast, const char *name, void *number_fn,
                 void *string_fn, void (*push_mt)(lua_State *))
{
  if (luaL_loadbuffer(L, maker, sizeof maker - 1, name) != 0)
    lua_error(L);
  lua_getfield(L, module, name + 7); /* past "=smarm." */
  push_cast(L, cast, "int (*)(const void *, double)", number_fn);
  push_cast(L, cast, "int (*)(const void *, const char *, size_t)", string_fn);
  lua_getglobal(L, "type");
  lua_getglobal(L, "debug");
  lua_getfield(L, -1, "getmetatable");
  lua_remove(L, -2);
  push_mt(L);
  lua_call(L, 6, 1);
  lua_setfield(L, module, name + 7);
}

/* Pushes the VM's FFI receive, made at the first call. */
static void push_receive(lua_State *L, int module, int ffi, int cast, smarm_match_fn is_scalar)
{
  lvm_push_registry(L, &receive_key);
  if (!lua_isnil(L, -1))
    return;
  lua_pop(L, 1);
  if (luaL_loadbuffer(L, receive_maker, sizeof receive_maker - 1, "=smarm.receive") != 0)
    lua_error(L);
  lua_getfield(L, module, "receive");
  push_cast(L, cast, "int (*)(void *)", (void *)(uintptr_t)receive_take);
  push_cast(L, cast, "void (*)(void *)", (void *)(uintptr_t)receive_release);
  fast_receive_t *slot = lua_newuserdata(L, sizeof *slot);
  memset(slot, 0, sizeof *slot);
  slot->more = 1;
  slot->is_scalar = is_scalar;
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, slot_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lvm_set_registry_once(L, &slot_key);
  push_cast(L, cast, SLOT_CTYPE, slot);
  lua_getfield(L, ffi, "string");
  lua_call(L, 5, 1);
  lua_pushvalue(L, -1);
  lvm_set_registry_once(L, &receive_key);
}

void sm_lfast_register(lua_State *L, int module, smarm_match_fn is_scalar)
{
  int base = lua_gettop(L);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "ffi");
  lua_call(L, 1, 1);
  int ffi = lua_gettop(L);
  lua_getfield(L, ffi, "cast");
  int cast = lua_gettop(L);
  wrap(L, module, cast, "=smarm.send", (void *)(uintptr_t)send_number,
       (void *)(uintptr_t)send_string, sm_lpid_push_pid_mt);
  wrap(L, module, cast, "=smarm.reply", (void *)(uintptr_t)reply_number,
       (void *)(uintptr_t)reply_string, sm_lpid_push_from_mt);
  push_receive(L, module, ffi, cast, is_scalar);
  lua_setfield(L, module, "receive");
  lua_settop(L, base);
}
