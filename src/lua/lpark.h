/*
** Parking from Lua (lpark.c): the checks every binding function makes before it may switch
** stacks (design rules 1-4). A function that can park calls sm_lpark_actor (it must run in an
** actor), then sm_lpark_check right before the switch, and sm_lpark_resumed right after it.
*/
#ifndef SMARM_LUA_LPARK_H
#define SMARM_LUA_LPARK_H

#include <lua.h>

#include <stdint.h>

/* The calling actor's data (the binding's lactor_t), or a raised error
** "smarm.<fname>: not inside an actor (call it from smarm.run)". */
void *sm_lpark_actor(lua_State *L, const char *fname);

/* Raises "smarm.<fname>: cannot park <why>" where parking is refused (a __gc finalizer, a debug
** hook, JIT-compiled code, an FFI callback); else stops recording a trace, as a switch must. */
void sm_lpark_check(lua_State *L, const char *fname);
/* For a receive or call that will not park (timeout 0): raises "smarm.<fname>: cannot take a
** message inside a __gc finalizer". A finalizer runs at any allocation, a decode's too, and a
** message taken there would free the block being decoded (lsmarm.c, push_message). */
void sm_lpark_check_taking(lua_State *L, const char *fname);

/* Whether L may park here: inside an actor and nowhere sm_lpark_check refuses. For a call that
** has a way to go on without parking (file:close posts the close instead). */
int sm_lpark_can(lua_State *L);

/* Right after a switch back into L's actor (and into the caller of smarm.run): makes L the VM's
** current state again (sm_ljx_after_switch); the checking builds then check that it is, so that a
** switch that leaves another coroutine current aborts there rather than corrupting later. */
void sm_lpark_resumed(lua_State *L);

/* Raises the error of a request to another scheduler that timed out (-ETIMEDOUT from the core:
** it did not answer within opts.request_timeout): "smarm.<fname>: scheduler <sched + 1> did not
** answer within opts.request_timeout (it is stuck in C code, a __gc finalizer or an actor with
** no time slice)"; sched < 0: not known. */
int sm_lpark_no_answer(lua_State *L, const char *fname, int sched);

/* A timeout in seconds as nanoseconds: SMARM_FOREVER for NaN, negative or absurdly long ones. */
int64_t sm_lsmarm_timeout_ns(lua_Number seconds);

/* The duration at idx in nanoseconds for the core (sm_lsmarm_timeout_ns): a number of seconds,
** not negative, not NaN; strings are refused even when they read as numbers. Raises "bad
** argument #idx to '<fn>' (non-negative number of seconds expected, got <type or value>)". */
int64_t sm_lpark_check_seconds(lua_State *L, int idx);

/* An optional time limit at idx: none or nil gives SMARM_FOREVER, anything else must pass
** sm_lpark_check_seconds (NaN, negative numbers and strings raise: they used to mean "no limit"
** in some calls and raise in others). */
int64_t sm_lpark_opt_seconds(lua_State *L, int idx);

/* A socket's or file's settimeout(seconds): none, nil or a negative number is no limit (-1),
** else a number of seconds; NaN and strings raise. */
lua_Number sm_lpark_check_settimeout(lua_State *L, int idx);

#endif
