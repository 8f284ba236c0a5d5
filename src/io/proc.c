/*
** Child processes and signals (see proc.h). Everything here runs on the IO thread.
*/
#define _GNU_SOURCE
#include "proc.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

/* ---- Running a program --------------------------------------------------------------------- */

typedef struct buf {
  char *data;
  size_t len, cap;
} buf_t;

typedef struct running {
  uv_process_t proc;
  uv_pipe_t in, out, err;
  uv_write_t write;
  proc_req_t *req;         /* NULL once abandoned (timed out) */
  buf_t bout, berr;
  int open_handles;        /* closes still to come before this can be freed */
  int exited, out_done, err_done;
  long long status;
  int term_signal;
  int failed;              /* an error while reading (-errno) */
  struct running *prev, *next; /* every program running, for the IO thread's stop */
} running_t;

static running_t *all_running;

static void maybe_finish(running_t *k);
static void update_guards(uv_loop_t *loop);

static void on_handle_closed(uv_handle_t *h)
{
  running_t *k = h->data;
  if (--k->open_handles == 0) {
    uv_loop_t *loop = h->loop;
    if (k->prev)
      k->prev->next = k->next;
    else if (all_running == k)
      all_running = k->next;
    if (k->next)
      k->next->prev = k->prev;
    free(k->bout.data);
    free(k->berr.data);
    free(k);
    update_guards(loop);
  }
}

static void close_all_handles(running_t *k)
{
  uv_handle_t *hs[] = {(uv_handle_t *)&k->proc, (uv_handle_t *)&k->in, (uv_handle_t *)&k->out,
                       (uv_handle_t *)&k->err};
  for (size_t i = 0; i < sizeof hs / sizeof *hs; i++)
    if (hs[i]->data && !uv_is_closing(hs[i]))
      uv_close(hs[i], on_handle_closed);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *out)
{
  running_t *k = h->data;
  buf_t *b = h == (uv_handle_t *)&k->out ? &k->bout : &k->berr;
  if (sm_io_buf_reserve(&b->data, &b->cap, b->len, hint < 4096 ? 4096 : hint) < 0) {
    *out = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
    return;
  }
  *out = uv_buf_init(b->data + b->len, (unsigned)(b->cap - b->len));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *unused)
{
  (void)unused;
  running_t *k = st->data;
  int is_out = st == (uv_stream_t *)&k->out;
  if (n > 0) {
    (is_out ? &k->bout : &k->berr)->len += (size_t)n;
    return;
  }
  if (n == 0)
    return;
  if (n != UV_EOF && !k->failed)
    k->failed = (int)n;
  uv_read_stop(st);
  *(is_out ? &k->out_done : &k->err_done) = 1;
  maybe_finish(k);
}

static void on_child_exit(uv_process_t *p, int64_t status, int term_signal)
{
  running_t *k = p->data;
  k->exited = 1;
  k->status = status;
  k->term_signal = term_signal;
  maybe_finish(k);
}

static void on_written(uv_write_t *w, int status)
{
  running_t *k = w->data;
  (void)status; /* a program that does not read its stdin is not an error */
  if (!uv_is_closing((uv_handle_t *)&k->in))
    uv_close((uv_handle_t *)&k->in, on_handle_closed);
}

/* Completes the request once the program has exited and both pipes ended; then closes up. */
static void maybe_finish(running_t *k)
{
  if (!(k->exited && k->out_done && k->err_done))
    return;
  proc_req_t *r = k->req;
  if (r) {
    k->req = NULL;
    r->base.uv = NULL;
    r->status = k->status;
    r->term_signal = k->term_signal;
    r->out = k->bout.data;
    r->out_len = k->bout.len;
    r->err = k->berr.data;
    r->err_len = k->berr.len;
    k->bout.data = k->berr.data = NULL;
    io_finish(&r->base, k->failed);
  }
  close_all_handles(k);
}

static void run_on_loop(io_req_t *req, void *loop)
{
  proc_req_t *r = (proc_req_t *)req;
  running_t *k = calloc(1, sizeof *k);
  if (!k) {
    io_finish(req, -ENOMEM);
    return;
  }
  k->req = r;
  uv_pipe_init(loop, &k->out, 0);
  uv_pipe_init(loop, &k->err, 0);
  k->out.data = k->err.data = k;
  k->open_handles = 2;
  uv_stdio_container_t stdio[3];
  if (r->input) {
    uv_pipe_init(loop, &k->in, 0);
    k->in.data = k;
    k->open_handles++;
    stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
    stdio[0].data.stream = (uv_stream_t *)&k->in;
  } else {
    stdio[0].flags = UV_IGNORE; /* /dev/null */
  }
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&k->out;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&k->err;
  uv_process_options_t o;
  memset(&o, 0, sizeof o);
  o.exit_cb = on_child_exit;
  o.file = r->argv[0];
  o.args = r->argv;
  o.env = r->env;
  o.cwd = r->cwd;
  o.stdio_count = 3;
  o.stdio = stdio;
  k->proc.data = k;
  int rc = uv_spawn(loop, &k->proc, &o);
  /* the child's chdir failing and the program missing both say ENOENT (or EACCES, ENOTDIR):
  ** a cwd that cannot be entered is the one to name */
  if (rc < 0 && r->cwd && access(r->cwd, X_OK) != 0)
    r->cwd_failed = 1;
  if (rc < 0) {
    /* libuv still wants the process handle closed */
    k->open_handles++;
    k->req = NULL;
    close_all_handles(k);
    io_finish(req, rc);
    return;
  }
  k->open_handles++;
  r->base.uv = k;
  k->next = all_running;
  if (all_running)
    all_running->prev = k;
  all_running = k;
  update_guards(loop);
  uv_read_start((uv_stream_t *)&k->out, on_alloc, on_read);
  uv_read_start((uv_stream_t *)&k->err, on_alloc, on_read);
  if (r->input) {
    k->write.data = k;
    uv_buf_t b = uv_buf_init(r->input, (unsigned)r->input_len);
    if (uv_write(&k->write, (uv_stream_t *)&k->in, &b, 1, on_written) < 0)
      uv_close((uv_handle_t *)&k->in, on_handle_closed);
  }
}

/* SIGKILL to every program still running (the runtime's end, a fatal signal). */
static void kill_running_programs(void)
{
  for (running_t *k = all_running; k; k = k->next)
    if (!k->exited)
      uv_process_kill(&k->proc, SIGKILL);
}

/* Timed out: kill the program; its handles close when it has gone. */
static void run_cancel(io_req_t *req)
{
  proc_req_t *r = (proc_req_t *)req;
  running_t *k = r->base.uv;
  if (!k)
    return;
  k->req = NULL;
  r->base.uv = NULL;
  uv_process_kill(&k->proc, SIGKILL);
  r->out = k->bout.data; /* what it wrote so far; what comes until its pipes close is dropped */
  r->out_len = k->bout.len;
  r->err = k->berr.data;
  r->err_len = k->berr.len;
  memset(&k->bout, 0, sizeof k->bout);
  memset(&k->berr, 0, sizeof k->berr);
  io_finish(req, -ETIMEDOUT);
}

static void free_list(char **v)
{
  for (char **p = v; p && *p; p++)
    free(*p);
  free(v);
}

static void proc_free(io_req_t *req)
{
  proc_req_t *r = (proc_req_t *)req;
  free_list(r->argv);
  free_list(r->env);
  free(r->cwd);
  free(r->input);
  free(r->out);
  free(r->err);
}

/* The IO thread stops (the runtime has ended): programs still running are killed, their callers
** (gone) completed as cancelled; their handles close as they go, so the loop can end. */
static void stop_programs(void *loop)
{
  (void)loop;
  kill_running_programs();
  for (running_t *k = all_running; k; k = k->next) {
    proc_req_t *r = k->req;
    if (r) {
      k->req = NULL;
      r->base.uv = NULL;
      io_finish(&r->base, -ECANCELED);
    }
  }
}

/* ---- Signals ------------------------------------------------------------------------------- */

#define MAX_SIGNAL 65

typedef struct waiters {
  uv_signal_t handle;
  int initialised;           /* the handle exists; it runs while count > 0 */
  proc_req_t **list;
  size_t count, cap;
} waiters_t;

static waiters_t signals[MAX_SIGNAL];

static void on_signal(uv_signal_t *h, int signum)
{
  (void)h;
  waiters_t *w = &signals[signum];
  size_t n = w->count;
  proc_req_t **list = w->list;
  w->list = NULL;
  w->count = w->cap = 0;
  uv_signal_stop(&w->handle);
  for (size_t i = 0; i < n; i++) {
    list[i]->base.uv = NULL;
    sm_io_complete(&list[i]->base);
  }
  free(list);
  update_guards(h->loop);
}

static void signal_on_loop(io_req_t *req, void *loop)
{
  proc_req_t *r = (proc_req_t *)req;
  waiters_t *w = &signals[r->signum];
  if (w->count == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 4;
    proc_req_t **more = realloc(w->list, cap * sizeof *more);
    if (!more) {
      io_finish(req, -ENOMEM);
      return;
    }
    w->list = more;
    w->cap = cap;
  }
  if (!w->initialised) {
    uv_signal_init(loop, &w->handle);
    w->initialised = 1;
  }
  if (w->count == 0) { /* the first waiter starts the handle */
    int rc = uv_signal_start(&w->handle, on_signal, r->signum);
    if (rc < 0) {
      io_finish(req, rc);
      return;
    }
  }
  w->list[w->count++] = r;
  r->base.uv = w;
  update_guards(loop);
}

static void signal_cancel(io_req_t *req)
{
  proc_req_t *r = (proc_req_t *)req;
  waiters_t *w = r->base.uv;
  if (!w)
    return;
  for (size_t i = 0; i < w->count; i++) {
    if (w->list[i] == r) {
      w->list[i] = w->list[--w->count];
      break;
    }
  }
  if (w->count == 0) /* the last waiter left */
    uv_signal_stop(&w->handle);
  r->base.uv = NULL;
  io_finish(req, -ETIMEDOUT);
  update_guards(w->handle.loop);
}

/* The IO thread stops: waiters end cancelled, the handles close. */
static void stop_signals(void *loop)
{
  (void)loop;
  for (int s = 0; s < MAX_SIGNAL; s++) {
    waiters_t *w = &signals[s];
    for (size_t i = 0; i < w->count; i++) {
      w->list[i]->base.uv = NULL;
      io_finish(&w->list[i]->base, -ECANCELED);
    }
    free(w->list);
    w->list = NULL;
    w->count = w->cap = 0;
    if (w->initialised) {
      uv_close((uv_handle_t *)&w->handle, NULL);
      w->initialised = 0;
    }
  }
}

/* ---- Children die with the runtime ----------------------------------------------------------
** The runtime's end kills the programs still running (stop_programs); so must a signal that ends
** the process with nobody to handle it. While a program runs, each of these signals that no
** smarm.signal.wait waits for has a guard: its handler (on the loop, through libuv) kills every
** running program, then lets the signal end the process as it would have (its default action,
** raised again). A waiter for the signal takes over from the guard while it waits. SIGKILL
** cannot be caught: a process killed by it leaves its programs running. */

static const int fatal_signals[] = {SIGTERM, SIGINT, SIGHUP};
#define NGUARDS (sizeof fatal_signals / sizeof *fatal_signals)
static uv_signal_t guards[NGUARDS];
static int guards_made;       /* the handles exist on the current loop */
static int guard_on[NGUARDS]; /* started */

static void on_fatal_signal(uv_signal_t *h, int signum)
{
  (void)h;
  kill_running_programs();
  for (size_t i = 0; i < NGUARDS; i++)
    if (guard_on[i])
      uv_signal_stop(&guards[i]);
  signal(signum, SIG_DFL);
  raise(signum);
}

static void update_guards(uv_loop_t *loop)
{
  if (sm_io_interrupted())
    return; /* the IO thread stops (stop_guards): no new handle may keep its loop going */
  for (size_t i = 0; i < NGUARDS; i++) {
    int want = all_running != NULL && signals[fatal_signals[i]].count == 0;
    if (want && !guard_on[i]) {
      if (!guards_made) {
        for (size_t j = 0; j < NGUARDS; j++)
          uv_signal_init(loop, &guards[j]);
        guards_made = 1;
      }
      guard_on[i] = uv_signal_start(&guards[i], on_fatal_signal, fatal_signals[i]) == 0;
    } else if (!want && guard_on[i]) {
      uv_signal_stop(&guards[i]);
      guard_on[i] = 0;
    }
  }
}

static void stop_guards(void *loop)
{
  (void)loop;
  for (size_t i = 0; i < NGUARDS; i++) {
    guard_on[i] = 0;
    if (guards_made)
      uv_close((uv_handle_t *)&guards[i], NULL);
  }
  guards_made = 0;
}

static pthread_once_t registered = PTHREAD_ONCE_INIT;
static void register_stop(void)
{
  sm_io_on_stop(stop_programs);
  sm_io_on_stop(stop_signals);
  sm_io_on_stop(stop_guards);
}

proc_req_t *sm_proc_run_new(void)
{
  pthread_once(&registered, register_stop);
  return (proc_req_t *)sm_io_req_new_loop(sizeof(proc_req_t), run_on_loop, run_cancel, proc_free);
}

proc_req_t *sm_proc_signal_new(void)
{
  pthread_once(&registered, register_stop);
  return (proc_req_t *)sm_io_req_new_loop(sizeof(proc_req_t), signal_on_loop, signal_cancel,
                                          proc_free);
}
