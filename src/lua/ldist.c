/*
** smarm.node (see ldist.h): the runtime as an Erlang node, over src/io/dist.c. Messages to other
** nodes are encoded here, in the sender's VM, as the distribution's packets (the control term
** and the message in the external format, lterm.h), and posted to the IO thread, which writes
** them in order; messages from other nodes arrive as IO events whose payload is the message's
** external format, decoded in the receiver's VM.
*/
#define _GNU_SOURCE
#include "ldist.h"

#include "codec.h"
#include "io/dist.h"
#include "lfaults.h"
#include "lio.h"
#include "lpark.h"
#include "lpid.h"
#include "lterm.h"

#include <lauxlib.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Whether the n bytes at s are a node name that fits (alive@host, no zero byte). */
static int node_name_ok(const char *s, size_t n)
{
  return n > 0 && n <= DIST_NAME_MAX && strchr(s, '@') && strlen(s) == n;
}

int sm_ldist_is_self(const char *node, size_t n)
{
  const char *self;
  size_t self_len;
  return sm_dist_identity(&self, &self_len, &(uint32_t){0}) && n == self_len &&
         memcmp(node, self, n) == 0;
}

/* Raises unless the string at idx is a node name that fits. */
static const char *check_node(lua_State *L, int idx, const char *fname)
{
  size_t n;
  const char *s = lua_tolstring(L, idx, &n);
  if (!s || !node_name_ok(s, n))
    luaL_error(L, "smarm.%s: a node name is 'alive@host', got %s", fname,
               s ? lua_pushfstring(L, "'%s'", s) : luaL_typename(L, idx));
  return s;
}

int sm_ldist_check_name_node(lua_State *L, int idx, const char *fname)
{
  static const char *const parts[] = {"name", "node"};
  size_t n;
  lua_rawgeti(L, idx, 2);
  const char *node = lua_tolstring(L, -1, &n);
  int here = sm_ldist_is_self(node, n);
  lua_pop(L, 1);
  if (here) /* its name is a name of this node, not an atom: the caller checks it as one */
    return 1;
  for (int i = 0; i < 2; i++) {
    lua_rawgeti(L, idx, i + 1);
    const char *s = lua_tolstring(L, -1, &n);
    if (n == 0) /* ('' is an atom, but no process or node is named so) */
      sm_lfaults_argerror(L, fname, idx,
                          lua_pushfstring(L, "the %s of {name, node} is empty", parts[i]));
    const char *fault = sm_lterm_atom_fault(s, n);
    if (fault)
      sm_lfaults_argerror(L, fname, idx, lua_pushfstring(L, "the %s of {name, node} is not an "
                                                            "atom: %s", parts[i], fault));
    if (i == 1 && !node_name_ok(s, n))
      sm_lfaults_argerror(L, fname, idx, lua_pushfstring(L, "the node of {name, node} is no "
                                                            "node name (alive@host): '%s'", s));
    lua_pop(L, 1);
  }
  return 0;
}

/* Runs the boxed request r (box: its stack slot) for the caller; pushes true, or nil and the
** request's error text (or the errno's); returns how many it pushed. */
static int run_request(lua_State *L, dist_req_t *r, int box, const char *fname)
{
  int err = sm_lsmarm_io_call(L, &r->base, SMARM_FOREVER, fname);
  if (!err) {
    lua_pushboolean(L, 1);
  } else {
    lua_pushnil(L);
    lua_pushstring(L, r->error[0] ? r->error : strerror(-err));
  }
  sm_lio_unbox(L, box);
  return err ? 2 : 1;
}

/* The cookie of ~/.erlang.cookie, as erl reads it, or NULL. */
static char *home_cookie(char *out, size_t cap)
{
  const char *home = getenv("HOME");
  char path[4096];
  if (!home || snprintf(path, sizeof path, "%s/.erlang.cookie", home) >= (int)sizeof path)
    return NULL;
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  char *got = fgets(out, (int)cap, f);
  fclose(f);
  if (!got)
    return NULL;
  out[strcspn(out, "\r\n")] = '\0';
  return out[0] ? out : NULL;
}

/* smarm.node.start{ name = "alive@host" [, cookie = s] [, listen = "127.0.0.1"] } -> true |
** nil, err */
static int l_start(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "name");
  const char *name = check_node(L, -1, "node.start");
  lua_getfield(L, 1, "cookie");
  lua_getfield(L, 1, "listen");
  dist_req_t *r = sm_dist_req_new(DIST_START);
  int box = sm_lio_box(L, &r->base);
  snprintf(r->node, sizeof r->node, "%s", name);
  size_t n;
  const char *cookie = lua_tolstring(L, -3, &n);
  if (cookie) {
    if (n == 0 || n >= sizeof r->cookie || strlen(cookie) != n)
      return luaL_error(L, "smarm.node.start: a cookie is 1 to 255 bytes, no zero byte");
    memcpy(r->cookie, cookie, n + 1);
  } else if (!lua_isnil(L, -3)) {
    return luaL_error(L, "smarm.node.start: cookie must be a string");
  } else if (!home_cookie(r->cookie, sizeof r->cookie)) {
    return luaL_error(L, "smarm.node.start: no cookie given, and ~/.erlang.cookie cannot be read");
  }
  const char *ip = lua_isnil(L, -2) ? "127.0.0.1" : lua_tostring(L, -2);
  if (!ip || strlen(ip) >= sizeof r->listen_ip)
    return luaL_error(L, "smarm.node.start: listen must be an IPv4 address");
  snprintf(r->listen_ip, sizeof r->listen_ip, "%s", ip);
  return run_request(L, r, box, "node.start");
}

/* smarm.node.connect(node) -> true | nil, err */
static int l_connect(lua_State *L)
{
  const char *node = check_node(L, 1, "node.connect");
  dist_req_t *r = sm_dist_req_new(DIST_CONNECT);
  int box = sm_lio_box(L, &r->base);
  snprintf(r->node, sizeof r->node, "%s", node);
  return run_request(L, r, box, "node.connect");
}

/* smarm.node.monitor(node [, on]) -> true | nil, err: the caller gets { smarm = "nodedown",
** node = } when the connection to node ends (at once if it cannot be made), once per call;
** on = false takes one such monitor back */
static int l_monitor(lua_State *L)
{
  const char *node = check_node(L, 1, "node.monitor");
  int on = lua_isnoneornil(L, 2) || lua_toboolean(L, 2);
  dist_req_t *r = sm_dist_req_new(DIST_MONITOR);
  int box = sm_lio_box(L, &r->base);
  snprintf(r->node, sizeof r->node, "%s", node);
  r->watcher = smarm_self();
  r->on = on;
  return run_request(L, r, box, "node.monitor");
}

/* smarm.node.available() -> whether this smarm was built with erl_interface */
static int l_available(lua_State *L)
{
  lua_pushboolean(L, sm_dist_available());
  return 1;
}

/* smarm.node.self() -> name | nil */
static int l_self(lua_State *L)
{
  const char *name;
  size_t n;
  uint32_t creation;
  if (sm_dist_identity(&name, &n, &creation))
    lua_pushlstring(L, name, n);
  else
    lua_pushnil(L);
  return 1;
}

/* smarm.node.nodes() -> { name, ... }: the nodes connected now */
static int l_nodes(lua_State *L)
{
  lua_newtable(L);
  const char *name;
  size_t n;
  uint32_t creation;
  if (!sm_dist_identity(&name, &n, &creation))
    return 1;
  dist_req_t *r = sm_dist_req_new(DIST_NODES);
  int box = sm_lio_box(L, &r->base);
  int err = sm_lsmarm_io_call(L, &r->base, SMARM_FOREVER, "node.nodes");
  if (err == -ENOTCONN) { /* stopped meanwhile: none */
    sm_lio_unbox(L, box);
    lua_settop(L, box - 1);
    return 1;
  }
  if (err)
    return luaL_error(L, "smarm.node.nodes: %s", strerror(-err));
  int k = 0;
  for (size_t at = 0; at < r->names_len; at += strlen(r->names + at) + 1) {
    lua_pushstring(L, r->names + at);
    lua_rawseti(L, box - 1, ++k);
  }
  sm_lio_unbox(L, box);
  lua_settop(L, box - 1);
  return 1;
}

int sm_ldist_is_target(lua_State *L, int idx)
{
  const char *node;
  size_t n;
  if (sm_lterm_pid_node(L, idx, &node, &n))
    return 1;
  if (!lua_istable(L, idx))
    return 0;
  lua_rawgeti(L, idx, 1);
  lua_rawgeti(L, idx, 2);
  int ok = lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TSTRING;
  lua_pop(L, 2);
  return ok;
}

int sm_ldist_send(lua_State *L)
{
  const char *node, *self_name;
  size_t node_len, self_len;
  uint32_t creation;
  lua_settop(L, 2);
  int to_pid = sm_lterm_pid_node(L, 1, &node, &node_len);
  if (!to_pid) { /* { name, node } */
    if (sm_ldist_check_name_node(L, 1, "send")) {
      lua_rawgeti(L, 1, 1); /* { name, this node }: a local send by name */
      lua_replace(L, 1);
      return 0;
    }
    lua_rawgeti(L, 1, 2); /* another node's name: both go as atoms */
    node = lua_tolstring(L, -1, &node_len);
    lua_pop(L, 1); /* the table at 1 keeps it */
  }
  if (!sm_dist_identity(&self_name, &self_len, &creation)) {
    if (to_pid) /* a pid of another node: the message is dropped, as to a dead actor */
      return 1;
    return luaL_error(L, "smarm.send: this runtime is not a node (smarm.node.start)");
  }
  /* the control term: {SEND, '', ToPid} or {REG_SEND, From, '', ToName} */
  lua_createtable(L, 4, 1);
  int ctrl = lua_gettop(L);
  lua_pushnumber(L, to_pid ? DIST_OP_SEND : DIST_OP_REG_SEND);
  lua_rawseti(L, ctrl, 1);
  sm_lterm_push_blob(L, LTERM_ATOM, "", 0); /* the unused field (once the cookie) */
  lua_rawseti(L, ctrl, to_pid ? 2 : 3);
  if (to_pid) {
    lua_pushvalue(L, 1);
    lua_rawseti(L, ctrl, 3);
  } else {
    sm_lsmarm_push_pid(L, smarm_self());
    lua_rawseti(L, ctrl, 2);
    lua_rawgeti(L, 1, 1);
    size_t n;
    const char *to_name = lua_tolstring(L, -1, &n); /* an atom: sm_ldist_check_name_node */
    sm_lterm_push_blob(L, LTERM_ATOM, to_name, n);
    lua_rawseti(L, ctrl, 4);
    lua_pop(L, 1);
  }
  sm_lterm_mark_table(L, ctrl, LTERM_TUPLE);
  sm_lterm_encode(L, ctrl, "control");
  sm_lterm_encode(L, 2, "message");
  size_t cn, mn;
  const char *cs = lua_tolstring(L, -2, &cn), *ms = lua_tolstring(L, -1, &mn);
  size_t total = 5 + cn + mn;
  if (total - 4 > UINT32_MAX)
    return luaL_error(L, "smarm.send: the message is too big for the distribution (4 GiB)");
  dist_req_t *r = sm_dist_req_new(DIST_SEND);
  if (r && !(r->packet = malloc(total))) {
    sm_io_req_release(&r->base);
    r = NULL;
  }
  if (!r)
    return luaL_error(L, "not enough memory");
  uint32_t len = (uint32_t)(total - 4);
  unsigned char *p = (unsigned char *)r->packet;
  p[0] = (unsigned char)(len >> 24);
  p[1] = (unsigned char)(len >> 16);
  p[2] = (unsigned char)(len >> 8);
  p[3] = (unsigned char)len;
  p[4] = DIST_PASS_THROUGH;
  memcpy(p + 5, cs, cn);
  memcpy(p + 5 + cn, ms, mn);
  r->packet_len = total;
  snprintf(r->node, sizeof r->node, "%.*s", (int)node_len, node);
  sm_io_post(&r->base); /* the IO thread takes it (or it is gone: the run is ending) */
  return 1;
}

/* An incoming message: its external format after the event's header. The IO thread has walked
** it whole (util/etf.h), so what can still fail here is rare (a float Erlang would not write,
** memory): the receiver then gets { smarm = "bad_term", reason = <why> } rather than an error
** out of its receive. */
static void decode_event(lua_State *L, const unsigned char *p, size_t n)
{
  const unsigned char *b = p + sizeof(io_event_t);
  size_t bn = n - sizeof(io_event_t);
  if (((const io_event_t *)p)->kind == IO_EV_CLOSED) { /* a monitored node's connection ended */
    lua_createtable(L, 0, 2);
    lua_pushliteral(L, "nodedown");
    lua_setfield(L, -2, "smarm");
    lua_pushlstring(L, (const char *)b, bn);
    lua_setfield(L, -2, "node");
    return;
  }
  sm_lterm_decode_or_bad(L, b, bn, "smarm.term.decode");
}

static const codec_event_fns_t event_fns = {decode_event, NULL};

/* The core's remote hook (smarm.h): a signal of one of our actors to a process of another node,
** or the end of an actor watched from one, with its reason as an Erlang term, to the IO thread.
** It runs where no Lua may (an actor's last moments): a Lua value's reason is translated from
** its bytes (sm_codec_data_to_etf). */
static void remote_hook(const smarm_signal_t *sig)
{
  if (sig->kind == SMARM_SIG_HANDLED) { /* signal_in's pin (dist.c) */
    sm_dist_alias_unpin(sig->from);
    return;
  }
  unsigned char *term = NULL;
  size_t len = 0;
  if (sig->reason == SMARM_EXIT_VALUE)
    term = sm_codec_data_to_etf(sig->data, sig->size, &len); /* NULL: undefined */
  if (sig->reason == SMARM_EXIT_TERM)
    sm_dist_signal(sig, sig->data, sig->size);
  else
    sm_dist_signal(sig, (const char *)term, len);
  free(term);
}

/* _reason_term(value): the term a reason of that value goes to another node as (the
** translation of remote_hook, for the specs), or nil when it has none. */
static int l_reason_term(lua_State *L)
{
  sm_lpark_actor(L, "node._reason_term");
  smarm_msg_t *block;
  int code = sm_lfaults_encode_reason(L, 1, &block);
  if (code != SMARM_EXIT_VALUE) {
    lua_pushinteger(L, code);
    return 1;
  }
  size_t len;
  unsigned char *term = block ? sm_codec_data_to_etf(smarm_msg_data(block), smarm_msg_size(block),
                                                      &len) : NULL;
  smarm_msg_free(block);
  if (!term)
    return 0;
  lua_pushlstring(L, (const char *)term, len);
  free(term);
  return 1;
}

void sm_ldist_register(lua_State *L, int module)
{
  static const luaL_Reg functions[] = {
    {"start", l_start}, {"connect", l_connect}, {"self", l_self}, {"nodes", l_nodes},
    {"available", l_available}, {"monitor", l_monitor}, {"_reason_term", l_reason_term},
    {NULL, NULL},
  };
  sm_lio_add_table(L, module, "node", functions);
  sm_codec_set_event_fns(IO_EV_DIST, &event_fns);
  smarm_set_remote_hook(remote_hook);
}
