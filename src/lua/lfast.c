/*
** smarm.send of a number or a string to a pid, through the FFI (see lfast.h).
**
** A classic C function (lua_CFunction) ends the compiled trace around its call: LuaJIT leaves
** compiled code, the interpreter makes the call, and compiled code is entered again after it.
** Around the short calls of message passing that costs about as much as the call (docs/perf.md,
** "Where smarm's own time goes"). A call through an FFI function pointer is compiled into the
** trace as a plain C call. Rule 1 of the design allows it for C code that never switches
** stacks, and a send never does: it appends the block to the receiver's mailbox or pushes it
** onto another scheduler's inbox (and may wake that scheduler), and returns.
**
** So smarm.send is a Lua function that sends a number or a string to a pid through these entry
** points, and hands every other case to the classic send (l_send): other values, names, other
** nodes' processes, and every failure (outside an actor, out of memory), so that errors read
** exactly as before. The entry points take the pid's userdata as the FFI passes it, a pointer to
** its payload (the Lua side lets only pids through), and check its size and magic (lpid.c)
** before they read it; the block is the one
** the codec makes of the value (sm_codec_number_block, sm_codec_string_block). What the classic
** send does around the encode (moving sockets, binaries) concerns no number or string.
*/
#include "lfast.h"

#include "codec.h"
#include "lpid.h"
#include "smarm.h"

#include <lauxlib.h>

#include <errno.h>
#include <stdint.h>

/* Sends m to `to`: 0 when it was sent, or dropped as the classic send drops it (a dead
** receiver); 1 when the classic send must take over. */
static int send_block(smarm_pid_t to, smarm_msg_t *m)
{
  if (!m)
    return 1;
  int rc = smarm_send(to, m);
  if (rc < 0) {
    smarm_msg_free(m);
    return rc != -ESRCH;
  }
  return 0;
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
  return may_send(p, &to) ? send_block(to, sm_codec_number_block(n)) : 1;
}

static int send_string(const void *p, const char *s, size_t len)
{
  smarm_pid_t to;
  return may_send(p, &to) ? send_block(to, sm_codec_string_block(s, len)) : 1;
}

/* smarm.send, made from the classic send and the two entry points. The checks compile to
** guards. Only a pid may reach an entry point, which reads the LuaJIT header before the payload
** it is given: the check compares the value's real metatable (debug.getmetatable, past any
** __metatable field) with the pid metatable, which the binding gives only to its pid userdata;
** only the debug library could give it to another value (a light userdata would reach C as its
** bare pointer), and what that breaks is the debug library's doing. The entry point checks the
** size and magic again, and refuses NULL. Arguments pass through as they came, so the classic
** send's errors read as before ("got no value"). */
static const char send_maker[] =
  "local classic, send_number, send_string, type, getmetatable, pid_mt = ...\n"
  "return function(...)\n"
  "  local to, m = ...\n"
  "  if getmetatable(to) == pid_mt then\n"
  "    local t = type(m)\n"
  "    if t == 'number' then\n"
  "      if send_number(to, m) == 0 then return end\n"
  "    elseif t == 'string' then\n"
  "      if send_string(to, m, #m) == 0 then return end\n"
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

void sm_lfast_register(lua_State *L, int module)
{
  int base = lua_gettop(L);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "ffi");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "cast");
  int cast = lua_gettop(L);
  if (luaL_loadbuffer(L, send_maker, sizeof send_maker - 1, "=smarm.send") != 0)
    lua_error(L);
  lua_getfield(L, module, "send");
  push_entry(L, cast, "int (*)(const void *, double)", (void *)(uintptr_t)send_number);
  push_entry(L, cast, "int (*)(const void *, const char *, size_t)",
             (void *)(uintptr_t)send_string);
  lua_getglobal(L, "type");
  lua_getglobal(L, "debug");
  lua_getfield(L, -1, "getmetatable");
  lua_remove(L, -2);
  sm_lpid_push_pid_mt(L);
  lua_call(L, 6, 1);
  lua_setfield(L, module, "send");
  lua_settop(L, base);
}
