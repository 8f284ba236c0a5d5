/*
** smarm.fs (lio.c): files for Lua actors through the IO thread.
*/
#ifndef SMARM_LUA_LIO_H
#define SMARM_LUA_LIO_H

#include <lauxlib.h>
#include <lua.h>
#include <stddef.h>

struct io_req;

/* Pushes a userdata that holds the caller's reference to req and releases it when collected: an
** error raised while req is alive, or the actor being stopped while the IO thread works on it,
** then leaks nothing. Returns the box's stack index; raises "not enough memory" when req is NULL
** (pass a request constructor's result as it is). lio_unbox releases it at once (the box at idx
** then holds nothing). */
int lio_box(lua_State *L, struct io_req *req);
void lio_unbox(lua_State *L, int idx);

/* A malloc'd copy of the string argument at idx (raises if it is not one); *len its length. */
char *lio_copy_arg(lua_State *L, int idx, size_t *len);

/* Files travel in messages like sockets (codec.c; the handle's `file` flag): */
struct ltcp_handle;
int lio_file_handle_of(lua_State *L, int idx, void **file, struct ltcp_handle *h);
void lio_file_handed_over(void *file);
void lio_push_file(lua_State *L, const struct ltcp_handle *h);
void lio_drop_file(const struct ltcp_handle *h); /* nobody received it: close it (any thread) */

/* After a run (the IO thread has stopped): closes the files of the run still open in L's VM, the
** one VM that outlives its runs; their handles are stale from now on. */
void lio_end_run(lua_State *L);

/* Pushes nil and the failure: "timeout" alone, or "<subject>: <reason>" (just the reason without
** a subject) and libuv's error name. Returns how many values it pushed. */
int lio_push_failure(lua_State *L, int err, const char *subject);

/* Sets module.fs (module: the stack index of the smarm.core table). */
void lio_register(lua_State *L, int module);

/* Registers the metatable `name` of a handle type (files here, sockets in ltcp.c) once per VM:
** methods as __index, gc as __gc, tostring as __tostring, and a locked __metatable. */
void lio_handle_metatable(lua_State *L, const char *name, const luaL_Reg *methods,
                          lua_CFunction gc, lua_CFunction tostring);

#endif
