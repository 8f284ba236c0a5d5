/*
** smarm.tcp and smarm.unix: stream sockets for Lua actors, in the shape of LuaSocket and
** OpenResty's cosockets. The sockets live on the IO thread (src/io/tcp.c); a Lua socket is a
** userdata holding the socket's id, its kind (server or connection, TCP or Unix: one metatable
** each for servers and connections, the methods being the same) and its timeout. Each call is
** a request that parks only the calling actor. Outcomes return (nil, "timeout"; nil, message,
** code with libuv's error name); misuse raises (wrong types, a closed socket, a second receive
** or accept on a socket while one waits).
**
** A connection's userdata also holds its descriptor, for sends straight from the actor's thread
** (m_send). That is safe only while the IO thread keeps the socket open: a handle's own close
** marks it closed before the IO thread closes it, and the end of a run closes every socket, so a
** handle of an earlier run is stale (lhandle.h) and touches neither its id nor its descriptor.
** Sockets travel in messages as a handle kind of their own (sock_kind).
*/
#define _GNU_SOURCE
#include "ltcp.h"

#include "codec.h"
#include "lactive.h"
#include "io/tcp.h"
#include "lbinary.h"
#include "lhandle.h"
#include "lio.h"
#include "ljx.h"
#include "lpark.h"

#include <lauxlib.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#define SERVER_MT "smarm.tcp.server"
#define CONN_MT "smarm.tcp.conn"

enum { OPEN, CLOSED, HANDED_OVER };

/* A connection reads ahead: each trip to the IO thread brings back everything it holds (up to
** READ_AHEAD or what the pattern still needs), and later receives are met here without a trip
** while the bytes last (an HTTP request's lines: one trip instead of one per line). */
#define READ_AHEAD (64 * 1024)

typedef struct lsock {
  uint64_t id;
  int listener;
  int unix_sock;  /* a Unix domain socket (smarm.unix): names and messages say so */
  int state;      /* OPEN, CLOSED or HANDED_OVER (sent in a message: another actor has it) */
  smarm_pid_t gone_by; /* who closed it or handed it over (0: its owner's end, or its __gc) */
  double timeout; /* seconds; negative: none */
  char *rbuf;     /* bytes read ahead: rbuf[rstart, rlen) (malloc'd) */
  size_t rstart, rlen, rcap;
  int rend;       /* the IO side said: closed (IOTCP_CLOSED) or an error; no more bytes come */
  int fd;         /* a connection's descriptor, or -1 (see m_send) */
  int sending;    /* sends of this handle parked in the IO thread now */
  int busy;       /* calls of this handle parked in the IO thread now (sends included) */
  int unsure;     /* a send through the IO thread timed out: its bytes may still be queued */
  lactive_t act;  /* its active mode as this side knows it (lactive.h; taken: bytes) */
  uint32_t run;   /* the run that made it (sm_lhandle_run_generation): its end closed the socket */
} lsock_t;

/* A socket of a run that has ended: its id and descriptor were closed with that run, and the
** number may be another socket's now, so nothing may be done with either. */
static int stale(const lsock_t *s) { return s->run != sm_lhandle_run_generation(); }

/* The module a socket's errors name: "tcp" or "unix". */
static const char *module_of(const lsock_t *s) { return s->unix_sock ? "unix" : "tcp"; }

static const lhandle_kind_t sock_kind;

static void push_sock(lua_State *L, uint64_t id, int listener, int fd, int unix_sock)
{
  lsock_t *s = lua_newuserdata(L, sizeof *s);
  memset(s, 0, sizeof *s);
  s->fd = listener ? -1 : fd;
  s->id = id;
  s->listener = listener;
  s->unix_sock = unix_sock;
  s->state = OPEN;
  s->timeout = -1;
  s->run = sm_lhandle_run_generation();
  luaL_getmetatable(L, listener ? SERVER_MT : CONN_MT);
  lua_setmetatable(L, -2);
  /* May raise (memory) once the userdata closes the socket by its __gc; a decoder's block may
  ** then close it too, which a socket's id allows (a second close finds nothing). */
  sm_lhandle_own(L, -1, &sock_kind);
}

void sm_ltcp_push_unix_conn(lua_State *L, uint64_t id, int fd) { push_sock(L, id, 0, fd, 1); }

/* Is the value at idx a socket userdata (a server when listener, a connection when not, either
** when -1)? */
static lsock_t *test_sock(lua_State *L, int idx, int listener)
{
  lsock_t *s = listener != 0 ? luaL_testudata(L, idx, SERVER_MT) : NULL;
  if (!s && listener != 1)
    s = luaL_testudata(L, idx, CONN_MT);
  return s;
}

/* Actors of one scheduler may share a socket (spawn arguments, upvalues). When one of them closes
** it or hands it away, every call of the others returns nil, "closed" from then on, as a call
** parked at that moment does, whatever the timing; only the actor that did it is told off (a
** raise: it is its own misuse), as is anyone using a socket of an earlier run. */
static int gone_elsewhere(const lsock_t *s)
{
  return s->state != OPEN && !stale(s) && s->gone_by != smarm_self();
}

static void check_open(lua_State *L, const lsock_t *s, const char *fname)
{
  if (stale(s))
    luaL_error(L, "smarm.%s.%s: the socket belongs to an earlier run", module_of(s), fname);
  if (s->state == CLOSED)
    luaL_error(L, "smarm.%s.%s: the socket is closed", module_of(s), fname);
  if (s->state == HANDED_OVER)
    luaL_error(L, "smarm.%s.%s: the socket was handed to another actor", module_of(s), fname);
}

/* The calls that read refuse an active socket: its data comes as messages. */
static void check_passive(lua_State *L, const lsock_t *s, const char *fname)
{
  if (s->act.mode != LACTIVE_PASSIVE)
    luaL_error(L, "smarm.%s.%s: the socket is active (its data comes as messages; "
                  "setactive(false) first)", module_of(s), fname);
}

/* The socket at idx, open; NULL when another actor closed it or handed it away (the caller
** returns nil, "closed": gone_elsewhere); raises on anything else. */
static lsock_t *check_sock(lua_State *L, int idx, int listener, const char *fname)
{
  lsock_t *s = test_sock(L, idx, listener);
  if (!s)
    luaL_argerror(L, idx, listener == 1 ? "tcp or unix server expected"
                          : listener == 0 ? "tcp or unix connection expected"
                                          : "tcp or unix socket expected");
  if (gone_elsewhere(s))
    return NULL;
  check_open(L, s, fname);
  return s;
}

/* nil, "closed", and `extra` (a receive's partial "", a send's count 0) unless NULL. */
static int push_closed(lua_State *L, const char *extra)
{
  lua_pushnil(L);
  lua_pushliteral(L, "closed");
  if (!extra)
    return 2;
  if (*extra)
    lua_pushinteger(L, 0);
  else
    lua_pushliteral(L, "");
  return 3;
}

/* ---- Sockets in messages (lhandle.h): bits are listener (1), queued (2) and unix (4) -------- */

#define BIT_LISTENER 1
#define BIT_QUEUED 2 /* writes through the IO thread may still be in flight: the next go that way */
#define BIT_UNIX 4
#define BIT_ONCE 8 /* active "once" on the sender's side: the receiver arms it again */
#define BIT_ON 16  /* active true: the same */

static int give_back(lsock_t *s);
static int source_of(const lsock_t *s);
static const lactive_ops_t active_ops;

static int sock_test(lua_State *L, int idx, void **sock, lhandle_t *h)
{
  lsock_t *s = test_sock(L, idx, -1);
  if (!s)
    return 0;
  if (stale(s)) /* named as smarm.send, not as the socket's own send method */
    luaL_error(L, "smarm.send: the socket belongs to an earlier run");
  if (s->state != OPEN)
    luaL_error(L, "smarm.send: the socket %s",
               s->state == CLOSED ? "is closed" : "was handed to another actor");
  if (s->busy) /* its bytes or connection would reach the waiting actor, not the receiver */
    luaL_error(L, "smarm.send: the socket is in use by another actor");
  if (give_back(s) < 0) /* bytes read ahead go back to the IO side, ahead of the rest */
    luaL_error(L, "not enough memory");
  *sock = s;
  h->id = s->id;
  h->timeout = s->timeout;
  h->fd = s->fd;
  h->bits = (uint8_t)((s->listener ? BIT_LISTENER : 0) | (s->unsure ? BIT_QUEUED : 0) |
                       (s->unix_sock ? BIT_UNIX : 0) |
                       (s->act.rearm == LACTIVE_ONCE ? BIT_ONCE : 0) |
                       (s->act.rearm == LACTIVE_ON ? BIT_ON : 0));
  return 1;
}

static void sock_handed_over(void *sock)
{
  lsock_t *s = sock;
  s->state = HANDED_OVER;
  s->gone_by = smarm_self();
  sm_lactive_handed_over(&s->act);
}

static void sock_push(lua_State *L, const lhandle_t *h)
{
  push_sock(L, h->id, h->bits & BIT_LISTENER, h->fd, (h->bits & BIT_UNIX) != 0);
  lsock_t *s = lua_touserdata(L, -1);
  s->timeout = h->timeout;
  s->unsure = (h->bits & BIT_QUEUED) != 0;
  if (h->bits & (BIT_ONCE | BIT_ON)) /* it was active: its messages come here now */
    sm_lactive_arm(L, &s->act, s, lua_gettop(L), source_of(s), s->id,
                   h->bits & BIT_ONCE ? LACTIVE_ONCE : LACTIVE_ON, &active_ops);
}

/* An active socket travels passive: its messages that the sender has not received yet are taken
** back first (the sender parks for a trip to the IO thread), and the receiver arms it again in the
** same mode; if the message does not go after all, it is armed again here (lactive.h). */
static int sock_before_move(lua_State *L, void *sock, int dry)
{
  lsock_t *s = sock;
  return sm_lactive_before_move(L, &s->act, s, dry, &active_ops);
}

static void sock_kept(lua_State *L, void *sock)
{
  (void)L;
  lsock_t *s = sock;
  sm_lactive_kept(&s->act, s, s->state == OPEN && !stale(s) && s->busy == 0, &active_ops);
}

static tcp_req_t *new_req(lua_State *L, enum tcp_op op, int *box)
{
  tcp_req_t *r = sm_tcp_req_new(op);
  *box = sm_lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  return r;
}

/* Runs r (timeout_ns: SMARM_FOREVER for none); returns 0, or its error: -ETIMEDOUT, IOTCP_CLOSED
** or a libuv error. Raises for misuse the IO thread found (a second waiting receive or accept). */
static int call(lua_State *L, tcp_req_t *r, int unix_sock, int64_t timeout_ns,
                const char *fname)
{
  /* the module's name too, for the parking errors and smarm.info ("io:tcp.receive"): static
  ** strings, which the actor's waiting_for keeps */
  static const char *const qualified[][3] = {
    {"listen", "tcp.listen", "unix.listen"},
    {"connect", "tcp.connect", "unix.connect"},
    {"accept", "tcp.accept", "unix.accept"},
    {"receive", "tcp.receive", "unix.receive"},
    {"receiveany", "tcp.receiveany", "unix.receiveany"},
    {"send", "tcp.send", "unix.send"},
    {"setoption", "tcp.setoption", "unix.setoption"},
    {"setactive", "tcp.setactive", "unix.setactive"},
    {"getsockname", "tcp.getsockname", "unix.getsockname"},
    {"getpeername", "tcp.getpeername", "unix.getpeername"},
    {"close", "tcp.close", "unix.close"},
  };
  const char *what = fname;
  for (size_t i = 0; i < sizeof qualified / sizeof *qualified; i++)
    if (strcmp(fname, qualified[i][0]) == 0)
      what = qualified[i][unix_sock ? 2 : 1];
  int err = sm_lsmarm_io_call(L, &r->base, timeout_ns, what);
  if (err == -EBUSY)
    luaL_error(L, "smarm.%s.%s: another actor is already waiting on this socket",
               unix_sock ? "unix" : "tcp", fname);
  return err;
}

/* call() for a request on socket s: while it is parked, s cannot be handed over. */
static int sock_call(lua_State *L, lsock_t *s, tcp_req_t *r, int64_t timeout_ns,
                     const char *fname)
{
  s->busy++;
  int err = call(L, r, s->unix_sock, timeout_ns, fname);
  s->busy--;
  return err;
}

/* Pushes nil and the error (and `extra` values already made by the caller go after); returns
** how many values were pushed. Receive and send name the error briefly ("timeout", "closed",
** "ECONNRESET"); the others give a message and libuv's code. */
static int push_error(lua_State *L, int err, int brief)
{
  if (err == IOTCP_CLOSED || err == -EBADF) {
    lua_pushnil(L);
    lua_pushliteral(L, "closed");
    return 2;
  }
  if (!brief || err == -ETIMEDOUT)
    return sm_lio_push_failure(L, err, NULL);
  lua_pushnil(L);
  lua_pushstring(L, sm_io_err_name(err));
  return 2;
}

static int check_port(lua_State *L, int idx)
{
  lua_Number p = luaL_checknumber(L, idx);
  luaL_argcheck(L, p >= 0 && p <= 65535 && p == floor(p), idx, "port from 0 to 65535 expected");
  return (int)p;
}

/* Ends a request that makes a socket: pushes it (or the error: its message names `subject`
** when given), releases the request. */
static int new_sock_result(lua_State *L, tcp_req_t *r, int err, int box, int listener,
                           int unix_sock, const char *subject)
{
  int n = 1;
  if (err && subject && err != -ETIMEDOUT) {
    n = sm_lio_push_failure(L, err, subject);
  } else if (err) {
    n = push_error(L, err, 0);
  } else {
    push_sock(L, r->new_id, listener, r->new_fd, unix_sock);
    r->new_taken = 1; /* its userdata owns the socket now (else the request's end closes it) */
  }
  sm_lio_unbox(L, box);
  return n;
}

/* ---- smarm.tcp.listen / connect ------------------------------------------------------------ */

static int l_listen(lua_State *L)
{
  luaL_checkstring(L, 1);
  int port = check_port(L, 2);
  lua_Number backlog = luaL_optnumber(L, 3, 511);
  luaL_argcheck(L, backlog >= 1 && backlog <= 65535, 3, "backlog from 1 to 65535 expected");
  lua_settop(L, 3);
  int box;
  tcp_req_t *r = new_req(L, IOTCP_LISTEN, &box);
  r->host = sm_lio_copy_arg(L, 1, NULL);
  r->port = port;
  r->backlog = (int)backlog;
  return new_sock_result(L, r, call(L, r, 0, SMARM_FOREVER, "listen"), box, 1, 0, NULL);
}

static int l_connect(lua_State *L)
{
  luaL_checkstring(L, 1);
  int port = check_port(L, 2);
  int64_t timeout_ns = sm_lpark_opt_seconds(L, 3);
  lua_settop(L, 3);
  int box;
  tcp_req_t *r = new_req(L, IOTCP_CONNECT, &box);
  r->host = sm_lio_copy_arg(L, 1, NULL);
  r->port = port;
  int err = call(L, r, 0, timeout_ns, "connect");
  return new_sock_result(L, r, err, box, 0, 0, NULL);
}

/* ---- smarm.unix.listen / connect ----------------------------------------------------------- */

/* The path argument at idx, checked: a path, or "@name" for Linux's abstract names. */
static void check_unix_path(lua_State *L, int idx)
{
  size_t len;
  const char *path = luaL_checklstring(L, idx, &len);
  luaL_argcheck(L, len > 0 && !(len == 1 && path[0] == '@'), idx, "socket path expected");
  luaL_argcheck(L, strlen(path) == len, idx, "socket path without NUL bytes expected");
  luaL_argcheck(L, len < sizeof(struct sockaddr_un){0}.sun_path, idx,
                "socket path of at most 107 bytes expected");
}

/* smarm.unix.listen(path [, opts]): opts.backlog (1..65535, default 511), opts.mode (the path's
** permission bits, 0..0777; default: the umask's; not for abstract names). */
static int l_unix_listen(lua_State *L)
{
  check_unix_path(L, 1);
  const char *path = lua_tostring(L, 1);
  lua_Number backlog = 511;
  int mode = -1;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "backlog");
    if (!lua_isnil(L, -1)) {
      luaL_argcheck(L, lua_type(L, -1) == LUA_TNUMBER, 2, "opts.backlog must be a number");
      backlog = lua_tonumber(L, -1);
      luaL_argcheck(L, backlog >= 1 && backlog <= 65535, 2,
                    "opts.backlog from 1 to 65535 expected");
    }
    lua_getfield(L, 2, "mode");
    if (!lua_isnil(L, -1)) {
      luaL_argcheck(L, lua_type(L, -1) == LUA_TNUMBER, 2, "opts.mode must be a number");
      lua_Number m = lua_tonumber(L, -1);
      luaL_argcheck(L, m >= 0 && m <= 511 && m == floor(m), 2,
                    "opts.mode from 0 to 0777 (511) expected");
      luaL_argcheck(L, path[0] != '@', 2, "opts.mode does not apply to an abstract name");
      mode = (int)m;
    }
  }
  lua_settop(L, 2);
  int box;
  tcp_req_t *r = new_req(L, IOTCP_LISTEN_UNIX, &box);
  r->host = sm_lio_copy_arg(L, 1, NULL);
  r->backlog = (int)backlog;
  r->mode = mode;
  int err = call(L, r, 1, SMARM_FOREVER, "listen");
  return new_sock_result(L, r, err, box, 1, 1, lua_tostring(L, 1));
}

/* smarm.unix.connect(path [, timeout]) */
static int l_unix_connect(lua_State *L)
{
  check_unix_path(L, 1);
  int64_t timeout_ns = sm_lpark_opt_seconds(L, 2);
  lua_settop(L, 2);
  int box;
  tcp_req_t *r = new_req(L, IOTCP_CONNECT_UNIX, &box);
  r->host = sm_lio_copy_arg(L, 1, NULL);
  int err = call(L, r, 1, timeout_ns, "connect");
  return new_sock_result(L, r, err, box, 0, 1, lua_tostring(L, 1));
}

/* ---- Methods ------------------------------------------------------------------------------- */

static int m_accept(lua_State *L)
{
  lsock_t *s = check_sock(L, 1, 1, "accept");
  if (!s)
    return push_closed(L, NULL);
  lua_settop(L, 1);
  int box;
  tcp_req_t *r = new_req(L, IOTCP_ACCEPT, &box);
  r->id = s->id;
  int err = sock_call(L, s, r, sm_lsmarm_timeout_ns(s->timeout), "accept");
  return new_sock_result(L, r, err, box, 0, s->unix_sock, NULL);
}

/* Appends n bytes to the read-ahead buffer: 0, or -1 when out of memory. */
static int keep_bytes(lsock_t *s, const char *p, size_t n)
{
  if (s->rstart == s->rlen)
    s->rstart = s->rlen = 0;
  if (s->rcap - s->rlen < n) {
    if (s->rstart > 0) {
      memmove(s->rbuf, s->rbuf + s->rstart, s->rlen - s->rstart);
      s->rlen -= s->rstart;
      s->rstart = 0;
    }
    if (s->rcap - s->rlen < n) {
      size_t cap = s->rcap ? s->rcap : 4096;
      while (cap - s->rlen < n)
        cap *= 2;
      char *more = realloc(s->rbuf, cap);
      if (!more)
        return -1;
      s->rbuf = more;
      s->rcap = cap;
    }
  }
  memcpy(s->rbuf + s->rlen, p, n);
  s->rlen += n;
  return 0;
}

/* One trip to the IO thread for at least one byte (at most `most`), kept in the read-ahead
** buffer. Returns 0, -ETIMEDOUT, or the end (IOTCP_CLOSED or an error, also remembered). */
static int read_more(lua_State *L, lsock_t *s, size_t most, int64_t deadline, const char *fname)
{
  if (s->rend)
    return s->rend;
  int64_t left = SMARM_FOREVER;
  if (deadline >= 0) {
    int64_t now = smarm_now_ns();
    left = now >= deadline ? 0 : deadline - now;
  }
  int top = lua_gettop(L);
  int box;
  tcp_req_t *r = new_req(L, IOTCP_RECEIVE, &box);
  r->id = s->id;
  r->want = most;
  int err = sock_call(L, s, r, left, fname);
  if (!err && r->len) {
    if (s->rstart == s->rlen) { /* nothing held: the request's block becomes the buffer */
      free(s->rbuf);
      s->rbuf = r->data;
      s->rcap = s->rlen = r->len;
      s->rstart = 0;
      r->data = NULL;
    } else if (keep_bytes(s, r->data, r->len) < 0) {
      luaL_error(L, "not enough memory"); /* the box frees the request */
    }
  }
  sm_lio_unbox(L, box);
  lua_settop(L, top);
  if (err && err != -ETIMEDOUT)
    s->rend = err;
  return err;
}

/* Pushes n read-ahead bytes as a string and drops them (and `skip` more) from the buffer. */
static void push_bytes(lua_State *L, lsock_t *s, size_t n, size_t skip)
{
  lua_pushlstring(L, s->rbuf ? s->rbuf + s->rstart : "", n);
  s->rstart += n + skip;
}

static int64_t deadline_of(const lsock_t *s)
{
  int64_t ns = sm_lsmarm_timeout_ns(s->timeout);
  return ns == SMARM_FOREVER ? -1 : smarm_now_ns() + ns;
}

/* receive(pattern): "*l" (default), "*a", or a number of bytes. */
static int m_receive(lua_State *L)
{
  lsock_t *s = check_sock(L, 1, 0, "receive");
  if (!s)
    return push_closed(L, "");
  check_passive(L, s, "receive");
  enum { LINE, ALL, EXACT } mode = LINE;
  size_t want = 0;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    lua_Number n = lua_tonumber(L, 2);
    luaL_argcheck(L, n >= 0 && n == floor(n) && n < 4294967296.0, 2, "byte count expected");
    mode = EXACT;
    want = (size_t)n;
  } else if (!lua_isnoneornil(L, 2)) {
    const char *p = luaL_checkstring(L, 2);
    if (strcmp(p, "*l") == 0 || strcmp(p, "l") == 0)
      mode = LINE;
    else if (strcmp(p, "*a") == 0 || strcmp(p, "a") == 0)
      mode = ALL;
    else
      return luaL_argerror(L, 2, "\"*l\", \"*a\" or a number expected");
  }
  int64_t deadline = deadline_of(s);
  size_t scanned = 0; /* LINE: bytes already known to hold no newline */
  for (;;) {
    size_t avail = s->rlen - s->rstart;
    const char *p = s->rbuf ? s->rbuf + s->rstart : NULL;
    if (mode == LINE && avail > scanned) {
      const char *nl = memchr(p + scanned, '\n', avail - scanned);
      if (nl) {
        size_t k = (size_t)(nl - p);
        size_t cut = k > 0 && p[k - 1] == '\r' ? 1 : 0;
        push_bytes(L, s, k - cut, cut + 1);
        return 1;
      }
      scanned = avail;
    } else if (mode == EXACT && avail >= want) {
      push_bytes(L, s, want, 0);
      return 1;
    }
    size_t most = mode == EXACT && want - avail > READ_AHEAD ? want - avail : READ_AHEAD;
    int err = read_more(L, s, most, deadline, "receive");
    if (err == -ETIMEDOUT) {
      int n = push_error(L, err, 1);
      lua_pushliteral(L, ""); /* what arrived stays for the next receive */
      return n + 1;
    }
    if (err) {
      if (mode == ALL && err == IOTCP_CLOSED) { /* the whole stream, up to the peer's close */
        push_bytes(L, s, s->rlen - s->rstart, 0);
        return 1;
      }
      int n = push_error(L, err, 1);
      push_bytes(L, s, s->rlen - s->rstart, 0); /* the partial */
      return n + 1;
    }
  }
}

static int m_receiveany(lua_State *L)
{
  lsock_t *s = check_sock(L, 1, 0, "receiveany");
  if (!s)
    return push_closed(L, NULL);
  check_passive(L, s, "receiveany");
  lua_Number max = luaL_checknumber(L, 2);
  luaL_argcheck(L, max >= 1 && max == floor(max) && max < 4294967296.0, 2,
                "byte count of at least 1 expected");
  if (s->rlen == s->rstart) {
    int err = read_more(L, s, READ_AHEAD, deadline_of(s), "receiveany");
    if (err)
      return push_error(L, err, 1);
  }
  size_t avail = s->rlen - s->rstart;
  push_bytes(L, s, avail < (size_t)max ? avail : (size_t)max, 0);
  return 1;
}

/* send(data): straight from the actor's thread when nothing of this socket is queued in the IO
** thread (a non-blocking send(2); the kernel took it all: no trip at all); whatever the kernel
** did not take goes through the IO thread, which completes when it has, so a writer whose peer
** does not read parks there (back-pressure), and every later send follows it there while it is
** in flight. The descriptor is the IO thread's socket: it stays open while this handle is open
** (only a close through an open handle, or the runtime's end, closes it). */
static int m_send(lua_State *L)
{
  lsock_t *s = check_sock(L, 1, 0, "send");
  if (!s)
    return push_closed(L, "0");
  size_t len;
  const char *data = sm_lbinary_checkbytes(L, 2, &len); /* a string or a binary */
  lua_settop(L, 2);
  size_t done = 0;
  if (s->fd >= 0 && s->sending == 0 && !s->unsure && len > 0) {
    ssize_t n = send(s->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      int k = push_error(L, -errno, 1);
      lua_pushinteger(L, 0);
      return k + 1;
    }
    done = n > 0 ? (size_t)n : 0;
  }
  int err = 0;
  if (done < len) {
    int box;
    tcp_req_t *r = new_req(L, IOTCP_SEND, &box);
    r->id = s->id;
    r->len = len - done;
    r->data = malloc(r->len);
    if (!r->data)
      return luaL_error(L, "not enough memory");
    memcpy(r->data, data + done, r->len);
    s->sending++;
    err = sock_call(L, s, r, sm_lsmarm_timeout_ns(s->timeout), "send");
    s->sending--;
    if (err && s->state != OPEN)
      err = IOTCP_CLOSED; /* closed while it waited (its write ended as cancelled) */
    if (err == -ETIMEDOUT)
      s->unsure = 1;
    else if (!err && !s->sending)
      s->unsure = 0; /* libuv writes a stream in order: everything queued before has gone out */
    sm_lio_unbox(L, box);
  }
  if (err) { /* the third value: the bytes the kernel took straight from here (a lower bound) */
    int n = push_error(L, err, 1);
    lua_pushnumber(L, (lua_Number)done);
    return n + 1;
  }
  lua_pushnumber(L, (lua_Number)len);
  return 1;
}

static int m_settimeout(lua_State *L)
{
  lsock_t *s = check_sock(L, 1, -1, "settimeout");
  if (!s)
    return push_closed(L, NULL);
  /* nil or negative: no limit; NaN and strings raise (sm_lpark_check_settimeout) */
  s->timeout = sm_lpark_check_settimeout(L, 2);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- Active mode (tcp.h): data and the end arrive as messages ------------------------------ */
/* The rules are lactive.h's; here: arming (the bytes read ahead go back first), taking back
** (passive_sync: into the read-ahead buffer), the events' tables and what taking one counts. */

#define ACK_EVERY (IOTCP_ACTIVE_HIGH / 4) /* _ON: received bytes are acknowledged in batches */

static int source_of(const lsock_t *s) { return s->unix_sock ? IO_EV_UNIX : IO_EV_TCP; }

/* Pushes this VM's userdata of socket id and returns it; NULL (nothing pushed) when there is none
** (collected: its __gc closed the socket while the event was on its way). */
static lsock_t *find_active(lua_State *L, int source, uint64_t id)
{
  if (!sm_codec_push_event_target(L, source, id))
    return NULL;
  lsock_t *s = test_sock(L, -1, 0);
  if (!s || s->id != id || stale(s)) {
    lua_pop(L, 1);
    return NULL;
  }
  return s;
}

/* Hands the bytes read ahead back to the IO side, in front of what it holds (a posted request):
** 0, or -ENOMEM (nothing changed). */
static int give_back(lsock_t *s)
{
  if (s->rlen == s->rstart)
    return 0;
  tcp_req_t *r = sm_tcp_req_new(IOTCP_UNREAD);
  char *copy = r ? malloc(s->rlen - s->rstart) : NULL;
  if (!copy) {
    sm_io_req_release(r ? &r->base : NULL);
    return -ENOMEM;
  }
  memcpy(copy, s->rbuf + s->rstart, s->rlen - s->rstart);
  r->id = s->id;
  r->data = copy;
  r->len = s->rlen - s->rstart;
  s->rstart = s->rlen = 0;
  sm_io_post(&r->base);
  return 0;
}

/* Posts what arms s in mode for the caller: the bytes read ahead first (they come back as its
** first messages), then the mode. 0, or -ENOMEM (then it stays passive, nothing lost). */
static int post_arm(void *sock, int mode)
{
  lsock_t *s = sock;
  tcp_req_t *r = sm_tcp_req_new(IOTCP_SETACTIVE);
  if (!r)
    return -ENOMEM;
  if (give_back(s) < 0) {
    sm_io_req_release(&r->base);
    return -ENOMEM;
  }
  r->id = s->id;
  r->flag = mode;
  r->owner = smarm_self();
  sm_io_post(&r->base);
  s->rend = 0; /* an end seen here is known there too: it comes as a message */
  return 0;
}

static void passive_sync(lua_State *L, void *sock, const char *fname);
static const lactive_ops_t active_ops = {post_arm, passive_sync};

/* Is msg an event of stream socket s (a block the IO thread made: io.h)? */
static int is_event_of(const smarm_msg_t *msg, void *sock)
{
  const lsock_t *s = sock;
  if (smarm_msg_kind(msg) != SMARM_MSG_USER || smarm_msg_size(msg) < sizeof(io_event_t))
    return 0;
  io_event_t ev;
  memcpy(&ev, smarm_msg_data((smarm_msg_t *)msg), sizeof ev);
  return ev.tag == IO_EVENT_TAG && ev.id == s->id && ev.source == source_of(s);
}

/* The event names of a socket's messages, by io_event_kind - 1. */
static const char *const event_names[2][3] = {
  {"tcp", "tcp_closed", "tcp_error"},
  {"unix", "unix_closed", "unix_error"},
};

/* sm_lsmarm_saved_claim's test: is the value on top a received message of socket `sock`? Its
** data is kept as read-ahead bytes again. */
static int claim_saved(lua_State *L, void *sock)
{
  lsock_t *s = sock;
  if (!lua_istable(L, -1))
    return 0;
  lua_pushliteral(L, "socket");
  lua_rawget(L, -2);
  int same = lua_touserdata(L, -1) == s;
  lua_pop(L, 1);
  if (!same || !sm_codec_unhold_event(L))
    return 0;
  lua_pushliteral(L, "smarm");
  lua_rawget(L, -2);
  const char *name = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
  int kind = 0;
  for (int k = 0; k < 3; k++)
    if (strcmp(name, event_names[s->unix_sock][k]) == 0)
      kind = k + 1;
  lua_pop(L, 1);
  if (kind == IO_EV_DATA) {
    lua_pushliteral(L, "data");
    lua_rawget(L, -2);
    size_t n = 0;
    const char *p = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &n) : NULL;
    int rc = p ? keep_bytes(s, p, n) : 0;
    lua_pop(L, 1);
    if (rc < 0)
      luaL_error(L, "not enough memory");
  }
  return kind != 0;
}

/* Makes an active socket passive again and takes back what it sent that has not been received:
** its data messages in the caller's mailbox (set aside by a selective receive or not) become
** read-ahead bytes again, in order; its end messages go (the IO side still knows the end, which
** the next receive finds). One trip to the IO thread, after which every message the socket sent
** is in the mailbox (tcp.h). */
static void passive_sync(lua_State *L, void *sock, const char *fname)
{
  lsock_t *s = sock;
  int top = lua_gettop(L);
  int box;
  tcp_req_t *r = new_req(L, IOTCP_SETACTIVE, &box);
  r->id = s->id;
  r->flag = IOTCP_PASSIVE;
  r->owner = smarm_self();
  sock_call(L, s, r, SMARM_FOREVER, fname); /* closed meanwhile: there is still mail to take */
  sm_lio_unbox(L, box);
  lua_settop(L, top);
  s->act.mode = LACTIVE_PASSIVE; /* as the IO side is now, should keeping the bytes raise */
  s->act.taken = 0;
  sm_lsmarm_saved_claim(L, claim_saved, s);
  smarm_msg_t *m;
  while (smarm_receive_match(is_event_of, s, 0, &m) == 0) {
    io_event_t ev;
    const char *p = smarm_msg_data(m);
    memcpy(&ev, p, sizeof ev);
    int rc = ev.kind == IO_EV_DATA
               ? keep_bytes(s, p + sizeof ev, smarm_msg_size(m) - sizeof ev) : 0;
    smarm_msg_free(m);
    if (rc < 0)
      luaL_error(L, "not enough memory");
  }
}

/* The decoder of stream sockets' events (codec.h): { smarm = "tcp", socket =, data = },
** { smarm = "tcp_closed", socket = } or { smarm = "tcp_error", socket =, reason = } ("unix" for a
** Unix socket), held until a receive hands it to the actor (event_taken). */
static void decode_event(lua_State *L, const unsigned char *p, size_t n)
{
  io_event_t ev;
  memcpy(&ev, p, sizeof ev);
  if (ev.kind < IO_EV_DATA || ev.kind > IO_EV_ERROR)
    luaL_error(L, "malformed message");
  int unix_sock = ev.source == IO_EV_UNIX;
  luaL_checkstack(L, 4, "message");
  lua_createtable(L, 0, 3);
  lua_pushstring(L, event_names[unix_sock][ev.kind - 1]);
  lua_setfield(L, -2, "smarm");
  lsock_t *s = find_active(L, ev.source, ev.id);
  if (!s) { /* nobody holds it any more: a closed one stands for it */
    push_sock(L, ev.id, 0, -1, unix_sock);
    ((lsock_t *)lua_touserdata(L, -1))->state = CLOSED;
  }
  lua_setfield(L, -2, "socket");
  size_t len = n - sizeof ev;
  if (ev.kind == IO_EV_DATA) {
    lua_pushlstring(L, (const char *)p + sizeof ev, len);
    lua_setfield(L, -2, "data");
  } else if (ev.kind == IO_EV_ERROR) {
    lua_pushstring(L, sm_io_err_name(ev.err));
    lua_setfield(L, -2, "reason");
  }
  sm_codec_hold_event(L, ev.source);
}

/* A receive hands one of our events (on top) to the actor (codec.h): its socket counts it
** (lactive.h). Taking a message is what lets the next come: "once" is passive again, true counts
** the bytes towards its acknowledgement, an end makes it passive. */
static void event_taken(lua_State *L)
{
  lua_pushliteral(L, "socket");
  lua_rawget(L, -2);
  lsock_t *s = test_sock(L, -1, 0);
  lua_pop(L, 1);
  lua_pushliteral(L, "data");
  lua_rawget(L, -2);
  size_t len = lua_type(L, -1) == LUA_TSTRING ? lua_objlen(L, -1) : 0;
  int data = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (!s || s->state != OPEN || stale(s))
    return;
  size_t ack = sm_lactive_taken(&s->act, !data, len, ACK_EVERY);
  tcp_req_t *r = ack ? sm_tcp_req_new(IOTCP_ACK) : NULL;
  if (r) {
    r->id = s->id;
    r->len = ack;
    sm_io_post(&r->base);
  } else if (ack) {
    s->act.taken += ack; /* out of memory: acknowledged with the next batch */
  }
}

static const codec_event_fns_t event_fns = {decode_event, event_taken};

/* conn:setactive(mode): false, "once" or true (tcp.h). Raises for a socket whose messages go to
** another actor, or on which another actor waits. */
static int sock_gone(void *sock) { return gone_elsewhere(sock); }

static int m_setactive(lua_State *L)
{
  lsock_t *s = check_sock(L, 1, 0, "setactive");
  if (!s)
    return push_closed(L, NULL);
  int mode = sm_lactive_mode_arg(L, 2);
  lua_settop(L, 1);
  if (sm_lactive_set(L, &s->act, s, 1, source_of(s), s->id, mode, s->busy, module_of(s),
                     &active_ops, sock_gone) < 0)
    return push_closed(L, NULL);
  lua_pushboolean(L, 1);
  return 1;
}

/* Closing does not wait: the request goes to the IO thread. A close lets what earlier sends
** queued go out first; an abort (the owner ended abnormally) drops it, and a TCP peer then sees a
** reset rather than a clean end (tcp.c, sock_close_after_writes). */
static void post_close_id(uint64_t id, int abort)
{
  tcp_req_t *r = sm_tcp_req_new(IOTCP_CLOSE);
  if (r) {
    r->id = id;
    r->flag = abort;
    sm_io_post(&r->base);
  }
}

static void post_close(lsock_t *s, int abort)
{
  if (s->state != OPEN || stale(s)) /* a stale id names nothing of a later IO loop, but why ask */
    return;
  s->state = CLOSED;
  post_close_id(s->id, abort);
}

static void sock_drop(const lhandle_t *h) { post_close_id(h->id, 0); }

static void sock_close_owned(void *ud) { post_close(ud, 1); }

static const lhandle_kind_t sock_kind = {sock_test,        sock_handed_over, sock_push,
                                         sock_drop,        sock_close_owned, sock_before_move,
                                         sock_kept};

static int m_close(lua_State *L)
{
  lsock_t *s = check_sock(L, 1, -1, "close");
  /* Parking refused (a __gc, a debug hook): closed without waiting, as __gc does, rather than
  ** raising with the handle marked closed and the listener left accepting. */
  int can_wait = smarm_actor_data() != NULL && sm_ljx_cannot_park(L) == NULL;
  if (s && s->unix_sock && s->listener && can_wait) {
    /* waits for the IO thread, so that the path is gone (and free to listen on again) when
    ** close returns */
    s->state = CLOSED;
    s->gone_by = smarm_self();
    lua_settop(L, 1);
    int box;
    tcp_req_t *r = new_req(L, IOTCP_CLOSE, &box);
    r->id = s->id;
    call(L, r, 1, SMARM_FOREVER, "close");
    sm_lio_unbox(L, box);
  } else if (s) {
    post_close(s, 0);
    s->gone_by = smarm_self();
  }
  lua_pushboolean(L, 1); /* closed by another actor: closed as asked */
  return 1;
}

/* __gc: an unclosed socket is closed by a posted request (no switch inside __gc). */
static int m_gc(lua_State *L)
{
  lsock_t *s = lua_touserdata(L, 1);
  post_close(s, 0);
  free(s->rbuf);
  s->rbuf = NULL;
  return 0;
}

static int name(lua_State *L, int peer, const char *fname)
{
  lsock_t *s = check_sock(L, 1, peer ? 0 : -1, fname);
  if (!s)
    return push_closed(L, NULL);
  lua_settop(L, 1);
  int box;
  tcp_req_t *r = new_req(L, IOTCP_NAME, &box);
  r->id = s->id;
  r->peer = peer;
  int err = sock_call(L, s, r, SMARM_FOREVER, fname);
  int n;
  if (err) {
    n = push_error(L, err, 0);
  } else { /* a Unix socket's name is its path alone */
    lua_pushstring(L, r->addr);
    if (r->addr_port >= 0)
      lua_pushinteger(L, r->addr_port);
    n = r->addr_port >= 0 ? 2 : 1;
  }
  sm_lio_unbox(L, box);
  return n;
}

static int m_getsockname(lua_State *L) { return name(L, 0, "getsockname"); }
static int m_getpeername(lua_State *L) { return name(L, 1, "getpeername"); }

static int m_setoption(lua_State *L)
{
  lsock_t *s = check_sock(L, 1, 0, "setoption");
  if (!s)
    return push_closed(L, NULL);
  const char *opt = luaL_checkstring(L, 2);
  if (strcmp(opt, "tcp-nodelay") != 0)
    return luaL_argerror(L, 2, "\"tcp-nodelay\" expected");
  if (s->unix_sock)
    return luaL_argerror(L, 2, "\"tcp-nodelay\" applies to TCP sockets only");
  int flag = lua_toboolean(L, 3);
  lua_settop(L, 3);
  int box;
  tcp_req_t *r = new_req(L, IOTCP_NODELAY, &box);
  r->id = s->id;
  r->flag = flag;
  int err = sock_call(L, s, r, SMARM_FOREVER, "setoption");
  int n;
  if (err) {
    n = push_error(L, err, 0);
  } else {
    lua_pushboolean(L, 1);
    n = 1;
  }
  sm_lio_unbox(L, box);
  return n;
}

static int m_tostring(lua_State *L)
{
  lsock_t *s = lua_touserdata(L, 1);
  lua_pushfstring(L, "%s.%s (%s%s)", module_of(s), s->listener ? "server" : "conn",
                  stale(s) ? "closed with an earlier run" : s->state == OPEN ? "open"
                  : s->state == CLOSED ? "closed" : "handed over",
                  s->state != OPEN || stale(s) ? "" : s->act.mode == LACTIVE_ONCE
                  ? ", active once" : s->act.mode == LACTIVE_ON ? ", active" : "");
  return 1;
}

static const luaL_Reg server_methods[] = {
  {"accept", m_accept}, {"getsockname", m_getsockname}, {"settimeout", m_settimeout},
  {"close", m_close},   {NULL, NULL},
};

static const luaL_Reg conn_methods[] = {
  {"receive", m_receive},         {"receiveany", m_receiveany}, {"send", m_send},
  {"settimeout", m_settimeout},   {"close", m_close},           {"getsockname", m_getsockname},
  {"getpeername", m_getpeername}, {"setoption", m_setoption},   {"setactive", m_setactive},
  {NULL, NULL},
};

static const luaL_Reg tcp_functions[] = {
  {"listen", l_listen},
  {"connect", l_connect},
  {NULL, NULL},
};

static const luaL_Reg unix_functions[] = {
  {"listen", l_unix_listen},
  {"connect", l_unix_connect},
  {NULL, NULL},
};

void sm_ltcp_register(lua_State *L, int module)
{
  sm_lhandle_register(&sock_kind);
  sm_codec_set_event_fns(IO_EV_TCP, &event_fns);
  sm_codec_set_event_fns(IO_EV_UNIX, &event_fns);
  sm_lio_handle_metatable(L, SERVER_MT, server_methods, m_gc, m_tostring);
  sm_lio_handle_metatable(L, CONN_MT, conn_methods, m_gc, m_tostring);
  sm_lio_add_table(L, module, "tcp", tcp_functions);
  sm_lio_add_table(L, module, "unix", unix_functions);
}
