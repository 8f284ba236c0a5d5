/*
** The runtime as an Erlang node, on the IO thread (see dist.h).
**
** A connection's life: made by a handshake on the pool (ei_accept_tmo for a node that calls us,
** ei_connect_tmo for one we call), then adopted by a libuv TCP handle (uv_tcp_open) that reads
** packets and writes them in order; its end (the peer closed, a read or write failed, the IO
** thread stops) closes the handle and forgets the node. Packets for a node whose handshake is
** under way wait in its connection, and are dropped if the handshake fails.
**
** epmd: publishing keeps a descriptor to it open (closing that descriptor unregisters the name);
** when none runs, `epmd -daemon` is started, as `erl` does, and asked again.
*/
#define _GNU_SOURCE
#include "dist.h"

#include "util/etf.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static _Atomic int identity_up; /* release by the IO thread after the fields; acquire by readers */
static char identity_name[DIST_NAME_MAX + 1];
static size_t identity_len;
static uint32_t identity_creation;

int sm_dist_identity(const char **name, size_t *len, uint32_t *creation)
{
  if (!atomic_load_explicit(&identity_up, memory_order_acquire))
    return 0;
  *name = identity_name;
  *len = identity_len;
  *creation = identity_creation;
  return 1;
}

#ifndef SMARM_HAVE_EI

int sm_dist_available(void) { return 0; }

static void dist_on_loop(io_req_t *req, void *loop)
{
  (void)loop;
  dist_req_t *r = (dist_req_t *)req;
  snprintf(r->error, sizeof r->error, "this smarm was built without erl_interface (Debian: "
                                       "erlang-dev)");
  io_finish(req, -ENOTSUP);
}

static void dist_free(io_req_t *req)
{
  dist_req_t *r = (dist_req_t *)req;
  free(r->packet);
  free(r->names);
}

dist_req_t *sm_dist_req_new(enum dist_op op)
{
  dist_req_t *r = (dist_req_t *)sm_io_req_new_loop(sizeof *r, dist_on_loop, NULL, dist_free);
  if (r)
    r->op = op;
  return r;
}

#else

#include <arpa/inet.h>
#include <ei.h>
#include <limits.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#define HANDSHAKE_MS 5000
/* Erlang drops a connection it has heard nothing on for net_ticktime (60 s by default, four
** of its ticks): a quarter of that is how often we make sure it hears something. */
#define TICK_MS 15000

typedef struct out {
  struct out *next;
  char *data;
  size_t len;
} out_t;

typedef struct conn {
  uv_tcp_t h;
  struct conn *next;
  char peer[DIST_NAME_MAX + 1];
  int up;                /* the handle is open and the handshake done */
  out_t *pending, **pending_tail; /* packets waiting for the handshake */
  dist_req_t *waiters;   /* connect requests waiting for it (linked by base.next) */
  smarm_pid_t *watchers; /* who monitors the node: one entry per monitor */
  size_t nwatchers, watchers_cap;
  int written;           /* something was written since the last tick */
  char *out;             /* packets queued since the last flush (flush_all), in order */
  size_t out_len, out_cap;
  char *rbuf;
  size_t rlen, rcap;
} conn_t;

/* A handshake on the pool: accepting (conn NULL) or connecting. */
typedef struct job {
  uv_work_t w;
  ei_cnode ec;         /* the node's, copied for this handshake: jobs share nothing */
  int fd;              /* the result: the connection's descriptor, or -1 */
  char peer[DIST_NAME_MAX + 1];
  char error[DIST_NAME_MAX + 160];
} job_t;

static struct {
  int started;
  ei_cnode ec;
  int listen_fd, epmd_fd;
  uv_poll_t listen_poll;
  uv_timer_t ticker;   /* every TICK_MS: a tick to each connection that heard nothing from us */
  uv_check_t flusher;  /* after each turn of the loop: what each connection queued, one write */
  int accepting;       /* an accept job is on the pool */
  int stopping;        /* the stop closes the connections: no nodedown for an ending run */
  int starting;        /* a start job is on the pool: it alone writes node.ec and the fds */
  conn_t *conns;
  uv_loop_t *loop;
} node = {.listen_fd = -1, .epmd_fd = -1};

/* Handshakes run on the pool at the same time (one accepting, one per node called), each with
** its own copy of node.ec, so one peer that stays silent holds up only its own handshake (for
** HANDSHAKE_MS at most) and, for an accept, the next accept. */
static pthread_once_t ei_once = PTHREAD_ONCE_INIT;
static void ei_start(void) { ei_init(); }

int sm_dist_available(void) { return 1; }


/* ---- Connections ---------------------------------------------------------------------------- */

static conn_t *conn_find(const char *peer)
{
  for (conn_t *c = node.conns; c; c = c->next)
    if (strcmp(c->peer, peer) == 0)
      return c;
  return NULL;
}

static conn_t *conn_new(const char *peer)
{
  conn_t *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  c->pending_tail = &c->pending;
  c->next = node.conns;
  node.conns = c;
  return c;
}

static void conn_unlink(conn_t *c)
{
  for (conn_t **p = &node.conns; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      return;
    }
}

static void drop_pending(conn_t *c)
{
  while (c->pending) {
    out_t *o = c->pending;
    c->pending = o->next;
    free(o->data);
    free(o);
  }
  c->pending_tail = &c->pending;
}

/* Ends the connect requests waiting for c with err (0: connected). */
static void finish_waiters(conn_t *c, int err, const char *error)
{
  while (c->waiters) {
    dist_req_t *r = c->waiters;
    c->waiters = (dist_req_t *)r->base.next;
    r->base.next = NULL;
    if (error)
      snprintf(r->error, sizeof r->error, "%s", error);
    io_finish(&r->base, err);
  }
}

/* The connection is gone: each monitor of its node gets its nodedown and ends. */
static void conn_gone(conn_t *c)
{
  for (size_t i = 0; i < c->nwatchers && !node.stopping; i++) {
    size_t n = strlen(c->peer);
    smarm_msg_t *m = sm_io_event_new(IO_EV_DIST, IO_EV_CLOSED, 0, 0, n);
    if (!m)
      continue; /* out of memory: this nodedown is lost */
    memcpy((char *)smarm_msg_data(m) + sizeof(io_event_t), c->peer, n);
    if (smarm_send_outside(c->watchers[i], m) < 0)
      smarm_msg_free(m);
  }
  free(c->watchers);
  c->watchers = NULL;
  c->nwatchers = c->watchers_cap = 0;
}

static void on_conn_closed(uv_handle_t *h)
{
  conn_t *c = h->data;
  free(c->rbuf);
  free(c->out);
  free(c);
}

static void conn_close(conn_t *c)
{
  conn_unlink(c);
  conn_gone(c);
  drop_pending(c);
  finish_waiters(c, -ECONNRESET, "the connection closed");
  if (c->up)
    uv_close((uv_handle_t *)&c->h, on_conn_closed);
  else
    free(c);
}

typedef struct write_job {
  uv_write_t w;
  char *data;
} write_job_t;

static void on_written(uv_write_t *w, int status)
{
  write_job_t *j = (write_job_t *)w;
  conn_t *c = w->handle->data;
  free(j->data);
  free(j);
  if (status < 0 && status != UV_ECANCELED && c->up && !uv_is_closing((uv_handle_t *)&c->h))
    conn_close(c);
}

/* Queues the packet for the connection's next write (takes data). Every write goes this way, so
** that the packets of one turn of the loop (a burst of sends drained at once) leave in one write
** call, in the order queued. */
static void conn_write(conn_t *c, char *data, size_t len)
{
  if (sm_io_buf_reserve(&c->out, &c->out_cap, c->out_len, len) == 0) {
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    c->written = 1;
  } /* else out of memory: this packet is lost, as a send to a node that went away is */
  free(data);
}

/* The flusher: each connection's queued packets, one uv_write. */
static void flush_all(uv_check_t *h)
{
  (void)h;
  for (conn_t *c = node.conns; c; c = c->next) {
    if (!c->up || c->out_len == 0)
      continue;
    write_job_t *j = malloc(sizeof *j);
    if (!j)
      return; /* out of memory: the next turn tries again */
    j->data = c->out;
    uv_buf_t b = uv_buf_init(c->out, (unsigned)c->out_len);
    c->out = NULL;
    c->out_len = c->out_cap = 0;
    if (uv_write(&j->w, (uv_stream_t *)&c->h, &b, 1, on_written) < 0) {
      free(j->data);
      free(j);
    }
  }
}

/* Sends msg (the external format, version byte first) to the actor `to`, as an IO event. */
static void deliver(smarm_pid_t to, const char *msg, size_t len)
{
  if (!to)
    return;
  smarm_msg_t *m = sm_io_event_new(IO_EV_DIST, IO_EV_DATA, 0, 0, len);
  if (!m)
    return; /* out of memory: lost, as a message to a node that went away is */
  memcpy((char *)smarm_msg_data(m) + sizeof(io_event_t), msg, len);
  if (smarm_send_outside(to, m) < 0)
    smarm_msg_free(m);
}

/* The smarm pid an Erlang pid of this node names, or 0 (another node, another incarnation). */
static smarm_pid_t local_pid(const erlang_pid *p)
{
  if (strcmp(p->node, identity_name) != 0 || p->creation != identity_creation)
    return 0;
  return (smarm_pid_t)p->serial << 32 | p->num;
}

/* net_kernel's {'$gen_call', {From, Tag}, {is_auth, Node}} (net_adm:ping) gets {Tag, yes}, as
** from an Erlang node, unless an actor holds the name net_kernel. The tag is copied as it came
** (a ref, or since OTP 24 [alias | Ref]). */
static void answer_ping(conn_t *c, const char *msg)
{
  int at = 0, version, arity, tag_at, tag_end;
  char atom[MAXATOMLEN_UTF8];
  erlang_pid from;
  if (ei_decode_version(msg, &at, &version) < 0 || ei_decode_tuple_header(msg, &at, &arity) < 0 ||
      arity != 3 || ei_decode_atom(msg, &at, atom) < 0 || strcmp(atom, "$gen_call") != 0 ||
      ei_decode_tuple_header(msg, &at, &arity) < 0 || arity != 2 ||
      ei_decode_pid(msg, &at, &from) < 0)
    return;
  tag_at = at;
  if (ei_skip_term(msg, &at) < 0)
    return;
  tag_end = at;
  if (ei_decode_tuple_header(msg, &at, &arity) < 0 || arity != 2 ||
      ei_decode_atom(msg, &at, atom) < 0 || strcmp(atom, "is_auth") != 0)
    return;
  ei_x_buff ctrl;
  if (ei_x_new_with_version(&ctrl) < 0)
    return;
  static const char yes[] = {119, 3, 'y', 'e', 's'}; /* SMALL_ATOM_UTF8 yes */
  size_t tag_len = (size_t)(tag_end - tag_at);
  if (ei_x_encode_tuple_header(&ctrl, 3) == 0 && ei_x_encode_long(&ctrl, DIST_OP_SEND) == 0 &&
      ei_x_encode_atom(&ctrl, "") == 0 && ei_x_encode_pid(&ctrl, &from) == 0) {
    size_t len = 1 + (size_t)ctrl.index + 3 + tag_len + sizeof yes;
    char *data = malloc(4 + len);
    if (data) {
      char *o = data;
      *o++ = (char)(len >> 24);
      *o++ = (char)(len >> 16);
      *o++ = (char)(len >> 8);
      *o++ = (char)len;
      *o++ = (char)DIST_PASS_THROUGH;
      memcpy(o, ctrl.buff, (size_t)ctrl.index);
      o += ctrl.index;
      *o++ = (char)131; /* {Tag, yes} */
      *o++ = 104;
      *o++ = 2;
      memcpy(o, msg + tag_at, tag_len);
      o += tag_len;
      memcpy(o, yes, sizeof yes);
      conn_write(c, data, 4 + len);
    }
  }
  ei_x_free(&ctrl);
}

/* One packet (without its length) from c: passes a message on to its actor; other control
** messages (links, monitors) are not handled yet and are dropped. The control term and the
** message are walked whole (sm_etf_skip: every length within the packet, nesting bounded)
** before erl_interface's decoders, which trust every length they read, see a byte of them; a
** packet that fails the walk is dropped. */
static void on_packet(conn_t *c, const char *p, size_t n)
{
  const unsigned char *u = (const unsigned char *)p;
  etf_error_t bad;
  if (n < 3 || n > INT_MAX || u[0] != DIST_PASS_THROUGH || u[1] != ETF_VERSION)
    return;
  size_t ctrl_end = sm_etf_skip(u, n, 2, 0, &bad);
  if (!ctrl_end)
    return;
  const char *msg = p + ctrl_end;
  size_t msg_len = n - ctrl_end;
  if (msg_len < 2 || u[ctrl_end] != ETF_VERSION ||
      sm_etf_skip(u + ctrl_end, msg_len, 1, 0, &bad) != msg_len)
    return; /* every message we take has one term after the control */
  int at = 1, version, arity;
  long op;
  if (ei_decode_version(p, &at, &version) < 0 || ei_decode_tuple_header(p, &at, &arity) < 0 ||
      arity < 1 || ei_decode_long(p, &at, &op) < 0)
    return;
  erlang_pid to;
  char name[MAXATOMLEN_UTF8];
  smarm_pid_t pid = 0;
  switch (op) {
  case DIST_OP_SEND: case DIST_OP_SEND_TT: case DIST_OP_SEND_SENDER: case DIST_OP_SEND_SENDER_TT:
    if (arity < 3 || ei_skip_term(p, &at) < 0 || ei_decode_pid(p, &at, &to) < 0)
      return;
    pid = local_pid(&to);
    break;
  case DIST_OP_REG_SEND: case DIST_OP_REG_SEND_TT: /* the name in UTF-8, as register keeps it */
    if (arity < 4 || ei_skip_term(p, &at) < 0 || ei_skip_term(p, &at) < 0 ||
        ei_decode_atom_as(p, &at, name, sizeof name, ERLANG_UTF8, NULL, NULL) < 0)
      return;
    pid = smarm_whereis_outside(name);
    if (!pid && strcmp(name, "net_kernel") == 0)
      answer_ping(c, msg);
    break;
  default:
    return;
  }
  deliver(pid, msg, msg_len);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
  conn_t *c = h->data;
  (void)suggested;
  if (sm_io_buf_reserve(&c->rbuf, &c->rcap, c->rlen, 65536) < 0) {
    *buf = uv_buf_init(NULL, 0); /* libuv then reports UV_ENOBUFS */
    return;
  }
  *buf = uv_buf_init(c->rbuf + c->rlen, (unsigned)(c->rcap - c->rlen));
}

static const char tick[4] = {0, 0, 0, 0};

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
  conn_t *c = s->data;
  (void)buf;
  if (nread < 0) {
    conn_close(c);
    return;
  }
  c->rlen += (size_t)nread;
  size_t used = 0;
  while (c->rlen - used >= 4) {
    size_t n = sm_etf_be32((unsigned char *)c->rbuf + used);
    if (n == 0) { /* a tick: answered, so the peer hears from us */
      char *t = malloc(4);
      if (t) {
        memcpy(t, tick, 4);
        conn_write(c, t, 4);
      }
      used += 4;
      continue;
    }
    if (c->rlen - used - 4 < n)
      break;
    on_packet(c, c->rbuf + used + 4, n);
    used += 4 + n;
  }
  memmove(c->rbuf, c->rbuf + used, c->rlen - used);
  c->rlen -= used;
}

/* The handshake of c is done on fd: c reads and writes from now on. */
static int conn_adopt(conn_t *c, int fd)
{
  int rc = uv_tcp_init(node.loop, &c->h);
  if (rc < 0) {
    close(fd);
    return rc;
  }
  c->h.data = c;
  c->up = 1; /* the handle exists: conn_close closes it */
  if ((rc = uv_tcp_open(&c->h, fd)) < 0) {
    close(fd);
    return rc;
  }
  uv_read_start((uv_stream_t *)&c->h, on_alloc, on_read);
  while (c->pending) {
    out_t *o = c->pending;
    c->pending = o->next;
    conn_write(c, o->data, o->len);
    free(o);
  }
  c->pending_tail = &c->pending;
  finish_waiters(c, 0, NULL);
  return 0;
}

/* ---- Handshakes on the pool ----------------------------------------------------------------- */

/* ei makes its sockets without close-on-exec: every program started after (smarm.process,
** io.popen, epmd) would inherit them, and keep epmd's registration and the connections open
** after we close ours. */
static int cloexec(int fd)
{
  if (fd >= 0)
    fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

static void accept_work(uv_work_t *w)
{
  job_t *j = (job_t *)w;
  ErlConnect who;
  j->fd = cloexec(ei_accept_tmo(&j->ec, node.listen_fd, &who, HANDSHAKE_MS));
  if (j->fd >= 0)
    snprintf(j->peer, sizeof j->peer, "%.*s", DIST_NAME_MAX, who.nodename);
}

static void on_listen_ready(uv_poll_t *p, int status, int events);

static void after_accept(uv_work_t *w, int status)
{
  job_t *j = (job_t *)w;
  node.accepting = 0;
  if (!node.started) { /* stopped meanwhile: the listening descriptor is ours to close */
    if (j->fd >= 0)
      close(j->fd);
    if (node.listen_fd >= 0)
      close(node.listen_fd);
    node.listen_fd = -1;
    free(j);
    return;
  }
  if (status == 0 && j->fd >= 0) {
    /* a node that calls us while we hold a connection to it has let that one go (it restarted,
    ** or dropped it: net_adm:ping does after a pang): the new one replaces it */
    conn_t *c = conn_find(j->peer);
    if (c && c->up) {
      conn_close(c);
      c = NULL;
    }
    if (!c)
      c = conn_new(j->peer);
    if (!c)
      close(j->fd);
    else if (conn_adopt(c, j->fd) < 0)
      conn_close(c);
  }
  free(j);
  uv_poll_start(&node.listen_poll, UV_READABLE, on_listen_ready);
}

static void on_listen_ready(uv_poll_t *p, int status, int events)
{
  (void)events;
  if (status < 0 || node.accepting)
    return;
  job_t *j = calloc(1, sizeof *j);
  if (!j)
    return; /* out of memory: the next readiness tries again */
  j->ec = node.ec;
  node.accepting = 1;
  uv_poll_stop(p); /* until this one is accepted */
  if (uv_queue_work(node.loop, &j->w, accept_work, after_accept) < 0) {
    node.accepting = 0;
    free(j);
    uv_poll_start(p, UV_READABLE, on_listen_ready);
  }
}

static void connect_work(uv_work_t *w)
{
  job_t *j = (job_t *)w;
  j->fd = cloexec(ei_connect_tmo(&j->ec, j->peer, HANDSHAKE_MS));
  int why = erl_errno;
  if (j->fd < 0)
    snprintf(j->error, sizeof j->error, "cannot connect to %s (%s)", j->peer,
             why == EHOSTUNREACH ? "no such node, or epmd does not know it"
             : why == ETIMEDOUT  ? "timed out"
                                 : "refused: is the cookie the same?");
}

static void after_connect(uv_work_t *w, int status)
{
  job_t *j = (job_t *)w;
  /* by name: the connection may have closed meanwhile (the stop, a peer that called us and
  ** went), or be up already (the peer called us at the same time: that one stays) */
  conn_t *c = node.started && status == 0 ? conn_find(j->peer) : NULL;
  if (!c || c->up) {
    if (j->fd >= 0)
      close(j->fd);
  } else if (j->fd < 0) {
    conn_unlink(c);
    conn_gone(c);
    drop_pending(c);
    finish_waiters(c, -ECONNREFUSED, j->error);
    free(c);
  } else if (conn_adopt(c, j->fd) < 0) {
    conn_close(c);
  }
  free(j);
}

/* The connection to peer: the one there is, or a new one whose handshake starts now. */
static conn_t *conn_get(const char *peer)
{
  conn_t *c = conn_find(peer);
  if (c)
    return c;
  job_t *j = calloc(1, sizeof *j);
  if (!j || !(c = conn_new(peer))) {
    free(j);
    return NULL;
  }
  j->ec = node.ec;
  snprintf(j->peer, sizeof j->peer, "%s", peer);
  if (uv_queue_work(node.loop, &j->w, connect_work, after_connect) < 0) {
    conn_unlink(c);
    free(c);
    free(j);
    return NULL;
  }
  return c;
}

/* ---- Starting ------------------------------------------------------------------------------- */

typedef struct start_job {
  uv_work_t w;
  dist_req_t *req;
  int err;
} start_job_t;

/* Runs `epmd -daemon` and waits for it to detach. */
static void start_epmd(void)
{
  char *argv[] = {"epmd", "-daemon", NULL};
  pid_t pid;
  extern char **environ;
  if (posix_spawnp(&pid, "epmd", NULL, NULL, argv, environ) == 0) {
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
      ;
  }
}

static void start_work(uv_work_t *w)
{
  start_job_t *j = (start_job_t *)w;
  dist_req_t *r = j->req;
  char alive[DIST_NAME_MAX + 1], host[DIST_NAME_MAX + 1];
  const char *at = strchr(r->node, '@');
  struct in_addr addr;
  if (!at || at == r->node || !at[1]) {
    snprintf(r->error, sizeof r->error, "a node name is alive@host, not '%s'", r->node);
    j->err = -EINVAL;
    return;
  }
  if (inet_pton(AF_INET, r->listen_ip, &addr) != 1) {
    snprintf(r->error, sizeof r->error, "cannot listen on '%s' (an IPv4 address)", r->listen_ip);
    j->err = -EINVAL;
    return;
  }
  snprintf(alive, sizeof alive, "%.*s", (int)(at - r->node), r->node);
  snprintf(host, sizeof host, "%s", at + 1);
  pthread_once(&ei_once, ei_start);
  j->err = -EIO;
  if (ei_connect_xinit(&node.ec, host, alive, r->node, (Erl_IpAddr)&addr, r->cookie, 0) < 0) {
    snprintf(r->error, sizeof r->error, "erl_interface refused the name or cookie");
  } else {
    int port = 0;
    node.listen_fd = cloexec(ei_xlisten(&node.ec, (Erl_IpAddr)&addr, &port, 16));
    if (node.listen_fd < 0) {
      snprintf(r->error, sizeof r->error, "cannot listen on %s: %s", r->listen_ip,
               strerror(errno));
    } else {
      node.epmd_fd = cloexec(ei_publish_tmo(&node.ec, port, HANDSHAKE_MS));
      if (node.epmd_fd < 0) { /* no epmd: start one, as erl does, and ask again */
        start_epmd();
        for (int i = 0; i < 50 && node.epmd_fd < 0; i++) {
          usleep(20000);
          node.epmd_fd = cloexec(ei_publish_tmo(&node.ec, port, HANDSHAKE_MS));
        }
      }
      if (node.epmd_fd < 0) {
        snprintf(r->error, sizeof r->error,
                 "epmd refused the name %s (taken by another node?)", r->node);
        close(node.listen_fd);
        node.listen_fd = -1;
      } else {
        j->err = 0;
      }
    }
  }
}

static void on_tick(uv_timer_t *t)
{
  (void)t;
  for (conn_t *c = node.conns; c; c = c->next) {
    if (c->up && !c->written) {
      char *data = malloc(4);
      if (data) {
        memcpy(data, tick, 4);
        conn_write(c, data, 4);
      }
    }
    c->written = 0;
  }
}

static void after_start(uv_work_t *w, int status)
{
  start_job_t *j = (start_job_t *)w;
  dist_req_t *r = j->req;
  int err = status < 0 ? status : j->err;
  if (err == 0 && sm_io_interrupted()) /* the IO thread stops: stop_all found no node to close */
    err = -ECANCELED;                  /* and no new handle may keep its loop going */
  if (err == 0 && (err = uv_poll_init(node.loop, &node.listen_poll, node.listen_fd)) == 0) {
    uv_poll_start(&node.listen_poll, UV_READABLE, on_listen_ready);
    uv_timer_init(node.loop, &node.ticker);
    uv_timer_start(&node.ticker, on_tick, TICK_MS, TICK_MS);
    uv_check_init(node.loop, &node.flusher);
    uv_check_start(&node.flusher, flush_all);
    node.stopping = 0;
    snprintf(identity_name, sizeof identity_name, "%s", ei_thisnodename(&node.ec));
    identity_len = strlen(identity_name);
    identity_creation = node.ec.creation;
    node.started = 1;
    atomic_store_explicit(&identity_up, 1, memory_order_release); /* sm_dist_identity */
  } else {
    if (node.listen_fd >= 0)
      close(node.listen_fd);
    if (node.epmd_fd >= 0)
      close(node.epmd_fd);
    node.listen_fd = node.epmd_fd = -1;
  }
  node.starting = 0;
  free(j);
  io_finish(&r->base, err);
}

/* ---- Stopping (the IO thread's stop hook) --------------------------------------------------- */

static void stop_all(void *loop)
{
  (void)loop;
  if (!node.started)
    return;
  atomic_store_explicit(&identity_up, 0, memory_order_release);
  node.started = 0;
  node.stopping = 1;
  /* what this turn queued (sends drained in the same async callback as the stop) is handed to
  ** libuv before the handles close: uv_write tries the write at once */
  flush_all(&node.flusher);
  while (node.conns)
    conn_close(node.conns);
  uv_close((uv_handle_t *)&node.listen_poll, NULL);
  uv_close((uv_handle_t *)&node.ticker, NULL);
  uv_close((uv_handle_t *)&node.flusher, NULL);
  if (!node.accepting) { /* else after_accept closes it */
    close(node.listen_fd);
    node.listen_fd = -1;
  }
  close(node.epmd_fd); /* epmd forgets the name */
  node.epmd_fd = -1;
}

/* ---- Requests ------------------------------------------------------------------------------- */

static void dist_on_loop(io_req_t *req, void *loop)
{
  dist_req_t *r = (dist_req_t *)req;
  node.loop = loop;
  if (r->op == DIST_START) {
    if (node.started || node.starting) {
      if (node.started)
        snprintf(r->error, sizeof r->error, "this runtime is already the node %s", identity_name);
      else
        snprintf(r->error, sizeof r->error, "this runtime is becoming a node already");
      io_finish(req, -EALREADY);
      return;
    }
    start_job_t *j = calloc(1, sizeof *j);
    if (!j) {
      io_finish(req, -ENOMEM);
      return;
    }
    j->req = r;
    int rc = uv_queue_work(loop, &j->w, start_work, after_start);
    if (rc < 0) {
      free(j);
      io_finish(req, rc);
    } else {
      node.starting = 1;
    }
    return;
  }
  if (!node.started) {
    snprintf(r->error, sizeof r->error, "this runtime is not a node (smarm.node.start)");
    io_finish(req, -ENOTCONN);
    return;
  }
  switch (r->op) {
  case DIST_CONNECT: {
    conn_t *c = strcmp(r->node, identity_name) == 0 ? NULL : conn_get(r->node);
    if (!c) {
      snprintf(r->error, sizeof r->error, "cannot connect to %s", r->node);
      io_finish(req, -ENOMEM);
    } else if (c->up) {
      io_finish(req, 0);
    } else {
      r->base.next = (io_req_t *)c->waiters;
      c->waiters = r;
    }
    return;
  }
  case DIST_SEND: {
    conn_t *c = strcmp(r->node, identity_name) == 0 ? NULL : conn_get(r->node);
    if (c && c->up) {
      conn_write(c, r->packet, r->packet_len);
      r->packet = NULL;
    } else if (c) {
      out_t *o = malloc(sizeof *o);
      if (o) {
        o->data = r->packet;
        o->len = r->packet_len;
        o->next = NULL;
        *c->pending_tail = o;
        c->pending_tail = &o->next;
        r->packet = NULL;
      }
    }
    io_finish(req, 0);
    return;
  }
  case DIST_MONITOR: {
    if (strcmp(r->node, identity_name) == 0) { /* this node: never down while it runs */
      io_finish(req, 0);
      return;
    }
    conn_t *c = r->on ? conn_get(r->node) : conn_find(r->node);
    if (!c) {
      io_finish(req, r->on ? -ENOMEM : 0);
      return;
    }
    if (!r->on) { /* one fewer: the last of this watcher's */
      for (size_t i = c->nwatchers; i-- > 0;)
        if (c->watchers[i] == r->watcher) {
          c->watchers[i] = c->watchers[--c->nwatchers];
          break;
        }
      io_finish(req, 0);
      return;
    }
    if (c->nwatchers == c->watchers_cap) {
      size_t cap = c->watchers_cap ? c->watchers_cap * 2 : 4;
      smarm_pid_t *w = realloc(c->watchers, cap * sizeof *w);
      if (!w) {
        io_finish(req, -ENOMEM);
        return;
      }
      c->watchers = w;
      c->watchers_cap = cap;
    }
    c->watchers[c->nwatchers++] = r->watcher;
    io_finish(req, 0);
    return;
  }
  case DIST_NODES: {
    size_t n = 0;
    for (conn_t *c = node.conns; c; c = c->next)
      if (c->up)
        n += strlen(c->peer) + 1;
    r->names = malloc(n ? n : 1);
    if (!r->names) {
      io_finish(req, -ENOMEM);
      return;
    }
    for (conn_t *c = node.conns; c; c = c->next)
      if (c->up) {
        size_t k = strlen(c->peer) + 1;
        memcpy(r->names + r->names_len, c->peer, k);
        r->names_len += k;
      }
    io_finish(req, 0);
    return;
  }
  default:
    io_finish(req, -EINVAL);
  }
}

static void dist_free(io_req_t *req)
{
  dist_req_t *r = (dist_req_t *)req;
  free(r->packet);
  free(r->names);
}

static pthread_once_t registered = PTHREAD_ONCE_INIT;
static void register_stop(void) { sm_io_on_stop(stop_all); }

dist_req_t *sm_dist_req_new(enum dist_op op)
{
  pthread_once(&registered, register_stop);
  dist_req_t *r = (dist_req_t *)sm_io_req_new_loop(sizeof *r, dist_on_loop, NULL, dist_free);
  if (r)
    r->op = op;
  return r;
}

#endif
