/*
** Stream sockets, TCP and Unix, on the IO thread (see tcp.h). Everything here runs on the IO
** thread, in the loop's callbacks; the only entry points from other threads are the requests,
** which reach us through io.c's queue.
*/
#define _GNU_SOURCE
#include "tcp.h"

#include "dns.h"
#include "ids.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#define READ_CHUNK (64 * 1024)
#define READ_HIGH (256 * 1024) /* unclaimed bytes at which a connection stops reading */

typedef struct sock {
  union {
    uv_tcp_t tcp;
    uv_pipe_t pipe; /* a Unix domain socket */
    uv_stream_t stream;
    uv_handle_t handle;
  } h;
  uint64_t id;
  int listener, closing;
  struct write *writes; /* libuv's writes in flight, newest first (IOTCP_SEND) */
  /* closed with writes still queued: they go out first (sock_close_after_writes) */
  uv_shutdown_t flush;
  struct sock *flush_next, **flush_prev; /* on the lingering list while it waits */
  uint64_t linger_until;                 /* uv_now's ms: then it closes all the same */
  size_t linger_queued;                  /* the write queue's size at the last look */
  int flushed, drained;                  /* its writes have gone, the peer's end has come */
  /* a Unix listener bound to a path: the path, unlinked at close if it is still this socket's */
  char *path;
  dev_t dev;
  ino_t ino;
  /* a connection: unclaimed bytes are buf[start, len) */
  char *buf;
  size_t start, len, cap;
  int eof, rerr, reading;
  int active;                 /* IOTCP_PASSIVE, IOTCP_ACTIVE_ONCE or IOTCP_ACTIVE_ON (tcp.h) */
  smarm_pid_t owner;          /* who gets the messages of an active socket */
  size_t unacked;             /* IOTCP_ACTIVE_ON: data bytes sent as messages, unacknowledged */
  tcp_req_t *receive;         /* the receive waiting for bytes, or NULL */
  /* a listener */
  tcp_req_t *accept;          /* the accept waiting for a connection, or NULL */
  int conn_ready;             /* libuv holds a connection for uv_accept */
  int lerr;                   /* a listening error, reported to the next accept */
} sock_t;

static io_ids_t ids; /* the sockets' ids (ids.h) */

/* A send's write in flight. It owns the bytes (taken from the request), so that the request
** can be answered before libuv is done with them: a close answers every send still waiting
** ("closed") while their bytes still go out (sock_close_after_writes). */
typedef struct write {
  uv_write_t uv;
  tcp_req_t *req; /* NULL once answered */
  char *data;
  struct write *next, **prev; /* on its socket's list */
} write_t;

/* ---- Requests ------------------------------------------------------------------------------ */

static void post_close_id(uint64_t id);

/* Runs on the thread that lets go of the last reference: the caller's, or the IO thread's when
** the caller was killed before the request completed. A socket that a listen, connect or accept
** made for a caller that never took it (killed between the completion and its resumption) is
** closed here, so that its peer sees the end instead of a connection open to nobody. */
static void tcp_free(io_req_t *req)
{
  tcp_req_t *r = (tcp_req_t *)req;
  int makes = r->op == IOTCP_LISTEN || r->op == IOTCP_CONNECT || r->op == IOTCP_ACCEPT ||
              r->op == IOTCP_LISTEN_UNIX || r->op == IOTCP_CONNECT_UNIX;
  if (makes && r->base.completed && r->base.err == 0 && r->new_id != 0 && !r->new_taken)
    post_close_id(r->new_id);
  free(r->host);
  free(r->data);
}

void sm_tcp_post_close(uint64_t id) { post_close_id(id); }

static void post_close_id(uint64_t id)
{
  tcp_req_t *c = sm_tcp_req_new(IOTCP_CLOSE);
  if (c) { /* out of memory: the socket stays open until the IO thread stops */
    c->id = id;
    sm_io_post(&c->base);
  }
}

static void finish(tcp_req_t *r, int err)
{
  io_finish(&r->base, err);
}

/* ---- Closing ------------------------------------------------------------------------------- */

static void on_closed(uv_handle_t *h)
{
  sock_t *s = h->data;
  free(s->buf);
  free(s->path);
  free(s);
}

/* A Unix listener's path goes with it, unless something else took the name since (a file
** removed and made again by someone else is left alone). */
static void unlink_path(sock_t *s)
{
  struct stat st;
  if (s->path && stat(s->path, &st) == 0 && st.st_dev == s->dev && st.st_ino == s->ino)
    unlink(s->path);
}

/* Everything of a close but the handle's: requests waiting on it end as closed, its id and its
** Unix path go, so nothing new reaches it. */
static void sock_detach(sock_t *s)
{
  s->closing = 1;
  if (s->receive) {
    tcp_req_t *r = s->receive;
    s->receive = NULL;
    finish(r, IOTCP_CLOSED);
  }
  if (s->accept) {
    tcp_req_t *r = s->accept;
    s->accept = NULL;
    finish(r, IOTCP_CLOSED);
  }
  sm_io_id_free(&ids, s->id);
  unlink_path(s);
}

static void sock_close(sock_t *s)
{
  if (s->closing)
    return;
  sock_detach(s);
  uv_close(&s->h.handle, on_closed); /* pending writes end with UV_ECANCELED */
}

/* A TCP socket, or a Unix one when unix_socket (not bound or connected yet). */
static sock_t *sock_new(uv_loop_t *loop, int listener, int unix_socket)
{
  sock_t *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  int rc = unix_socket ? uv_pipe_init(loop, &s->h.pipe, 0) : uv_tcp_init(loop, &s->h.tcp);
  if (rc != 0) {
    free(s);
    return NULL;
  }
  s->h.handle.data = s;
  s->listener = listener;
  s->id = sm_io_id_new(&ids, s);
  if (!s->id) {
    uv_close(&s->h.handle, on_closed);
    return NULL;
  }
  return s;
}

static int is_unix(const sock_t *s) { return s->h.handle.type == UV_NAMED_PIPE; }

/* ---- Reading ------------------------------------------------------------------------------- */

/* libuv reads every connection into this one buffer (the IO thread's alone: a read's bytes are
** dealt with before the next read), and a connection keeps only what nobody takes at once, in a
** buffer of its own that goes when it is empty: an idle connection holds no read buffer. */
static char scratch[READ_CHUNK];

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  (void)h;
  (void)hint;
  *buf = uv_buf_init(scratch, sizeof scratch);
}

/* A connection's own buffer goes when nothing is left in it. */
static void drop_empty_buffer(sock_t *s)
{
  if (s->start == s->len && s->buf != scratch) {
    free(s->buf);
    s->buf = NULL;
    s->start = s->len = s->cap = 0;
  }
}

/* Keeps n bytes just read (in scratch) after the unclaimed ones: 0, or -ENOMEM. */
static int keep_read(sock_t *s, size_t n)
{
  if (s->start > 0) { /* slide the unclaimed bytes down first */
    memmove(s->buf, s->buf + s->start, s->len - s->start);
    s->len -= s->start;
    s->start = 0;
  }
  if (sm_io_buf_reserve(&s->buf, &s->cap, s->len, n) < 0)
    return -ENOMEM;
  memcpy(s->buf + s->len, scratch, n);
  s->len += n;
  return 0;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

static void read_resume(sock_t *s)
{
  if (!s->reading && !s->eof && !s->rerr && !s->closing) {
    if (uv_read_start(&s->h.stream, on_alloc, on_read) == 0)
      s->reading = 1;
  }
}

static void read_pause(sock_t *s)
{
  if (s->reading) {
    uv_read_stop(&s->h.stream);
    s->reading = 0;
  }
}

/* ---- Closing with writes queued ------------------------------------------------------------ */

/* A socket closed while bytes it was asked to send are still queued, whose peer must not see a
** clean end of a stream cut short: a TCP peer gets a reset instead (SO_LINGER 0: the kernel's
** own send buffer is dropped too, so only when libuv still holds bytes). */
static void reset_if_queued(sock_t *s)
{
  uv_os_fd_t fd;
  struct linger hard = {1, 0};
  if (!is_unix(s) && !s->listener && uv_stream_get_write_queue_size(&s->h.stream) > 0 &&
      uv_fileno(&s->h.handle, &fd) == 0)
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
}

/* Sockets closed while their writes drain (sock_close_after_writes), and the timer that ends
** the wait of those that take too long. IO thread only. */
static sock_t *lingering;
static uv_timer_t linger_timer;
static int linger_timer_made;

#define LINGER_LIMIT_MS 10000 /* the longest a close waits without progress: for its writes to
                              ** move, then for the peer's end */

static void linger_end(sock_t *s)
{
  *s->flush_prev = s->flush_next;
  if (s->flush_next)
    s->flush_next->flush_prev = s->flush_prev;
  s->flush_prev = NULL;
  if (!uv_is_closing(&s->h.handle))
    uv_close(&s->h.handle, on_closed); /* a shutdown still waiting ends with UV_ECANCELED */
}

static void on_linger_tick(uv_timer_t *t)
{
  uint64_t now = uv_now(t->loop);
  for (sock_t *s = lingering, *next; s; s = next) {
    next = s->flush_next;
    size_t queued = s->flushed ? 0 : uv_stream_get_write_queue_size(&s->h.stream);
    if (queued < s->linger_queued) { /* the peer reads: a slow one is not a gone one */
      s->linger_queued = queued;
      s->linger_until = now + LINGER_LIMIT_MS;
    }
    if (now >= s->linger_until) {
      if (!s->flushed)
        reset_if_queued(s); /* its peer did not read what was left: it sees a reset */
      linger_end(s);
    }
  }
  if (!lingering)
    uv_timer_stop(t);
}

static void on_flushed(uv_shutdown_t *req, int status)
{
  sock_t *s = req->data;
  if (!s->flush_prev)
    return; /* ended already (the limit, or the IO thread's stop) */
  s->flushed = 1;
  s->linger_until = uv_now(req->handle->loop) + LINGER_LIMIT_MS; /* now for the peer's end */
  if (status < 0 || s->drained)
    linger_end(s); /* written and the peer's end came, or it cannot be written (peer gone) */
}

/* Reads while it lingers are thrown away: what matters is the peer's end. Closing with bytes
** unread makes Linux send a reset, and the peer may then lose what it had not read yet. */
static void on_drain(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
  (void)buf;
  sock_t *s = st->data;
  if (n >= 0)
    return;
  s->drained = 1;
  uv_read_stop(st);
  if (s->flushed)
    linger_end(s);
}

/* A close asked for (sock:close(), a __gc's, a socket in a message nobody took). What earlier
** sends queued still goes out, in order, as a send that timed out was promised ("it still goes
** out later, all of it"): a close dropped it before, and the peer read a clean end of a stream
** cut short. The socket lingers (Apache's lingering close): its sending side is shut down after
** the writes, what the peer sends is read and dropped until its end comes, then it closes; it
** gives up after LINGER_LIMIT_MS without progress (its queue not shrinking, then no end after
** the last write), and one whose bytes have not all gone is then reset. Waiting
** receives and accepts end as closed at once, and sends still waiting are answered "closed"
** (their bytes go out all the same). */
static void sock_close_after_writes(sock_t *s)
{
  if (s->closing)
    return;
  if (s->listener || uv_stream_get_write_queue_size(&s->h.stream) == 0) {
    sock_close(s);
    return;
  }
  sock_detach(s);
  for (write_t *w = s->writes; w; w = w->next) /* the senders waiting hear "closed" now */
    if (w->req) {
      finish(w->req, IOTCP_CLOSED);
      w->req = NULL;
    }
  uv_loop_t *loop = s->h.handle.loop;
  if (!linger_timer_made) {
    if (uv_timer_init(loop, &linger_timer) < 0) {
      sock_close(s);
      return;
    }
    linger_timer_made = 1;
  }
  s->flush.data = s;
  if (uv_shutdown(&s->flush, &s->h.stream, on_flushed) < 0) {
    reset_if_queued(s);
    uv_close(&s->h.handle, on_closed);
    return;
  }
  read_pause(s);
  s->drained = s->eof || s->rerr;
  if (!s->drained && uv_read_start(&s->h.stream, on_alloc, on_drain) < 0)
    s->drained = 1;
  s->linger_until = uv_now(loop) + LINGER_LIMIT_MS;
  s->linger_queued = uv_stream_get_write_queue_size(&s->h.stream);
  s->flush_next = lingering;
  s->flush_prev = &lingering;
  if (lingering)
    lingering->flush_prev = &s->flush_next;
  lingering = s;
  if (!uv_is_active((uv_handle_t *)&linger_timer))
    uv_timer_start(&linger_timer, on_linger_tick, 1000, 1000);
}

/* Meets receive r from the buffer if it can: returns 1 when r is finished (its err set). */
static int try_receive(sock_t *s, tcp_req_t *r)
{
  size_t avail = s->len - s->start;
  if (avail > 0) {
    size_t n = avail < r->want ? avail : r->want;
    r->data = malloc(n);
    r->base.err = r->data ? 0 : -ENOMEM;
    if (r->data) {
      memcpy(r->data, s->buf + s->start, n);
      r->len = n;
      s->start += n;
    }
    return 1;
  }
  if (!s->eof && !s->rerr)
    return 0;
  r->base.err = s->rerr ? s->rerr : IOTCP_CLOSED;
  return 1;
}

/* Puts n bytes back in front of the unclaimed ones (a socket handed over with bytes read ahead). */
static int unread(sock_t *s, const char *p, size_t n)
{
  size_t unclaimed = s->len - s->start;
  if (s->start < n) {
    size_t cap = s->cap;
    if (cap < n + unclaimed) {
      cap = n + unclaimed + READ_CHUNK;
      char *more = realloc(s->buf, cap);
      if (!more)
        return -ENOMEM;
      s->buf = more;
      s->cap = cap;
    }
    memmove(s->buf + n, s->buf + s->start, unclaimed);
    s->start = n;
    s->len = n + unclaimed;
  }
  s->start -= n;
  memcpy(s->buf + s->start, p, n);
  return 0;
}

/* Sends an active socket's owner one event (the payload's n bytes from p); 0 or -1 (out of
** memory: tried again at the next read, acknowledgement or re-arm). The owner's end is no
** failure: its scheduler drops what comes for a dead actor. */
static int send_event(sock_t *s, int kind, int err, const char *p, size_t n)
{
  smarm_msg_t *m = sm_io_event_new(is_unix(s) ? IO_EV_UNIX : IO_EV_TCP, kind, s->id, err, n);
  if (!m)
    return -1;
  if (n)
    memcpy((char *)smarm_msg_data(m) + sizeof(io_event_t), p, n);
  if (smarm_send_outside(s->owner, m) < 0)
    smarm_msg_free(m); /* no runtime any more: the socket is about to close */
  return 0;
}

/* An active socket hands its owner what the buffer holds, as far as its mode lets it (tcp.h). */
static void serve_active(sock_t *s)
{
  while (s->active != IOTCP_PASSIVE && !s->closing) {
    size_t avail = s->len - s->start;
    if (avail > 0) {
      if (s->active == IOTCP_ACTIVE_ON && s->unacked >= IOTCP_ACTIVE_HIGH)
        return;
      size_t n = avail < READ_CHUNK ? avail : READ_CHUNK;
      if (send_event(s, IO_EV_DATA, 0, s->buf + s->start, n) < 0)
        return;
      s->start += n;
      s->unacked += n;
    } else if (s->eof || s->rerr) {
      if (send_event(s, s->rerr ? IO_EV_ERROR : IO_EV_CLOSED, s->rerr, NULL, 0) < 0)
        return;
      s->active = IOTCP_PASSIVE; /* the end is told once; a receive still finds it */
      return;
    } else {
      return;
    }
    if (s->active == IOTCP_ACTIVE_ONCE)
      s->active = IOTCP_PASSIVE;
  }
}

/* Finishes the waiting receive if the buffer meets it now, or sends an active socket's messages;
** then reads on or pauses. */
static void serve_receive(sock_t *s)
{
  tcp_req_t *r = s->receive;
  if (r && try_receive(s, r)) {
    s->receive = NULL;
    sm_io_complete(&r->base);
  }
  serve_active(s);
  drop_empty_buffer(s);
  if (s->len - s->start >= READ_HIGH)
    read_pause(s);
  else
    read_resume(s);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
  (void)buf;
  sock_t *s = st->data;
  if (n > 0 && s->start == s->len) {
    /* Nothing kept: served straight from scratch (a waiting receive or an active socket takes
    ** it all, usually), and only what is left is copied into a buffer of the socket's own. */
    free(s->buf);
    s->buf = scratch;
    s->start = 0;
    s->len = s->cap = (size_t)n;
    serve_receive(s);
    size_t rest = s->len - s->start;
    char *own = rest ? malloc(rest) : NULL;
    if (own)
      memcpy(own, scratch + s->start, rest);
    s->buf = own;
    s->start = 0;
    s->len = s->cap = own ? rest : 0;
    if (rest && !own) { /* out of memory: the bytes are lost, which the reader is told */
      s->rerr = -ENOMEM;
      read_pause(s);
      serve_receive(s);
    }
    return;
  }
  if (n > 0) {
    if (keep_read(s, (size_t)n) < 0) {
      s->rerr = -ENOMEM;
      read_pause(s);
    }
  } else if (n == UV_EOF) {
    s->eof = 1;
    read_pause(s);
  } else if (n < 0) {
    s->rerr = (int)n;
    read_pause(s);
  }
  serve_receive(s);
}

/* ---- Listening and accepting --------------------------------------------------------------- */

static void accept_now(sock_t *l, tcp_req_t *r)
{
  sock_t *c = sock_new(l->h.handle.loop, 0, is_unix(l));
  if (!c) {
    finish(r, -ENOMEM);
    return;
  }
  int rc = uv_accept(&l->h.stream, &c->h.stream);
  l->conn_ready = 0;
  if (rc < 0) {
    sock_close(c);
    finish(r, rc);
    return;
  }
  read_resume(c);
  r->new_id = c->id;
  uv_fileno(&c->h.handle, &r->new_fd);
  finish(r, 0);
}

static void on_connection(uv_stream_t *server, int status)
{
  sock_t *l = server->data;
  if (status < 0)
    l->lerr = status;
  else
    l->conn_ready = 1; /* libuv stops listening until we accept it */
  tcp_req_t *r = l->accept;
  if (!r)
    return;
  l->accept = NULL;
  if (status < 0) {
    l->lerr = 0;
    finish(r, status);
  } else {
    accept_now(l, r);
  }
}

/* ---- Resolving, then listening or connecting ----------------------------------------------- */

typedef struct connecting {
  uv_getaddrinfo_t gai;
  uv_connect_t conn;
  tcp_req_t *req;              /* NULL once cancelled */
  sock_t *sock;                /* the socket of the attempt under way */
  struct addrinfo *res, *next; /* connect: the resolver's answers, and the next to try */
} connecting_t;

static void on_connect(uv_connect_t *cr, int status);

/* Starts a connect to the next answer that takes one; 0 when one is under way, else the last
** error (no answer left: ECONNREFUSED). */
static int connect_next(connecting_t *k, uv_loop_t *loop)
{
  int rc = UV_ECONNREFUSED;
  while (k->next) {
    struct addrinfo *a = k->next;
    k->next = a->ai_next;
    if (!(k->sock = sock_new(loop, 0, 0)))
      return -ENOMEM;
    k->conn.data = k;
    rc = uv_tcp_connect(&k->conn, &k->sock->h.tcp, a->ai_addr, on_connect);
    if (rc == 0)
      return 0;
    sock_close(k->sock);
    k->sock = NULL;
  }
  return rc;
}

static void connecting_free(connecting_t *k)
{
  uv_freeaddrinfo(k->res);
  free(k);
}

/* A connect attempt ended: done, or on to the next address (a name may have several, the first
** of them refusing: "localhost" as ::1 and 127.0.0.1). */
static void on_connect(uv_connect_t *cr, int status)
{
  connecting_t *k = cr->data;
  tcp_req_t *r = k->req;
  if (r && status < 0 && status != UV_ECANCELED && k->next) {
    uv_loop_t *loop = k->sock->h.handle.loop;
    sock_close(k->sock);
    k->sock = NULL;
    int rc = connect_next(k, loop);
    if (rc == 0)
      return;
    status = rc;
  }
  if (r)
    r->base.uv = NULL; /* before finish: the request may be freed by it */
  if (!r || status < 0) {
    if (k->sock)
      sock_close(k->sock);
    if (r)
      finish(r, status < 0 ? status : UV_ECANCELED);
  } else {
    read_resume(k->sock);
    r->new_id = k->sock->id;
    uv_fileno(&k->sock->h.handle, &r->new_fd);
    finish(r, 0);
  }
  connecting_free(k);
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
  connecting_t *k = g->data;
  k->res = res;
  tcp_req_t *r = k->req;
  if (!r) { /* cancelled while resolving */
    connecting_free(k);
    return;
  }
  int rc = status;
  if (rc == 0 && r->op == IOTCP_CONNECT) {
    k->next = res;
    if ((rc = connect_next(k, g->loop)) == 0)
      return; /* on_connect finishes */
  } else if (rc == 0) {
    sock_t *s = sock_new(g->loop, 1, 0);
    rc = s ? uv_tcp_bind(&s->h.tcp, res->ai_addr, 0) : -ENOMEM;
    if (rc == 0)
      rc = uv_listen(&s->h.stream, r->backlog, on_connection);
    if (rc == 0)
      r->new_id = s->id;
    else if (s)
      sock_close(s);
  }
  r->base.uv = NULL;
  connecting_free(k);
  finish(r, rc);
}

static void resolve(tcp_req_t *r, uv_loop_t *loop)
{
  connecting_t *k = calloc(1, sizeof *k);
  if (!k) {
    finish(r, -ENOMEM);
    return;
  }
  k->req = r;
  k->gai.data = k;
  r->base.uv = k;
  char service[16];
  snprintf(service, sizeof service, "%d", r->port);
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = r->op == IOTCP_LISTEN ? AI_PASSIVE : 0;
  const char *host = r->host && strcmp(r->host, "*") != 0 ? r->host : NULL;
  if (!host && r->op == IOTCP_LISTEN)
    hints.ai_family = AF_INET; /* "*": every IPv4 address */
  int rc = uv_getaddrinfo(loop, &k->gai, on_resolved, host, service, &hints);
  if (rc < 0) {
    r->base.uv = NULL;
    free(k);
    finish(r, rc);
  }
}

/* ---- Unix domain sockets ------------------------------------------------------------------- */
/* libuv 1.44 binds and connects pipes by NUL-terminated paths only, so Linux's abstract names
** ("@name" here, as Go spells them) could not be reached through it: the socket is made, bound or
** connected here and handed to libuv with uv_pipe_open. A Unix connect does not wait on Linux: it
** succeeds, or fails at once (ENOENT, ECONNREFUSED, EAGAIN when the listener's backlog is full). */

/* name as an address; its length (abstract names: no terminating NUL) or a negative errno. */
static int unix_addr(const char *name, struct sockaddr_un *a, socklen_t *len)
{
  size_t n = strlen(name);
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  if (n == 0 || (n == 1 && name[0] == '@'))
    return UV_EINVAL;
  if (n >= sizeof a->sun_path)
    return UV_ENAMETOOLONG;
  memcpy(a->sun_path, name, n);
  int abstract = name[0] == '@';
  if (abstract)
    a->sun_path[0] = '\0';
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + !abstract);
  return 0;
}

/* A new Unix stream socket for name (its address in *a, *len); the descriptor or a negative
** errno. */
static int unix_socket(const char *name, struct sockaddr_un *a, socklen_t *len)
{
  int rc = unix_addr(name, a, len);
  if (rc < 0)
    return rc;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  return fd < 0 ? -errno : fd;
}

/* Binds, sets the path's mode (before listen: nobody can connect in between), listens. */
/* chmod of the socket file at path, never through a symlink that replaced it meanwhile: glibc
** refuses one for AT_SYMLINK_NOFOLLOW (through /proc/self/fd); where it cannot tell (no /proc:
** EOPNOTSUPP), the file is looked at first. -1 with errno set on failure. */
static int chmod_socket_file(const char *path, mode_t mode)
{
  if (fchmodat(AT_FDCWD, path, mode, AT_SYMLINK_NOFOLLOW) == 0)
    return 0;
  if (errno != EOPNOTSUPP)
    return -1;
  struct stat st;
  if (lstat(path, &st) < 0)
    return -1;
  if (!S_ISSOCK(st.st_mode)) {
    errno = ELOOP;
    return -1;
  }
  return chmod(path, mode);
}

static int unix_listen(tcp_req_t *r, uv_loop_t *loop)
{
  struct sockaddr_un a;
  socklen_t len;
  int rc = 0, fd = unix_socket(r->host, &a, &len);
  if (fd < 0)
    return fd;
  int on_path = r->host[0] != '@';
  struct stat st;
  sock_t *s = NULL;
  /* The mode, before the path exists: Linux makes the socket file with the socket's own mode
  ** less the umask, so it is never open wider than asked, not even between bind and the chmod
  ** below (a console's socket would otherwise take connections of the group for that while). */
  if (on_path && r->mode >= 0 && fchmod(fd, (mode_t)r->mode) < 0) {
    rc = -errno;
    close(fd);
    return rc;
  }
  if (bind(fd, (struct sockaddr *)&a, len) < 0) {
    rc = -errno;
    close(fd);
    return rc;
  }
  /* then exactly the bits asked for (the umask may have taken some) */
  if (on_path && r->mode >= 0 && chmod_socket_file(r->host, (mode_t)r->mode) < 0)
    rc = -errno;
  else if (on_path && stat(r->host, &st) < 0)
    rc = -errno;
  else if (!(s = sock_new(loop, 1, 1)))
    rc = -ENOMEM;
  else if (on_path && !(s->path = strdup(r->host)))
    rc = -ENOMEM;
  if (s && rc == 0) {
    if (on_path) {
      s->dev = st.st_dev;
      s->ino = st.st_ino;
    }
    if ((rc = uv_pipe_open(&s->h.pipe, fd)) == 0) {
      fd = -1; /* the handle's now */
      rc = uv_listen(&s->h.stream, r->backlog, on_connection);
    }
  }
  if (rc == 0) {
    r->new_id = s->id;
    return 0;
  }
  if (on_path && !(s && s->path))
    unlink(r->host); /* bound here, not known to the socket yet */
  if (s)
    sock_close(s); /* unlinks the path it knows */
  if (fd >= 0)
    close(fd);
  return rc;
}

static int unix_connect(tcp_req_t *r, uv_loop_t *loop)
{
  struct sockaddr_un a;
  socklen_t len;
  int rc = 0, fd = unix_socket(r->host, &a, &len);
  if (fd < 0)
    return fd;
  sock_t *s = NULL;
  if (connect(fd, (struct sockaddr *)&a, len) < 0)
    rc = -errno;
  else if (!(s = sock_new(loop, 0, 1)))
    rc = -ENOMEM;
  else if ((rc = uv_pipe_open(&s->h.pipe, fd)) == 0)
    fd = -1;
  if (rc == 0) {
    read_resume(s);
    r->new_id = s->id;
    uv_fileno(&s->h.handle, &r->new_fd);
    return 0;
  }
  if (s)
    sock_close(s);
  if (fd >= 0)
    close(fd);
  return rc;
}

static pthread_once_t registered = PTHREAD_ONCE_INIT;
static void register_stop(void);

uint64_t sm_tcp_adopt_unix(void *loop, int fd)
{
  pthread_once(&registered, register_stop); /* the sockets close when the IO thread stops */
  sock_t *s = sock_new(loop, 0, 1);
  if (!s) {
    close(fd);
    return 0;
  }
  if (uv_pipe_open(&s->h.pipe, fd) < 0) {
    close(fd);
    sock_close(s);
    return 0;
  }
  read_resume(s);
  return s->id;
}

/* A Unix socket's own or peer's name: its path, "@name" for an abstract one, "" for none. */
static int unix_name(sock_t *s, int peer, char *out, size_t size)
{
  uv_os_fd_t fd;
  struct sockaddr_un a;
  socklen_t len = sizeof a;
  int rc = uv_fileno(&s->h.handle, &fd);
  if (rc < 0)
    return rc;
  if ((peer ? getpeername(fd, (struct sockaddr *)&a, &len)
            : getsockname(fd, (struct sockaddr *)&a, &len)) < 0)
    return -errno;
  size_t n = len > offsetof(struct sockaddr_un, sun_path)
               ? len - offsetof(struct sockaddr_un, sun_path) : 0;
  if (n > 0 && a.sun_path[0] != '\0')
    n = strnlen(a.sun_path, n);
  if (n >= size)
    return UV_ENAMETOOLONG;
  memcpy(out, a.sun_path, n);
  out[n] = '\0';
  if (n > 0 && out[0] == '\0')
    out[0] = '@';
  return 0;
}

/* ---- The requests on the loop ------------------------------------------------------------- */

static void on_written(uv_write_t *w, int status);

static void tcp_on_loop(io_req_t *req, void *loop)
{
  tcp_req_t *r = (tcp_req_t *)req;
  if (r->op == IOTCP_LISTEN || r->op == IOTCP_CONNECT) {
    resolve(r, loop);
    return;
  }
  if (r->op == IOTCP_LISTEN_UNIX || r->op == IOTCP_CONNECT_UNIX) {
    finish(r, r->op == IOTCP_LISTEN_UNIX ? unix_listen(r, loop) : unix_connect(r, loop));
    return;
  }
  sock_t *s = sm_io_id_get(&ids, r->id);
  if (!s) {
    finish(r, UV_EBADF);
    return;
  }
  switch (r->op) {
  case IOTCP_ACCEPT:
    if (!s->listener || s->accept) {
      finish(r, s->listener ? UV_EBUSY : UV_EINVAL);
    } else if (s->lerr) {
      int e = s->lerr;
      s->lerr = 0;
      finish(r, e);
    } else if (s->conn_ready) {
      accept_now(s, r);
    } else {
      s->accept = r;
    }
    return;
  case IOTCP_RECEIVE:
    if (s->listener || s->receive || s->active != IOTCP_PASSIVE) {
      finish(r, s->listener || s->active != IOTCP_PASSIVE ? UV_EINVAL : UV_EBUSY);
      return;
    }
    s->receive = r;
    serve_receive(s);
    return;
  case IOTCP_SEND: {
    if (s->listener) {
      finish(r, UV_EINVAL);
      return;
    }
    write_t *w = malloc(sizeof *w);
    if (!w) {
      finish(r, -ENOMEM);
      return;
    }
    uv_buf_t b = uv_buf_init(r->data, (unsigned)r->len);
    w->uv.data = w;
    int rc = uv_write(&w->uv, &s->h.stream, &b, 1, on_written); /* its callback comes later */
    if (rc < 0) {
      free(w);
      finish(r, rc);
      return;
    }
    w->req = r;
    w->data = r->data;
    r->data = NULL; /* the write's now */
    w->next = s->writes;
    w->prev = &s->writes;
    if (s->writes)
      s->writes->prev = &w->next;
    s->writes = w;
    return;
  }
  case IOTCP_CLOSE:
    if (r->flag) { /* its owner ended abnormally: closed at once, its peer told of a cut */
      reset_if_queued(s);
      sock_close(s);
    } else {
      sock_close_after_writes(s);
    }
    finish(r, 0);
    return;
  case IOTCP_UNREAD:
    if (s->listener) {
      finish(r, UV_EINVAL);
      return;
    }
    finish(r, unread(s, r->data, r->len));
    serve_receive(s);
    return;
  case IOTCP_NAME: {
    if (is_unix(s)) {
      r->addr_port = -1;
      finish(r, unix_name(s, r->peer, r->addr, sizeof r->addr));
      return;
    }
    struct sockaddr_storage ss;
    int len = sizeof ss;
    int rc = r->peer ? uv_tcp_getpeername(&s->h.tcp, (struct sockaddr *)&ss, &len)
                     : uv_tcp_getsockname(&s->h.tcp, (struct sockaddr *)&ss, &len);
    if (rc == 0 && sm_dns_addr_text((struct sockaddr *)&ss, r->addr, sizeof r->addr,
                                    &r->addr_port) < 0)
      rc = UV_EAFNOSUPPORT;
    finish(r, rc);
    return;
  }
  case IOTCP_SETACTIVE:
    if (s->listener || s->receive) {
      finish(r, UV_EINVAL);
      return;
    }
    s->active = r->flag;
    s->owner = r->owner;
    s->unacked = 0;
    finish(r, 0);
    serve_receive(s);
    return;
  case IOTCP_ACK:
    if (s->listener) {
      finish(r, UV_EINVAL);
      return;
    }
    s->unacked = r->len < s->unacked ? s->unacked - r->len : 0;
    finish(r, 0);
    serve_receive(s);
    return;
  case IOTCP_NODELAY:
    finish(r, s->listener || is_unix(s) ? UV_EINVAL : uv_tcp_nodelay(&s->h.tcp, r->flag));
    return;
  default:
    finish(r, UV_EINVAL);
  }
}

static void on_written(uv_write_t *uv, int status)
{
  write_t *w = uv->data;
  *w->prev = w->next;
  if (w->next)
    w->next->prev = w->prev;
  if (w->req)
    finish(w->req, status);
  free(w->data);
  free(w);
}

/* Timed out: receives and accepts stop waiting (the bytes stay for the next receive); a connect
** gives up its socket; a send cannot be taken back from libuv and completes later. */
static void tcp_cancel(io_req_t *req)
{
  tcp_req_t *r = (tcp_req_t *)req;
  if (r->op == IOTCP_CONNECT || r->op == IOTCP_LISTEN) {
    connecting_t *k = r->base.uv;
    if (k) {
      k->req = NULL; /* its callbacks clean up */
      r->base.uv = NULL;
      if (k->sock)
        sock_close(k->sock); /* on_connect runs with UV_ECANCELED */
      else
        uv_cancel((uv_req_t *)&k->gai);
      finish(r, -ETIMEDOUT);
    }
    return;
  }
  sock_t *s = sm_io_id_get(&ids, r->id);
  if (s && s->receive == r)
    s->receive = NULL;
  else if (s && s->accept == r)
    s->accept = NULL;
  else
    return;
  finish(r, -ETIMEDOUT); /* the bytes stay; reading goes on or pauses by the buffer alone */
}

/* The IO thread stops: close every socket (waiting requests end as closed). */
static void close_one(void *s)
{
  reset_if_queued(s); /* the run ends: what is queued is dropped, and the peer sees a cut */
  sock_close(s);
}
static void close_all(void *loop)
{
  (void)loop;
  sm_io_id_each(&ids, close_one);
  while (lingering) {
    if (!lingering->flushed)
      reset_if_queued(lingering);
    linger_end(lingering);
  }
  if (linger_timer_made) {
    uv_close((uv_handle_t *)&linger_timer, NULL);
    linger_timer_made = 0;
  }
}

static void register_stop(void) { sm_io_on_stop(close_all); }

tcp_req_t *sm_tcp_req_new(enum tcp_op op)
{
  pthread_once(&registered, register_stop);
  tcp_req_t *r = (tcp_req_t *)sm_io_req_new_loop(sizeof *r, tcp_on_loop, tcp_cancel, tcp_free);
  if (r)
    r->op = op;
  return r;
}
