/*
** UDP sockets on the IO thread (see udp.h). Everything here runs on the IO thread, in the
** loop's callbacks; other threads reach it only through requests.
*/
#define _GNU_SOURCE
#include "udp.h"

#include "ids.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define QUEUE_HIGH 64            /* unclaimed datagrams at which a socket stops reading */
#define DATAGRAM_MAX (64 * 1024) /* more than any UDP datagram carries (65,507 bytes) */

typedef struct datagram {
  struct datagram *next;
  struct sockaddr_storage from;
  size_t len;
  char data[]; /* len bytes */
} datagram_t;

typedef struct usock {
  uv_udp_t udp;
  uint64_t id;
  int closing, reading;
  datagram_t *head, *tail; /* unclaimed datagrams, oldest first */
  unsigned queued;
  int rerr;                /* a receiving error, reported to the next receive */
  udp_req_t *receive;      /* the receive waiting for a datagram, or NULL */
  int active;              /* IOUDP_PASSIVE, _ONCE or _ON (udp.h) */
  smarm_pid_t owner;       /* who gets an active socket's messages */
  unsigned unacked;        /* _ON: datagram messages sent and not acknowledged */
} usock_t;

static io_ids_t ids;

/* libuv reads every socket's datagrams here, one at a time: on_recv copies each out before the
** next read (one buffer for all, not 64 KiB a socket). The IO thread's alone. */
static char scratch[DATAGRAM_MAX];

static void finish(udp_req_t *r, int err) { io_finish(&r->base, err); }

static void post_close_id(uint64_t id)
{
  udp_req_t *c = sm_udp_req_new(IOUDP_CLOSE);
  if (c) { /* out of memory: the socket stays open until the IO thread stops */
    c->id = id;
    sm_io_post(&c->base);
  }
}

/* The last reference's side (as tcp.c's tcp_free): a socket a bind made for a caller that
** never took it is closed. */
static void udp_free(io_req_t *req)
{
  udp_req_t *r = (udp_req_t *)req;
  if (r->op == IOUDP_BIND && r->base.completed && r->base.err == 0 && !r->new_taken)
    post_close_id(r->new_id);
  free(r->data);
  free(r->group);
  free(r->iface);
}

static void on_closed(uv_handle_t *h)
{
  usock_t *s = h->data;
  while (s->head) {
    datagram_t *d = s->head;
    s->head = d->next;
    free(d);
  }
  free(s);
}

static void sock_close(usock_t *s)
{
  if (s->closing)
    return;
  s->closing = 1;
  if (s->receive) {
    udp_req_t *r = s->receive;
    s->receive = NULL;
    finish(r, IOUDP_CLOSED);
  }
  sm_io_id_free(&ids, s->id);
  uv_close((uv_handle_t *)&s->udp, on_closed); /* pending sends end with UV_ECANCELED */
}

/* ---- Receiving ----------------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
  (void)hint;
  (void)h;
  *buf = uv_buf_init(scratch, DATAGRAM_MAX);
}

static void on_recv(uv_udp_t *u, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                    unsigned flags);

static void read_resume(usock_t *s)
{
  if (!s->reading && !s->closing && s->queued < QUEUE_HIGH &&
      uv_udp_recv_start(&s->udp, on_alloc, on_recv) == 0)
    s->reading = 1;
}

static void read_pause(usock_t *s)
{
  if (s->reading) {
    uv_udp_recv_stop(&s->udp);
    s->reading = 0;
  }
}

/* Takes the oldest datagram off the queue. */
static datagram_t *pop(usock_t *s)
{
  datagram_t *d = s->head;
  s->head = d->next;
  if (!s->head)
    s->tail = NULL;
  s->queued--;
  return d;
}

/* An active socket sends its owner the datagrams (and a receiving error) as far as its mode lets
** it (udp.h). Out of memory: tried again at the next datagram, acknowledgement or arming. */
static void serve_active(usock_t *s)
{
  while (s->active != IOUDP_PASSIVE && !s->closing && (s->head || s->rerr)) {
    smarm_msg_t *m;
    if (s->head) {
      if (s->active == IOUDP_ACTIVE_ON && s->unacked >= IOUDP_ACTIVE_HIGH)
        return;
      datagram_t *d = s->head;
      m = sm_io_event_new(IO_EV_UDP, IO_EV_DATA, s->id, 0, sizeof d->from + d->len);
      if (!m)
        return;
      char *p = (char *)smarm_msg_data(m) + sizeof(io_event_t);
      memcpy(p, &d->from, sizeof d->from);
      memcpy(p + sizeof d->from, d->data, d->len);
      free(pop(s));
      s->unacked++;
    } else {
      if (!(m = sm_io_event_new(IO_EV_UDP, IO_EV_ERROR, s->id, s->rerr, 0)))
        return;
      s->rerr = 0;
    }
    if (smarm_send_outside(s->owner, m) < 0)
      smarm_msg_free(m); /* no runtime any more: the socket is about to close */
    if (s->active == IOUDP_ACTIVE_ONCE)
      s->active = IOUDP_PASSIVE;
  }
}

/* Puts the packed datagrams of an IOUDP_UNREAD back in front of the queue, in their order. */
static int unread(usock_t *s, const char *p, size_t n)
{
  datagram_t *first = NULL, **link = &first, *last = NULL;
  unsigned count = 0;
  while (n >= sizeof(udp_packed_t)) {
    udp_packed_t h;
    memcpy(&h, p, sizeof h);
    if (h.len > n - sizeof h)
      break;
    datagram_t *d = malloc(sizeof *d + h.len);
    if (!d) {
      while (first) {
        datagram_t *next = first->next;
        free(first);
        first = next;
      }
      return -ENOMEM;
    }
    d->next = NULL;
    d->from = h.from;
    d->len = h.len;
    memcpy(d->data, p + sizeof h, h.len);
    *link = last = d;
    link = &d->next;
    count++;
    p += sizeof h + h.len;
    n -= sizeof h + h.len;
  }
  if (!first)
    return 0;
  last->next = s->head;
  s->head = first;
  if (!s->tail)
    s->tail = last;
  s->queued += count;
  return 0;
}

/* Hands the oldest datagram (or the error) to the waiting receive, if both are there, or sends
** an active socket's messages; then reads on or pauses. */
static void serve_receive(usock_t *s)
{
  udp_req_t *r = s->receive;
  if (r && (s->head || s->rerr)) {
    s->receive = NULL;
    if (s->head) {
      datagram_t *d = pop(s);
      r->data = malloc(d->len ? d->len : 1);
      if (r->data) {
        memcpy(r->data, d->data, d->len);
        r->len = d->len;
        r->addr = d->from;
      }
      free(d);
      finish(r, r->data ? 0 : -ENOMEM);
    } else {
      int e = s->rerr;
      s->rerr = 0;
      finish(r, e);
    }
  }
  serve_active(s);
  if (s->queued >= QUEUE_HIGH)
    read_pause(s);
  else
    read_resume(s);
}

static void on_recv(uv_udp_t *u, ssize_t n, const uv_buf_t *buf, const struct sockaddr *from,
                    unsigned flags)
{
  (void)buf;
  (void)flags;
  usock_t *s = u->data;
  if (n < 0) {
    s->rerr = (int)n;
  } else if (from) { /* n == 0 with no sender: nothing more to read now (libuv's convention) */
    datagram_t *d = malloc(sizeof *d + (size_t)n);
    if (!d) {
      s->rerr = -ENOMEM; /* the datagram is lost, as the network may lose it */
    } else {
      d->next = NULL;
      d->len = (size_t)n;
      memcpy(d->data, scratch, (size_t)n);
      memset(&d->from, 0, sizeof d->from);
      memcpy(&d->from, from, from->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                         : sizeof(struct sockaddr_in));
      if (s->tail)
        s->tail->next = d;
      else
        s->head = d;
      s->tail = d;
      s->queued++;
    }
  }
  serve_receive(s);
}

/* ---- The requests on the loop -------------------------------------------------------------- */

static void bind_now(udp_req_t *r, uv_loop_t *loop)
{
  usock_t *s = calloc(1, sizeof *s);
  if (!s) {
    finish(r, -ENOMEM);
    return;
  }
  int rc = uv_udp_init(loop, &s->udp);
  if (rc < 0) {
    free(s);
    finish(r, rc);
    return;
  }
  s->udp.data = s;
  s->id = sm_io_id_new(&ids, s);
  if (!s->id) {
    s->closing = 1;
    uv_close((uv_handle_t *)&s->udp, on_closed);
    finish(r, -ENOMEM);
    return;
  }
  rc = uv_udp_bind(&s->udp, (const struct sockaddr *)&r->addr, 0);
  if (rc == 0)
    rc = uv_fileno((uv_handle_t *)&s->udp, &r->new_fd);
  if (rc < 0) {
    sock_close(s);
    finish(r, rc);
    return;
  }
  read_resume(s);
  r->new_id = s->id;
  finish(r, 0);
}

static void on_sent(uv_udp_send_t *w, int status)
{
  udp_req_t *r = w->data;
  free(w);
  finish(r, status);
}

static int set_option(usock_t *s, udp_req_t *r)
{
  switch (r->option) {
  case UDP_BROADCAST: return uv_udp_set_broadcast(&s->udp, r->flag);
  case UDP_TTL: return uv_udp_set_ttl(&s->udp, r->flag);
  case UDP_MULTICAST_LOOP: return uv_udp_set_multicast_loop(&s->udp, r->flag);
  case UDP_MULTICAST_TTL: return uv_udp_set_multicast_ttl(&s->udp, r->flag);
  case UDP_MULTICAST_JOIN:
  case UDP_MULTICAST_LEAVE:
    return uv_udp_set_membership(&s->udp, r->group, r->iface,
                                 r->option == UDP_MULTICAST_JOIN ? UV_JOIN_GROUP : UV_LEAVE_GROUP);
  }
  return UV_EINVAL;
}

static void udp_on_loop(io_req_t *req, void *loop)
{
  udp_req_t *r = (udp_req_t *)req;
  if (r->op == IOUDP_BIND) {
    bind_now(r, loop);
    return;
  }
  usock_t *s = sm_io_id_get(&ids, r->id);
  if (!s) {
    finish(r, UV_EBADF);
    return;
  }
  switch (r->op) {
  case IOUDP_RECEIVE:
    if (s->receive || s->active != IOUDP_PASSIVE) {
      finish(r, s->receive ? UV_EBUSY : UV_EINVAL);
      return;
    }
    s->receive = r;
    serve_receive(s);
    return;
  case IOUDP_SEND: {
    uv_udp_send_t *w = malloc(sizeof *w);
    if (!w) {
      finish(r, -ENOMEM);
      return;
    }
    w->data = r;
    uv_buf_t b = uv_buf_init(r->data, (unsigned)r->len);
    int rc = uv_udp_send(w, &s->udp, &b, 1, (const struct sockaddr *)&r->addr, on_sent);
    if (rc < 0) {
      free(w);
      finish(r, rc);
    }
    return;
  }
  case IOUDP_CLOSE:
    sock_close(s);
    finish(r, 0);
    return;
  case IOUDP_NAME: {
    int len = sizeof r->addr;
    finish(r, uv_udp_getsockname(&s->udp, (struct sockaddr *)&r->addr, &len));
    return;
  }
  case IOUDP_OPTION:
    finish(r, set_option(s, r));
    return;
  case IOUDP_SETACTIVE:
    if (s->receive) {
      finish(r, UV_EINVAL);
      return;
    }
    s->active = r->flag;
    s->owner = r->owner;
    s->unacked = 0;
    finish(r, 0);
    serve_receive(s);
    return;
  case IOUDP_ACK:
    s->unacked = (size_t)s->unacked > r->len ? s->unacked - (unsigned)r->len : 0;
    finish(r, 0);
    serve_receive(s);
    return;
  case IOUDP_UNREAD:
    finish(r, unread(s, r->data, r->len));
    serve_receive(s);
    return;
  default:
    finish(r, UV_EINVAL);
  }
}

/* Timed out: a receive stops waiting (the datagrams stay for the next one); a send cannot be
** taken back from libuv and completes later. */
static void udp_cancel(io_req_t *req)
{
  udp_req_t *r = (udp_req_t *)req;
  usock_t *s = sm_io_id_get(&ids, r->id);
  if (r->op != IOUDP_RECEIVE || !s || s->receive != r)
    return;
  s->receive = NULL;
  finish(r, -ETIMEDOUT);
}

static void close_one(void *s) { sock_close(s); }
static void close_all(void *loop)
{
  (void)loop;
  sm_io_id_each(&ids, close_one);
}

static pthread_once_t registered = PTHREAD_ONCE_INIT;
static void register_stop(void) { sm_io_on_stop(close_all); }

udp_req_t *sm_udp_req_new(enum udp_op op)
{
  pthread_once(&registered, register_stop);
  udp_req_t *r = (udp_req_t *)sm_io_req_new_loop(sizeof *r, udp_on_loop, udp_cancel, udp_free);
  if (r)
    r->op = op;
  return r;
}
