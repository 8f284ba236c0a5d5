/*
** What the binding's IO modules share (lio.c): smarm.fs (lfs.c), smarm.dns (ldns.c),
** smarm.process (lproc.c), smarm.signal (lsignal.c) and smarm.tcp (ltcp.c) each turn a call
** into a request (src/io/io.h), run it for the calling actor, and return its results or
** nil, message, code.
**
** Ownership: a request is boxed on the actor's Lua stack as soon as it is made (sm_lio_box), so an
** error raised while it is alive, or the actor being stopped while the IO thread works on it,
** leaks nothing; the box's __gc drops the actor's reference. Arguments are copied into the
** request (sm_lio_copy_arg): the IO side may still work when the actor's values are gone.
*/
#ifndef SMARM_LUA_LIO_H
#define SMARM_LUA_LIO_H

#include "smarm.h"

#include <lauxlib.h>
#include <lua.h>

#include <stddef.h>
#include <stdint.h>

struct io_req;

/* Pushes a userdata that holds the caller's reference to req and releases it when collected.
** Returns the box's stack index; raises "not enough memory" when req is NULL (pass a request
** constructor's result as it is). sm_lio_unbox releases it at once (the box at idx then holds
** nothing). */
int sm_lio_box(lua_State *L, struct io_req *req);
void sm_lio_unbox(lua_State *L, int idx);

/* A malloc'd copy of the string argument at idx (raises if it is not one); *len its length. With
** len NULL the copy is a C string (a path, a host name), and a string holding a NUL byte raises:
** the C side would read a shorter name, silently. */
char *sm_lio_copy_arg(lua_State *L, int idx, size_t *len);
/* The same for data to write: a string or a binary (lbinary.h). */
char *sm_lio_copy_bytes(lua_State *L, int idx, size_t *len);

/* Runs an IO request for the calling actor (sm_io_call_timeout; SMARM_FOREVER: no limit) under the
** binding's parking rules: raises "smarm.<fname>: ..." outside an actor or where parking is
** refused; else returns 0 or the error (the call's, else the request's). */
int sm_lsmarm_io_call(lua_State *L, struct io_req *req, int64_t timeout_ns, const char *fname);

/* The same, with `also` (may be NULL) pushed as a cleanup for the time the actor is parked: it
** runs if the actor ends there (killed, or stopped at the run's end), after the request's own.
** Pushed after the checks that may raise and popped before anything else can, so that no raise
** ever leaves it on the actor's cleanup stack. */
int sm_lsmarm_io_call_with(lua_State *L, struct io_req *req, int64_t timeout_ns,
                           const char *fname, smarm_cleanup_t *also);

/* Takes out of the calling actor's saved queue (the messages its selective receives set aside),
** oldest first, every one that claim(L, ud) claims: it is called with the message on top, must
** leave the stack as it found it, and returns 1 to take the message (which is then gone). Does
** nothing outside an actor. */
void sm_lsmarm_saved_claim(lua_State *L, int (*claim)(lua_State *L, void *ud), void *ud);

/* Pushes nil and the failure: "timeout" alone, or "<subject>: <reason>" (just the reason without
** a subject) and libuv's error name. Returns how many values it pushed. */
int sm_lio_push_failure(lua_State *L, int err, const char *subject);

/* Pushes true when err is 0, else the failure (sm_lio_push_failure, no subject); returns how
** many values it pushed. */
int sm_lio_push_done(lua_State *L, int err);

/* Sets module[name] (module: the stack index of the smarm.core table) to a new table of the
** functions. */
void sm_lio_add_table(lua_State *L, int module, const char *name, const luaL_Reg *functions);

#endif
