/*
** smarm.udp: UDP for Lua actors, in LuaSocket's shape (sendto, receivefrom). The sockets live
** on the IO thread (src/io/udp.c); a Lua socket is a userdata holding the socket's id, its
** descriptor and its timeout. A datagram is sent straight from the actor's thread (sendto(2),
** non-blocking, on the IO thread's descriptor: safe while the handle is open, as ltcp.c's sends);
** only one the kernel could not take at once goes through the IO thread. A receive parks the
** actor until a datagram comes. Outcomes return (nil, "timeout"; nil, "closed"; nil, libuv's
** error name); misuse raises. Addresses are numeric (IPv4 or IPv6; "*" binds every IPv4
** address): names are resolved with smarm.dns.getaddrinfo first.
*/
#define _GNU_SOURCE
#include "ludp.h"

#include "codec.h"
#include "io/dns.h"
#include "io/udp.h"
#include "lactive.h"
#include "lbinary.h"
#include "lhandle.h"
#include "lio.h"
#include "lpark.h"

#include <lauxlib.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#define UDP_MT "smarm.udp.socket"

enum { OPEN, CLOSED, HANDED_OVER };

typedef struct ludp {
  uint64_t id;
  int fd;
  int state;           /* OPEN, CLOSED or HANDED_OVER (sent in a message) */
  smarm_pid_t gone_by; /* who closed it or handed it over (ltcp.c's rule for sharers) */
  double timeout;      /* seconds; negative: none */
  int busy;            /* calls of this handle parked in the IO thread now */
  uint32_t run;        /* the run that made it (sm_lhandle_run_generation) */
  lactive_t act;       /* its active mode as this side knows it (lactive.h; taken: datagrams) */
} ludp_t;

static int stale(const ludp_t *u) { return u->run != sm_lhandle_run_generation(); }

static const lhandle_kind_t udp_kind;

static void push_udp(lua_State *L, uint64_t id, int fd, double timeout)
{
  ludp_t *u = lua_newuserdata(L, sizeof *u);
  memset(u, 0, sizeof *u);
  u->id = id;
  u->fd = fd;
  u->state = OPEN;
  u->timeout = timeout;
  u->run = sm_lhandle_run_generation();
  luaL_getmetatable(L, UDP_MT);
  lua_setmetatable(L, -2);
  sm_lhandle_own(L, -1, &udp_kind);
}

/* The socket at idx, open; NULL when another actor closed it or handed it away (the caller
** returns nil, "closed", as ltcp.c's sharers get); raises on anything else. */
static ludp_t *check_udp(lua_State *L, const char *fname)
{
  ludp_t *u = luaL_checkudata(L, 1, UDP_MT);
  if (stale(u))
    luaL_error(L, "smarm.udp.%s: the socket belongs to an earlier run", fname);
  if (u->state != OPEN && u->gone_by != smarm_self())
    return NULL;
  if (u->state == CLOSED)
    luaL_error(L, "smarm.udp.%s: the socket is closed", fname);
  if (u->state == HANDED_OVER)
    luaL_error(L, "smarm.udp.%s: the socket was handed to another actor", fname);
  return u;
}

static int push_closed(lua_State *L)
{
  lua_pushnil(L);
  lua_pushliteral(L, "closed");
  return 2;
}

/* nil and a brief error: "timeout", "closed" or libuv's name ("EMSGSIZE"). */
static int push_error(lua_State *L, int err)
{
  if (err == IOUDP_CLOSED || err == -EBADF)
    return push_closed(L);
  lua_pushnil(L);
  lua_pushstring(L, err == -ETIMEDOUT ? "timeout" : sm_io_err_name(err));
  return 2;
}

/* The address at idx (a numeric IPv4 or IPv6 address; "*" when any is true: every IPv4 one)
** and the port at idx + 1, into *out; raises on anything else. */
static void check_addr(lua_State *L, int idx, int any, struct sockaddr_storage *out)
{
  size_t hlen;
  const char *host = luaL_checklstring(L, idx, &hlen);
  luaL_argcheck(L, !memchr(host, 0, hlen), idx, "string without NUL bytes expected");
  lua_Number p = luaL_checknumber(L, idx + 1);
  luaL_argcheck(L, p >= 0 && p <= 65535 && p == floor(p), idx + 1, "port from 0 to 65535 expected");
  memset(out, 0, sizeof *out);
  if (any && strcmp(host, "*") == 0)
    host = "0.0.0.0";
  struct sockaddr_in *in = (struct sockaddr_in *)out;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
  if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)p);
  } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)p);
  } else {
    luaL_argerror(L, idx, "numeric IPv4 or IPv6 address expected (resolve names with "
                          "smarm.dns.getaddrinfo)");
  }
}

static int push_addr(lua_State *L, const struct sockaddr_storage *a)
{
  char text[64];
  int port;
  if (sm_dns_addr_text((const struct sockaddr *)a, text, sizeof text, &port) < 0) {
    lua_pushnil(L);
    lua_pushnil(L);
  } else {
    lua_pushstring(L, text);
    lua_pushinteger(L, port);
  }
  return 2;
}

static udp_req_t *new_req(lua_State *L, enum udp_op op, int *box)
{
  udp_req_t *r = sm_udp_req_new(op);
  *box = sm_lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  return r;
}

/* Runs r for the calling actor; while it is parked, u cannot be handed over. */
static int call(lua_State *L, ludp_t *u, udp_req_t *r, int64_t timeout_ns, const char *what)
{
  if (u)
    u->busy++;
  int err = sm_lsmarm_io_call(L, &r->base, timeout_ns, what);
  if (u)
    u->busy--;
  if (err == -EBUSY)
    luaL_error(L, "smarm.udp.receivefrom: another actor is already waiting on this socket");
  if (err && u && u->state != OPEN)
    err = IOUDP_CLOSED; /* closed by another actor while this one waited */
  return err;
}

/* ---- smarm.udp.bind(host, port) ------------------------------------------------------------ */

static int l_bind(lua_State *L)
{
  struct sockaddr_storage a;
  check_addr(L, 1, 1, &a);
  lua_settop(L, 2);
  int box;
  udp_req_t *r = new_req(L, IOUDP_BIND, &box);
  r->addr = a;
  int err = call(L, NULL, r, SMARM_FOREVER, "udp.bind");
  int n;
  if (err) {
    n = sm_lio_push_failure(L, err, NULL);
  } else {
    push_udp(L, r->new_id, r->new_fd, -1);
    r->new_taken = 1;
    n = 1;
  }
  sm_lio_unbox(L, box);
  return n;
}

/* ---- Methods ------------------------------------------------------------------------------- */

/* sendto(data, host, port) -> true */
static int m_sendto(lua_State *L)
{
  ludp_t *u = check_udp(L, "sendto");
  size_t len;
  const char *data = sm_lbinary_checkbytes(L, 2, &len); /* a string or a binary */
  struct sockaddr_storage a;
  check_addr(L, 3, 0, &a);
  if (!u)
    return push_closed(L);
  socklen_t alen = a.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                           : sizeof(struct sockaddr_in);
  ssize_t n = sendto(u->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&a, alen);
  if (n >= 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS && errno != EINTR)
    return push_error(L, -errno);
  lua_settop(L, 4); /* the kernel's buffer is full: through the IO thread, which waits for room */
  int box;
  udp_req_t *r = new_req(L, IOUDP_SEND, &box);
  r->id = u->id;
  r->addr = a;
  r->len = len;
  r->data = malloc(len ? len : 1);
  if (!r->data)
    return luaL_error(L, "not enough memory");
  memcpy(r->data, data, len);
  int err = call(L, u, r, sm_lsmarm_timeout_ns(u->timeout), "udp.sendto");
  sm_lio_unbox(L, box);
  if (err)
    return push_error(L, err);
  lua_pushboolean(L, 1);
  return 1;
}

/* receivefrom([size]) -> data, host, port: the next datagram (cut to size bytes, the rest of it
** lost, as LuaSocket does). receive([size]) -> data. */
static int receive(lua_State *L, int with_sender, const char *fname)
{
  ludp_t *u = check_udp(L, fname);
  if (u && u->act.mode != LACTIVE_PASSIVE)
    luaL_error(L, "smarm.udp.%s: the socket is active (its datagrams come as messages; "
                  "setactive(false) first)", fname);
  lua_Number size = luaL_optnumber(L, 2, 65536);
  luaL_argcheck(L, size >= 1 && size == floor(size) && size < 4294967296.0, 2,
                "byte count of at least 1 expected");
  if (!u)
    return push_closed(L);
  lua_settop(L, 2);
  int box;
  udp_req_t *r = new_req(L, IOUDP_RECEIVE, &box);
  r->id = u->id;
  int err = call(L, u, r, sm_lsmarm_timeout_ns(u->timeout),
                 with_sender ? "udp.receivefrom" : "udp.receive");
  int n;
  if (err) {
    n = push_error(L, err);
  } else {
    lua_pushlstring(L, r->data, r->len < (size_t)size ? r->len : (size_t)size);
    n = with_sender ? 1 + push_addr(L, &r->addr) : 1;
  }
  sm_lio_unbox(L, box);
  return n;
}

static int m_receivefrom(lua_State *L) { return receive(L, 1, "receivefrom"); }
static int m_receive(lua_State *L) { return receive(L, 0, "receive"); }

static int m_getsockname(lua_State *L)
{
  ludp_t *u = check_udp(L, "getsockname");
  if (!u)
    return push_closed(L);
  lua_settop(L, 1);
  int box;
  udp_req_t *r = new_req(L, IOUDP_NAME, &box);
  r->id = u->id;
  int err = call(L, u, r, SMARM_FOREVER, "udp.getsockname");
  int n = err ? push_error(L, err) : push_addr(L, &r->addr);
  sm_lio_unbox(L, box);
  return n;
}

/* setoption(name, value): "broadcast" (boolean), "ttl" (1..255), "multicast-loop" (boolean),
** "multicast-ttl" (0..255), "multicast-join" / "multicast-leave" (group address [, interface
** address]) -> true */
static int m_setoption(lua_State *L)
{
  ludp_t *u = check_udp(L, "setoption");
  static const char *const names[] = {"broadcast",     "ttl",           "multicast-loop",
                                      "multicast-ttl", "multicast-join", "multicast-leave",
                                      NULL};
  static const enum udp_option options[] = {UDP_BROADCAST,      UDP_TTL,
                                            UDP_MULTICAST_LOOP, UDP_MULTICAST_TTL,
                                            UDP_MULTICAST_JOIN, UDP_MULTICAST_LEAVE};
  int which = luaL_checkoption(L, 2, NULL, names);
  enum udp_option opt = options[which];
  int flag = 0;
  if (opt == UDP_TTL || opt == UDP_MULTICAST_TTL) {
    lua_Number v = luaL_checknumber(L, 3);
    luaL_argcheck(L, v >= (opt == UDP_TTL ? 1 : 0) && v <= 255 && v == floor(v), 3,
                  opt == UDP_TTL ? "ttl from 1 to 255 expected" : "ttl from 0 to 255 expected");
    flag = (int)v;
  } else if (opt == UDP_BROADCAST || opt == UDP_MULTICAST_LOOP) {
    luaL_checktype(L, 3, LUA_TBOOLEAN);
    flag = lua_toboolean(L, 3);
  } else {
    luaL_checkstring(L, 3);
    luaL_optstring(L, 4, NULL);
  }
  if (!u)
    return push_closed(L);
  lua_settop(L, 4);
  int box;
  udp_req_t *r = new_req(L, IOUDP_OPTION, &box);
  r->id = u->id;
  r->option = opt;
  r->flag = flag;
  if (opt == UDP_MULTICAST_JOIN || opt == UDP_MULTICAST_LEAVE) {
    r->group = sm_lio_copy_arg(L, 3, NULL);
    if (!lua_isnil(L, 4))
      r->iface = sm_lio_copy_arg(L, 4, NULL);
  }
  int err = call(L, u, r, SMARM_FOREVER, "udp.setoption");
  int n = sm_lio_push_done(L, err);
  sm_lio_unbox(L, box);
  return n;
}

static int m_settimeout(lua_State *L)
{
  ludp_t *u = check_udp(L, "settimeout");
  if (!u)
    return push_closed(L);
  u->timeout = sm_lpark_check_settimeout(L, 2);
  lua_pushboolean(L, 1);
  return 1;
}

static void post_close_id(uint64_t id)
{
  udp_req_t *r = sm_udp_req_new(IOUDP_CLOSE);
  if (r) {
    r->id = id;
    sm_io_post(&r->base);
  }
}

static void post_close(ludp_t *u)
{
  if (u->state != OPEN || stale(u))
    return;
  u->state = CLOSED;
  post_close_id(u->id);
}

static int m_close(lua_State *L)
{
  ludp_t *u = check_udp(L, "close");
  if (u) {
    post_close(u);
    u->gone_by = smarm_self();
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int m_gc(lua_State *L)
{
  post_close(lua_touserdata(L, 1));
  return 0;
}

static int m_tostring(lua_State *L)
{
  ludp_t *u = lua_touserdata(L, 1);
  lua_pushfstring(L, "udp.socket (%s%s)", stale(u) ? "closed with an earlier run"
                  : u->state == OPEN ? "open" : u->state == CLOSED ? "closed" : "handed over",
                  u->state != OPEN || stale(u) ? "" : u->act.mode == LACTIVE_ONCE
                  ? ", active once" : u->act.mode == LACTIVE_ON ? ", active" : "");
  return 1;
}

/* ---- Active mode (udp.h; lactive.h's rules, per datagram) ---------------------------------- */

static void passive_sync(lua_State *L, void *ud, const char *fname);

#define ACK_EVERY (IOUDP_ACTIVE_HIGH / 4) /* _ON: received datagrams are acknowledged in batches */
#define BIT_ONCE 8 /* lhandle bits: active "once" on the sender's side; the receiver arms it */
#define BIT_ON 16  /* active true: the same */

/* Posts the arming of u in mode for the caller: 0, or -ENOMEM (it stays passive). */
static int post_arm(void *ud, int mode)
{
  ludp_t *u = ud;
  udp_req_t *r = sm_udp_req_new(IOUDP_SETACTIVE);
  if (!r)
    return -ENOMEM;
  r->id = u->id;
  r->flag = mode;
  r->owner = smarm_self();
  sm_io_post(&r->base);
  return 0;
}

/* The datagrams taken back, packed for IOUDP_UNREAD (udp_packed_t, then the bytes, each). */
typedef struct packed {
  ludp_t *u;
  char *p;
  size_t len, cap;
  int oom; /* a datagram could not be kept (then the UNREAD is not posted: they are lost) */
} packed_t;

static void pack_datagram(packed_t *k, const struct sockaddr_storage *from, const char *data,
                          size_t len)
{
  udp_packed_t h;
  memset(&h, 0, sizeof h);
  h.from = *from;
  h.len = len;
  if (k->oom || sm_io_buf_reserve(&k->p, &k->cap, k->len, sizeof h + len) < 0) {
    k->oom = 1;
    return;
  }
  memcpy(k->p + k->len, &h, sizeof h);
  memcpy(k->p + k->len + sizeof h, data, len);
  k->len += sizeof h + len;
}

/* sm_lsmarm_saved_claim's test: a received message of u's (a datagram goes back packed). Reads
** with raw gets only: nothing here raises. */
static int claim_saved(lua_State *L, void *ud)
{
  packed_t *k = ud;
  if (!lua_istable(L, -1))
    return 0;
  lua_pushliteral(L, "socket");
  lua_rawget(L, -2);
  int same = lua_touserdata(L, -1) == k->u;
  lua_pop(L, 1);
  if (!same || !sm_codec_unhold_event(L))
    return 0;
  lua_pushliteral(L, "data");
  lua_rawget(L, -2);
  lua_pushliteral(L, "ip");
  lua_rawget(L, -3);
  lua_pushliteral(L, "port");
  lua_rawget(L, -4);
  struct sockaddr_storage from;
  memset(&from, 0, sizeof from);
  if (lua_type(L, -3) == LUA_TSTRING && lua_type(L, -2) == LUA_TSTRING &&
      lua_type(L, -1) == LUA_TNUMBER) {
    const char *ip = lua_tostring(L, -2);
    uint16_t port = htons((uint16_t)lua_tointeger(L, -1));
    struct sockaddr_in *in = (struct sockaddr_in *)&from;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&from;
    if (inet_pton(AF_INET, ip, &in->sin_addr) == 1) {
      in->sin_family = AF_INET;
      in->sin_port = port;
    } else if (inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1) {
      in6->sin6_family = AF_INET6;
      in6->sin6_port = port;
    }
    size_t len;
    const char *data = lua_tolstring(L, -3, &len);
    pack_datagram(k, &from, data, len);
  } /* an error message goes: UDP errors are not kept for the next receive */
  lua_pop(L, 3);
  return 1;
}

/* Is msg an event of UDP socket u? */
static int is_event_of(const smarm_msg_t *msg, void *ud)
{
  const ludp_t *u = ud;
  if (smarm_msg_kind(msg) != SMARM_MSG_USER || smarm_msg_size(msg) < sizeof(io_event_t))
    return 0;
  io_event_t ev;
  memcpy(&ev, smarm_msg_data((smarm_msg_t *)msg), sizeof ev);
  return ev.tag == IO_EVENT_TAG && ev.id == u->id && ev.source == IO_EV_UDP;
}

/* Makes an active socket passive again (ltcp.c's passive_sync): after one waited trip to the IO
** thread every datagram message it sent is in the caller's mailbox or saved queue; they go back
** to the IO side, in front of its queue, in order. */
static void passive_sync(lua_State *L, void *ud, const char *fname)
{
  ludp_t *u = ud;
  int top = lua_gettop(L);
  int box;
  udp_req_t *r = new_req(L, IOUDP_SETACTIVE, &box);
  r->id = u->id;
  r->flag = IOUDP_PASSIVE;
  r->owner = smarm_self();
  call(L, u, r, SMARM_FOREVER, fname); /* closed meanwhile: there is still mail to take */
  sm_lio_unbox(L, box);
  lua_settop(L, top);
  packed_t k = {u, NULL, 0, 0, 0};
  sm_lsmarm_saved_claim(L, claim_saved, &k);
  smarm_msg_t *m;
  while (smarm_receive_match(is_event_of, u, 0, &m) == 0) {
    io_event_t ev;
    const char *p = smarm_msg_data(m);
    size_t n = smarm_msg_size(m), head = sizeof ev + sizeof(struct sockaddr_storage);
    memcpy(&ev, p, sizeof ev);
    if (ev.kind == IO_EV_DATA && n >= head) {
      struct sockaddr_storage from;
      memcpy(&from, p + sizeof ev, sizeof from);
      pack_datagram(&k, &from, p + head, n - head);
    }
    smarm_msg_free(m);
  }
  udp_req_t *back = k.len && !k.oom && u->state == OPEN && !stale(u)
                      ? sm_udp_req_new(IOUDP_UNREAD) : NULL;
  if (back) {
    back->id = u->id;
    back->data = k.p; /* the request's now */
    back->len = k.len;
    sm_io_post(&back->base);
  } else {
    free(k.p);
  }
}

/* The decoder of UDP events (codec.h): { smarm = "udp", socket =, data =, ip =, port = } or
** { smarm = "udp_error", socket =, reason = }, held until a receive hands it over. */
static void decode_event(lua_State *L, const unsigned char *p, size_t n)
{
  io_event_t ev;
  memcpy(&ev, p, sizeof ev);
  size_t head = sizeof ev + sizeof(struct sockaddr_storage);
  if ((ev.kind != IO_EV_DATA && ev.kind != IO_EV_ERROR) || (ev.kind == IO_EV_DATA && n < head))
    luaL_error(L, "malformed message");
  luaL_checkstack(L, 6, "message");
  lua_createtable(L, 0, 5);
  lua_pushstring(L, ev.kind == IO_EV_DATA ? "udp" : "udp_error");
  lua_setfield(L, -2, "smarm");
  ludp_t *u = NULL;
  if (sm_codec_push_event_target(L, IO_EV_UDP, ev.id)) {
    u = luaL_testudata(L, -1, UDP_MT);
    if (!u || u->id != ev.id || stale(u)) {
      lua_pop(L, 1);
      u = NULL;
    }
  }
  if (!u) { /* nobody holds it any more: a closed one stands for it */
    push_udp(L, ev.id, -1, -1);
    ((ludp_t *)lua_touserdata(L, -1))->state = CLOSED;
  }
  lua_setfield(L, -2, "socket");
  if (ev.kind == IO_EV_DATA) {
    struct sockaddr_storage from;
    memcpy(&from, p + sizeof ev, sizeof from);
    lua_pushlstring(L, (const char *)p + head, n - head);
    lua_setfield(L, -2, "data");
    push_addr(L, &from);
    lua_setfield(L, -3, "port");
    lua_setfield(L, -2, "ip");
  } else {
    lua_pushstring(L, sm_io_err_name(ev.err));
    lua_setfield(L, -2, "reason");
  }
  sm_codec_hold_event(L, IO_EV_UDP);
}

/* A receive hands one of our events (on top) to the actor: "once" is passive again, true counts
** it towards its acknowledgement. */
static void event_taken(lua_State *L)
{
  lua_pushliteral(L, "socket");
  lua_rawget(L, -2);
  ludp_t *u = luaL_testudata(L, -1, UDP_MT);
  lua_pop(L, 1);
  lua_pushliteral(L, "data");
  lua_rawget(L, -2);
  int data = !lua_isnil(L, -1); /* the IO side counts datagram messages only, not errors */
  lua_pop(L, 1);
  if (!u || u->state != OPEN || stale(u))
    return;
  size_t ack = sm_lactive_taken(&u->act, 0, data, ACK_EVERY);
  udp_req_t *r = ack ? sm_udp_req_new(IOUDP_ACK) : NULL;
  if (r) {
    r->id = u->id;
    r->len = ack;
    sm_io_post(&r->base);
  } else if (ack) {
    u->act.taken += ack; /* out of memory: acknowledged with the next batch */
  }
}

static const codec_event_fns_t event_fns = {decode_event, event_taken};

static const lactive_ops_t active_ops = {post_arm, passive_sync};

static int udp_gone(void *ud) { return ((ludp_t *)ud)->state != OPEN; }

/* sock:setactive(mode): false, "once" or true, as a TCP connection's. */
static int m_setactive(lua_State *L)
{
  ludp_t *u = check_udp(L, "setactive");
  int mode = sm_lactive_mode_arg(L, 2);
  if (!u)
    return push_closed(L);
  lua_settop(L, 1);
  if (sm_lactive_set(L, &u->act, u, 1, IO_EV_UDP, u->id, mode, u->busy, "udp", &active_ops,
                     udp_gone) < 0)
    return push_closed(L);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- Sockets in messages (lhandle.h) --------------------------------------------------------- */

static int udp_test(lua_State *L, int idx, void **ud, lhandle_t *h)
{
  ludp_t *u = luaL_testudata(L, idx, UDP_MT);
  if (!u)
    return 0;
  if (stale(u))
    luaL_error(L, "smarm.send: the socket belongs to an earlier run");
  if (u->state != OPEN)
    luaL_error(L, "smarm.send: the socket is %s", u->state == CLOSED ? "closed"
                                                    : "handed to another actor");
  if (u->busy) /* its datagram would reach the waiting actor, not the receiver */
    luaL_error(L, "smarm.send: the socket is in use by another actor");
  *ud = u;
  memset(h, 0, sizeof *h);
  h->id = u->id;
  h->timeout = u->timeout;
  h->fd = u->fd;
  h->bits = (uint8_t)(u->act.rearm == LACTIVE_ONCE ? BIT_ONCE
                      : u->act.rearm == LACTIVE_ON ? BIT_ON : 0);
  return 1;
}

static void udp_handed_over(void *ud)
{
  ludp_t *u = ud;
  u->state = HANDED_OVER;
  u->gone_by = smarm_self();
  sm_lactive_handed_over(&u->act);
}

static void udp_push(lua_State *L, const lhandle_t *h)
{
  push_udp(L, h->id, h->fd, h->timeout);
  ludp_t *u = lua_touserdata(L, -1);
  if (h->bits & (BIT_ONCE | BIT_ON)) /* it was active: its messages come here now */
    sm_lactive_arm(L, &u->act, u, lua_gettop(L), IO_EV_UDP, u->id,
                   h->bits & BIT_ONCE ? LACTIVE_ONCE : LACTIVE_ON, &active_ops);
}

static void udp_drop(const lhandle_t *h) { post_close_id(h->id); }
static void udp_close_owned(void *ud) { post_close(ud); }

/* An active socket travels passive, its messages going with it (lactive.h). */
static int udp_before_move(lua_State *L, void *ud, int dry)
{
  ludp_t *u = ud;
  return sm_lactive_before_move(L, &u->act, u, dry, &active_ops);
}

static void udp_kept(lua_State *L, void *ud)
{
  (void)L;
  ludp_t *u = ud;
  sm_lactive_kept(&u->act, u, u->state == OPEN && !stale(u) && u->busy == 0, &active_ops);
}

static const lhandle_kind_t udp_kind = {udp_test,        udp_handed_over, udp_push,
                                        udp_drop,        udp_close_owned, udp_before_move,
                                        udp_kept};

static const luaL_Reg udp_methods[] = {
  {"sendto", m_sendto},           {"receivefrom", m_receivefrom}, {"receive", m_receive},
  {"getsockname", m_getsockname}, {"setoption", m_setoption},     {"settimeout", m_settimeout},
  {"close", m_close},             {"setactive", m_setactive},     {NULL, NULL},
};

static const luaL_Reg udp_functions[] = {
  {"bind", l_bind},
  {NULL, NULL},
};

void sm_ludp_register(lua_State *L, int module)
{
  sm_lhandle_register(&udp_kind);
  sm_codec_set_event_fns(IO_EV_UDP, &event_fns);
  sm_lio_handle_metatable(L, UDP_MT, udp_methods, m_gc, m_tostring);
  sm_lio_add_table(L, module, "udp", udp_functions);
}
