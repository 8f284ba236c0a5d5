/*
** The IO thread (see io.h).
**
** Submission queue (actors' scheduler threads -> IO thread): a lock-free stack. A producer pushes
** with a CAS; if the stack was empty before its push and the loop is not spinning (io_main), it
** calls uv_async_send(). The loop takes the whole stack with an exchange (drain) and starts each
** request, oldest first. No wake-up is lost: the producer that makes the stack non-empty either
** sees the loop spinning (and the loop looks at the queue again before it blocks, see io_main)
** or sends a wake after its push, and libuv runs the async callback at least once after every
** uv_async_send() (one already pending covers it: the later drain still sees the push).
** Producers that find the stack non-empty send nothing: whoever made it non-empty has woken the
** loop, or the loop is spinning. That is the coalescing.
**
** Completions (IO thread -> the actor's scheduler): smarm_wake_many() through the schedulers'
** inboxes, one push per scheduler for all completions of a loop iteration;
** libuv hands a pool thread's results to the loop thread under its own lock, so what the work
** wrote is visible to the loop thread, and the inbox's release/acquire carries it to the actor.
**
** Start and stop: the first sm_io_call() of a runtime starts the thread (under io_lock; later calls
** see io_ready with an acquire load). sm_io_shutdown() runs when the runtime has ended and nobody
** can submit: it asks the loop to stop (io_stopping, then a wake); the loop finishes the work in
** flight (a completion then finds no runtime and wakes nobody), closes its handle, and the thread
** ends.
**
** Interrupting blocked pool work at the stop: a pool thread running a work function links itself
** into busy_workers (under busy_lock) for the time of the call. Once stopping, a timer on the loop
** sends IO_INTERRUPT_SIGNAL to every busy worker every 10 ms while pool work is in flight; the
** signal's handler does nothing and is installed without SA_RESTART, so a blocked system call
** returns EINTR, and work functions that see sm_io_interrupted() give up. A signal that arrives
** just before the call blocks is not lost for good: the next tick sends another.
**
** The same for the pool work of an actor that ended while it waited (killed: sm_io_call's
** cleanup): the work is marked `abandoned` (loop thread, relaxed: the pool thread reads it in
** sm_io_interrupted, and the signal only hurries that) and, once it runs, its worker, found in
** busy_workers by its request under busy_lock (so the thread still runs that work), is
** signalled every 10 ms until the work ends. It is not taken out of the pool's queue: a regular
** file's call, which no signal interrupts, still happens (a write the actor made is made).
** Without it, four actors killed while they read FIFOs held libuv's four pool threads, and every
** file call of the process waited for a writer. A signal may still land in a worker that has
** just moved on to other work; work functions retry an EINTR unless sm_io_interrupted().
*/
#define _GNU_SOURCE
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

static pthread_mutex_t io_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int io_ready;      /* the thread runs and accepts requests */
static _Atomic int io_stopping;   /* set by sm_io_shutdown before its wake */
static _Atomic(io_req_t *) io_queue;
static uv_loop_t io_loop;
static uv_async_t io_async;
static pthread_t io_thread;
static _Atomic int io_spinning; /* the loop polls the queue itself: producers need not wake it */
static uint64_t io_activity;      /* loop thread only: requests taken and completed so far */

/* Sent to pool threads blocked in a work function at the stop, only once our handler for it is
** installed (it stays installed for the life of the process). Not SIGURG: the core's preemption
** (core/preempt.c) takes that one, with SA_RESTART, which would restart the blocked call. */
#define IO_INTERRUPT_SIGNAL (SIGRTMIN + 4)

/* The asynchronous signals whose handlers belong on the IO thread (sm_io_sched_thread_enter). */
static void io_signal_set(sigset_t *set)
{
  sigemptyset(set);
  sigaddset(set, SIGCHLD);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  sigaddset(set, SIGHUP);
  sigaddset(set, IO_INTERRUPT_SIGNAL);
}

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
static _Thread_local sigset_t sched_old_mask;

void sm_io_sched_thread_enter(unsigned sched, void *userdata)
{
  (void)sched;
  (void)userdata;
  sigset_t set;
  io_signal_set(&set);
  pthread_sigmask(SIG_BLOCK, &set, &sched_old_mask);
}

void sm_io_sched_thread_leave(unsigned sched, void *userdata)
{
  (void)sched;
  (void)userdata;
  pthread_sigmask(SIG_SETMASK, &sched_old_mask, NULL);
}
#else
void sm_io_sched_thread_enter(unsigned sched, void *userdata)
{
  (void)sched;
  (void)userdata;
}

void sm_io_sched_thread_leave(unsigned sched, void *userdata)
{
  (void)sched;
  (void)userdata;
}
#endif
typedef struct busy_worker {
  pthread_t thread;
  io_req_t *req; /* the work it runs */
  struct busy_worker *prev, *next;
} busy_worker_t;
static pthread_mutex_t busy_lock = PTHREAD_MUTEX_INITIALIZER;
static busy_worker_t *busy_workers; /* pool threads inside a work function (busy_lock) */
static int interrupt_installed;     /* our handler is IO_INTERRUPT_SIGNAL's (io_lock) */
static uint64_t pool_in_flight;     /* loop thread only: pool works queued and not completed */
static uint64_t pool_abandoned;     /* loop thread only: of those, the abandoned ones */
static uv_timer_t interrupt_timer;  /* loop thread only: made with the loop, closed at its stop */
static int interrupting;            /* loop thread only: interrupt_timer runs */
static __thread io_req_t *current_work; /* a pool thread's work (work_cb) */

static void on_interrupt_signal(int sig) { (void)sig; }

int sm_io_interrupted(void)
{
  return atomic_load_explicit(&io_stopping, memory_order_relaxed) ||
         (current_work && atomic_load_explicit(&current_work->abandoned, memory_order_relaxed));
}

/* size bytes, plus a uv_work_t after them for pool work. */
static io_req_t *req_alloc(size_t size, int pool, io_free_fn free_fields)
{
  size_t head = (size + 15) & ~(size_t)15;
  io_req_t *req = calloc(1, head + (pool ? sizeof(uv_work_t) : 0));
  if (!req)
    return NULL;
  atomic_init(&req->refs, 1);
  req->free_fields = free_fields;
  if (pool)
    req->uv = (char *)req + head;
  return req;
}

io_req_t *sm_io_req_new_loop(size_t size, io_loop_fn on_loop, io_cancel_fn cancel,
                             io_free_fn free_fields)
{
  io_req_t *req = req_alloc(size, 0, free_fields);
  if (req) {
    req->on_loop = on_loop;
    req->cancel = cancel;
  }
  return req;
}

io_req_t *sm_io_req_new(size_t size, io_work_fn work, io_free_fn free_fields)
{
  io_req_t *req = req_alloc(size, 1, free_fields);
  if (req)
    req->work = work;
  return req;
}

void sm_io_req_release(io_req_t *req)
{
  if (!req || atomic_fetch_sub_explicit(&req->refs, 1, memory_order_acq_rel) != 1)
    return;
  if (req->free_fields)
    req->free_fields(req);
  free(req);
}

/* Completions of one loop iteration are woken together (io_flush_wakes): one inbox push per
** scheduler. The result is written before the request is completed; the actor keeps its own
** reference until it has read it, so the IO side may drop its own before the wake goes out. */
#define WAKE_BATCH 64
static smarm_pid_t wake_pids[WAKE_BATCH];
static uint64_t wake_tokens[WAKE_BATCH];
static size_t nwakes;

static void flush_wakes(void)
{
  smarm_wake_many(wake_pids, wake_tokens, nwakes); /* after the runtime's end: wakes nobody */
  nwakes = 0;
}

/* Requests handed to the IO thread and not completed (sm_io_in_flight): submit adds, any thread;
** sm_io_complete subtracts, on the IO thread. Relaxed: a count for statistics, ordering nothing. */
static _Atomic uint64_t io_in_flight;

uint64_t sm_io_in_flight(void) { return atomic_load_explicit(&io_in_flight, memory_order_relaxed); }

void sm_io_complete(io_req_t *req)
{
  atomic_fetch_sub_explicit(&io_in_flight, 1, memory_order_relaxed);
  io_activity++;
  req->completed = 1;
  if (req->waited) {
    if (nwakes == WAKE_BATCH)
      flush_wakes();
    wake_pids[nwakes] = req->pid;
    wake_tokens[nwakes++] = req->token;
  }
  sm_io_req_release(req);
}

static void work_cb(uv_work_t *w)
{
  io_req_t *req = w->data;
  busy_worker_t me = {pthread_self(), req, NULL, NULL};
  pthread_mutex_lock(&busy_lock);
  me.next = busy_workers;
  if (busy_workers)
    busy_workers->prev = &me;
  busy_workers = &me;
  pthread_mutex_unlock(&busy_lock);
  current_work = req;
  req->work(req);
  current_work = NULL;
  pthread_mutex_lock(&busy_lock);
  if (me.prev)
    me.prev->next = me.next;
  else
    busy_workers = me.next;
  if (me.next)
    me.next->prev = me.prev;
  pthread_mutex_unlock(&busy_lock);
}

static void after_work_cb(uv_work_t *w, int status)
{
  io_req_t *req = w->data;
  pool_in_flight--;
  if (atomic_load_explicit(&req->abandoned, memory_order_relaxed))
    pool_abandoned--;
  if (status == UV_ECANCELED)
    req->err = -ECANCELED;
  sm_io_complete(req);
}

/* Every 10 ms while there is pool work to interrupt (see the top): stopping, every pool thread
** still in a work function; else those whose work is abandoned. */
static void interrupt_tick(uv_timer_t *t)
{
  int stopping = atomic_load_explicit(&io_stopping, memory_order_relaxed);
  if (pool_in_flight == 0 || (!stopping && pool_abandoned == 0)) {
    uv_timer_stop(t);
    interrupting = 0;
    if (stopping) /* the last handle of the loop: it ends */
      uv_close((uv_handle_t *)t, NULL);
    return;
  }
  if (!interrupt_installed)
    return;
  pthread_mutex_lock(&busy_lock);
  for (busy_worker_t *b = busy_workers; b; b = b->next)
    if (stopping || atomic_load_explicit(&b->req->abandoned, memory_order_relaxed))
      pthread_kill(b->thread, IO_INTERRUPT_SIGNAL);
  pthread_mutex_unlock(&busy_lock);
}

static void interrupt_start(void)
{
  if (!interrupting && !uv_is_closing((uv_handle_t *)&interrupt_timer)) {
    interrupting = 1;
    uv_timer_start(&interrupt_timer, interrupt_tick, 0, 10);
  }
}

/* A cancel request (sm_io_call_timeout): it holds a reference to the request it cancels. */
typedef struct cancel_req {
  io_req_t base;
  io_req_t *target;
  int ended; /* its actor ended while it waited (abandon): pool work is interrupted too; a
                timeout leaves pool work to finish (its result may still be taken) */
} cancel_req_t;

/* Its on_loop: cancels the target unless that completed meanwhile: a request on the loop by its
** own cancel; pool work whose actor ended while it waited (abandon) by interrupting it where it
** blocks (see the top). */
static void cancel_on_loop(io_req_t *req, void *loop)
{
  (void)loop;
  io_req_t *target = ((cancel_req_t *)req)->target;
  if (!target->completed && target->cancel) {
    target->cancel(target);
  } else if (!target->completed && target->work && ((cancel_req_t *)req)->ended &&
             !atomic_load_explicit(&target->abandoned, memory_order_relaxed)) {
    atomic_store_explicit(&target->abandoned, 1, memory_order_relaxed);
    pool_abandoned++; /* until its after_work_cb */
    if (interrupt_installed) /* else the host's signal: the work ends when it ends */
      interrupt_start();
  }
  sm_io_complete(req);
}

static void cancel_free(io_req_t *req) { sm_io_req_release(((cancel_req_t *)req)->target); }

/* One per module that keeps things open (tcp, udp, proc's three, lineedit, fs's waits, watch):
** a fixed number, so a full table is a bug of smarm's, which aborts rather than leave a module's
** handles open at the stop (four slots once dropped udp's hook silently, after proc's three and
** tcp's one). */
static io_stop_fn stop_hooks[16];
static int nstop_hooks;

void sm_io_on_stop(io_stop_fn fn)
{
  pthread_mutex_lock(&io_lock);
  int known = 0;
  for (int i = 0; i < nstop_hooks; i++)
    known |= stop_hooks[i] == fn;
  if (!known) {
    if (nstop_hooks == (int)(sizeof stop_hooks / sizeof *stop_hooks)) {
      fprintf(stderr, "smarm: too many IO stop hooks (src/io/io.c)\n");
      abort();
    }
    stop_hooks[nstop_hooks++] = fn;
  }
  pthread_mutex_unlock(&io_lock);
}


static void drain(uv_loop_t *loop);

static void async_cb(uv_async_t *a)
{
  drain(a->loop);
  if (atomic_load_explicit(&io_stopping, memory_order_acquire)) {
    for (int i = 0; i < nstop_hooks; i++) /* close what the modules keep open (sockets) */
      stop_hooks[i](a->loop);
    uv_close((uv_handle_t *)a, NULL);
    interrupt_start(); /* its tick closes it once no pool work is in flight */
  }
}

/* Takes every submitted request and starts it, oldest first. */
static void drain(uv_loop_t *loop)
{
  io_req_t *list = atomic_exchange_explicit(&io_queue, NULL, memory_order_seq_cst);
  if (list)
    io_activity++;
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
    if (req->on_loop) {
      req->on_loop(req, loop);
      continue;
    }
    uv_work_t *w = req->uv;
    w->data = req;
    int rc = uv_queue_work(loop, w, work_cb, after_work_cb);
    if (rc < 0) { /* cannot happen with a valid loop; fail the request rather than hang */
      req->err = rc;
      sm_io_complete(req);
    } else {
      pool_in_flight++;
    }
  }
}

/* The loop: while it has been busy within IO_SPIN_NS it polls (the queue, then libuv without
** blocking), so a busy exchange pays no wake-ups; then it announces that it stops spinning,
** looks at the queue once more, and blocks in libuv until a socket, a pool completion or a wake.
** Producers skip uv_async_send while io_spinning is set: each side stores before it loads,
** seq_cst (the queue exchange and push are RMWs), so either the loop's last look sees the push or
** the producer sees io_spinning clear and wakes it (the argument of inbox.h). */
#define IO_SPIN_NS 50000

static void *io_main(void *arg)
{
  (void)arg;
  /* A write from this thread or libuv's pool (which it creates, so they inherit this mask) to a
  ** pipe, socket or FIFO whose reader is gone must fail with EPIPE, not raise SIGPIPE, whose
  ** default action ends the whole process. SIGPIPE goes to the thread that wrote, so blocking it
  ** here changes nothing for the host's other threads; libuv resets the mask of the programs it
  ** starts (spec/c/test_proc.c checks). */
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
  /* This thread (started by an actor's scheduler) takes the signals libuv handles even where the
  ** schedulers block them (sm_io_sched_thread_enter, TSan builds). */
  sigset_t async_set;
  io_signal_set(&async_set);
  pthread_sigmask(SIG_UNBLOCK, &async_set, NULL);
  int64_t busy_at = smarm_now_ns();
  uint64_t seen = io_activity;
  atomic_store_explicit(&io_spinning, 1, memory_order_seq_cst);
  smarm_helper_running(1); /* running or spinning: a CPU the schedulers may lose to us */
  for (;;) {
    drain(&io_loop);
    int alive = uv_run(&io_loop, UV_RUN_NOWAIT);
    flush_wakes();
    if (!alive)
      break; /* the async handle is closed and nothing is left */
    int64_t now = smarm_now_ns();
    if (io_activity != seen) {
      seen = io_activity;
      busy_at = now;
    }
    if (now - busy_at < IO_SPIN_NS && !atomic_load_explicit(&io_stopping, memory_order_relaxed))
      continue;
    atomic_exchange_explicit(&io_spinning, 0, memory_order_seq_cst); /* an RMW: inbox.h */
    if (atomic_load_explicit(&io_queue, memory_order_seq_cst) == NULL) {
      smarm_helper_running(0);
      int still = uv_run(&io_loop, UV_RUN_ONCE);
      smarm_helper_running(1);
      flush_wakes();
      if (!still)
        break;
    }
    atomic_store_explicit(&io_spinning, 1, memory_order_seq_cst);
    busy_at = smarm_now_ns();
  }
  atomic_store_explicit(&io_spinning, 0, memory_order_seq_cst);
  smarm_helper_running(0);
  flush_wakes();
  uv_loop_close(&io_loop);
  return NULL;
}

/* libuv takes descriptors 0-2 for standard streams and aborts when asked to close one of them
** (uv__close asserts). A process started with one of them closed would hand that number to the
** loop's epoll or a socket: /dev/null fills each closed one first, as node does at start. */
static void fill_closed_stdio(void)
{
  for (int fd = 0; fd <= 2; fd++)
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      int got = open("/dev/null", O_RDWR | O_CLOEXEC); /* the lowest free number: fd */
      if (got > 2)
        close(got); /* cannot happen while fd is free; never keep a stray descriptor */
    }
}

static int io_start(void)
{
  pthread_mutex_lock(&io_lock);
  int rc = 0;
  if (!atomic_load_explicit(&io_ready, memory_order_relaxed)) {
    fill_closed_stdio();
    if (!interrupt_installed) { /* only where nobody else handles the signal */
      struct sigaction old, sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = on_interrupt_signal; /* no SA_RESTART: blocked calls return EINTR */
      sigemptyset(&sa.sa_mask);
      if (sigaction(IO_INTERRUPT_SIGNAL, NULL, &old) == 0 &&
          (old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN) && !(old.sa_flags & SA_SIGINFO))
        interrupt_installed = sigaction(IO_INTERRUPT_SIGNAL, &sa, NULL) == 0;
    }
    rc = uv_loop_init(&io_loop);
    if (rc == 0 && (rc = uv_async_init(&io_loop, &io_async, async_cb)) != 0)
      uv_loop_close(&io_loop);
    if (rc == 0) {
      uv_timer_init(&io_loop, &interrupt_timer); /* cannot fail */
      interrupting = 0;
      pool_abandoned = 0;
      atomic_store_explicit(&io_stopping, 0, memory_order_relaxed);
      if ((rc = -pthread_create(&io_thread, NULL, io_main, NULL)) != 0) {
        uv_close((uv_handle_t *)&io_async, NULL);
        uv_close((uv_handle_t *)&interrupt_timer, NULL);
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

/* Pushes req onto the submission queue, waking the loop if the queue was empty. */
static void submit(io_req_t *req)
{
  atomic_fetch_add_explicit(&io_in_flight, 1, memory_order_relaxed);
  io_req_t *old = atomic_load_explicit(&io_queue, memory_order_relaxed);
  do {
    req->next = old;
  } while (!atomic_compare_exchange_weak_explicit(&io_queue, &old, req, memory_order_seq_cst,
                                                  memory_order_relaxed));
  if (!old && !atomic_load_explicit(&io_spinning, memory_order_seq_cst))
    uv_async_send(&io_async);
}

/* Submits req for the calling actor (taking the IO side's reference); 0 or a negative errno. */
static int submit_waited(io_req_t *req)
{
  smarm_pid_t self = smarm_self();
  if (!self)
    return -EPERM;
  if (!atomic_load_explicit(&io_ready, memory_order_acquire) && io_start() != 0)
    return -ECANCELED;
  req->pid = self;
  req->token = smarm_await_token();
  req->err = 0;
  req->completed = 0;
  req->waited = 1;
  atomic_fetch_add_explicit(&req->refs, 1, memory_order_relaxed); /* the IO side's */
  submit(req);
  return 0;
}

/* Parks until the wake of req's token; a timer cannot be short of memory without a timeout. */
static int await_done(io_req_t *req, int64_t timeout_ns)
{
  int rc;
  while ((rc = smarm_await(req->token, timeout_ns)) == -ENOMEM)
    smarm_yield();
  return rc;
}

int sm_io_call(io_req_t *req) { return sm_io_call_timeout(req, SMARM_FOREVER); }

/* The caller's cleanup while it waits (smarm_cleanup_push): it ended in the middle (killed, or
** stopped at shutdown), so its reference is released here, and a request on the loop is
** cancelled (a socket's receive or accept would otherwise wait for good), pool work taken out of
** the pool or interrupted (see the top). */
/* A request that cancels req on the loop (cancel_on_loop looks at `completed` there, on the loop's
** thread), holding a reference to it; NULL when out of memory. */
static cancel_req_t *cancel_new(io_req_t *req)
{
  cancel_req_t *c =
    (cancel_req_t *)sm_io_req_new_loop(sizeof *c, cancel_on_loop, NULL, cancel_free);
  if (c) {
    atomic_fetch_add_explicit(&req->refs, 1, memory_order_relaxed); /* the cancel's */
    c->target = req;
  }
  return c;
}

static void abandon(void *p)
{
  io_req_t *req = p;
  cancel_req_t *c;
  if ((req->cancel || req->work) && (c = cancel_new(req))) { /* pool work: interrupted */
    c->ended = 1;
    sm_io_post(&c->base);
  }
  sm_io_req_release(req);
}

int sm_io_call_timeout(io_req_t *req, int64_t timeout_ns)
{
  int rc = submit_waited(req);
  if (rc < 0)
    return rc;
  smarm_cleanup_t cleanup = {abandon, req, NULL}; /* until the last wait below is over */
  smarm_cleanup_push(&cleanup);
  rc = await_done(req, timeout_ns);
  if (rc != 0) {
    /* Timed out: ask the loop to cancel it and wait for the answer. Requests are taken in order,
    ** so by then req is either cancelled or completed; its completion (if any) wrote req first. */
    cancel_req_t *c;
    while (!(c = cancel_new(req)))
      smarm_sleep(1000 * 1000);
    sm_io_call(&c->base); /* fails only without an IO thread: then nothing is left to cancel */
    sm_io_req_release(&c->base);
    rc = req->completed && req->err != -ETIMEDOUT ? 0 : -ETIMEDOUT;
  }
  smarm_cleanup_pop(&cleanup);
  return rc;
}

int sm_io_post(io_req_t *req)
{
  if (!atomic_load_explicit(&io_ready, memory_order_acquire) ||
      atomic_load_explicit(&io_stopping, memory_order_acquire)) {
    sm_io_req_release(req);
    return -ECANCELED;
  }
  req->waited = 0;
  submit(req); /* the IO side takes the caller's reference */
  return 0;
}

void sm_io_shutdown(void)
{
  pthread_mutex_lock(&io_lock);
  if (atomic_load_explicit(&io_ready, memory_order_relaxed)) {
    atomic_store_explicit(&io_stopping, 1, memory_order_release);
    uv_async_send(&io_async);
    pthread_join(io_thread, NULL);
    atomic_store_explicit(&io_ready, 0, memory_order_relaxed);
    /* Nobody submits now (the runtime has ended); anything that came after the loop's last look
    ** is released unrun. */
    io_req_t *left = atomic_exchange_explicit(&io_queue, NULL, memory_order_acquire);
    while (left) {
      io_req_t *next = left->next;
      left->err = -ECANCELED;
      sm_io_complete(left);
      left = next;
    }
    flush_wakes();
    /* what a socket's close ended without a completion is not in flight either */
    atomic_store_explicit(&io_in_flight, 0, memory_order_relaxed);
  }
  pthread_mutex_unlock(&io_lock);
}

int sm_io_buf_reserve(char **data, size_t *cap, size_t len, size_t room)
{
  if (*cap - len >= room)
    return 0;
  size_t grown = *cap ? *cap : room;
  while (grown - len < room)
    grown *= 2;
  char *more = realloc(*data, grown);
  if (!more)
    return -ENOMEM;
  *data = more;
  *cap = grown;
  return 0;
}

const char *sm_io_err_name(int err) { return uv_err_name(err); }
const char *sm_io_strerror(int err) { return uv_strerror(err); }

smarm_msg_t *sm_io_event_new(int source, int kind, uint64_t id, int err, size_t n)
{
  smarm_msg_t *m = smarm_msg_new(sizeof(io_event_t) + n);
  if (!m)
    return NULL;
  io_event_t ev = {IO_EVENT_TAG, (uint8_t)source, (uint8_t)kind, 0, err, id};
  memcpy(smarm_msg_data(m), &ev, sizeof ev);
  return m;
}
