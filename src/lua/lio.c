/*
** The IO modules' shared helpers (see lio.h): boxing requests on the actor's stack, running them
** under the parking rules, and the failure values every IO call returns.
*/
#include "lio.h"

#include "io/io.h"
#include "lbinary.h"
#include "ljx.h"
#include "lpark.h"
#include "lvm.h"

#include <lauxlib.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int sm_lio_push_failure(lua_State *L, int err, const char *subject)
{
  lua_pushnil(L);
  if (err == -ETIMEDOUT) {
    lua_pushliteral(L, "timeout");
    return 2;
  }
  if (subject)
    lua_pushfstring(L, "%s: %s", subject, sm_io_strerror(err));
  else
    lua_pushstring(L, sm_io_strerror(err));
  lua_pushstring(L, sm_io_err_name(err));
  return 3;
}

int sm_lio_push_done(lua_State *L, int err)
{
  if (err)
    return sm_lio_push_failure(L, err, NULL);
  lua_pushboolean(L, 1);
  return 1;
}

/* A malloc'd copy of the n bytes at s, NUL-terminated. */
static char *copy_of(lua_State *L, const char *s, size_t n, size_t *len)
{
  char *c = malloc(n + 1);
  if (!c)
    luaL_error(L, "not enough memory");
  memcpy(c, s, n + 1);
  if (len)
    *len = n;
  return c;
}

char *sm_lio_copy_arg(lua_State *L, int idx, size_t *len)
{
  size_t n;
  const char *s = luaL_checklstring(L, idx, &n);
  if (!len && memchr(s, 0, n)) /* a C string: a NUL would end it there, silently */
    luaL_argerror(L, idx, "string without NUL bytes expected");
  return copy_of(L, s, n, len);
}

char *sm_lio_copy_bytes(lua_State *L, int idx, size_t *len)
{
  size_t n;
  const char *s = sm_lbinary_checkbytes(L, idx, &n);
  return copy_of(L, s, n, len);
}

static const char req_mt_key = 0;

static int request_gc(lua_State *L);

int sm_lio_box(lua_State *L, io_req_t *req)
{
  if (!req)
    return luaL_error(L, "not enough memory");
  io_req_t **box = lua_newuserdata(L, sizeof *box);
  *box = NULL;
  lua_pushlightuserdata(L, (void *)&req_mt_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, request_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushlightuserdata(L, (void *)&req_mt_key);
    lua_pushvalue(L, -2);
    lua_rawset(L, LUA_REGISTRYINDEX);
  }
  lua_setmetatable(L, -2);
  *box = req;
  return lua_gettop(L);
}

void sm_lio_unbox(lua_State *L, int idx)
{
  io_req_t **box = lua_touserdata(L, idx);
  sm_io_req_release(*box);
  *box = NULL;
}

static int request_gc(lua_State *L)
{
  sm_lio_unbox(L, 1);
  return 0;
}

/* The box on L's stack (the calling function's frame) that holds req, or NULL. */
static io_req_t **find_box(lua_State *L, io_req_t *req)
{
  lua_pushlightuserdata(L, (void *)&req_mt_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  io_req_t **found = NULL;
  for (int i = lua_gettop(L) - 1; i >= 1 && !found; i--) {
    if (lua_type(L, i) != LUA_TUSERDATA || !lua_getmetatable(L, i))
      continue;
    io_req_t **box = lua_touserdata(L, i);
    if (lua_rawequal(L, -1, -2) && *box == req)
      found = box;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return found;
}

int sm_lsmarm_io_call(lua_State *L, io_req_t *req, int64_t timeout_ns, const char *fname)
{
  return sm_lsmarm_io_call_with(L, req, timeout_ns, fname, NULL);
}

int sm_lsmarm_io_call_with(lua_State *L, io_req_t *req, int64_t timeout_ns, const char *fname,
                           smarm_cleanup_t *also)
{
  lvm_actor_head_t *head = sm_lpark_actor(L, fname);
  sm_lpark_check(L, fname);
  /* The box's reference is sm_io_call's for the call: if the actor ends meanwhile (killed, or
  ** stopped at the run's end), sm_io_call's cleanup releases it and the box must not again. */
  io_req_t **box = find_box(L, req);
  if (!box) /* every IO function boxes its request first (sm_lio_box) */
    return luaL_error(L, "smarm.%s: the request is not boxed (a binding bug)", fname);
  *box = NULL;
  head->waiting_for = fname; /* smarm.info: "io:" .. fname */
  if (also)
    smarm_cleanup_push(also);
  int rc = sm_io_call_timeout(req, timeout_ns);
  if (also)
    smarm_cleanup_pop(also);
  head->waiting_for = NULL;
  *box = req;
  sm_lpark_resumed(L);
  return rc < 0 ? rc : req->err;
}

void sm_lio_add_table(lua_State *L, int module, const char *name, const luaL_Reg *functions)
{
  lua_newtable(L);
  luaL_register(L, NULL, functions);
  lua_setfield(L, module, name);
}
