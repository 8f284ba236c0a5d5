/*
** smarm.dns: name resolution for Lua actors. getaddrinfo runs on the IO thread's pool
** (src/io/dns.c) and parks only the caller; a timed-out lookup is abandoned (it cannot be
** stopped) and its answer dropped.
*/
#include "ldns.h"

#include "io/dns.h"
#include "lio.h"
#include "lpark.h"

#include <lauxlib.h>

#include <math.h>
#include <stdlib.h>

/* getaddrinfo(host [, service [, timeout]]) -> { {addr =, family =, port =}, ... } */
static int l_getaddrinfo(lua_State *L)
{
  luaL_checkstring(L, 1);
  if (!lua_isnoneornil(L, 2)) {
    int number = lua_type(L, 2) == LUA_TNUMBER; /* before checkstring makes it a string */
    const char *service = luaL_checkstring(L, 2); /* a number too (a port) */
    /* a port by number: getaddrinfo takes 70000 as 70000 mod 65536 (4464), where the sockets
    ** refuse it */
    char *end;
    double p = strtod(service, &end); /* " 70000" and "+70000" are numbers to getaddrinfo too */
    if (number || (end != service && *end == '\0')) {
      luaL_argcheck(L, p >= 0 && p <= 65535 && p == floor(p), 2,
                    "port from 0 to 65535 expected");
    }
  }
  int64_t timeout_ns = sm_lpark_opt_seconds(L, 3);
  lua_settop(L, 3);
  dns_req_t *r = sm_dns_req_new();
  int box = sm_lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  r->host = sm_lio_copy_arg(L, 1, NULL);
  if (!lua_isnil(L, 2))
    r->service = sm_lio_copy_arg(L, 2, NULL); /* a number converts */
  int err = sm_lsmarm_io_call(L, &r->base, timeout_ns, "dns.getaddrinfo");
  int n = 1;
  if (err) {
    n = sm_lio_push_failure(L, err, r->host);
  } else {
    lua_createtable(L, (int)r->count, 0);
    for (size_t i = 0; i < r->count; i++) {
      lua_createtable(L, 0, 3);
      lua_pushstring(L, r->entries[i].addr);
      lua_setfield(L, -2, "addr");
      lua_pushstring(L, r->entries[i].family == 6 ? "inet6" : "inet");
      lua_setfield(L, -2, "family");
      lua_pushinteger(L, r->entries[i].port);
      lua_setfield(L, -2, "port");
      lua_rawseti(L, -2, (int)i + 1);
    }
  }
  sm_lio_unbox(L, box);
  return n;
}

static const luaL_Reg functions[] = {{"getaddrinfo", l_getaddrinfo}, {NULL, NULL}};

void sm_ldns_register(lua_State *L, int module) { sm_lio_add_table(L, module, "dns", functions); }
