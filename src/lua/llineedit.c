/*
** smarm.lineedit: a line of the terminal with editing and history (libedit, loaded at run time;
** src/io/lineedit.c). The read runs on the IO thread's pool and parks only the caller; an actor
** killed while it reads cancels the read, and the terminal is given back as it was.
*/
#include "llineedit.h"

#include "io/lineedit.h"
#include "lio.h"
#include "lpark.h"

#include <lauxlib.h>

#include <errno.h>

/* available() -> true | false, why */
static int l_available(lua_State *L)
{
  const char *why = sm_lineedit_unavailable();
  lua_pushboolean(L, why == NULL);
  if (!why)
    return 1;
  lua_pushstring(L, why);
  return 2;
}

/* read([prompt]) -> line | nil (the end of input) | nil, "interrupted" (Ctrl-C) */
static int l_read(lua_State *L)
{
  if (lua_isnoneornil(L, 1))
    lua_pushliteral(L, "");
  else
    luaL_checktype(L, 1, LUA_TSTRING); /* a number is no prompt */
  lua_settop(L, 1);
  lineedit_req_t *r = sm_lineedit_req_new();
  int box = sm_lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  r->prompt = sm_lio_copy_arg(L, 1, NULL);
  int err = sm_lsmarm_io_call(L, &r->base, SMARM_FOREVER, "lineedit.read");
  if (err == -ENOTSUP)
    return luaL_error(L, "smarm.lineedit.read: %s", sm_lineedit_unavailable());
  int n = 1;
  if (err == -EINTR) {
    lua_pushnil(L);
    lua_pushliteral(L, "interrupted");
    n = 2;
  } else if (err)
    n = sm_lio_push_failure(L, err, NULL);
  else if (r->line)
    lua_pushstring(L, r->line);
  else
    lua_pushnil(L);
  sm_lio_unbox(L, box);
  return n;
}

static const luaL_Reg functions[] = {{"available", l_available}, {"read", l_read}, {NULL, NULL}};

void sm_llineedit_register(lua_State *L, int module)
{
  sm_lio_add_table(L, module, "lineedit", functions);
}
