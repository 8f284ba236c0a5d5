/* Programs and signals on the IO thread (src/io/proc.c), through the request protocol the Lua
** layer uses: output and status collected, a timeout kills the program, a runtime that ends with
** programs running kills them (and reaps them), a live program talks through its pipes (tcp.c's
** sockets), is waited for and tells its exit in a message, signal waiters complete; nothing
** leaks (ASan, valgrind) and no race is seen (TSan). */
#define _GNU_SOURCE
#include "test.h"

#include "io/proc.h"
#include "io/tcp.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define MS (1000LL * 1000)

/* Gives request r (checked) a copy of argv: the request owns its strings. */
static proc_req_t *with_argv(proc_req_t *r, const char *const *argv)
{
  CHECK(r != NULL);
  size_t n = 0;
  while (argv[n])
    n++;
  r->argv = calloc(n + 1, sizeof *r->argv);
  for (size_t i = 0; i < n; i++)
    r->argv[i] = strdup(argv[i]);
  return r;
}

/* A run request for argv, with stdin bytes or NULL. */
static proc_req_t *run_new(const char *const *argv, const char *input)
{
  proc_req_t *r = with_argv(sm_proc_run_new(), argv);
  if (input) {
    r->input = strdup(input);
    r->input_len = strlen(input);
  }
  return r;
}

static int same(const char *got, size_t len, const char *want)
{
  return len == strlen(want) && (len == 0 || memcmp(got, want, len) == 0);
}

static void main_output(void *arg)
{
  (void)arg;
  const char *const sh[] = {"/bin/sh", "-c", "read x; echo out:$x; echo oops >&2; exit 3", NULL};
  proc_req_t *r = run_new(sh, "hello\n");
  CHECK_EQ(sm_io_call(&r->base), 0);
  CHECK_EQ(r->base.err, 0);
  CHECK_EQ(r->status, 3);
  CHECK_EQ(r->term_signal, 0);
  CHECK(same(r->out, r->out_len, "out:hello\n"));
  CHECK(same(r->err, r->err_len, "oops\n"));
  sm_io_req_release(&r->base);

  const char *const killed[] = {"/bin/sh", "-c", "kill -TERM $$", NULL};
  r = run_new(killed, NULL);
  CHECK_EQ(sm_io_call(&r->base), 0);
  CHECK_EQ(r->term_signal, SIGTERM);
  sm_io_req_release(&r->base);

  const char *const missing[] = {"/nonexistent/program", NULL};
  r = run_new(missing, NULL);
  CHECK_EQ(sm_io_call(&r->base), 0);
  CHECK_EQ(r->base.err, -ENOENT);
  sm_io_req_release(&r->base);

  /* programs start with no signal blocked, whatever the IO thread blocks (SIGPIPE) */
  const char *const mask[] = {"/bin/sh", "-c", "grep SigBlk /proc/self/status", NULL};
  r = run_new(mask, NULL);
  CHECK_EQ(sm_io_call(&r->base), 0);
  CHECK(same(r->out, r->out_len, "SigBlk:\t0000000000000000\n"));
  sm_io_req_release(&r->base);

  /* a program that never reads a big stdin is not an error (nor a SIGPIPE for us) */
  char *big = malloc(1 << 20);
  memset(big, 'x', (1 << 20) - 1);
  big[(1 << 20) - 1] = 0;
  const char *const ignores[] = {"/bin/true", NULL};
  r = run_new(ignores, big);
  free(big);
  CHECK_EQ(sm_io_call(&r->base), 0);
  CHECK_EQ(r->base.err, 0);
  CHECK_EQ(r->status, 0);
  sm_io_req_release(&r->base);
}

TEST(programs_report_output_status_and_failures) { RUN_IO(1, main_output, NULL); sm_io_shutdown(); }

static smarm_pid_t timeout_main; /* the runners report to it */

static void runner(void *arg)
{
  int k = (int)(intptr_t)arg;
  char script[64];
  snprintf(script, sizeof script, "echo %d", k);
  const char *const sh[] = {"/bin/sh", "-c", script, NULL};
  char want[16];
  snprintf(want, sizeof want, "%d\n", k);
  proc_req_t *r = run_new(sh, NULL);
  CHECK_EQ(sm_io_call(&r->base), 0);
  CHECK(same(r->out, r->out_len, want));
  sm_io_req_release(&r->base);
  CHECK_EQ(test_send_u64(timeout_main, (uint64_t)k), 0);
}

static void main_timeout(void *arg)
{
  (void)arg;
  const char *const sleeper[] = {"/bin/sleep", "30", NULL};
  proc_req_t *r = run_new(sleeper, NULL);
  int64_t t0 = smarm_now_ns();
  CHECK_EQ(sm_io_call_timeout(&r->base, 50 * MS), -ETIMEDOUT);
  CHECK(smarm_now_ns() - t0 < 20000 * MS); /* killed, not waited for */
  sm_io_req_release(&r->base);
  /* many at once, from actors on both schedulers; main waits for every one (a runner still in
  ** sm_io_call when the runtime ends would be stopped there, its request in flight) */
  timeout_main = smarm_self();
  for (int k = 0; k < 20; k++)
    CHECK_EQ(smarm_spawn_on(k % 2, runner, (void *)(intptr_t)k, NULL, NULL), 0);
  uint64_t seen = 0;
  for (int k = 0; k < 20; k++) {
    int64_t v = test_recv_u64(TEST_HANG_GUARD_NS);
    CHECK(v >= 0 && v < 20);
    if (v >= 0 && v < 20)
      seen |= 1ull << v;
  }
  CHECK_EQ(seen, (1ull << 20) - 1);
}

TEST(a_timed_out_program_is_killed) { RUN_IO(2, main_timeout, NULL); sm_io_shutdown(); }

static proc_req_t *left_running;

static void long_runner(void *arg)
{
  (void)arg;
  const char *const sleeper[] = {"/bin/sleep", "30", NULL};
  left_running = run_new(sleeper, NULL);
  atomic_fetch_add(&left_running->base.refs, 1); /* the test's, to read the result afterwards */
  /* One scheduler: main runs again only once this actor parks in sm_io_call, its request sent. */
  CHECK_EQ(test_send_u64((smarm_pid_t)(uintptr_t)arg, 1), 0);
  sm_io_call(&left_running->base); /* the runtime ends while this waits */
  CHECK(0);
}

static void main_leave(void *arg)
{
  (void)arg;
  CHECK_EQ(smarm_spawn(long_runner, (void *)(uintptr_t)smarm_self(), NULL, NULL), 0);
  CHECK_EQ(test_recv_u64(TEST_HANG_GUARD_NS), 1);
}

TEST(a_runtime_end_kills_its_programs)
{
  int64_t t0 = smarm_now_ns();
  RUN_IO(1, main_leave, NULL);
  sm_io_shutdown(); /* kills the sleep and waits for it: not 30 s */
  CHECK(smarm_now_ns() - t0 < 20000 * MS);
  /* cancelled when its actor was stopped (the cancel hook kills the program: -ETIMEDOUT), or
  ** else by the IO thread's stop (-ECANCELED) */
  CHECK(left_running->base.err == -ETIMEDOUT || left_running->base.err == -ECANCELED);
  sm_io_req_release(&left_running->base); /* the test's (the stopped actor's went with it) */
}

/* ---- live programs (spawn) ---- */

static proc_req_t *spawn_new(const char *const *argv, int in, int out, smarm_pid_t notify)
{
  proc_req_t *r = with_argv(sm_proc_req_new(IOPROC_SPAWN), argv);
  r->stdio[0] = in;
  r->stdio[1] = out;
  r->stdio[2] = IOPROC_NULL;
  r->notify = notify;
  return r;
}

/* A request on program id (wait, kill, release), its result left in the request. */
static proc_req_t *on_program(enum proc_op op, uint64_t id, int64_t timeout_ns)
{
  proc_req_t *r = sm_proc_req_new(op);
  CHECK(r != NULL);
  r->id = id;
  r->signum = SIGTERM;
  sm_io_call_timeout(&r->base, timeout_ns);
  return r;
}

static int is_exit_event(const smarm_msg_t *m, void *id)
{
  io_event_t ev;
  if (smarm_msg_size(m) != sizeof ev + sizeof(proc_exit_payload_t))
    return 0;
  memcpy(&ev, smarm_msg_data((smarm_msg_t *)m), sizeof ev);
  return ev.tag == IO_EVENT_TAG && ev.source == IO_EV_PROCESS && ev.kind == IO_EV_EXIT &&
         ev.id == *(uint64_t *)id;
}

static int spawned_pid; /* the program left running at the runtime's end */

static void main_spawn(void *arg)
{
  (void)arg;
  const char *const sh[] = {"/bin/sh", "-c", "read x; echo got:$x; exit 4", NULL};
  proc_req_t *r = spawn_new(sh, IOPROC_PIPE, IOPROC_PIPE, smarm_self());
  CHECK_EQ(sm_io_call(&r->base), 0);
  CHECK_EQ(r->base.err, 0);
  uint64_t id = r->new_id, in = r->stdio_id[0], out = r->stdio_id[1];
  CHECK(id != 0 && in != 0 && out != 0 && r->stdio_id[2] == 0 && r->os_pid > 0);
  r->new_taken = 1; /* the test closes the pipes and releases the program below */
  sm_io_req_release(&r->base);

  /* a wait that times out leaves the program as it was */
  proc_req_t *w = on_program(IOPROC_WAIT, id, 10 * MS);
  CHECK_EQ(w->base.err, -ETIMEDOUT);
  sm_io_req_release(&w->base);

  tcp_req_t *t = sm_tcp_req_new(IOTCP_SEND);
  t->id = in;
  t->data = strdup("hi\n");
  t->len = 3;
  CHECK_EQ(sm_io_call(&t->base), 0);
  CHECK_EQ(t->base.err, 0);
  sm_io_req_release(&t->base);
  char line[32];
  size_t got = 0;
  while (got < 7) { /* "got:hi\n", in as many pieces as the pipe gives */
    t = sm_tcp_req_new(IOTCP_RECEIVE);
    t->id = out;
    t->want = sizeof line - got;
    CHECK_EQ(sm_io_call(&t->base), 0);
    CHECK_EQ(t->base.err, 0);
    memcpy(line + got, t->data, t->len);
    got += t->len;
    sm_io_req_release(&t->base);
  }
  CHECK(got == 7 && memcmp(line, "got:hi\n", 7) == 0);

  w = on_program(IOPROC_WAIT, id, SMARM_FOREVER);
  CHECK_EQ(w->base.err, 0);
  CHECK_EQ(w->status, 4);
  CHECK_EQ(w->term_signal, 0);
  sm_io_req_release(&w->base);
  smarm_msg_t *m;
  CHECK_EQ(smarm_receive_match(is_exit_event, &id, TEST_HANG_GUARD_NS, &m), 0);
  proc_exit_payload_t pl;
  memcpy(&pl, (char *)smarm_msg_data(m) + sizeof(io_event_t), sizeof pl);
  CHECK_EQ(pl.status, 4);
  smarm_msg_free(m);
  proc_req_t *k = on_program(IOPROC_KILL, id, SMARM_FOREVER); /* it has exited */
  CHECK_EQ(k->base.err, -ESRCH);
  sm_io_req_release(&k->base);
  sm_tcp_post_close(in);
  sm_tcp_post_close(out);
  k = sm_proc_req_new(IOPROC_RELEASE);
  k->id = id;
  CHECK_EQ(sm_io_post(&k->base), 0);

  /* one left running: the runtime's end kills it and reaps it */
  const char *const sleeper[] = {"/bin/sleep", "30", NULL};
  r = spawn_new(sleeper, IOPROC_NULL, IOPROC_NULL, 0);
  CHECK_EQ(sm_io_call(&r->base), 0);
  CHECK_EQ(r->base.err, 0);
  spawned_pid = r->os_pid;
  r->new_taken = 1;
  sm_io_req_release(&r->base);
}

TEST(a_live_program_talks_exits_and_is_reaped_at_the_end)
{
  RUN_IO(1, main_spawn, NULL);
  sm_io_shutdown();
  CHECK(spawned_pid > 0);
  CHECK(kill(spawned_pid, 0) < 0 && errno == ESRCH); /* gone, not a zombie of this process */
}

/* ---- a lost SIGCHLD ---- */

/* A SIGCHLD that never reaches libuv's handler (a host's own handler takes it; under TSan, one
** of process_spec's runs in about fifty lost it under load, and p:wait() hung): the program's
** exit is still seen, by the loop's own look (proc.c, reap_check). The program waits for a file
** so that it ends while the test's handler holds SIGCHLD, whatever the machine's speed. */
static _Atomic int swallowed;

static void swallow(int sig)
{
  (void)sig;
  swallowed++;
}

static void main_lost_sigchld(void *arg)
{
  const char *go = arg;
  char script[256];
  snprintf(script, sizeof script, "while [ ! -e %s ]; do sleep 0.01; done; exit 5", go);
  const char *const sh[] = {"/bin/sh", "-c", script, NULL};
  proc_req_t *r = spawn_new(sh, IOPROC_NULL, IOPROC_NULL, 0);
  CHECK_EQ(sm_io_call(&r->base), 0);
  CHECK_EQ(r->base.err, 0);
  uint64_t id = r->new_id;
  pid_t pid = r->os_pid;
  r->new_taken = 1;
  sm_io_req_release(&r->base);

  swallowed = 0;
  struct sigaction mine, libuvs;
  memset(&mine, 0, sizeof mine);
  mine.sa_handler = swallow;
  mine.sa_flags = SA_RESTART; /* as libuv's: no EINTR elsewhere meanwhile */
  sigemptyset(&mine.sa_mask);
  int taken = sigaction(SIGCHLD, &mine, &libuvs) == 0;
  CHECK(taken);
  CHECK(libuvs.sa_handler != SIG_DFL && libuvs.sa_handler != SIG_IGN); /* libuv's, taken away */
  FILE *f = fopen(go, "w"); /* the program ends: its SIGCHLD is ours */
  CHECK(f != NULL);
  if (f)
    fclose(f);
  siginfo_t si;
  int64_t until = smarm_now_ns() + TEST_HANG_GUARD_NS;
  do { /* ended (WNOWAIT: not reaped) and the signal taken */
    smarm_sleep(MS);
    si.si_pid = 0;
    waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
  } while ((si.si_pid == 0 || swallowed == 0) && smarm_now_ns() < until);
  CHECK(si.si_pid == pid);
  CHECK(swallowed > 0);
  if (taken)
    CHECK_EQ(sigaction(SIGCHLD, &libuvs, NULL), 0); /* libuv's handler again, the signal gone */

  proc_req_t *w = on_program(IOPROC_WAIT, id, TEST_HANG_GUARD_NS);
  CHECK_EQ(w->base.err, 0);
  if (w->base.err != 0) /* not seen: a signal of our own, or the runtime's end waits for good */
    kill(getpid(), SIGCHLD);
  CHECK_EQ(w->status, 5);
  sm_io_req_release(&w->base);
  proc_req_t *k = sm_proc_req_new(IOPROC_RELEASE);
  k->id = id;
  CHECK_EQ(sm_io_post(&k->base), 0);
}

TEST(an_exit_whose_sigchld_was_lost_is_still_seen)
{
  char go[] = "/tmp/smarm-test-proc-XXXXXX";
  int fd = mkstemp(go);
  CHECK(fd >= 0);
  close(fd);
  unlink(go);
  RUN_IO(1, main_lost_sigchld, go);
  sm_io_shutdown();
  unlink(go);
}

/* ---- signals ---- */

static int handler_installed(int signum)
{
  struct sigaction sa;
  sigaction(signum, NULL, &sa);
  return sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN;
}

static _Atomic int woken;

static void signal_waiter(void *arg)
{
  (void)arg;
  proc_req_t *r = sm_proc_signal_new();
  r->signum = SIGHUP;
  CHECK_EQ(sm_io_call(&r->base), 0);
  CHECK_EQ(r->base.err, 0);
  sm_io_req_release(&r->base);
  atomic_fetch_add(&woken, 1);
}

static void main_signal(void *arg)
{
  (void)arg;
  atomic_store(&woken, 0);
  /* a wait that times out leaves nothing waiting: the handler is gone again */
  proc_req_t *r = sm_proc_signal_new();
  r->signum = SIGHUP;
  CHECK_EQ(sm_io_call_timeout(&r->base, 20 * MS), -ETIMEDOUT);
  sm_io_req_release(&r->base);
  CHECK(!handler_installed(SIGHUP));
  CHECK_EQ(smarm_spawn_on(1, signal_waiter, NULL, NULL, NULL), 0);
  /* Raise only once the IO thread's handler is in place (else SIGHUP would end the test): it
  ** starts the handler and registers the waiter in one step. */
  WAIT_UNTIL(handler_installed(SIGHUP), 1 * MS);
  CHECK(handler_installed(SIGHUP));
  kill(getpid(), SIGHUP);
  WAIT_UNTIL(atomic_load(&woken) >= 1, 1 * MS);
  CHECK_EQ(atomic_load(&woken), 1);
}

TEST(a_signal_wakes_its_waiter) { RUN_IO(2, main_signal, NULL); sm_io_shutdown(); }

TEST_MAIN()
