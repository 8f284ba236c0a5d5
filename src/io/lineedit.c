/*
** The line editor (see lineedit.h).
**
** Protocol (who writes what):
**   le (the loaded functions, why)   written once under pthread_once, read after it by anyone.
**   queue, running                   the IO thread's alone: reads waiting, and the one whose
**                                    work is on the pool (at most one).
**   editing_t.req                    the IO thread's: NULL once the read was cancelled (its
**                                    answer is then dropped).
**   editing_t.line, err, done        written by the work (pool thread), read by the IO thread
**                                    in the after-work callback (libuv orders the two).
**   cancel_fd                        an eventfd: the IO thread adds to it to stop the running
**                                    work (a cancel, the IO thread's stop); the work drains it
**                                    as it starts, so a cancel that came after its line is not
**                                    taken by the next read.
**   libedit's own state, last_line   the running work's (works never overlap; libuv's queue
**                                    orders one's end before the next one's start).
*/
#define _GNU_SOURCE
#include "lineedit.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <uv.h>

typedef void (*line_fn)(char *line);

static struct {
  void (*install)(const char *prompt, line_fn fn); /* rl_callback_handler_install */
  void (*read_char)(void);                         /* rl_callback_read_char */
  void (*remove)(void);                            /* rl_callback_handler_remove */
  int (*add_history)(const char *line);
  const char *why; /* NULL once loaded */
  char why_buf[200];
} le;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* dlsym into a function pointer of any type (ISO C has no cast between the two). */
static int sym(void *lib, const char *name, void *fn_ptr)
{
  void *p = dlsym(lib, name);
  memcpy(fn_ptr, &p, sizeof p);
  return p != NULL;
}

static void load(void)
{
  const char *env = getenv("SMARM_LINEEDIT");
  if (env && strcmp(env, "0") == 0) {
    le.why = "line editing is turned off (SMARM_LINEEDIT=0)";
    return;
  }
  void *lib = dlopen("libedit.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *err = dlerror();
    snprintf(le.why_buf, sizeof le.why_buf, "libedit.so.2 cannot be loaded (%s)",
             err ? err : "?");
    le.why = le.why_buf;
    return;
  }
  int *catch_signals = dlsym(lib, "rl_catch_signals");
  int *catch_winch = dlsym(lib, "rl_catch_sigwinch");
  if (!sym(lib, "rl_callback_handler_install", &le.install) ||
      !sym(lib, "rl_callback_read_char", &le.read_char) ||
      !sym(lib, "rl_callback_handler_remove", &le.remove) ||
      !sym(lib, "add_history", &le.add_history) || !catch_signals) {
    le.why = "libedit.so.2 lacks the readline callback interface";
    dlclose(lib);
    return;
  }
  /* No signal handlers of libedit's: SIGINT is smarm.signal's (a prompt's Ctrl-C cancels the
  ** read instead), and a handler it installed from a pool thread would race with the others. */
  *catch_signals = 0;
  if (catch_winch)
    *catch_winch = 0;
  le.why = NULL;
}

const char *sm_lineedit_unavailable(void)
{
  pthread_once(&load_once, load);
  if (le.why)
    return le.why;
  if (!isatty(STDIN_FILENO))
    return "standard input is not a terminal";
  if (!isatty(STDOUT_FILENO))
    return "standard output is not a terminal";
  return NULL;
}

typedef struct editing {
  uv_work_t work;
  struct editing *next; /* in the queue */
  lineedit_req_t *req;  /* NULL once cancelled */
  char *prompt;
  char *line;
  int err;
  int done;
} editing_t;

static editing_t *queue_head, *queue_tail, *running;
static int cancel_fd = -1;

/* ---- On the pool thread of the running read -------------------------------------------------- */

static editing_t *reading;
static char *last_line;

static void on_line(char *line)
{
  reading->line = line;
  reading->done = 1;
}

static void add_history(const char *line)
{
  if (!line[0] || (last_line && strcmp(last_line, line) == 0))
    return;
  le.add_history(line);
  free(last_line);
  last_line = strdup(line);
}

static void edit_work(uv_work_t *w)
{
  editing_t *e = w->data;
  uint64_t n;
  while (read(cancel_fd, &n, sizeof n) > 0) /* a cancel meant for an earlier read */
    ;
  reading = e;
  le.install(e->prompt, on_line);
  struct pollfd p[2] = {{STDIN_FILENO, POLLIN, 0}, {cancel_fd, POLLIN, 0}};
  while (!e->done) {
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      e->err = -errno;
      break;
    }
    if (p[1].revents & POLLIN) {
      e->err = -ECANCELED;
      break;
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
      le.read_char();
    if ((p[0].revents & (POLLHUP | POLLERR | POLLNVAL)) && !e->done)
      e->done = 1; /* the terminal is gone: the end of input */
  }
  le.remove(); /* the terminal as it was */
  reading = NULL;
  if (e->line)
    add_history(e->line);
}

/* ---- On the IO thread ------------------------------------------------------------------------- */

static void free_editing(editing_t *e)
{
  free(e->prompt);
  free(e->line);
  free(e);
}

static void start_next(uv_loop_t *loop);

static void edit_done(uv_work_t *w, int status)
{
  editing_t *e = w->data;
  uv_loop_t *loop = w->loop; /* w is freed with e */
  running = NULL;
  lineedit_req_t *r = e->req;
  if (r) {
    r->base.uv = NULL;
    r->line = e->line;
    e->line = NULL;
    io_finish(&r->base, status == UV_ECANCELED ? -ECANCELED : e->err);
  }
  free_editing(e);
  start_next(loop);
}

static void start_next(uv_loop_t *loop)
{
  while (!running && queue_head) {
    editing_t *e = queue_head;
    queue_head = e->next;
    if (!queue_head)
      queue_tail = NULL;
    running = e;
    int rc = uv_queue_work(loop, &e->work, edit_work, edit_done);
    if (rc < 0) {
      running = NULL;
      e->req->base.uv = NULL;
      io_finish(&e->req->base, rc);
      free_editing(e);
    }
  }
}

/* The IO thread stops: the running read gives the terminal back; the others end. */
static void lineedit_stop(void *loop)
{
  (void)loop;
  uint64_t one = 1;
  if (running && write(cancel_fd, &one, sizeof one) < 0) {
    /* cannot fail but when the counter is full: then it is already signalled */
  }
  while (queue_head) {
    editing_t *e = queue_head;
    queue_head = e->next;
    e->req->base.uv = NULL;
    io_finish(&e->req->base, -ECANCELED);
    free_editing(e);
  }
  queue_tail = NULL;
}

static void lineedit_on_loop(io_req_t *req, void *loop)
{
  lineedit_req_t *r = (lineedit_req_t *)req;
  if (sm_lineedit_unavailable()) {
    io_finish(req, -ENOTSUP);
    return;
  }
  if (cancel_fd < 0) {
    cancel_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (cancel_fd < 0) {
      io_finish(req, -errno);
      return;
    }
    sm_io_on_stop(lineedit_stop);
  }
  editing_t *e = calloc(1, sizeof *e);
  if (!e || !(e->prompt = strdup(r->prompt ? r->prompt : ""))) {
    free(e);
    io_finish(req, -ENOMEM);
    return;
  }
  e->req = r;
  e->work.data = e;
  r->base.uv = e;
  if (queue_tail)
    queue_tail->next = e;
  else
    queue_head = e;
  queue_tail = e;
  start_next(loop);
}

/* The reader ended or timed out: the running read gives the terminal back (its answer is
** dropped); a waiting one leaves the queue. */
static void lineedit_cancel(io_req_t *req)
{
  editing_t *e = req->uv;
  if (!e)
    return;
  e->req = NULL;
  req->uv = NULL;
  if (e == running) {
    uint64_t one = 1;
    if (write(cancel_fd, &one, sizeof one) < 0) {
      /* full: already signalled */
    }
  } else {
    editing_t **p = &queue_head, *prev = NULL;
    while (*p && *p != e) {
      prev = *p;
      p = &(*p)->next;
    }
    if (*p) {
      *p = e->next;
      if (queue_tail == e)
        queue_tail = prev;
    }
    free_editing(e);
  }
  io_finish(req, -ETIMEDOUT);
}

static void lineedit_free(io_req_t *req)
{
  lineedit_req_t *r = (lineedit_req_t *)req;
  free(r->prompt);
  free(r->line);
}

lineedit_req_t *sm_lineedit_req_new(void)
{
  return (lineedit_req_t *)sm_io_req_new_loop(sizeof(lineedit_req_t), lineedit_on_loop,
                                              lineedit_cancel, lineedit_free);
}
