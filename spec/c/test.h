/*
** A small test harness for the C core. Each spec/c/test_<module>.c holds TEST() cases and ends
** with TEST_MAIN(). A case fails when one of its CHECKs fails; a CHECK prints both sides and
** lets the case go on (many CHECKs run inside actors, where jumping out is not an option).
** `test_x name...` runs only the named cases. The last line is "N passed, N failed".
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
} test_case_t;

#define TEST_MAX 128
extern test_case_t test_cases[TEST_MAX];
extern int test_count;
extern int test_failures; /* CHECK failures in the running case */

#define TEST(name)                                                                             \
  static void name(void);                                                                      \
  __attribute__((constructor)) static void register_##name(void)                              \
  {                                                                                            \
    if (test_count < TEST_MAX)                                                                 \
      test_cases[test_count++] = (test_case_t){#name, name};                                   \
  }                                                                                            \
  static void name(void)

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      __atomic_add_fetch(&test_failures, 1, __ATOMIC_RELAXED);                                 \
      fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);              \
    }                                                                                          \
  } while (0)

#define CHECK_EQ(a, b)                                                                         \
  do {                                                                                         \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);                            \
    if (check_a_ != check_b_) {                                                                \
      __atomic_add_fetch(&test_failures, 1, __ATOMIC_RELAXED);                                 \
      fprintf(stderr, "  %s:%d: CHECK_EQ(%s, %s) failed: %lld != %lld\n", __FILE__, __LINE__, \
              #a, #b, check_a_, check_b_);                                                     \
    }                                                                                          \
  } while (0)

/* Runs fn as the main actor of a runtime with `schedulers` threads and checks smarm_run's result;
** RUN_HOOKED also sets the schedulers' start and stop hooks (tests of the IO thread pass
** io_sched_thread_enter/leave, as the Lua binding does). */
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
/* For tests of the IO thread (they include io/io.h). */
#define RUN_IO(nsched_, fn_, arg_)                                                            \
  RUN_HOOKED(nsched_, fn_, arg_, io_sched_thread_enter, io_sched_thread_leave)

/* Scale factor for stress sizes: SMARM_STRESS_SCALE (default 1; sanitizer runs use less). */
double test_scale(void);

/* Sends a message holding one 64-bit value; returns smarm_send's result. */
int test_send_u64(smarm_pid_t to, uint64_t v);
/* Receives one 64-bit value (-1 on timeout or error). */
int64_t test_recv_u64(int64_t timeout_ns);

int test_main(int argc, char **argv);
#define TEST_MAIN()                                                                            \
  int main(int argc, char **argv) { return test_main(argc, argv); }

#endif
