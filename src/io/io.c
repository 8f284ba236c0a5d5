/*
** The IO thread (see io.h).
**
** Submission queue (actors' scheduler threads -> IO thread): a lock-free stack. A producer pushes
** with a release CAS; if the stack was empty before its push, it calls uv_async_send(). The IO
** thread's async callback takes the whole stack with an acquire exchange and queues each request
** on libuv's thread pool, oldest first. No wake-up is lost: the producer that makes the stack
** non-empty sends a wake after its push, and libuv runs the async callback at least once after
** every uv_async_send() (one already pending covers it: the later callback's exchange still sees
** the push). Producers that find the stack non-empty send nothing: the wake of whoever made it
** non-empty is pending or its callback has not taken the stack yet. That is the coalescing.
**
** Completions (IO thread -> the actor's scheduler): smarm_wake() through the scheduler's inbox;
** libuv hands a pool thread's results to the loop thread under its own lock, so what the work
** wrote is visible to the loop thread, and the inbox's release/acquire carries it to the actor.
**
** Start and stop: the first io_call() of a runtime starts the thread (under io_lock; later calls
** see io_ready with an acquire load). io_shutdown() runs when the runtime has ended and nobody can
** submit: it asks the loop to stop (io_stopping, then a wake); the loop finishes the work in flight
** (a completion then finds no runtime and wakes nobody), closes its handle, and the thread ends.
*/
#define _GNU_SOURCE
#include "io.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <uv.h>

static pthread_mutex_t io_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int io_ready;      /* the thread runs and accepts requests */
static _Atomic int io_stopping;   /* set by io_shutdown before its wake */
static _Atomic(io_req_t *) io_queue;
static uv_loop_t io_loop;
static uv_async_t io_async;
static pthread_t io_thread;

io_req_t *io_req_new(size_t size, io_work_fn work, io_free_fn free_fields)
{
  size_t head = (size + 15) & ~(size_t)15;
  io_req_t *req = calloc(1, head + sizeof(uv_work_t));
  if (!req)
    return NULL;
  atomic_init(&req->refs, 1);
  req->work = work;
  req->free_fields = free_fields;
  req->uv = (char *)req + head;
  return req;
}

void io_req_release(io_req_t *req)
{
  if (!req || atomic_fetch_sub_explicit(&req->refs, 1, memory_order_acq_rel) != 1)
    return;
  if (req->free_fields)
    req->free_fields(req);
  free(req);
}

static void work_cb(uv_work_t *w)
{
  io_req_t *req = w->data;
  req->work(req);
}

static void after_work_cb(uv_work_t *w, int status)
{
  io_req_t *req = w->data;
  if (status == UV_ECANCELED)
    req->err = -ECANCELED;
  smarm_wake(req->pid, req->token); /* no runtime any more (shutdown): nobody to wake */
  io_req_release(req);
}

static void async_cb(uv_async_t *a)
{
  io_req_t *list = atomic_exchange_explicit(&io_queue, NULL, memory_order_acquire);
  io_req_t *fifo = NULL;
  while (list) { /* the stack is newest first */
    io_req_t *next = list->next;
    list->next = fifo;
    fifo = list;
    list = next;
  }
  while (fifo) {
    io_req_t *req = fifo;
    fifo = req->next;
    uv_work_t *w = req->uv;
    w->data = req;
    int rc = uv_queue_work(a->loop, w, work_cb, after_work_cb);
    if (rc < 0) { /* cannot happen with a valid loop; fail the request rather than hang */
      req->err = rc;
      smarm_wake(req->pid, req->token);
      io_req_release(req);
    }
  }
  if (atomic_load_explicit(&io_stopping, memory_order_acquire))
    uv_close((uv_handle_t *)a, NULL);
}

static void *io_main(void *arg)
{
  (void)arg;
  uv_run(&io_loop, UV_RUN_DEFAULT); /* until the async handle is closed and the work is done */
  uv_loop_close(&io_loop);
  return NULL;
}

static int io_start(void)
{
  pthread_mutex_lock(&io_lock);
  int rc = 0;
  if (!atomic_load_explicit(&io_ready, memory_order_relaxed)) {
    rc = uv_loop_init(&io_loop);
    if (rc == 0 && (rc = uv_async_init(&io_loop, &io_async, async_cb)) != 0)
      uv_loop_close(&io_loop);
    if (rc == 0) {
      atomic_store_explicit(&io_stopping, 0, memory_order_relaxed);
      if ((rc = -pthread_create(&io_thread, NULL, io_main, NULL)) != 0) {
        uv_close((uv_handle_t *)&io_async, NULL);
        uv_run(&io_loop, UV_RUN_DEFAULT);
        uv_loop_close(&io_loop);
      }
    }
    if (rc == 0)
      atomic_store_explicit(&io_ready, 1, memory_order_release);
  }
  pthread_mutex_unlock(&io_lock);
  return rc;
}

int io_call(io_req_t *req)
{
  smarm_pid_t self = smarm_self();
  if (!self)
    return -EPERM;
  if (!atomic_load_explicit(&io_ready, memory_order_acquire) && io_start() != 0)
    return -ECANCELED;
  req->pid = self;
  req->token = smarm_await_token();
  req->err = 0;
  atomic_fetch_add_explicit(&req->refs, 1, memory_order_relaxed); /* the IO side's */
  io_req_t *old = atomic_load_explicit(&io_queue, memory_order_relaxed);
  do {
    req->next = old;
  } while (!atomic_compare_exchange_weak_explicit(&io_queue, &old, req, memory_order_release,
                                                  memory_order_relaxed));
  if (!old)
    uv_async_send(&io_async);
  int rc;
  while ((rc = smarm_await(req->token, SMARM_FOREVER)) == -ENOMEM)
    smarm_yield(); /* no memory for a timer cannot happen without a timeout; be safe anyway */
  return rc;
}

void io_shutdown(void)
{
  pthread_mutex_lock(&io_lock);
  if (atomic_load_explicit(&io_ready, memory_order_relaxed)) {
    atomic_store_explicit(&io_stopping, 1, memory_order_release);
    uv_async_send(&io_async);
    pthread_join(io_thread, NULL);
    atomic_store_explicit(&io_ready, 0, memory_order_relaxed);
  }
  pthread_mutex_unlock(&io_lock);
}

const char *io_err_name(int err) { return uv_err_name(err); }
const char *io_strerror(int err) { return uv_strerror(err); }
