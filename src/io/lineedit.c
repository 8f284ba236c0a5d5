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
**                                    work (a cancel, the IO thread's stop), and only the IO
**                                    thread drains it, once that work has ended (edit_done): a
**                                    cancel that came after its line is not taken by the next
**                                    read, and one that came before the work ran is not lost.
**                                    The work only polls it (every key libedit reads, inside a
**                                    key sequence or a search too, goes through edit_getc).
**   libedit's own state, last_line,  the running work's (works never overlap; libuv's queue
**   intr_char                        orders one's end before the next one's start).
**
** Ctrl-C while a line is edited is a key, not a signal: the work turns the terminal's interrupt
** character off (VINTR) while it reads and ends the read itself when the key comes (-EINTR).
** A SIGINT would reach the prompt's actor later than the keys typed after it reach the editor,
** which took them into the line being dropped; now they stay queued for the next read. Ctrl-\
** and Ctrl-Z keep their signals.
*/
#define _GNU_SOURCE
#include "lineedit.h"

#include <dlfcn.h>
#include <errno.h>
#include <locale.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <termios.h>
#include <unistd.h>
#include <uv.h>
#include <wchar.h>

typedef void (*line_fn)(char *line);

static struct {
  void (*install)(const char *prompt, line_fn fn); /* rl_callback_handler_install */
  void (*read_char)(void);                         /* rl_callback_read_char */
  void (*remove)(void);                            /* rl_callback_handler_remove */
  int (*add_history)(const char *line);
  locale_t ctype; /* the environment's LC_CTYPE, the editing thread's while it edits; 0: C */
  const char *why; /* NULL once loaded */
  char why_buf[200];
} le;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static int edit_getc(FILE *f);

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
  int (**getc_fn)(FILE *) = dlsym(lib, "rl_getc_function");
  if (!sym(lib, "rl_callback_handler_install", &le.install) ||
      !sym(lib, "rl_callback_read_char", &le.read_char) ||
      !sym(lib, "rl_callback_handler_remove", &le.remove) ||
      !sym(lib, "add_history", &le.add_history) || !catch_signals || !getc_fn) {
    le.why = "libedit.so.2 lacks the readline callback interface";
    dlclose(lib);
    return;
  }
  /* No signal handlers of libedit's: SIGINT is smarm.signal's (a prompt's Ctrl-C cancels the
  ** read instead), and a handler it installed from a pool thread would race with the others. */
  *catch_signals = 0;
  if (catch_winch)
    *catch_winch = 0;
  /* Every key through edit_getc, which a cancel ends: libedit's own reads block (inside a key
  ** sequence after Escape, an incremental search, a multibyte character). Set before libedit's
  ** initialisation (the first read), which installs it. */
  *getc_fn = edit_getc;
  /* Characters as the environment's locale encodes them (the process's stays "C": only the
  ** editing thread takes it, with uselocale), else libedit drops every non-ASCII byte. */
  le.ctype = newlocale(LC_CTYPE_MASK, "", (locale_t)0);
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
  int err; /* -ECANCELED once the work saw a cancel */
  int done;
} editing_t;

static editing_t *queue_head, *queue_tail, *running;
static int cancel_fd = -1;

/* ---- On the pool thread of the running read -------------------------------------------------- */

static editing_t *reading;
static char *last_line;
static int intr_char = -1; /* the interrupt character this read turned off; -1: none (it was
                              off already: the user's stty, which is left alone) */

/* Turns the terminal's interrupt character off (libedit may have set its modes again since the
** last key: looked at every key), remembering it. */
static void take_interrupt_key(void)
{
  struct termios t;
  if (tcgetattr(STDIN_FILENO, &t) < 0 || t.c_cc[VINTR] == _POSIX_VDISABLE)
    return;
  intr_char = t.c_cc[VINTR];
  t.c_cc[VINTR] = _POSIX_VDISABLE;
  tcsetattr(STDIN_FILENO, TCSANOW, &t); /* TCSANOW: the keys typed ahead stay */
}

/* The interrupt character back, once libedit gave the terminal back. */
static void give_back_interrupt_key(void)
{
  struct termios t;
  if (intr_char < 0 || tcgetattr(STDIN_FILENO, &t) < 0 || t.c_cc[VINTR] != _POSIX_VDISABLE)
    return;
  t.c_cc[VINTR] = (cc_t)intr_char;
  tcsetattr(STDIN_FILENO, TCSANOW, &t);
}

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

/* Waits for the terminal or a cancel: 1 when a byte can be read (or the terminal hung up: the
** read says so), 0 when the read is cancelled (err) or the terminal is gone (done). */
static int wait_key(editing_t *e)
{
  struct pollfd p[2] = {{STDIN_FILENO, POLLIN, 0}, {cancel_fd, POLLIN, 0}};
  for (;;) {
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      e->err = -errno;
      return 0;
    }
    if (p[1].revents & POLLIN) {
      e->err = -ECANCELED;
      return 0;
    }
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
      return 1;
    if (p[0].revents & POLLNVAL) {
      e->done = 1; /* no terminal: the end of input */
      return 0;
    }
  }
}

/* libedit's key reader (rl_getc_function): the next character, decoded in the editing thread's
** locale, or EOF once the read is cancelled or interrupted (Ctrl-C) or the input ends. */
static int edit_getc(FILE *f)
{
  (void)f;
  editing_t *e = reading;
  mbstate_t st;
  memset(&st, 0, sizeof st);
  for (;;) {
    if (!e || e->err || e->done)
      return EOF;
    take_interrupt_key();
    if (!wait_key(e))
      return EOF;
    char b;
    ssize_t n = read(STDIN_FILENO, &b, 1);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n <= 0) {
      e->done = 1; /* the end of input (or the terminal gone) */
      return EOF;
    }
    if (intr_char >= 0 && (unsigned char)b == intr_char) {
      e->err = -EINTR;
      return EOF;
    }
    wchar_t wc;
    size_t k = mbrtowc(&wc, &b, 1, &st);
    if (k == (size_t)-2)
      continue; /* more bytes of the same character */
    if (k == (size_t)-1) {
      memset(&st, 0, sizeof st); /* not a character: dropped, as libedit does */
      continue;
    }
    return (int)wc;
  }
}

static void edit_work(uv_work_t *w)
{
  editing_t *e = w->data;
  struct pollfd c = {cancel_fd, POLLIN, 0};
  if (poll(&c, 1, 0) > 0 && (c.revents & POLLIN)) { /* cancelled before it ran: nothing shown */
    e->err = -ECANCELED;
    return;
  }
  locale_t old = le.ctype ? uselocale(le.ctype) : (locale_t)0;
  reading = e;
  intr_char = -1;
  take_interrupt_key(); /* before the prompt shows: a Ctrl-C from then on is a key */
  le.install(e->prompt, on_line);
  while (!e->done && !e->err)
    le.read_char(); /* edit_getc waits for the keys */
  le.remove(); /* the terminal as it was */
  give_back_interrupt_key();
  reading = NULL;
  if (old)
    uselocale(old);
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

/* Stops the running work (it sees cancel_fd readable). A write fails only when the counter is
** full: then it is signalled already. */
static void signal_cancel(void)
{
  uint64_t one = 1;
  if (write(cancel_fd, &one, sizeof one) < 0) {
    /* full: already signalled */
  }
}

/* On the IO thread, between two works: whatever was added to cancel_fd was for the one that
** ended (the only writers are this thread's cancel and stop, of the running work). */
static void drain_cancels(void)
{
  uint64_t n;
  while (read(cancel_fd, &n, sizeof n) > 0)
    ;
}

static void edit_done(uv_work_t *w, int status)
{
  editing_t *e = w->data;
  uv_loop_t *loop = w->loop; /* w is freed with e */
  running = NULL;
  drain_cancels();
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
  if (running)
    signal_cancel();
  while (queue_head) {
    editing_t *e = queue_head;
    queue_head = e->next;
    e->req->base.uv = NULL;
    io_finish(&e->req->base, -ECANCELED);
    free_editing(e);
  }
  queue_tail = NULL;
}

/* exit() (os.exit from any actor) while a read runs: libuv joins its pool's threads as the
** process ends, which waited for a line; the cancel ends the read and gives the terminal back. */
static void cancel_at_exit(void)
{
  if (cancel_fd >= 0)
    signal_cancel();
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
    atexit(cancel_at_exit);
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
    signal_cancel();
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
