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
#include "handshake.h"

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

smarm_pid_t sm_dist_alias_pin(const char *pid, size_t n)
{
  (void)pid;
  (void)n;
  return 0;
}

void sm_dist_alias_unpin(smarm_pid_t alias) { (void)alias; }

void sm_dist_signal(const smarm_signal_t *sig, const char *reason, size_t len)
{
  (void)sig;
  (void)reason;
  (void)len;
}

#else

#include <arpa/inet.h>
#include <ei.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#define HANDSHAKE_MS 5000
/* Erlang drops a connection it has heard nothing on for net_ticktime (60 s by default, four
** of its ticks): a quarter of that is how often we make sure it hears something. */
#define TICK_MS 15000

/* ---- Remote pids (dist.h) ------------------------------------------------------------------
** A remote pid is SMARM_PID_SCHED_REMOTE, a slot of this table and the slot's generation. Entries
** are found by the pid's bytes (a hash of them) when an actor links to or monitors a pid of
** another node, and when the other node's control messages name one. Any thread, under `lock`;
** the IO thread counts in `refs` the ties it keeps, the others pin. */
#define ALIAS_BUCKETS 1024
#define ALIAS_GEN_MASK ((1u << SMARM_PID_GEN_BITS) - 1)
#define ALIAS_SLOTS_MAX (1u << SMARM_PID_SLOT_BITS)
/* NEW_PID: tag, node atom, ID, serial, creation; or {Name, Node} (a monitor by name): two atoms */
#define PID_BYTES_MAX (2 + 2 * (3 + DIST_NAME_MAX))
/* {Name, Node}: the tuple's 2 bytes, a name atom's 3 and a node atom's 2 (it has at most 255). */
_Static_assert(2 + 3 + 2 + DIST_MONITOR_NAME_NODE_MAX <= PID_BYTES_MAX, "a monitor by name fits");

typedef struct alias {
  uint32_t gen;  /* of the remote pid this slot stands for now (or stood for last) */
  uint32_t refs; /* ties and pins; 0: free */
  uint32_t next; /* the next in its bucket, or in the free list: slot + 1 (0: none) */
  size_t n;
  char pid[PID_BYTES_MAX]; /* its node: pid_node */
} alias_t;

static struct {
  pthread_mutex_t lock;
  alias_t *slots;
  uint32_t used, cap, free_head;
  uint32_t buckets[ALIAS_BUCKETS];
} aliases = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint32_t alias_hash(const char *p, size_t n)
{
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)p[i]) * 16777619u;
  return h % ALIAS_BUCKETS;
}

static smarm_pid_t alias_pid(uint32_t slot)
{
  return (smarm_pid_t)SMARM_PID_SCHED_REMOTE << (SMARM_PID_SLOT_BITS + SMARM_PID_GEN_BITS) |
         (smarm_pid_t)slot << SMARM_PID_GEN_BITS | aliases.slots[slot].gen;
}

/* The live entry of alias, or NULL (lock held). */
static alias_t *alias_at(smarm_pid_t alias)
{
  uint32_t slot = smarm_pid_slot(alias);
  if (!smarm_pid_is_remote(alias) || slot >= aliases.used)
    return NULL;
  alias_t *a = &aliases.slots[slot];
  return a->refs && a->gen == smarm_pid_gen(alias) ? a : NULL;
}

/* The node of the pid whose bytes are p[0..n), or of the registered name {Name, Node} (two
** atoms: a monitor by name), into node; 0 when it is neither, or names this node. */
static int pid_node(const char *p, size_t n, char node[DIST_NAME_MAX + 1])
{
  const unsigned char *u = (const unsigned char *)p;
  const char *s;
  size_t len, at = 1;
  int latin1;
  etf_error_t bad;
  if (n < 1 || n > PID_BYTES_MAX || sm_etf_skip(u, n, 0, 1, &bad) != n)
    return 0;
  if (u[0] == ETF_SMALL_TUPLE && n > 2 && u[1] == 2) /* {Name, Node}: Node after Name */
    at = sm_etf_atom(u, n, 2, &s, &len, &latin1, &bad);
  else if (u[0] != ETF_NEW_PID && u[0] != ETF_PID)
    return 0;
  if (!at || !sm_etf_atom(u, n, at, &s, &len, &latin1, &bad) || len > DIST_NAME_MAX)
    return 0;
  for (size_t i = 0; latin1 && i < len; i++)
    if ((unsigned char)s[i] >= 0x80)
      return 0; /* a Latin-1 node name beyond ASCII: no node this one talks to */
  memcpy(node, s, len);
  node[len] = '\0';
  return strcmp(node, identity_name) != 0;
}

/* Finds or makes the remote pid of those bytes and adds a ref (lock held); 0: out of room. */
static smarm_pid_t alias_ref_bytes(const char *p, size_t n)
{
  uint32_t b = alias_hash(p, n);
  for (uint32_t i = aliases.buckets[b]; i; i = aliases.slots[i - 1].next) {
    alias_t *a = &aliases.slots[i - 1];
    if (a->n == n && memcmp(a->pid, p, n) == 0) {
      a->refs++;
      return alias_pid(i - 1);
    }
  }
  uint32_t slot;
  if (aliases.free_head) {
    slot = aliases.free_head - 1;
    aliases.free_head = aliases.slots[slot].next;
  } else {
    if (aliases.used == aliases.cap) {
      uint32_t cap = aliases.cap ? aliases.cap * 2 : 64;
      alias_t *more = cap <= ALIAS_SLOTS_MAX ? realloc(aliases.slots, cap * sizeof *more) : NULL;
      if (!more)
        return 0;
      aliases.slots = more;
      aliases.cap = cap;
    }
    slot = aliases.used++;
    aliases.slots[slot].gen = 0;
  }
  alias_t *a = &aliases.slots[slot];
  a->gen = (a->gen + 1) & ALIAS_GEN_MASK;
  if (a->gen == 0) /* gen 0 is no pid */
    a->gen = 1;
  a->refs = 1;
  a->n = n;
  memcpy(a->pid, p, n);
  a->next = aliases.buckets[b];
  aliases.buckets[b] = slot + 1;
  return alias_pid(slot);
}

/* Drops a ref of alias (lock held); the last one frees its slot. */
static void alias_unref_locked(smarm_pid_t alias)
{
  alias_t *a = alias_at(alias);
  if (!a || --a->refs)
    return;
  uint32_t slot = smarm_pid_slot(alias);
  for (uint32_t *at = &aliases.buckets[alias_hash(a->pid, a->n)]; *at;
       at = &aliases.slots[*at - 1].next)
    if (*at == slot + 1) {
      *at = a->next;
      break;
    }
  a->next = aliases.free_head;
  aliases.free_head = slot + 1;
}

smarm_pid_t sm_dist_alias_pin(const char *pid, size_t n)
{
  char nodename[DIST_NAME_MAX + 1];
  if (!atomic_load_explicit(&identity_up, memory_order_acquire) || !pid_node(pid, n, nodename))
    return 0;
  pthread_mutex_lock(&aliases.lock);
  smarm_pid_t alias = alias_ref_bytes(pid, n);
  pthread_mutex_unlock(&aliases.lock);
  return alias;
}

void sm_dist_alias_unpin(smarm_pid_t alias)
{
  if (!smarm_pid_is_remote(alias))
    return; /* a pid of ours: nothing pinned */
  pthread_mutex_lock(&aliases.lock);
  alias_unref_locked(alias);
  pthread_mutex_unlock(&aliases.lock);
}

/* Copies what alias stands for: its bytes; 0 when it names nobody now. */
static int alias_copy(smarm_pid_t alias, char pid[PID_BYTES_MAX], size_t *n)
{
  pthread_mutex_lock(&aliases.lock);
  alias_t *a = alias_at(alias);
  if (a) {
    memcpy(pid, a->pid, a->n);
    *n = a->n;
  }
  pthread_mutex_unlock(&aliases.lock);
  return a != NULL;
}

/* One more ref of a remote pid: 1, or 0 when it names nobody now. */
static int alias_repin(smarm_pid_t alias)
{
  pthread_mutex_lock(&aliases.lock);
  alias_t *a = alias_at(alias);
  if (a)
    a->refs++;
  pthread_mutex_unlock(&aliases.lock);
  return a != NULL;
}

/* ---- Ties: links and monitors across the connection (IO thread) -----------------------------
** Each connection keeps the links and monitors between our actors and its node's processes,
** each holding a ref of its remote pid, so that when the connection ends every one of them ends
** with noconnection; the actors keep their own halves (faults.c). */
enum tie_kind {
  TIE_LINK,     /* local and alias are linked */
  TIE_WATCHING, /* local monitors alias, by our ref */
  TIE_WATCHED   /* alias monitors local, by the peer's ref (its bytes) */
};

typedef struct tie {
  int kind;
  smarm_pid_t local, alias;
  smarm_ref_t ref;
  char *rref; /* WATCHED: the peer's ref, in the external format without the version byte */
  size_t rref_len;
  char *name; /* WATCHED by name: the atom the peer named local by (its bytes), which its
                 MONITOR_P_EXIT must give back: Erlang's DOWN then says {Name, Node} */
  size_t name_len;
} tie_t;

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
  struct tie *ties;      /* links and monitors between our actors and the peer's processes */
  struct job *connecting; /* the connect job that made it, until that job ends */
  size_t nties, ties_cap;
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
  hs_self_t self;      /* the node's, copied for this handshake: jobs share nothing */
  int simultaneous;    /* connecting: the peer is connecting to us (sm_hs_connect) */
  conn_t *conn;        /* connecting: the connection it made; NULL once that one is gone (a
                          later one to the same peer is not this job's to fail) */
  int fd;              /* the result: the connection's descriptor, or -1 */
  char peer[DIST_NAME_MAX + 1];
  char error[DIST_NAME_MAX + 160];
} job_t;

static struct {
  int started;
  ei_cnode ec;         /* for epmd (the publish) */
  hs_self_t self;      /* for handshakes */
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


/* The index of the tie like t in c, or -1 (rref compared for WATCHED, ref for WATCHING). */
static ptrdiff_t tie_find(const conn_t *c, const tie_t *t)
{
  for (size_t i = 0; i < c->nties; i++) {
    const tie_t *u = &c->ties[i];
    if (u->kind != t->kind || u->local != t->local || u->alias != t->alias)
      continue;
    if ((t->kind == TIE_WATCHING && u->ref != t->ref) ||
        (t->kind == TIE_WATCHED &&
         (u->rref_len != t->rref_len || memcmp(u->rref, t->rref, t->rref_len) != 0)))
      continue;
    return (ptrdiff_t)i;
  }
  return -1;
}

/* Keeps t in c (its alias gains a ref, its rref is copied). 0 or -ENOMEM. */
static int tie_add(conn_t *c, const tie_t *t)
{
  if (c->nties == c->ties_cap) {
    size_t cap = c->ties_cap ? c->ties_cap * 2 : 8;
    tie_t *more = realloc(c->ties, cap * sizeof *more);
    if (!more)
      return -ENOMEM;
    c->ties = more;
    c->ties_cap = cap;
  }
  tie_t u = *t;
  u.rref = u.name = NULL;
  if ((t->rref_len && !(u.rref = malloc(t->rref_len))) ||
      (t->name_len && !(u.name = malloc(t->name_len)))) {
    free(u.rref);
    return -ENOMEM;
  }
  if (t->rref_len)
    memcpy(u.rref, t->rref, t->rref_len);
  if (t->name_len)
    memcpy(u.name, t->name, t->name_len);
  if (!alias_repin(t->alias)) { /* cannot happen: the caller holds a ref */
    free(u.rref);
    free(u.name);
    return -EINVAL;
  }
  c->ties[c->nties++] = u;
  return 0;
}

static void tie_drop(conn_t *c, size_t i)
{
  tie_t t = c->ties[i];
  c->ties[i] = c->ties[--c->nties];
  free(t.rref);
  free(t.name);
  sm_dist_alias_unpin(t.alias);
}

/* Hands our actor `local` a signal from the remote pid alias (whose bytes go with it): 0, or
** smarm_signal_outside's error (out of memory, a pid of no scheduler of ours). */
static int signal_in(int kind, smarm_pid_t local, smarm_pid_t alias, smarm_ref_t ref, int code,
                      const char *reason, size_t reason_len)
{
  char pid[PID_BYTES_MAX];
  size_t n = 0;
  /* the signal's own ref of its remote pid, until the core says SMARM_SIG_HANDLED: the records
  ** it changes hold that pid until then (so an unlink in between still finds the link) */
  if (!alias_repin(alias) || !alias_copy(alias, pid, &n)) {
    sm_dist_alias_unpin(alias);
    return -EINVAL;
  }
  smarm_signal_t sig = {kind, alias, local, ref, code, reason, reason_len};
  int rc = smarm_signal_outside(&sig, pid, n);
  if (rc < 0)
    sm_dist_alias_unpin(alias);
  return rc;
}

/* The connection has ended: every tie ends, our side hearing noconnection. */
static void ties_gone(conn_t *c)
{
  while (c->nties) {
    tie_t *t = &c->ties[c->nties - 1];
    if (!node.stopping && t->kind == TIE_LINK)
      signal_in(SMARM_SIG_EXIT_LINK, t->local, t->alias, 0, SMARM_EXIT_NOCONNECTION, NULL, 0);
    else if (!node.stopping && t->kind == TIE_WATCHING)
      signal_in(SMARM_SIG_DOWN, t->local, t->alias, t->ref, SMARM_EXIT_NOCONNECTION, NULL, 0);
    tie_drop(c, c->nties - 1);
  }
  free(c->ties);
  c->ties = NULL;
  c->ties_cap = 0;
}

static conn_t *conn_get(const char *peer);

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
  ties_gone(c);
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
  if (c->connecting)
    c->connecting->conn = NULL;
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

/* A whole packet for c: written now, or kept until the handshake is done (takes data). */
static void conn_send(conn_t *c, char *data, size_t len)
{
  if (c->up) {
    conn_write(c, data, len);
    return;
  }
  out_t *o = malloc(sizeof *o);
  if (!o) {
    free(data); /* out of memory: lost, as a send to a node that went away is */
    return;
  }
  o->data = data;
  o->len = len;
  o->next = NULL;
  *c->pending_tail = o;
  c->pending_tail = &o->next;
}

/* Sends the control term in x (version byte first), with no message, to c. */
static void send_control(conn_t *c, const ei_x_buff *x)
{
  size_t len = 1 + (size_t)x->index;
  char *data = malloc(4 + len);
  if (!data)
    return;
  unsigned char *o = (unsigned char *)data;
  o[0] = (unsigned char)(len >> 24);
  o[1] = (unsigned char)(len >> 16);
  o[2] = (unsigned char)(len >> 8);
  o[3] = (unsigned char)len;
  o[4] = DIST_PASS_THROUGH;
  memcpy(data + 5, x->buff, (size_t)x->index);
  conn_send(c, data, 4 + len);
}

static int x_local_pid(ei_x_buff *x, smarm_pid_t pid)
{
  erlang_pid p = {{0}, (unsigned)(uint32_t)pid, (unsigned)(pid >> 32), identity_creation};
  snprintf(p.node, sizeof p.node, "%s", identity_name);
  return ei_x_encode_pid(x, &p);
}

static int x_local_ref(ei_x_buff *x, smarm_ref_t ref)
{
  erlang_ref r = {{0}, 3, {(unsigned)(uint32_t)ref, (unsigned)(ref >> 32), 0}, identity_creation};
  snprintf(r.node, sizeof r.node, "%s", identity_name);
  return ei_x_encode_ref(x, &r);
}

/* Reasons with a code, as Erlang names them (and back). */
static const char *const code_atoms[] = {
  [SMARM_EXIT_NORMAL] = "normal",   [SMARM_EXIT_KILL] = "kill",
  [SMARM_EXIT_KILLED] = "killed",   [SMARM_EXIT_NOPROC] = "noproc",
  [SMARM_EXIT_MAILBOX_OVERFLOW] = "mailbox_overflow", [SMARM_EXIT_NOMEM] = "nomem",
  [SMARM_EXIT_NOCONNECTION] = "noconnection",
};
#define NCODE_ATOMS (sizeof code_atoms / sizeof code_atoms[0])

/* The reason: its term (version byte first), or the atom of its code; a reason with no term
** (a Lua value Erlang has none for) goes as the atom undefined. */
static int x_reason(ei_x_buff *x, int code, const char *term, size_t len)
{
  if (term && len > 1)
    return ei_x_append_buf(x, term + 1, (int)(len - 1));
  const char *name = code >= 0 && (size_t)code < NCODE_ATOMS && code_atoms[code]
                         ? code_atoms[code] : "undefined";
  return ei_x_encode_atom(x, name);
}

/* One control message: {op, [Id,] First, Remote [, Ref] [, Reason]}: First our pid, or a pid or
** name as the peer gave it; Remote the remote pid's bytes; the ref ours or the peer's bytes. */
typedef struct ctrl {
  long op;
  int has_id;
  uint64_t id;                     /* UNLINK_ID and its ack: right after the op */
  smarm_pid_t local;               /* First: our pid... */
  const char *first;               /* ...or these bytes, when set */
  size_t first_len;
  const char *remote;
  size_t remote_len;
  int has_ref;
  smarm_ref_t ref;                 /* ours, when rref is NULL */
  const char *rref;                /* the peer's ref (bytes) */
  size_t rref_len;
  int has_reason;
  int code;
  const char *term;                /* the reason's term, version byte first, or NULL */
  size_t term_len;
} ctrl_t;

static void send_ctrl(conn_t *c, const ctrl_t *k)
{
  ei_x_buff x;
  if (ei_x_new_with_version(&x) < 0)
    return;
  int arity = 3 + (k->has_id != 0) + (k->has_ref != 0) + (k->has_reason != 0);
  /* in the tuple's order: each call appends */
  int rc = ei_x_encode_tuple_header(&x, arity);
  if (rc == 0)
    rc = ei_x_encode_long(&x, k->op);
  if (rc == 0 && k->has_id)
    rc = ei_x_encode_ulonglong(&x, k->id);
  if (rc == 0)
    rc = k->first ? ei_x_append_buf(&x, k->first, (int)k->first_len) : x_local_pid(&x, k->local);
  if (rc == 0)
    rc = ei_x_append_buf(&x, k->remote, (int)k->remote_len);
  if (rc == 0 && k->has_ref)
    rc = k->rref ? ei_x_append_buf(&x, k->rref, (int)k->rref_len) : x_local_ref(&x, k->ref);
  if (rc == 0 && k->has_reason)
    rc = x_reason(&x, k->code, k->term, k->term_len);
  if (rc == 0)
    send_control(c, &x);
  ei_x_free(&x);
}

/* The remote hook's signal, on the IO thread (DIST_SIGNAL): our actor sig->from acts on the
** remote pid sig->to, whose ref the hook pinned. */
static void on_signal(dist_req_t *r)
{
  const smarm_signal_t *g = &r->sig;
  ctrl_t k = {0};
  k.local = g->from;
  k.code = g->reason;
  k.term = r->packet;
  k.term_len = r->packet_len;
  if (g->kind == SMARM_SIG_WATCHED_DOWN) { /* {21, FromProc, ToPid, Ref, Reason} */
    char pid[PID_BYTES_MAX];
    k.op = DIST_OP_MONITOR_P_EXIT;
    k.has_ref = k.has_reason = 1;
    for (conn_t *c = node.conns; c; c = c->next)
      for (size_t i = c->nties; i-- > 0;) {
        tie_t *t = &c->ties[i];
        if (t->kind != TIE_WATCHED || t->local != g->from)
          continue;
        if (alias_copy(t->alias, pid, &k.remote_len)) {
          k.remote = pid;
          k.rref = t->rref;
          k.rref_len = t->rref_len;
          k.first = t->name; /* by name: the name as the peer gave it, else our pid */
          k.first_len = t->name_len;
          send_ctrl(c, &k);
        }
        tie_drop(c, i);
      }
    return;
  }
  char pid[PID_BYTES_MAX], nodename[DIST_NAME_MAX + 1];
  if (!alias_copy(g->to, pid, &k.remote_len) || !pid_node(pid, k.remote_len, nodename))
    return; /* its ties ended meanwhile: it names nobody */
  k.remote = pid;
  if ((unsigned char)pid[0] == ETF_SMALL_TUPLE) { /* {Name, Node}: monitors name Name there */
    etf_error_t bad;
    if (g->kind != SMARM_SIG_MONITOR && g->kind != SMARM_SIG_DEMONITOR)
      return; /* the Lua layer links and signals pids only */
    k.remote = pid + 2;
    k.remote_len = sm_etf_skip((const unsigned char *)pid, k.remote_len, 2, 1, &bad) - 2;
  }
  tie_t t = {TIE_LINK, g->from, g->to, g->ref, NULL, 0, NULL, 0};
  /* a link, a monitor or exit/2 connects (as in Erlang); an unlink, a demonitor or our end
  ** needs no connection that is gone: its ties ended with it */
  int connects = g->kind == SMARM_SIG_LINK || g->kind == SMARM_SIG_MONITOR ||
                 g->kind == SMARM_SIG_EXIT;
  conn_t *c = connects ? conn_get(nodename) : conn_find(nodename);
  if (!c && !connects)
    return;
  if (!c) {
    if (g->kind == SMARM_SIG_LINK)
      signal_in(SMARM_SIG_EXIT_LINK, g->from, g->to, 0, SMARM_EXIT_NOCONNECTION, NULL, 0);
    else if (g->kind == SMARM_SIG_MONITOR)
      signal_in(SMARM_SIG_DOWN, g->from, g->to, g->ref, SMARM_EXIT_NOCONNECTION, NULL, 0);
    return;
  }
  ptrdiff_t i;
  switch (g->kind) {
  case SMARM_SIG_LINK:
    if (tie_find(c, &t) < 0 && tie_add(c, &t) < 0) {
      signal_in(SMARM_SIG_EXIT_LINK, g->from, g->to, 0, SMARM_EXIT_NOMEM, NULL, 0);
      return;
    }
    k.op = DIST_OP_LINK;
    break;
  case SMARM_SIG_UNLINK: { /* {35, Id, From, To} (handshake.c: we link with unlink ids); the
                            ** ack that comes back says nothing we need */
    static uint64_t unlink_id;
    if ((i = tie_find(c, &t)) >= 0)
      tie_drop(c, (size_t)i);
    k.op = DIST_OP_UNLINK_ID;
    k.has_id = 1;
    k.id = ++unlink_id;
    break;
  }
  case SMARM_SIG_EXIT_LINK: /* our actor ended: the link's other end hears, if it still is one */
    if ((i = tie_find(c, &t)) < 0)
      return;
    tie_drop(c, (size_t)i);
    k.op = DIST_OP_EXIT;
    k.has_reason = 1;
    break;
  case SMARM_SIG_EXIT:
    k.op = DIST_OP_EXIT2;
    k.has_reason = 1;
    break;
  case SMARM_SIG_MONITOR:
    t.kind = TIE_WATCHING;
    if (tie_add(c, &t) < 0) {
      signal_in(SMARM_SIG_DOWN, g->from, g->to, g->ref, SMARM_EXIT_NOMEM, NULL, 0);
      return;
    }
    k.op = DIST_OP_MONITOR_P;
    k.has_ref = 1;
    k.ref = g->ref;
    break;
  case SMARM_SIG_DEMONITOR:
    t.kind = TIE_WATCHING;
    if ((i = tie_find(c, &t)) < 0)
      return;
    tie_drop(c, (size_t)i);
    k.op = DIST_OP_DEMONITOR_P;
    k.has_ref = 1;
    k.ref = g->ref;
    break;
  default:
    return;
  }
  send_ctrl(c, &k);
}

/* A pid term at p[*at]: its bytes' start and length, *at moved past it; 0 if it is none. */
static int take_pid(const char *p, int end, int *at, const char **s, size_t *n)
{
  if (*at >= end)
    return 0;
  unsigned char tag = (unsigned char)p[*at];
  int start = *at;
  if ((tag != ETF_NEW_PID && tag != ETF_PID) || ei_skip_term(p, at) < 0)
    return 0;
  *s = p + start;
  *n = (size_t)(*at - start);
  return 1;
}

/* Our actor a pid term names (0: another node's, or an earlier incarnation's). */
static smarm_pid_t local_of(const char *s)
{
  int at = 0;
  erlang_pid pid;
  return ei_decode_pid(s, &at, &pid) == 0 ? local_pid(&pid) : 0;
}

/* The reason term at p[at..end): its code, or SMARM_EXIT_TERM with its bytes copied (version
** byte first) into *term (malloc'd; NULL out of memory: the code is then SMARM_EXIT_NOMEM). */
static int reason_in(const char *p, int at, int end, char **term, size_t *len)
{
  char atom[MAXATOMLEN_UTF8];
  int a = at;
  *term = NULL;
  *len = 0;
  if (ei_decode_atom(p, &a, atom) == 0)
    for (size_t c = 0; c < NCODE_ATOMS; c++)
      if (code_atoms[c] && strcmp(atom, code_atoms[c]) == 0)
        return (int)c;
  *len = 1 + (size_t)(end - at);
  if (!(*term = malloc(*len))) {
    *len = 0;
    return SMARM_EXIT_NOMEM;
  }
  (*term)[0] = (char)ETF_VERSION;
  memcpy(*term + 1, p + at, *len - 1);
  return SMARM_EXIT_TERM;
}

/* A control message with no message after it (links, exits, monitors), whole in p[0..n); `at`
** is past its op. */
static void on_control(conn_t *c, const char *p, int at, int n, long op, int arity)
{
  const char *from = NULL, *to = NULL;
  size_t from_len = 0, to_len = 0;
  unsigned long long id = 0;
  if (op == DIST_OP_MONITOR_P || op == DIST_OP_DEMONITOR_P) { /* {op, From, ToProc, Ref} */
    if (arity != 4 || !take_pid(p, n, &at, &from, &from_len))
      return;
    int to_at = at;
    char name[MAXATOMLEN_UTF8];
    smarm_pid_t local = 0;
    int by_name = 0;
    if (ei_decode_atom_as(p, &to_at, name, sizeof name, ERLANG_UTF8, NULL, NULL) == 0) {
      by_name = 1;
      if (op == DIST_OP_MONITOR_P && !(local = smarm_whereis_outside(name)) &&
          strcmp(name, "net_kernel") == 0)
        return; /* answered by this node itself (answer_ping), which never ends while it runs */
    } else if (take_pid(p, n, &to_at, &to, &to_len)) {
      local = local_of(to);
    } else {
      return;
    }
    int ref_at = to_at;
    if (ei_skip_term(p, &to_at) < 0 || to_at != n)
      return;
    smarm_pid_t alias = sm_dist_alias_pin(from, from_len);
    if (!alias)
      return;
    tie_t t = {TIE_WATCHED, local, alias, 0, (char *)p + ref_at, (size_t)(n - ref_at),
               by_name ? (char *)p + at : NULL, by_name ? (size_t)(ref_at - at) : 0};
    int tied = 0;
    if (op == DIST_OP_DEMONITOR_P) { /* by its ref: a name may have changed hands since */
      for (size_t i = 0; i < c->nties; i++) {
        tie_t *u = &c->ties[i];
        if (u->kind == TIE_WATCHED && u->alias == alias && u->rref_len == t.rref_len &&
            memcmp(u->rref, t.rref, t.rref_len) == 0) {
          tie_drop(c, i);
          break;
        }
      }
    } else if (local && tie_add(c, &t) == 0) {
      smarm_signal_t sig = {SMARM_SIG_WATCH, 0, local, 0, SMARM_EXIT_NORMAL, NULL, 0};
      tied = 1;
      if (smarm_signal_outside(&sig, NULL, 0) < 0) { /* a pid of no scheduler of ours */
        ptrdiff_t i = tie_find(c, &t);
        if (i >= 0)
          tie_drop(c, (size_t)i);
        local = 0;
        tied = 0;
      }
    }
    if (op == DIST_OP_MONITOR_P && !tied) { /* {21, FromProc, ToPid, Ref, Reason}: nomem, or
                                            ** noproc with FromProc as it asked (name or pid) */
      ctrl_t k = {.op = DIST_OP_MONITOR_P_EXIT, .local = local, .remote = from,
                  .remote_len = from_len, .has_ref = 1, .rref = t.rref, .rref_len = t.rref_len,
                  .has_reason = 1, .code = local ? SMARM_EXIT_NOMEM : SMARM_EXIT_NOPROC};
      if (!local) {
        k.first = p + at;
        k.first_len = (size_t)(ref_at - at);
      }
      send_ctrl(c, &k);
    }
    sm_dist_alias_unpin(alias);
    return;
  }
  /* the others: {op, From, To, ...} (UNLINK_ID: after its id), MONITOR_P_EXIT's From a name or
  ** a pid; each read only in a tuple of its arity (the walk checked the term's lengths) */
  int want = op == DIST_OP_LINK || op == DIST_OP_UNLINK ? 3
             : op == DIST_OP_UNLINK_ID || op == DIST_OP_EXIT || op == DIST_OP_EXIT2 ? 4
             : op == DIST_OP_EXIT_TT || op == DIST_OP_EXIT2_TT || op == DIST_OP_MONITOR_P_EXIT ? 5
                                                                                             : 0;
  if (arity != want)
    return; /* an op this node does not take (UNLINK_ID_ACK...), or a malformed one */
  if (op == DIST_OP_UNLINK_ID && ei_decode_ulonglong(p, &at, &id) < 0)
    return;
  if (op == DIST_OP_MONITOR_P_EXIT ? ei_skip_term(p, &at) < 0
                                   : !take_pid(p, n, &at, &from, &from_len))
    return;
  if (!take_pid(p, n, &at, &to, &to_len))
    return;
  smarm_pid_t local = local_of(to);
  smarm_ref_t ref = 0;
  if (op == DIST_OP_MONITOR_P_EXIT) { /* {21, FromProc, ToPid, Ref, Reason}: our monitor's ref */
    erlang_ref r;
    if (ei_decode_ref(p, &at, &r) < 0 || strcmp(r.node, identity_name) != 0 || r.len < 2)
      return;
    ref = (smarm_ref_t)r.n[1] << 32 | r.n[0];
  } else if (op == DIST_OP_EXIT_TT || op == DIST_OP_EXIT2_TT) {
    if (ei_skip_term(p, &at) < 0) /* the trace token */
      return;
  }
  int reason_at = at;
  if ((op == DIST_OP_LINK || op == DIST_OP_UNLINK || op == DIST_OP_UNLINK_ID)
          ? at != n
          : ei_skip_term(p, &at) < 0 || at != n)
    return;
  if (op == DIST_OP_UNLINK_ID) { /* acknowledged at once: {36, Id, From, To}, we being From */
    ctrl_t k = {.op = DIST_OP_UNLINK_ID_ACK, .has_id = 1, .id = id, .first = to,
                .first_len = to_len, .remote = from, .remote_len = from_len};
    send_ctrl(c, &k);
  }
  if (op == DIST_OP_MONITOR_P_EXIT) {
    for (size_t i = 0; i < c->nties; i++) {
      tie_t *t = &c->ties[i];
      if (t->kind == TIE_WATCHING && t->ref == ref && t->local == local) {
        char *term;
        size_t len;
        int code = reason_in(p, reason_at, n, &term, &len);
        signal_in(SMARM_SIG_DOWN, local, t->alias, ref, code, term, len);
        free(term);
        tie_drop(c, i);
        return;
      }
    }
    return;
  }
  smarm_pid_t alias = sm_dist_alias_pin(from, from_len);
  if (!alias)
    return;
  tie_t t = {TIE_LINK, local, alias, 0, NULL, 0, NULL, 0};
  ptrdiff_t i = tie_find(c, &t);
  switch (op) {
  case DIST_OP_LINK: {
    if (local && (i >= 0 || tie_add(c, &t) == 0) &&
        signal_in(SMARM_SIG_LINK, local, alias, 0, SMARM_EXIT_NORMAL, NULL, 0) == 0)
      break;
    /* an actor of an earlier run, none, or a pid of no scheduler of ours: the link fails at
    ** once, {3, To, From, noproc} (To as it came) */
    if ((i = tie_find(c, &t)) >= 0)
      tie_drop(c, (size_t)i);
    ctrl_t k = {.op = DIST_OP_EXIT, .first = to, .first_len = to_len, .remote = from,
                .remote_len = from_len, .has_reason = 1, .code = SMARM_EXIT_NOPROC};
    send_ctrl(c, &k);
    break;
  }
  case DIST_OP_UNLINK:
  case DIST_OP_UNLINK_ID:
    if (i >= 0) {
      tie_drop(c, (size_t)i);
      signal_in(SMARM_SIG_UNLINK, local, alias, 0, SMARM_EXIT_NORMAL, NULL, 0);
    }
    break;
  case DIST_OP_EXIT:
  case DIST_OP_EXIT_TT:
  case DIST_OP_EXIT2:
  case DIST_OP_EXIT2_TT: {
    int link = op == DIST_OP_EXIT || op == DIST_OP_EXIT_TT;
    if (!local || (link && i < 0))
      break; /* no such link (unlinked meanwhile): dropped */
    char *term;
    size_t len;
    int code = reason_in(p, reason_at, n, &term, &len);
    /* exit(Pid, kill) comes as kill: untrappable, as smarm.kill's is (faults.c) */
    signal_in(link ? SMARM_SIG_EXIT_LINK : SMARM_SIG_EXIT, local, alias, 0, code, term, len);
    free(term);
    if (link)
      tie_drop(c, (size_t)i);
    break;
  }
  default:
    break;
  }
  sm_dist_alias_unpin(alias);
}

/* One packet (without its length) from c: passes a message on to its actor, a control message
** alone (links, exits, monitors) to on_control. The control term and the
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
  int at = 1, version, arity;
  long op;
  if (ei_decode_version(p, &at, &version) < 0 || ei_decode_tuple_header(p, &at, &arity) < 0 ||
      arity < 1 || ei_decode_long(p, &at, &op) < 0)
    return;
  if (ctrl_end == n) { /* a control message alone */
    on_control(c, p, at, (int)n, op, arity);
    return;
  }
  const char *msg = p + ctrl_end;
  size_t msg_len = n - ctrl_end;
  if (msg_len < 2 || u[ctrl_end] != ETF_VERSION ||
      sm_etf_skip(u + ctrl_end, msg_len, 1, 0, &bad) != msg_len)
    return; /* every message we take has one term after the control */
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
  struct pollfd p = {node.listen_fd, POLLIN, 0};
  j->fd = poll(&p, 1, HANDSHAKE_MS) == 1
              ? accept4(node.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK) : -1;
  if (j->fd >= 0 &&
      sm_hs_accept(j->fd, &j->self, HANDSHAKE_MS, j->peer, j->error, sizeof j->error) < 0) {
    close(j->fd);
    j->fd = -1;
  }
  int flags = j->fd >= 0 ? fcntl(j->fd, F_GETFL) : -1;
  if (flags >= 0)
    fcntl(j->fd, F_SETFL, flags & ~O_NONBLOCK);
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
  j->self = node.self;
  node.accepting = 1;
  uv_poll_stop(p); /* until this one is accepted */
  if (uv_queue_work(node.loop, &j->w, accept_work, after_accept) < 0) {
    node.accepting = 0;
    free(j);
    uv_poll_start(p, UV_READABLE, on_listen_ready);
  }
}

/* The peer's own connection to us should come within this after it answered "nok". */
#define SIMULTANEOUS_WAIT_US 500000

static void connect_work(uv_work_t *w)
{
  job_t *j = (job_t *)w;
  j->fd = sm_hs_connect(j->peer, &j->self, HANDSHAKE_MS, j->error, sizeof j->error,
                        &j->simultaneous);
  /* its connection is on the way: after_connect finds it up, or fails; a stop cuts the wait
  ** short (the pool's interrupt, io.h) */
  for (int waited = 0; j->simultaneous && waited < SIMULTANEOUS_WAIT_US && !sm_io_interrupted();
       waited += 10000)
    usleep(10000);
}

static void after_connect(uv_work_t *w, int status)
{
  job_t *j = (job_t *)w;
  /* the connection it made: gone meanwhile (the stop, a peer that called us and went: NULL), or
  ** up already (the peer called us at the same time: that one stays) */
  conn_t *c = j->conn;
  if (c)
    c->connecting = NULL;
  if (!node.started || status != 0)
    c = NULL;
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
  j->self = node.self;
  snprintf(j->peer, sizeof j->peer, "%s", peer);
  if (uv_queue_work(node.loop, &j->w, connect_work, after_connect) < 0) {
    conn_unlink(c);
    free(c);
    free(j);
    return NULL;
  }
  j->conn = c;
  c->connecting = j;
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
  snprintf(node.self.cookie, sizeof node.self.cookie, "%s", r->cookie);
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
    snprintf(node.self.name, sizeof node.self.name, "%s", identity_name);
    node.self.creation = identity_creation;
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
    if (r->op == DIST_SIGNAL && r->sig.kind != SMARM_SIG_WATCHED_DOWN)
      sm_dist_alias_unpin(r->sig.to); /* the hook's pin */
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
    if (c) {
      conn_send(c, r->packet, r->packet_len);
      r->packet = NULL;
    }
    io_finish(req, 0);
    return;
  }
  case DIST_SIGNAL:
    on_signal(r);
    if (r->sig.kind != SMARM_SIG_WATCHED_DOWN)
      sm_dist_alias_unpin(r->sig.to); /* the hook's pin */
    io_finish(req, 0);
    return;
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

void sm_dist_signal(const smarm_signal_t *sig, const char *reason, size_t len)
{
  if (sig->kind != SMARM_SIG_WATCHED_DOWN && !alias_repin(sig->to))
    return; /* its ties ended: it names nobody now (else it lives until the IO thread's turn) */
  dist_req_t *r = sm_dist_req_new(DIST_SIGNAL);
  if (r && reason && (r->packet = malloc(len)))
    memcpy(r->packet, reason, len);
  if (r && (!reason || r->packet)) {
    r->packet_len = reason ? len : 0;
    r->sig = *sig;
    r->sig.data = NULL;
    r->sig.size = 0;
    if (sm_io_post(&r->base) < 0 && sig->kind != SMARM_SIG_WATCHED_DOWN)
      sm_dist_alias_unpin(sig->to); /* no IO thread: the run is ending */
    return;
  }
  if (r)
    sm_io_req_release(&r->base);
  if (sig->kind != SMARM_SIG_WATCHED_DOWN) /* out of memory: lost, as on a lost connection */
    sm_dist_alias_unpin(sig->to);
}

dist_req_t *sm_dist_req_new(enum dist_op op)
{
  pthread_once(&registered, register_stop);
  dist_req_t *r = (dist_req_t *)sm_io_req_new_loop(sizeof *r, dist_on_loop, NULL, dist_free);
  if (r)
    r->op = op;
  return r;
}

#endif
