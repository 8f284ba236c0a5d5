/*
** A small test harness for the C core. Each spec/c/test_<module>.c holds TEST() cases and ends
** with TEST_MAIN(). A case fails when one of its CHECKs fails, or when it ran no CHECK at all (a
** case that checks nothing proves nothing); a CHECK prints both sides and lets the case go on
** (many CHECKs run inside actors, where jumping out is not an option). SKIP("why") ends a case
** that cannot run here; it is reported "skip <name>: <why>" and counted apart.
** `test_x name...` runs only the named cases (an unknown name is an error); `test_x --list`
** prints every case's name, one a line. The last line is "N passed, N failed, N skipped".
*/
#ifndef SMARM_TEST_H
#define SMARM_TEST_H

#include "smarm.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct test_case {
  const char *name;
  void (*fn)(void);
  struct test_case *next;
} test_case_t;

/* Adds a case at the end of the list (TEST() does it before main). */
void test_register(test_case_t *tc);

/* Of the running case; updated atomically (CHECKs run on scheduler threads too). */
extern int test_failures; /* CHECKs that failed */
extern int test_checks;   /* CHECKs that ran */
/* Marks the running case skipped, with why (a string literal); see SKIP. */
void test_skip(const char *why);

#define TEST(name)                                                                             \
  static void name(void);                                                                      \
  __attribute__((constructor)) static void register_##name(void)                              \
  {                                                                                            \
    static test_case_t tc_ = {#name, name, NULL};                                              \
    test_register(&tc_);                                                                       \
  }                                                                                            \
  static void name(void)

/* Ends the calling function (the case, or the main actor a case runs) as skipped. */
#define SKIP(why)                                                                              \
  do {                                                                                         \
    test_skip(why);                                                                            \
    return;                                                                                    \
  } while (0)

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    __atomic_add_fetch(&test_checks, 1, __ATOMIC_RELAXED);                                     \
    if (!(cond)) {                                                                             \
      __atomic_add_fetch(&test_failures, 1, __ATOMIC_RELAXED);                                 \
      fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);              \
    }                                                                                          \
  } while (0)

#define CHECK_EQ(a, b)                                                                         \
  do {                                                                                         \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
    __atomic_add_fetch(&test_checks, 1, __ATOMIC_RELAXED);                                     \
    if (check_a_ != check_b_) {                                                                \
      __atomic_add_fetch(&test_failures, 1, __ATOMIC_RELAXED);                                 \
      fprintf(stderr, "  %s:%d: CHECK_EQ(%s, %s) failed: %lld != %lld\n", __FILE__, __LINE__, \
              #a, #b, check_a_, check_b_);                                                     \
    }                                                                                          \
  } while (0)

/* Runs fn as the main actor of a runtime with `schedulers` threads and checks smarm_run's result;
** RUN_HOOKED also sets the schedulers' start and stop hooks (tests of the IO thread pass
** sm_io_sched_thread_enter/leave, as the Lua binding does). */
#define RUN_HOOKED(nsched_, fn_, arg_, start_, stop_)                                         \
  do {                                                                                         \
    smarm_config_t run_cfg_;                                                                   \
    smarm_config_init(&run_cfg_);                                                              \
    run_cfg_.schedulers = (nsched_);                                                           \
    run_cfg_.on_sched_start = (start_);                                                        \
    run_cfg_.on_sched_stop = (stop_);                                                          \
    CHECK_EQ(smarm_run(&run_cfg_, (fn_), (arg_)), 0);                                          \
  } while (0)
#define RUN(nsched_, fn_, arg_) RUN_HOOKED(nsched_, fn_, arg_, NULL, NULL)
/* Runs fn(arg) as the main actor of a runtime of nsched schedulers on the virtual clock, with
** spin_ns as smarm_config_t.spin_ns (-1: the default); returns smarm_run's result. */
static inline int test_run_virtual(unsigned nsched, smarm_actor_fn fn, void *arg, int64_t spin_ns)
{
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  cfg.schedulers = nsched;
  cfg.spin_ns = spin_ns;
  cfg.clock = SMARM_CLOCK_VIRTUAL;
  return smarm_run(&cfg, fn, arg);
}
/* Runs fn(arg) as the main actor of a runtime of nsched schedulers whose on_actor_stopped is
** on_stopped; returns smarm_run's result. */
static inline int test_run_stopped(unsigned nsched, smarm_actor_fn fn, void *arg,
                                   void (*on_stopped)(void *, void *))
{
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  cfg.schedulers = nsched;
  cfg.on_actor_stopped = on_stopped;
  return smarm_run(&cfg, fn, arg);
}
/* For tests of the IO thread (they include io/io.h). */
#define RUN_IO(nsched_, fn_, arg_)                                                            \
  RUN_HOOKED(nsched_, fn_, arg_, sm_io_sched_thread_enter, sm_io_sched_thread_leave)

/* A receive or wait timeout that only guards against a hang: long enough for a machine 10x
** slower than a developer's (sanitizers, valgrind, qemu, busy neighbours) never to reach it. */
#define TEST_HANG_GUARD_NS (120LL * 1000 * 1000 * 1000)

/* Inside an actor: polls cond every poll_ns until it holds or TEST_HANG_GUARD_NS has passed (a
** hang guard, not a time limit: follow it with a CHECK of cond). */
#define WAIT_UNTIL(cond, poll_ns)                                                              \
  do {                                                                                         \
    int64_t wait_end_ = smarm_now_ns() + TEST_HANG_GUARD_NS;                                   \
    while (!(cond) && smarm_now_ns() < wait_end_)                                              \
      smarm_sleep(poll_ns);                                                                    \
  } while (0)

/* Scale factor for stress sizes: SMARM_STRESS_SCALE (default 1; sanitizer runs use less). */
double test_scale(void);
/* n scaled by test_scale(), at least min. */
int test_scaled(int n, int min);
/* test_scale() for a test whose time goes into creating actors: a quarter of it under TSan, which
** makes and clears a fiber state for every actor (src/core/annotate.h): about 70% of such a
** test's time there (docs/design.md, "Sanitizers"). */
double test_spawn_scale(void);

/* The next number of a xorshift32 sequence whose state is *s (never 0): cheap, repeatable
** randomness for stress tests. */
uint32_t test_xorshift(uint32_t *s);

/* Sends a message holding one 64-bit value; returns smarm_send's result. */
int test_send_u64(smarm_pid_t to, uint64_t v);
/* Receives one 64-bit value (-1 on timeout or error). */
int64_t test_recv_u64(int64_t timeout_ns);

int test_main(int argc, char **argv);
#define TEST_MAIN()                                                                            \
  int main(int argc, char **argv) { return test_main(argc, argv); }

#endif
