/* The harness behind test.h. */
#include "test.h"

static test_case_t *test_first, **test_tail = &test_first;
int test_failures;
int test_checks;
static const char *test_skipped; /* why the running case skipped, or NULL */

void test_register(test_case_t *tc)
{
  tc->next = NULL;
  *test_tail = tc;
  test_tail = &tc->next;
}

void test_skip(const char *why)
{
  __atomic_store_n(&test_skipped, why ? why : "(no reason given)", __ATOMIC_RELEASE);
}

double test_scale(void)
{
  const char *s = getenv("SMARM_STRESS_SCALE");
  double v = s ? atof(s) : 1.0;
  return v > 0 ? v : 1.0;
}

#ifndef __has_feature
#define __has_feature(x) 0
#endif

double test_spawn_scale(void)
{
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
  return test_scale() / 4;
#else
  return test_scale();
#endif
}

int test_scaled(int n, int min)
{
  double v = n * test_scale();
  return v < min ? min : (int)v;
}

uint32_t test_xorshift(uint32_t *s)
{
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

int test_send_u64(smarm_pid_t to, uint64_t v)
{
  smarm_msg_t *m = smarm_msg_new(sizeof v);
  if (!m)
    return -12;
  memcpy(smarm_msg_data(m), &v, sizeof v);
  int rc = smarm_send(to, m);
  if (rc < 0)
    smarm_msg_free(m);
  return rc;
}

int64_t test_recv_u64(int64_t timeout_ns)
{
  smarm_msg_t *m;
  if (smarm_receive(timeout_ns, &m) < 0)
    return -1;
  uint64_t v = 0;
  if (smarm_msg_size(m) == sizeof v)
    memcpy(&v, smarm_msg_data(m), sizeof v);
  smarm_msg_free(m);
  return (int64_t)v;
}

static int wanted(const test_case_t *tc, int argc, char **argv)
{
  if (argc <= 1)
    return 1;
  for (int j = 1; j < argc; j++)
    if (strcmp(argv[j], tc->name) == 0)
      return 1;
  return 0;
}

int test_main(int argc, char **argv)
{
  int passed = 0, failed = 0, skipped = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (test_case_t *tc = test_first; tc; tc = tc->next)
      printf("%s\n", tc->name);
    return 0;
  }
  for (int j = 1; j < argc; j++) {
    test_case_t *tc = test_first;
    while (tc && strcmp(tc->name, argv[j]) != 0)
      tc = tc->next;
    if (!tc) {
      fprintf(stderr, "%s: no case named '%s' (--list names them)\n", argv[0], argv[j]);
      return 2;
    }
  }
  for (test_case_t *tc = test_first; tc; tc = tc->next) {
    if (!wanted(tc, argc, argv))
      continue;
    __atomic_store_n(&test_failures, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&test_checks, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&test_skipped, NULL, __ATOMIC_RELAXED);
    tc->fn();
    int failures = __atomic_load_n(&test_failures, __ATOMIC_RELAXED);
    int checks = __atomic_load_n(&test_checks, __ATOMIC_RELAXED);
    const char *skip = __atomic_load_n(&test_skipped, __ATOMIC_ACQUIRE);
    if (failures > 0) {
      failed++;
      printf("FAIL %s (%d of %d checks)\n", tc->name, failures, checks);
    } else if (skip) {
      skipped++;
      printf("skip %s: %s\n", tc->name, skip);
    } else if (checks == 0) {
      failed++;
      printf("FAIL %s (no CHECK ran)\n", tc->name);
    } else {
      passed++;
      printf("ok %s\n", tc->name);
    }
  }
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
