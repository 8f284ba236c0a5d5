/* The IO thread (src/io/io.c): requests run on libuv's pool and wake their actor; a runtime can
** end with requests in flight; nothing leaks (ASan, valgrind) and no race is seen (TSan). */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include "io/io.h"

#include <errno.h>
#include <time.h>
#include <unistd.h>

#define MS (1000LL * 1000)

typedef struct sum_req {
  io_req_t base;
  int64_t delay_ns; /* the work sleeps this long first */
  int a, b, sum;
  int *freed;       /* counts io_free calls */
} sum_req_t;

static void sum_work(io_req_t *req)
{
  sum_req_t *r = (sum_req_t *)req;
  if (r->delay_ns > 0) {
    struct timespec ts = {r->delay_ns / 1000000000, r->delay_ns % 1000000000};
    nanosleep(&ts, NULL);
  }
  r->sum = r->a + r->b;
  req->err = r->sum < 0 ? -ERANGE : 0;
}

static _Atomic int freed_total;

static void sum_free(io_req_t *req)
{
  (void)req;
  atomic_fetch_add(&freed_total, 1);
}

static sum_req_t *sum_new(int a, int b, int64_t delay_ns)
{
  sum_req_t *r = (sum_req_t *)sm_io_req_new(sizeof *r, sum_work, sum_free);
  CHECK(r != NULL);
  r->a = a;
  r->b = b;
  r->delay_ns = delay_ns;
  return r;
}

static smarm_pid_t many_main; /* the adders report to it */

static void adder(void *arg)
{
  int k = (int)(intptr_t)arg;
  for (int i = 0; i < 20; i++) {
    sum_req_t *r = sum_new(k, i, 0);
    CHECK_EQ(sm_io_call(&r->base), 0);
    CHECK_EQ(r->base.err, 0);
    CHECK_EQ(r->sum, k + i);
    sm_io_req_release(&r->base);
  }
  CHECK_EQ(test_send_u64(many_main, 1), 0);
}

static void main_many(void *arg)
{
  (void)arg;
  many_main = smarm_self();
  for (int k = 0; k < 50; k++)
    CHECK_EQ(smarm_spawn_on(SMARM_SCHED_ANY, adder, (void *)(intptr_t)k, NULL, NULL), 0);
  sum_req_t *r = sum_new(-5, 1, 0); /* an error result travels too */
  CHECK_EQ(sm_io_call(&r->base), 0);
  CHECK_EQ(r->base.err, -ERANGE);
  CHECK(strcmp(sm_io_err_name(r->base.err), "ERANGE") == 0);
  sm_io_req_release(&r->base);
  for (int k = 0; k < 50; k++) /* the adders finish */
    CHECK_EQ(test_recv_u64(TEST_HANG_GUARD_NS), 1);
}

TEST(requests_from_many_actors_on_both_schedulers)
{
  atomic_store(&freed_total, 0);
  RUN_IO(2, main_many, NULL);
  sm_io_shutdown();
  CHECK_EQ(atomic_load(&freed_total), 50 * 20 + 1);
}

static _Atomic int sums_done; /* slow works that ran to their end with the right sum */

static void slow_sum_free(io_req_t *req)
{
  sum_req_t *r = (sum_req_t *)req;
  if (r->sum == 3)
    atomic_fetch_add(&sums_done, 1);
  sum_free(req);
}

static void slow_caller(void *arg)
{
  (void)arg;
  sum_req_t *r = sum_new(1, 2, 100 * MS);
  r->base.free_fields = slow_sum_free;
  sm_io_call(&r->base); /* the runtime ends while this waits: the actor never returns */
  CHECK(0);
}

static void main_leave_early(void *arg)
{
  (void)arg;
  for (int i = 0; i < 3; i++)
    CHECK_EQ(smarm_spawn(slow_caller, (void *)(intptr_t)i, NULL, NULL), 0);
  smarm_yield(); /* they submit and park; main returns: the runtime stops them */
}

TEST(runtime_ends_with_requests_in_flight)
{
  atomic_store(&freed_total, 0);
  atomic_store(&sums_done, 0);
  RUN_IO(1, main_leave_early, NULL);
  /* The stopped actors' references went with them (sm_io_call's cleanup); the IO side's go when
  ** the works complete, which sm_io_shutdown waits for: each request is freed exactly once. */
  sm_io_shutdown();
  CHECK_EQ(atomic_load(&freed_total), 3);
  CHECK_EQ(atomic_load(&sums_done), 3); /* the works ran to their end first */
}

/* A killed actor's request is released with it, and one on the loop is cancelled. */
static void killed_caller(void *arg)
{
  (void)arg;
  sum_req_t *r = sum_new(1, 2, 100 * MS);
  r->base.free_fields = slow_sum_free;
  sm_io_call(&r->base); /* killed while it waits */
  CHECK(0);
}

static void main_kill_caller(void *arg)
{
  (void)arg;
  smarm_pid_t pid;
  smarm_ref_t ref;
  CHECK_EQ(smarm_spawn(killed_caller, NULL, &(smarm_spawn_opts_t){.monitor = &ref}, &pid), 0);
  smarm_yield(); /* it submits and parks */
  CHECK_EQ(smarm_exit_signal(pid, SMARM_EXIT_KILL, NULL, 0), 0);
  smarm_msg_t *m;
  CHECK_EQ(smarm_receive(TEST_HANG_GUARD_NS, &m), 0); /* its DOWN */
  CHECK_EQ(smarm_msg_kind(m), SMARM_MSG_DOWN);
  smarm_msg_free(m);
  WAIT_UNTIL(atomic_load(&freed_total) == 1, 1 * MS); /* freed once the work completes */
  CHECK_EQ(atomic_load(&freed_total), 1);
}

TEST(a_killed_actors_request_is_released)
{
  atomic_store(&freed_total, 0);
  atomic_store(&sums_done, 0);
  RUN_IO(2, main_kill_caller, NULL);
  sm_io_shutdown();
  CHECK_EQ(atomic_load(&freed_total), 1);
  CHECK_EQ(atomic_load(&sums_done), 1);
}

/* ---- blocked pool work at the stop ---- */

typedef struct block_req {
  io_req_t base;
  int fd;           /* a pipe's read end nobody writes to */
  int saw_eintr;    /* the read returned EINTR while the IO layer was stopping */
} block_req_t;

static int blocked_pipe[2];
static block_req_t *blocked;
static _Atomic int block_started; /* the work function runs on a pool thread */

static void block_work(io_req_t *req)
{
  block_req_t *r = (block_req_t *)req;
  char c;
  ssize_t n;
  atomic_store(&block_started, 1); /* a stop from here on interrupts the read (every 10 ms) */
  while ((n = read(r->fd, &c, 1)) < 0 && errno == EINTR && !sm_io_interrupted())
    ;
  r->saw_eintr = n < 0 && errno == EINTR && sm_io_interrupted();
  req->err = n < 0 ? -errno : 0;
}

static void blocked_caller(void *arg)
{
  (void)arg;
  sm_io_call(&blocked->base); /* never returns: the runtime ends while the read blocks */
  CHECK(0);
}

static void main_leave_blocked(void *arg)
{
  (void)arg;
  CHECK_EQ(smarm_spawn(blocked_caller, NULL, NULL, NULL), 0);
  WAIT_UNTIL(atomic_load(&block_started), 1 * MS); /* the read starts on a pool thread */
  CHECK(atomic_load(&block_started));
  /* main ends the runtime */
}

TEST(shutdown_interrupts_blocked_pool_work)
{
  CHECK_EQ(pipe(blocked_pipe), 0);
  blocked = (block_req_t *)sm_io_req_new(sizeof *blocked, block_work, NULL);
  blocked->fd = blocked_pipe[0];
  atomic_fetch_add(&blocked->base.refs, 1); /* the test's, to read the result afterwards (the
                                             ** stopped actor's goes with it) */
  atomic_store(&block_started, 0);
  int64_t t0 = smarm_now_ns();
  RUN_IO(1, main_leave_blocked, NULL);
  sm_io_shutdown(); /* would wait for a writer forever without the interruption */
  CHECK(smarm_now_ns() - t0 < TEST_HANG_GUARD_NS); /* not waited for without end */
  CHECK_EQ(blocked->saw_eintr, 1);
  CHECK_EQ(blocked->base.err, -EINTR);
  sm_io_req_release(&blocked->base); /* the test's reference */
  close(blocked_pipe[0]);
  close(blocked_pipe[1]);
}

TEST(io_call_outside_an_actor)
{
  sum_req_t *r = sum_new(1, 1, 0);
  CHECK_EQ(sm_io_call(&r->base), -EPERM);
  sm_io_req_release(&r->base);
  sm_io_shutdown(); /* never started: nothing to do */
}

TEST_MAIN()
