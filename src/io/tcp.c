/*
** TCP on the IO thread (see tcp.h). Everything here runs on the IO thread, in the loop's
** callbacks; the only entry points from other threads are the requests, which reach us through
** io.c's queue.
*/
#define _GNU_SOURCE
#include "tcp.h"

#include "dns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define READ_CHUNK (64 * 1024)
#define READ_HIGH (256 * 1024) /* unclaimed bytes at which a connection stops reading */

typedef struct sock {
  uv_tcp_t tcp;
  uint64_t id;
  int listener, closing;
  /* a connection: unclaimed bytes are buf[start, len) */
  char *buf;
  size_t start, len, cap;
  int eof, rerr, reading;
  tcp_req_t *receive;         /* the receive waiting for bytes, or NULL */
  /* a listener */
  tcp_req_t *accept;          /* the accept waiting for a connection, or NULL */
  int conn_ready;             /* libuv holds a connection for uv_accept */
  int lerr;                   /* a listening error, reported to the next accept */
} sock_t;

/* ---- Ids: slot index (low 32 bits) and a generation, so a closed socket's id never matches ----
** */

typedef struct slot {
  sock_t *sock;
  uint32_t gen;
} slot_t;

static slot_t *slots;
static uint32_t nslots, slots_cap;
static uint32_t *free_slots;
static uint32_t nfree;

static uint64_t id_new(sock_t *s)
{
  uint32_t i;
  if (nfree) {
    i = free_slots[--nfree];
  } else {
    if (nslots == slots_cap) {
      uint32_t cap = slots_cap ? slots_cap * 2 : 64;
      slot_t *more = realloc(slots, cap * sizeof *more);
      uint32_t *fmore = realloc(free_slots, cap * sizeof *fmore);
      if (more)
        slots = more;
      if (fmore)
        free_slots = fmore;
      if (!more || !fmore)
        return 0;
      slots_cap = cap;
    }
    i = nslots++;
    slots[i].gen = 0;
  }
  slots[i].sock = s;
  slots[i].gen++;
  return (uint64_t)slots[i].gen << 32 | i;
}

static sock_t *id_sock(uint64_t id)
{
  uint32_t i = (uint32_t)id;
  if (i >= nslots || slots[i].gen != (uint32_t)(id >> 32) || !slots[i].sock)
    return NULL;
  return slots[i].sock; /* sock_close empties the slot as it starts closing */
}

static void id_free(uint64_t id)
{
  uint32_t i = (uint32_t)id;
  slots[i].sock = NULL;
  free_slots[nfree++] = i;
}

/* ---- Requests ------------------------------------------------------------------------------ */

static void post_close_id(uint64_t id);

/* Runs on the thread that lets go of the last reference: the caller's, or the IO thread's when
** the caller was killed before the request completed. A socket that a listen, connect or accept
** made for a caller that never took it (killed between the completion and its resumption) is
** closed here, so that its peer sees the end instead of a connection open to nobody. */
static void tcp_free(io_req_t *req)
{
  tcp_req_t *r = (tcp_req_t *)req;
  int makes = r->op == IOTCP_LISTEN || r->op == IOTCP_CONNECT || r->op == IOTCP_ACCEPT;
  if (makes && r->base.completed && r->base.err == 0 && r->new_id != 0 && !r->new_taken)
    post_close_id(r->new_id);
  free(r->host);
  free(r->data);
}

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
  free(s);
}

static void sock_close(sock_t *s)
{
  if (s->closing)
    return;
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
  id_free(s->id);
  uv_close((uv_handle_t *)&s->tcp, on_closed); /* pending writes end with UV_ECANCELED */
}

static sock_t *sock_new(uv_loop_t *loop, int listener)
{
  sock_t *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  if (uv_tcp_init(loop, &s->tcp) != 0) {
    free(s);
    return NULL;
  }
  s->tcp.data = s;
  s->listener = listener;
  s->id = id_new(s);
  if (!s->id) {
    uv_close((uv_handle_t *)&s->tcp, on_closed);
    return NULL;
  }
  return s;
}

/* ---- Reading ------------------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  (void)hint;
  sock_t *s = h->data;
  if (s->start > 0 && s->start == s->len)
    s->start = s->len = 0;
  if (s->cap - s->len < READ_CHUNK) {
    if (s->start > 0) { /* slide the unclaimed bytes down first */
      memmove(s->buf, s->buf + s->start, s->len - s->start);
      s->len -= s->start;
      s->start = 0;
    }
    if (sm_io_buf_reserve(&s->buf, &s->cap, s->len, READ_CHUNK) < 0) {
      *buf = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
      return;
    }
  }
  *buf = uv_buf_init(s->buf + s->len, (unsigned)(s->cap - s->len));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

static void read_resume(sock_t *s)
{
  if (!s->reading && !s->eof && !s->rerr && !s->closing) {
    if (uv_read_start((uv_stream_t *)&s->tcp, on_alloc, on_read) == 0)
      s->reading = 1;
  }
}

static void read_pause(sock_t *s)
{
  if (s->reading) {
    uv_read_stop((uv_stream_t *)&s->tcp);
    s->reading = 0;
  }
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

/* Finishes the waiting receive if the buffer meets it now; then reads on or pauses. */
static void serve_receive(sock_t *s)
{
  tcp_req_t *r = s->receive;
  if (r && try_receive(s, r)) {
    s->receive = NULL;
    sm_io_complete(&r->base);
  }
  if (s->len - s->start >= READ_HIGH)
    read_pause(s);
  else
    read_resume(s);
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
  (void)buf;
  sock_t *s = st->data;
  if (n > 0) {
    s->len += (size_t)n;
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
  sock_t *c = sock_new(l->tcp.loop, 0);
  if (!c) {
    finish(r, -ENOMEM);
    return;
  }
  int rc = uv_accept((uv_stream_t *)&l->tcp, (uv_stream_t *)&c->tcp);
  l->conn_ready = 0;
  if (rc < 0) {
    sock_close(c);
    finish(r, rc);
    return;
  }
  read_resume(c);
  r->new_id = c->id;
  uv_fileno((uv_handle_t *)&c->tcp, &r->new_fd);
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
    if (!(k->sock = sock_new(loop, 0)))
      return -ENOMEM;
    k->conn.data = k;
    rc = uv_tcp_connect(&k->conn, &k->sock->tcp, a->ai_addr, on_connect);
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
    uv_loop_t *loop = k->sock->tcp.loop;
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
    uv_fileno((uv_handle_t *)&k->sock->tcp, &r->new_fd);
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
    sock_t *s = sock_new(g->loop, 1);
    rc = s ? uv_tcp_bind(&s->tcp, res->ai_addr, 0) : -ENOMEM;
    if (rc == 0)
      rc = uv_listen((uv_stream_t *)&s->tcp, r->backlog, on_connection);
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

/* ---- The requests on the loop ------------------------------------------------------------- */

static void on_written(uv_write_t *w, int status);

static void tcp_on_loop(io_req_t *req, void *loop)
{
  tcp_req_t *r = (tcp_req_t *)req;
  if (r->op == IOTCP_LISTEN || r->op == IOTCP_CONNECT) {
    resolve(r, loop);
    return;
  }
  sock_t *s = id_sock(r->id);
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
    if (s->listener || s->receive) {
      finish(r, s->listener ? UV_EINVAL : UV_EBUSY);
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
    uv_write_t *w = malloc(sizeof *w);
    if (!w) {
      finish(r, -ENOMEM);
      return;
    }
    w->data = r;
    uv_buf_t b = uv_buf_init(r->data, (unsigned)r->len);
    int rc = uv_write(w, (uv_stream_t *)&s->tcp, &b, 1, on_written);
    if (rc < 0) {
      free(w);
      finish(r, rc);
    }
    return;
  }
  case IOTCP_CLOSE:
    sock_close(s);
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
    struct sockaddr_storage ss;
    int len = sizeof ss;
    int rc = r->peer ? uv_tcp_getpeername(&s->tcp, (struct sockaddr *)&ss, &len)
                     : uv_tcp_getsockname(&s->tcp, (struct sockaddr *)&ss, &len);
    if (rc == 0 && sm_dns_addr_text((struct sockaddr *)&ss, r->addr, sizeof r->addr,
                                    &r->addr_port) < 0)
      rc = UV_EAFNOSUPPORT;
    finish(r, rc);
    return;
  }
  case IOTCP_NODELAY:
    finish(r, s->listener ? UV_EINVAL : uv_tcp_nodelay(&s->tcp, r->flag));
    return;
  default:
    finish(r, UV_EINVAL);
  }
}

static void on_written(uv_write_t *w, int status)
{
  tcp_req_t *r = w->data;
  free(w);
  finish(r, status);
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
  sock_t *s = id_sock(r->id);
  if (s && s->receive == r)
    s->receive = NULL;
  else if (s && s->accept == r)
    s->accept = NULL;
  else
    return;
  finish(r, -ETIMEDOUT); /* the bytes stay; reading goes on or pauses by the buffer alone */
}

/* The IO thread stops: close every socket (waiting requests end as closed). */
static void close_all(void *loop)
{
  (void)loop;
  for (uint32_t i = 0; i < nslots; i++)
    if (slots[i].sock)
      sock_close(slots[i].sock);
}

static pthread_once_t registered = PTHREAD_ONCE_INIT;
static void register_stop(void) { sm_io_on_stop(close_all); }

tcp_req_t *sm_tcp_req_new(enum tcp_op op)
{
  pthread_once(&registered, register_stop);
  tcp_req_t *r = (tcp_req_t *)sm_io_req_new_loop(sizeof *r, tcp_on_loop, tcp_cancel, tcp_free);
  if (r)
    r->op = op;
  return r;
}
