/*
** File-system watches on the IO thread (see watch.h).
*/
#define _GNU_SOURCE
#include "watch.h"

#include "ids.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

typedef struct watch {
  uv_fs_event_t h;
  uint64_t id;
  smarm_pid_t owner;
} watch_t;

static io_ids_t ids;

static void on_closed(uv_handle_t *h) { free(h->data); }

static void watch_close(watch_t *w)
{
  sm_io_id_free(&ids, w->id);
  uv_close((uv_handle_t *)&w->h, on_closed);
}

/* Sends the owner what happened; an owner that has ended drops it (its scheduler does), and out
** of memory loses this one event (the next change sends another). */
static void on_event(uv_fs_event_t *h, const char *name, int events, int status)
{
  watch_t *w = h->data;
  size_t n = status < 0 || !name ? 0 : strlen(name);
  smarm_msg_t *m = sm_io_event_new(IO_EV_WATCH, status < 0 ? IO_EV_ERROR : IO_EV_DATA, w->id,
                                   status < 0 ? status : 0,
                                   status < 0 ? 0 : sizeof(watch_payload_t) + n);
  if (!m)
    return;
  if (status >= 0) {
    watch_payload_t pl = {0, (uint32_t)n};
    if (events & UV_RENAME)
      pl.what |= WATCH_RENAME;
    if (events & UV_CHANGE)
      pl.what |= WATCH_CHANGE;
    char *p = (char *)smarm_msg_data(m) + sizeof(io_event_t);
    memcpy(p, &pl, sizeof pl);
    if (n)
      memcpy(p + sizeof pl, name, n);
  }
  if (smarm_send_outside(w->owner, m) < 0)
    smarm_msg_free(m); /* no runtime any more: the watch is about to close */
}

static void close_one(void *w) { watch_close(w); }
static void stop_all(void *loop)
{
  (void)loop;
  sm_io_id_each(&ids, close_one);
}

static void watch_on_loop(io_req_t *req, void *loop)
{
  watch_req_t *r = (watch_req_t *)req;
  if (r->op == IOWATCH_STOP) {
    watch_t *w = sm_io_id_get(&ids, r->id);
    if (w)
      watch_close(w);
    io_finish(req, 0);
    return;
  }
  watch_t *w = calloc(1, sizeof *w);
  if (!w) {
    io_finish(req, -ENOMEM);
    return;
  }
  int rc = uv_fs_event_init(loop, &w->h);
  if (rc < 0) {
    free(w);
    io_finish(req, rc);
    return;
  }
  w->h.data = w;
  w->owner = r->owner;
  if ((rc = uv_fs_event_start(&w->h, on_event, r->path, 0)) < 0 ||
      !(w->id = sm_io_id_new(&ids, w))) {
    uv_close((uv_handle_t *)&w->h, on_closed);
    io_finish(req, rc < 0 ? rc : -ENOMEM);
    return;
  }
  r->new_id = w->id;
  io_finish(req, 0);
}

static void post_stop(uint64_t id)
{
  watch_req_t *s = sm_watch_req_new(IOWATCH_STOP);
  if (s) { /* out of memory: it watches on until the IO thread stops */
    s->id = id;
    sm_io_post(&s->base);
  }
}

/* The thread that lets go of the last reference (tcp.c's tcp_free says why): a watch started
** for a caller that never took it is stopped. */
static void watch_free(io_req_t *req)
{
  watch_req_t *r = (watch_req_t *)req;
  if (r->op == IOWATCH_START && r->base.completed && r->base.err == 0 && !r->new_taken)
    post_stop(r->new_id);
  free(r->path);
}

static pthread_once_t registered = PTHREAD_ONCE_INIT;
static void register_stop(void) { sm_io_on_stop(stop_all); }

watch_req_t *sm_watch_req_new(enum watch_op op)
{
  pthread_once(&registered, register_stop);
  watch_req_t *r =
    (watch_req_t *)sm_io_req_new_loop(sizeof *r, watch_on_loop, NULL, watch_free);
  if (r)
    r->op = op;
  return r;
}
