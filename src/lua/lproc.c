/*
** smarm.process: running programs for Lua actors. The program is started by the IO thread
** (src/io/proc.c), which collects its output whole and completes when it has exited and closed
** its pipes; only the caller parks meanwhile. Arguments, environment and input are copied into
** the request.
*/
#define _GNU_SOURCE
#include "lproc.h"

#include "io/proc.h"
#include "lio.h"
#include "lpark.h"

#include <lauxlib.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A NULL-terminated malloc'd copy of the strings of the array at idx (raises on a non-string). */
static char **string_list(lua_State *L, int idx, const char *what)
{
  size_t n = lua_objlen(L, idx);
  char **v = calloc(n + 1, sizeof *v);
  if (!v)
    luaL_error(L, "not enough memory");
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, idx, (int)i + 1);
    const char *s = lua_tostring(L, -1);
    char *c = s ? strdup(s) : NULL;
    lua_pop(L, 1);
    if (!c) {
      for (size_t j = 0; j < i; j++)
        free(v[j]);
      free(v);
      luaL_error(L, s ? "not enough memory" : "%s[%d] is not a string", what, (int)i + 1);
    }
    v[i] = c;
  }
  return v;
}

/* Pushes { stdout =, stderr = } with what r collected. */
static void push_output(lua_State *L, const proc_req_t *r, int extra)
{
  lua_createtable(L, 0, 2 + extra);
  lua_pushlstring(L, r->out ? r->out : "", r->out_len);
  lua_setfield(L, -2, "stdout");
  lua_pushlstring(L, r->err ? r->err : "", r->err_len);
  lua_setfield(L, -2, "stderr");
}

/* run(argv [, opts]) -> { status =, signal =, stdout =, stderr = } | nil, err, code | nil,
** "timeout", { stdout =, stderr = } */
static int l_run(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_argcheck(L, lua_objlen(L, 1) >= 1, 1, "argv with at least the program expected");
  if (!lua_isnoneornil(L, 2))
    luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  proc_req_t *r = sm_proc_run_new();
  int box = sm_lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  r->argv = string_list(L, 1, "argv");
  double timeout = -1;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "cwd");
    if (!lua_isnil(L, -1))
      r->cwd = sm_lio_copy_arg(L, lua_gettop(L), NULL);
    lua_getfield(L, 2, "stdin");
    if (!lua_isnil(L, -1))
      r->input = sm_lio_copy_arg(L, lua_gettop(L), &r->input_len);
    lua_getfield(L, 2, "timeout");
    if (!lua_isnil(L, -1))
      timeout = luaL_checknumber(L, -1);
    lua_getfield(L, 2, "env");
    if (!lua_isnil(L, -1)) {
      luaL_checktype(L, -1, LUA_TTABLE);
      lua_newtable(L); /* as NAME=value strings */
      int list = lua_gettop(L), n = 0;
      lua_pushnil(L);
      while (lua_next(L, list - 1) != 0) {
        if (lua_type(L, -2) != LUA_TSTRING || !lua_isstring(L, -1))
          return luaL_error(L, "smarm.process.run: opts.env must map names to strings");
        lua_pushfstring(L, "%s=%s", lua_tostring(L, -2), lua_tostring(L, -1));
        lua_rawseti(L, list, ++n);
        lua_pop(L, 1);
      }
      r->env = string_list(L, list, "env");
    }
    lua_settop(L, box);
  }
  int err = sm_lsmarm_io_call(L, &r->base, sm_lsmarm_timeout_ns(timeout), "process.run");
  int n = 1;
  if (err == -ETIMEDOUT) { /* killed: what it wrote so far comes with the error */
    n = sm_lio_push_failure(L, err, NULL);
    push_output(L, r, 0);
    n++;
  } else if (err && r->cwd_failed) {
    lua_pushfstring(L, "cwd %s", r->cwd);
    n = sm_lio_push_failure(L, err, lua_tostring(L, -1));
    lua_remove(L, -n - 1);
  } else if (err) {
    n = sm_lio_push_failure(L, err, r->argv[0]);
  } else {
    push_output(L, r, 2);
    if (r->term_signal) { /* no status: no `status == 0` check may take it for success */
      lua_pushinteger(L, r->term_signal);
      lua_setfield(L, -2, "signal");
    } else {
      lua_pushnumber(L, (lua_Number)r->status);
      lua_setfield(L, -2, "status");
    }
  }
  sm_lio_unbox(L, box);
  return n;
}

static const luaL_Reg functions[] = {{"run", l_run}, {NULL, NULL}};

void sm_lproc_register(lua_State *L, int module)
{
  sm_lio_add_table(L, module, "process", functions);
}
