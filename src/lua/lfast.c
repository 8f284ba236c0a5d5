/*
** smarm.send of a number or a string to a pid, and smarm.reply of one to a call, through the
** FFI (see lfast.h).
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
** or string.
*/
#include "lfast.h"

#include "codec.h"
#include "lpid.h"
#include "smarm.h"

#include <lauxlib.h>

#include <errno.h>
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
  return may_send(p, &to) ? send_block(to, sm_codec_string_block(s, len, 0)) : 1;
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
  return may_reply(p, &caller, &alias)
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

/* Pushes ffi.cast(ctype, fn). */
static void push_entry(lua_State *L, int cast, const char *ctype, void *fn)
{
  lua_pushvalue(L, cast);
  lua_pushstring(L, ctype);
  lua_pushlightuserdata(L, fn);
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
  push_entry(L, cast, "int (*)(const void *, double)", number_fn);
  push_entry(L, cast, "int (*)(const void *, const char *, size_t)", string_fn);
  lua_getglobal(L, "type");
  lua_getglobal(L, "debug");
  lua_getfield(L, -1, "getmetatable");
  lua_remove(L, -2);
  push_mt(L);
  lua_call(L, 6, 1);
  lua_setfield(L, module, name + 7);
}

void sm_lfast_register(lua_State *L, int module)
{
  int base = lua_gettop(L);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "ffi");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "cast");
  int cast = lua_gettop(L);
  wrap(L, module, cast, "=smarm.send", (void *)(uintptr_t)send_number,
       (void *)(uintptr_t)send_string, sm_lpid_push_pid_mt);
  wrap(L, module, cast, "=smarm.reply", (void *)(uintptr_t)reply_number,
       (void *)(uintptr_t)reply_string, sm_lpid_push_from_mt);
  lua_settop(L, base);
}
