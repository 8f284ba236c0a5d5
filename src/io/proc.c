/*
** Child processes and signals (see proc.h). Everything here runs on the IO thread.
*/
#define _GNU_SOURCE
#include "proc.h"

#include "ids.h"
#include "tcp.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

/* ---- Programs: what run and spawn share --------------------------------------------------- */

typedef struct child child_t;
struct child {
  uv_process_t proc;         /* first: the handle's data is the record (a running_t or live_t) */
  int exited;
  long long status;
  int term_signal;
  int group;                 /* leads a process group of its own: kills go to the group */
  void (*on_exit)(child_t *c);
  child_t *prev, *next;      /* in all_running while the program runs */
};

static child_t *all_running; /* the programs running (the guards and the stop kill them) */

static void update_guards(uv_loop_t *loop);
static int starting; /* a program is being started (start_child): the guards are wanted */

static void unlink_running(child_t *c)
{
  if (c->prev)
    c->prev->next = c->next;
  else if (all_running == c)
    all_running = c->next;
  if (c->next)
    c->next->prev = c->prev;
  c->prev = c->next = NULL;
}

/* Process groups (opts.group) whose leader has exited while others of the group ran on: the
** programs it started, which every kill of the group is promised to reach (process:kill, the
** runtime's end, a fatal signal). A group is kept from its leader's exit until a kill finds it
** empty (ESRCH) or the runtime ends.
** Why kill(-pgid) is safe after the leader's pid was reaped: while any process of the group
** lives, its pgid is in use, and the kernel gives that number to no new process (nor group), so
** the signal reaches the leader's group and nobody else. Once the group is empty, a kill says
** ESRCH and the group is forgotten; so it is when the look for lost exits (on_reap_check, every
** REAP_CHECK_MS while groups are kept) finds it empty. The one case left: the group empties, and
** within those 100 ms the pids wrap round (pid_max) to that number and its new owner leads a
** group of its own before a kill comes. */
typedef struct left_group {
  int pgid;
  struct left_group *next;
} left_group_t;

static left_group_t *left_groups;
/* The runtime's end has sent its SIGKILL to every program and group (stop_programs): a leader
** reaped after it leaves no group to keep, whose stale pgid a later run's end would signal
** however much later. Cleared by the next program's start. IO thread only, as the list. */
static int groups_killed;

/* Signals the left group pgid: 0 or a libuv error; UV_ESRCH, and it is forgotten, once empty
** (or when it was not kept). */
static int signal_left_group(int pgid, int signum)
{
  for (left_group_t **p = &left_groups; *p; p = &(*p)->next) {
    if ((*p)->pgid != pgid)
      continue;
    int rc = uv_kill(-pgid, signum);
    if (rc == UV_ESRCH) {
      left_group_t *g = *p;
      *p = g->next;
      free(g);
    }
    return rc;
  }
  return UV_ESRCH;
}

/* The leader of group pgid has exited: the group is kept while others are in it (out of
** memory: it is not, and no kill reaches it any more, as before groups were kept). */
static void keep_left_group(int pgid)
{
  if (groups_killed) /* the end's SIGKILL reached it: what is left of it is dying */
    return;
  if (kill(-pgid, 0) != 0 && errno != EPERM) /* empty (ESRCH); EPERM: someone of it lives */
    return;
  left_group_t *g = malloc(sizeof *g);
  if (!g)
    return;
  g->pgid = pgid;
  g->next = left_groups;
  left_groups = g;
}

static void on_child_exit(uv_process_t *p, int64_t status, int term_signal)
{
  child_t *c = p->data;
  if (c->group)
    keep_left_group(c->proc.pid); /* before anything else of ours can start a program */
  c->exited = 1;
  c->status = status;
  c->term_signal = term_signal;
  unlink_running(c);
  update_guards(p->loop);
  c->on_exit(c);
}

/* Signals a running program (its group when it leads one): 0 or a libuv error. */
static int signal_child(child_t *c, int signum)
{
  if (c->exited)
    return c->group ? signal_left_group(c->proc.pid, signum) : UV_ESRCH;
  return c->group ? uv_kill(-c->proc.pid, signum) : uv_process_kill(&c->proc, signum);
}

/* SIGKILL to every program still running (the runtime's end, a fatal signal), and to the groups
** whose leaders have exited; those are forgotten (their programs are not ours to wait for). */
static void kill_running_programs(void)
{
  for (child_t *c = all_running; c; c = c->next)
    signal_child(c, SIGKILL);
  while (left_groups) {
    left_group_t *g = left_groups;
    left_groups = g->next;
    uv_kill(-g->pgid, SIGKILL);
    free(g);
  }
}

/* ---- SIGCHLD under TSan ---------------------------------------------------------------------
** libuv's SIGCHLD handler takes a lock made of a pipe (a blocking read of its one byte) and
** relies on the kernel blocking SIGCHLD while the handler runs. TSan defers signals and delivers
** them at the exit of an intercepted call, that read's included: a second SIGCHLD then runs the
** handler again inside the first, on the same thread, and its read waits forever for the byte
** the first one holds (the IO thread hung so, 14 children unreaped, in a CI run under load).
** Under TSan only, the handler libuv installs is wrapped (after each uv_spawn, which installs it
** when the first program starts): a nested call on the same thread only notes that it came, and
** the outer one runs libuv's handler once more when done. No signal is lost: a SIGCHLD stands
** for "some child ended", and the loop reaps them all. Without TSan the kernel's mask does it. */
#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
static void (*libuv_on_sigchld)(int); /* libuv's handler (static there: one address) */
static _Thread_local volatile sig_atomic_t in_sigchld, sigchld_again;

static void guarded_sigchld(int signum)
{
  if (in_sigchld) {
    sigchld_again = 1;
    return;
  }
  in_sigchld = 1;
  do {
    sigchld_again = 0;
    libuv_on_sigchld(signum);
  } while (sigchld_again);
  in_sigchld = 0;
}

static void guard_sigchld(void)
{
  struct sigaction sa;
  if (sigaction(SIGCHLD, NULL, &sa) != 0 || (sa.sa_flags & SA_SIGINFO) ||
      sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN || sa.sa_handler == guarded_sigchld)
    return;
  if (!libuv_on_sigchld) /* set once: a handler may be reading it on another thread */
    libuv_on_sigchld = sa.sa_handler;
  sa.sa_handler = guarded_sigchld;
  sigaction(SIGCHLD, &sa, NULL);
}
#else
static void guard_sigchld(void) {}
#endif

/* Starts r's argv as c with these standard streams: 0, or a libuv error (*spawned says whether
** libuv made c->proc, which must be closed then too). */
static int start_child(uv_loop_t *loop, child_t *c, proc_req_t *r, uv_stdio_container_t *stdio,
                       int *spawned)
{
  uv_process_options_t o;
  memset(&o, 0, sizeof o);
  o.exit_cb = on_child_exit;
  o.file = r->argv[0];
  o.args = r->argv;
  o.env = r->env;
  o.cwd = r->cwd;
  o.stdio_count = 3;
  o.stdio = stdio;
  if (c->group)
    o.flags |= UV_PROCESS_DETACHED; /* setsid: a session and process group of its own */
  c->proc.data = c;
  /* The guards go on before the program exists: once it runs, it can be seen (its pid, its
  ** output) and the process sent a signal before this thread, slow under load, would have
  ** started them after uv_spawn (process_spec's SIGTERM test left its program running so, under
  ** TSan). A guard's handler runs on this loop, after this function, when c is in all_running. */
  starting = 1;
  groups_killed = 0;
  update_guards(loop);
  int rc = uv_spawn(loop, &c->proc, &o);
  starting = 0;
  *spawned = 1;
  guard_sigchld();
  /* the child's chdir failing and the program missing both say ENOENT (or EACCES, ENOTDIR):
  ** a cwd that cannot be entered is the one to name (an executable file passes access(X_OK)
  ** but is no folder: ENOTDIR was the program's) */
  struct stat st;
  if (rc < 0 && r->cwd &&
      (access(r->cwd, X_OK) != 0 || stat(r->cwd, &st) != 0 || !S_ISDIR(st.st_mode)))
    r->cwd_failed = 1;
  if (rc < 0)
    return rc; /* the guards stay on (Signals says why) */
  c->next = all_running;
  if (all_running)
    all_running->prev = c;
  all_running = c;
  update_guards(loop);
  return 0;
}

/* ---- Running a program to its end (run) ---------------------------------------------------- */

typedef struct buf {
  char *data;
  size_t len, cap;
} buf_t;

typedef struct running {
  child_t c;               /* first (child_t's proc) */
  uv_pipe_t in, out, err;
  uv_write_t write;
  proc_req_t *req;         /* NULL once abandoned (timed out) */
  buf_t bout, berr;
  int open_handles;        /* closes still to come before this can be freed */
  int out_done, err_done;
  int failed;              /* an error while reading (-errno) */
  struct running *prev, *next; /* every run not freed yet, for the IO thread's stop */
} running_t;

static running_t *all_runs;

static void maybe_finish(running_t *k);

static void on_handle_closed(uv_handle_t *h)
{
  running_t *k = h->data;
  if (--k->open_handles == 0) {
    if (k->prev)
      k->prev->next = k->next;
    else if (all_runs == k)
      all_runs = k->next;
    if (k->next)
      k->next->prev = k->prev;
    free(k->bout.data);
    free(k->berr.data);
    free(k);
  }
}

static void close_all_handles(running_t *k)
{
  uv_handle_t *hs[] = {(uv_handle_t *)&k->c.proc, (uv_handle_t *)&k->in,
                       (uv_handle_t *)&k->out, (uv_handle_t *)&k->err};
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

static void run_exited(child_t *c) { maybe_finish((running_t *)c); }

static void on_written(uv_write_t *w, int status)
{
  running_t *k = w->data;
  (void)status; /* a program that does not read its stdin is not an error */
  if (!uv_is_closing((uv_handle_t *)&k->in))
    uv_close((uv_handle_t *)&k->in, on_handle_closed);
}

/* Hands what the program wrote to r. */
static void take_output(running_t *k, proc_req_t *r)
{
  r->out = k->bout.data;
  r->out_len = k->bout.len;
  r->err = k->berr.data;
  r->err_len = k->berr.len;
  memset(&k->bout, 0, sizeof k->bout);
  memset(&k->berr, 0, sizeof k->berr);
}

/* Completes the request once the program has exited and both pipes ended; then closes up. */
static void maybe_finish(running_t *k)
{
  if (!(k->c.exited && k->out_done && k->err_done))
    return;
  proc_req_t *r = k->req;
  if (r) {
    k->req = NULL;
    r->base.uv = NULL;
    r->status = k->c.status;
    r->term_signal = k->c.term_signal;
    take_output(k, r);
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
  k->c.on_exit = run_exited;
  k->next = all_runs;
  if (all_runs)
    all_runs->prev = k;
  all_runs = k;
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
  int spawned = 0;
  int rc = start_child(loop, &k->c, r, stdio, &spawned);
  k->open_handles++; /* the process handle: libuv wants it closed even when the spawn failed */
  if (rc < 0) {
    k->req = NULL;
    close_all_handles(k);
    io_finish(req, rc);
    return;
  }
  r->base.uv = k;
  uv_read_start((uv_stream_t *)&k->out, on_alloc, on_read);
  uv_read_start((uv_stream_t *)&k->err, on_alloc, on_read);
  if (r->input) {
    k->write.data = k;
    uv_buf_t b = uv_buf_init(r->input, (unsigned)r->input_len);
    if (uv_write(&k->write, (uv_stream_t *)&k->in, &b, 1, on_written) < 0)
      uv_close((uv_handle_t *)&k->in, on_handle_closed);
  }
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
  signal_child(&k->c, SIGKILL);
  /* its stdin's bytes are r's, freed once r is completed: a write still pending (a program it
  ** started may read that pipe on) ends now, cancelled by the close */
  if (k->in.data && !uv_is_closing((uv_handle_t *)&k->in))
    uv_close((uv_handle_t *)&k->in, on_handle_closed);
  take_output(k, r); /* what it wrote so far */
  /* Its output pipes close now, not when the program has gone: a program it started may hold
  ** them for good (`sh -c "yes; true"`), and its output, read on into buffers nobody will
  ** take, grew without end. Such a writer meets EPIPE (SIGPIPE) instead, as in Erlang when a
  ** port closes. A closed pipe reads no more (uv_close), so the run counts it as ended; the
  ** process handle closes once the program has exited (maybe_finish, now if it has). */
  uv_handle_t *pipes[] = {(uv_handle_t *)&k->out, (uv_handle_t *)&k->err};
  for (size_t i = 0; i < 2; i++)
    if (!uv_is_closing(pipes[i]))
      uv_close(pipes[i], on_handle_closed);
  k->out_done = k->err_done = 1;
  io_finish(req, -ETIMEDOUT);
  maybe_finish(k);
}

/* ---- Live programs (spawn) ------------------------------------------------------------------
** A live_t is named by its id from the spawn until its handle is released; it is freed when
** both have happened: released and exited (libuv reaps the program only while its process
** handle is open). */

typedef struct live {
  child_t c;               /* first (child_t's proc) */
  uint64_t id;             /* 0 once released */
  smarm_pid_t notify;      /* who gets the exit message, or 0 */
  proc_req_t *waits;       /* the waits for its exit (linked through wait_next) */
} live_t;

static io_ids_t lives;

static void free_live(uv_handle_t *h) { free(h->data); }

static void finish_waits(live_t *l, int err)
{
  proc_req_t *w = l->waits;
  l->waits = NULL;
  while (w) {
    proc_req_t *next = w->wait_next;
    w->wait_next = NULL;
    w->base.uv = NULL;
    w->status = l->c.status;
    w->term_signal = l->c.term_signal;
    io_finish(&w->base, err);
    w = next;
  }
}

static void live_exited(child_t *c)
{
  live_t *l = (live_t *)c;
  if (l->notify) {
    smarm_msg_t *m = sm_io_event_new(IO_EV_PROCESS, IO_EV_EXIT, l->id, 0,
                                     sizeof(proc_exit_payload_t));
    if (m) { /* out of memory: no message (a wait still tells) */
      proc_exit_payload_t pl = {c->status, c->term_signal, c->proc.pid};
      memcpy((char *)smarm_msg_data(m) + sizeof(io_event_t), &pl, sizeof pl);
      if (smarm_send_outside(l->notify, m) < 0)
        smarm_msg_free(m); /* no runtime any more */
    }
  }
  finish_waits(l, 0);
  if (!l->id) /* released already */
    uv_close((uv_handle_t *)&c->proc, free_live);
}

/* The handle is gone: forgotten now if it has exited, else once it has. */
static void live_release(live_t *l)
{
  sm_io_id_free(&lives, l->id);
  l->id = 0;
  if (l->c.exited)
    uv_close((uv_handle_t *)&l->c.proc, free_live);
}

/* A standard stream of a spawned program: the container for uv_spawn, and for a pipe the
** socketpair (parent's end, child's end). 0 or -errno. */
static int stdio_of(proc_req_t *r, int i, uv_stdio_container_t *stdio, int pair[3][2])
{
  switch (r->stdio[i]) {
  case IOPROC_PIPE:
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair[i]) < 0)
      return -errno;
    if (i > 0)
      shutdown(pair[i][0], SHUT_WR); /* an output: nothing of ours reaches the program's reads */
    stdio[i].flags = UV_INHERIT_FD;
    stdio[i].data.fd = pair[i][1];
    return 0;
  case IOPROC_INHERIT:
    stdio[i].flags = UV_INHERIT_FD;
    stdio[i].data.fd = i;
    return 0;
  case IOPROC_TO_STDOUT:
    stdio[i] = stdio[1];
    return 0;
  default:
    stdio[i].flags = UV_IGNORE; /* /dev/null */
    return 0;
  }
}

static void spawn_on_loop(proc_req_t *r, uv_loop_t *loop)
{
  live_t *l = calloc(1, sizeof *l);
  if (!l) {
    io_finish(&r->base, -ENOMEM);
    return;
  }
  l->c.on_exit = live_exited;
  l->c.group = r->group;
  l->notify = r->notify;
  int pair[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
  uv_stdio_container_t stdio[3];
  int rc = 0, spawned = 0, started = 0;
  for (int i = 0; i < 3 && rc == 0; i++)
    rc = stdio_of(r, i, stdio, pair);
  if (rc == 0)
    started = (rc = start_child(loop, &l->c, r, stdio, &spawned)) == 0;
  for (int i = 0; i < 3; i++) /* the child's ends are the child's alone */
    if (pair[i][1] >= 0)
      close(pair[i][1]);
  if (rc == 0 && !(l->id = sm_io_id_new(&lives, l)))
    rc = -ENOMEM;
  for (int i = 0; i < 3; i++) {
    if (pair[i][0] < 0)
      continue;
    if (rc == 0) { /* adopting closes the descriptor when it fails */
      r->stdio_fd[i] = pair[i][0];
      if (!(r->stdio_id[i] = sm_tcp_adopt_unix(loop, pair[i][0])))
        rc = -ENOMEM;
    } else {
      close(pair[i][0]);
    }
  }
  if (rc == 0) {
    r->new_id = l->id;
    r->os_pid = l->c.proc.pid;
    io_finish(&r->base, 0);
    return;
  }
  for (int i = 0; i < 3; i++)
    if (r->stdio_id[i])
      sm_tcp_post_close(r->stdio_id[i]);
  if (started) { /* it runs, in all_running: killed, and freed at its exit (reaped) */
    l->notify = 0; /* no exit message for a spawn that failed */
    signal_child(&l->c, SIGKILL);
    if (l->id)
      live_release(l);
  } else if (spawned) {
    uv_close((uv_handle_t *)&l->c.proc, free_live);
  } else {
    free(l);
  }
  io_finish(&r->base, rc);
}

static void live_on_loop(io_req_t *req, void *loop)
{
  proc_req_t *r = (proc_req_t *)req;
  if (r->op == IOPROC_SPAWN) {
    spawn_on_loop(r, loop);
    return;
  }
  live_t *l = sm_io_id_get(&lives, r->id);
  if (!l) {
    io_finish(req, UV_EBADF);
    return;
  }
  switch (r->op) {
  case IOPROC_WAIT:
    if (l->c.exited) {
      r->status = l->c.status;
      r->term_signal = l->c.term_signal;
      io_finish(req, 0);
    } else {
      r->wait_next = l->waits;
      l->waits = r;
      r->base.uv = l;
    }
    return;
  case IOPROC_KILL:
    io_finish(req, signal_child(&l->c, r->signum));
    return;
  case IOPROC_RELEASE:
    live_release(l);
    io_finish(req, 0);
    return;
  default:
    io_finish(req, UV_EINVAL);
  }
}

/* A wait timed out: it leaves the list. */
static void live_cancel(io_req_t *req)
{
  proc_req_t *r = (proc_req_t *)req;
  live_t *l = r->base.uv;
  if (!l)
    return;
  for (proc_req_t **p = &l->waits; *p; p = &(*p)->wait_next) {
    if (*p == r) {
      *p = r->wait_next;
      break;
    }
  }
  r->wait_next = NULL;
  r->base.uv = NULL;
  io_finish(req, -ETIMEDOUT);
}

/* ---- Requests' ends ------------------------------------------------------------------------ */

static void free_list(char **v)
{
  for (char **p = v; p && *p; p++)
    free(*p);
  free(v);
}

static void post_release(uint64_t id)
{
  proc_req_t *c = sm_proc_req_new(IOPROC_RELEASE);
  if (c) { /* out of memory: it stays known until the IO thread stops */
    c->id = id;
    sm_io_post(&c->base);
  }
}

/* Runs on the thread that lets go of the last reference (tcp.c's tcp_free says why): what a
** spawn made for a caller that never took it is let go here; the program runs on. */
static void proc_free(io_req_t *req)
{
  proc_req_t *r = (proc_req_t *)req;
  if (r->op == IOPROC_SPAWN && r->base.completed && r->base.err == 0 && !r->new_taken) {
    for (int i = 0; i < 3; i++)
      if (r->stdio_id[i])
        sm_tcp_post_close(r->stdio_id[i]);
    post_release(r->new_id);
  }
  free_list(r->argv);
  free_list(r->env);
  free(r->cwd);
  free(r->input);
  free(r->out);
  free(r->err);
}

/* The IO thread stops (the runtime has ended): programs still running are killed, their callers
** (gone) completed as cancelled, and every handle closes, so that the loop can end. A process
** handle closes only once its program has exited (killed: at once), so that libuv reaps it
** rather than leave a zombie for the rest of the host's life; a run's pipes close now (a
** program it started may hold them open for good). */
static void stop_live(void *l)
{
  live_t *v = l;
  finish_waits(v, -ECANCELED);
  v->notify = 0;
  live_release(v); /* closed now if it has exited, else at its exit (live_exited) */
}

static void stop_programs(void *loop)
{
  (void)loop;
  kill_running_programs();
  groups_killed = 1;
  for (running_t *k = all_runs; k; k = k->next) {
    proc_req_t *r = k->req;
    if (r) {
      k->req = NULL;
      r->base.uv = NULL;
      io_finish(&r->base, -ECANCELED);
    }
    k->out_done = k->err_done = 1; /* maybe_finish closes the process handle at its exit */
    uv_handle_t *pipes[] = {(uv_handle_t *)&k->in, (uv_handle_t *)&k->out, (uv_handle_t *)&k->err};
    for (size_t i = 0; i < sizeof pipes / sizeof *pipes; i++)
      if (pipes[i]->data && !uv_is_closing(pipes[i]))
        uv_close(pipes[i], on_handle_closed);
    if (k->c.exited)
      close_all_handles(k);
  }
  sm_io_id_each(&lives, stop_live);
}

/* ---- Signals --------------------------------------------------------------------------------
** One libuv handle per signal, started by its first waiter (smarm.signal.wait) and, unless
** latched, stopped by its last: libuv then puts the default action back. Two cases keep a
** handle running while nobody waits (latched, until the IO thread stops):
** - a guard. From the start of the first program on (before it exists: see start_child), the
**   handles of SIGTERM, SIGINT and SIGHUP run; one that catches its signal while nobody waits
**   kills every running program, then lets the signal end the process as it would have (its
**   default action, raised again). SIGKILL cannot be caught: a process killed by it leaves its
**   programs running. A guard stays on: stopped when the last program ended, it could drop a
**   signal libuv had caught and not yet dispatched (libuv drops what arrives for a handle
**   stopped meanwhile), and with no program to kill it only lets the signal end the process.
** - a signal the process started with ignored (nohup's SIGHUP, SIGINT in a background job). Its
**   handle is latched by its first waiter, since stopping it would make the signal fatal, and
**   catching it while nobody waits does nothing. It needs no guard. The IO thread's stop puts
**   SIG_IGN back after closing the handle (libuv's close sets SIG_DFL first: a signal in
**   between ends the process; libuv offers nothing to close that window).
** - a caught signal (smarm.signal.catch): latched for the rest of the run, and one that comes
**   while nobody waits is kept (pending) for the next waiter, who is completed at once;
**   several such count as one, as a pending Unix signal does. It needs no guard either: its
**   default action never applies while the run lasts.
** The waiters and the guard share one handle, so a signal caught while the guard is on and a
** waiter arrives or leaves goes to one of them, never to neither (without a guard, one caught
** just before the last waiter leaves goes with the handle's stop: the timeout and the signal
** crossed). The disposition the process started with is read before this loop first starts the
** signal's handle (ignored_at_start), and again on the next loop, which therefore sees what the
** host set between two runs. */

#define MAX_SIGNAL 65

typedef struct waiters {
  uv_signal_t handle;
  int initialised;           /* the handle exists on this loop */
  int started;
  int latched;               /* runs while nobody waits too (above) */
  int disposition_read;      /* ignored is known, for this loop */
  int ignored;               /* the process had SIG_IGN for it before this loop first caught it */
  int caught;                /* smarm.signal.catch asked for it: latched, arrivals kept */
  int pending;               /* it came while nobody waited, caught: for the next waiter */
  proc_req_t **list;
  size_t count, cap;
} waiters_t;

static waiters_t signals[MAX_SIGNAL];
static const int fatal_signals[] = {SIGTERM, SIGINT, SIGHUP}; /* guarded */
#define NFATAL (sizeof fatal_signals / sizeof *fatal_signals)

static void on_signal(uv_signal_t *h, int signum);

static int ignored_at_start(int signum)
{
  waiters_t *w = &signals[signum];
  if (!w->disposition_read) { /* before this loop's first start: nothing of ours is in place */
    struct sigaction sa;
    w->ignored = sigaction(signum, NULL, &sa) == 0 && !(sa.sa_flags & SA_SIGINFO) &&
                 sa.sa_handler == SIG_IGN;
    w->disposition_read = 1;
  }
  return w->ignored;
}

/* Starts or stops signum's handle as its waiters and its latch say: 0 or a libuv error (of the
** start, for the waiter that asked it). */
static int update_signal(uv_loop_t *loop, int signum)
{
  waiters_t *w = &signals[signum];
  if (w->count > 0 && ignored_at_start(signum))
    w->latched = 1;
  int want = w->count > 0 || w->latched;
  if (want && !w->started) { /* ignored_at_start was read: a waiter above, a guard's latch */
    if (!w->initialised) {
      uv_signal_init(loop, &w->handle);
      w->initialised = 1;
    }
    int rc = uv_signal_start(&w->handle, on_signal, signum);
    if (rc < 0)
      return rc;
    w->started = 1;
  } else if (!want && w->started) {
    uv_signal_stop(&w->handle);
    w->started = 0;
  }
  return 0;
}

/* A guarded or ignored signal that nobody waits for (the handle's latch). */
static void on_unwaited_signal(int signum)
{
  if (ignored_at_start(signum))
    return; /* ignored, as the process was told before it started */
  kill_running_programs();
  signal(signum, SIG_DFL);
  raise(signum);
}

static void on_signal(uv_signal_t *h, int signum)
{
  waiters_t *w = &signals[signum];
  size_t n = w->count;
  if (n == 0 && w->caught) {
    w->pending = 1;
    return;
  }
  if (n == 0) {
    on_unwaited_signal(signum);
    return;
  }
  proc_req_t **list = w->list;
  w->list = NULL;
  w->count = w->cap = 0;
  update_signal(h->loop, signum);
  for (size_t i = 0; i < n; i++) {
    list[i]->base.uv = NULL;
    sm_io_complete(&list[i]->base);
  }
  free(list);
}

static void signal_on_loop(io_req_t *req, void *loop)
{
  proc_req_t *r = (proc_req_t *)req;
  waiters_t *w = &signals[r->signum];
  if (r->op == IOPROC_CATCH) {
    ignored_at_start(r->signum); /* read before our handle is in place: its stop restores it */
    int latched = w->latched;
    w->caught = w->latched = 1;
    int rc = update_signal(loop, r->signum);
    if (rc < 0) {
      w->caught = 0;
      w->latched = latched;
    }
    io_finish(req, rc);
    return;
  }
  if (w->pending) { /* it came while nobody waited: this waiter has it */
    w->pending = 0;
    io_finish(req, 0);
    return;
  }
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
  w->list[w->count++] = r;
  int rc = update_signal(loop, r->signum); /* the first waiter starts the handle */
  if (rc < 0) {
    w->count--;
    io_finish(req, rc);
    return;
  }
  r->base.uv = w;
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
  update_signal(w->handle.loop, r->signum); /* the last waiter stops it, unless latched */
  r->base.uv = NULL;
  io_finish(req, -ETIMEDOUT);
}

/* The IO thread stops: waiters end cancelled, the handles close, and a signal the process
** started with ignored is ignored again. */
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
    if (w->initialised)
      uv_close((uv_handle_t *)&w->handle, NULL);
    if (w->started && w->ignored)
      signal(s, SIG_IGN);
    w->list = NULL; /* the handle stays as it is: libuv ends its close on the next turn */
    w->count = w->cap = 0;
    w->initialised = w->started = w->latched = w->disposition_read = w->ignored = 0;
    w->caught = w->pending = 0;
  }
}

/* ---- Exits whose SIGCHLD went missing ------------------------------------------------------
** libuv learns that a program ended from SIGCHLD: its handler writes to the loop, which reaps.
** A SIGCHLD can fail to reach that handler: a host's own handler took it, or a sanitizer lost it
** (under TSan, one of process_spec's runs in about fifty, under load: the program a zombie, the
** loop never told). So while programs run, the loop also looks every REAP_CHECK_MS: a program
** that has ended but is still in all_running (waitid's WNOWAIT: seen, not reaped) is taken for a
** lost signal (at worst one whose message waits unread in libuv's pipe: a SIGCHLD too many does
** no harm), and SIGCHLD is raised on this thread, where libuv's handler runs at once and the
** loop reaps as usual. The timer is unreferenced: it never keeps the loop going. It runs on
** through the IO thread's stop (stop_reap_check) until the programs killed there have ended. */
#define REAP_CHECK_MS 100
static uv_timer_t reap_check;
static int reap_check_made; /* initialised on the current loop, not closed */
static int reap_check_on;   /* started */

static void close_reap_check(void)
{
  if (reap_check_made)
    uv_close((uv_handle_t *)&reap_check, NULL);
  reap_check_made = reap_check_on = 0;
}

static void on_reap_check(uv_timer_t *t)
{
  if (left_groups) { /* forget the groups that have emptied (see left_group_t) */
    for (left_group_t **p = &left_groups; *p;) {
      left_group_t *g = *p;
      if (kill(-g->pgid, 0) != 0 && errno == ESRCH) {
        *p = g->next;
        free(g);
      } else {
        p = &g->next;
      }
    }
    if (!left_groups)
      update_guards(t->loop); /* the timer stops unless programs run */
  }
  siginfo_t si;
  si.si_pid = 0; /* a child ended and not reaped? (the usual answer, no, costs one call) */
  if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || !si.si_pid)
    return;
  for (child_t *c = all_running; c; c = c->next) { /* one of ours, not a host's */
    si.si_pid = 0;
    if (waitid(P_PID, (id_t)c->proc.pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid) {
      raise(SIGCHLD);
      return;
    }
  }
}

static void start_reap_check(uv_loop_t *loop)
{
  if (!reap_check_made) {
    uv_timer_init(loop, &reap_check);
    uv_unref((uv_handle_t *)&reap_check);
    reap_check_made = 1;
  }
  reap_check_on = uv_timer_start(&reap_check, on_reap_check, REAP_CHECK_MS, REAP_CHECK_MS) == 0;
}

/* The guards (from the first program's start on: see Signals) and the look for lost exits
** (while programs run). */
static void update_guards(uv_loop_t *loop)
{
  if ((all_running || left_groups) && !reap_check_on) /* after the stop began too: the programs
                                                          it kills */
    start_reap_check(loop);
  if (sm_io_interrupted()) { /* the IO thread stops (stop_reap_check): no guard may start */
    if (!all_running) /* the last program killed at the stop has ended (no group is kept) */
      close_reap_check();
    return;
  }
  if (!all_running && !left_groups && reap_check_on) {
    uv_timer_stop(&reap_check);
    reap_check_on = 0;
  }
  for (size_t i = 0; i < NFATAL; i++) {
    int s = fatal_signals[i];
    if ((all_running || starting) && !ignored_at_start(s))
      signals[s].latched = 1;
    update_signal(loop, s); /* a guard that fails to start leaves the signal's default action */
  }
}

static void stop_reap_check(void *loop)
{
  (void)loop;
  /* else closed once the last program killed has ended (update_guards); kept groups alone
  ** (the stop forgets them: kill_running_programs) keep it no longer */
  if (!reap_check_on || !all_running)
    close_reap_check();
}

static pthread_once_t registered = PTHREAD_ONCE_INIT;
static void register_stop(void)
{
  sm_io_on_stop(stop_programs);
  sm_io_on_stop(stop_signals);
  sm_io_on_stop(stop_reap_check);
}

proc_req_t *sm_proc_run_new(void)
{
  pthread_once(&registered, register_stop);
  return (proc_req_t *)sm_io_req_new_loop(sizeof(proc_req_t), run_on_loop, run_cancel, proc_free);
}

proc_req_t *sm_proc_signal_new(void)
{
  pthread_once(&registered, register_stop);
  proc_req_t *r = (proc_req_t *)sm_io_req_new_loop(sizeof(proc_req_t), signal_on_loop,
                                                   signal_cancel, proc_free);
  if (r)
    r->op = IOPROC_SIGNAL;
  return r;
}

proc_req_t *sm_proc_req_new(enum proc_op op)
{
  pthread_once(&registered, register_stop);
  proc_req_t *r = (proc_req_t *)sm_io_req_new_loop(sizeof(proc_req_t), live_on_loop, live_cancel,
                                                   proc_free);
  if (r)
    r->op = op;
  return r;
}
