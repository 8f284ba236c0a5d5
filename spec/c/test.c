/* The harness behind test.h. */
#include "test.h"

test_case_t test_cases[TEST_MAX];
int test_count;
int test_failures;

double test_scale(void)
{
  const char *s = getenv("SMARM_STRESS_SCALE");
  double v = s ? atof(s) : 1.0;
  return v > 0 ? v : 1.0;
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

int test_main(int argc, char **argv)
{
  int passed = 0, failed = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 0; i < test_count; i++) {
    if (argc > 1) {
      int wanted = 0;
      for (int j = 1; j < argc; j++)
        wanted |= strcmp(argv[j], test_cases[i].name) == 0;
      if (!wanted)
        continue;
    }
    test_failures = 0;
    test_cases[i].fn();
    if (test_failures == 0) {
      passed++;
      printf("ok %s\n", test_cases[i].name);
    } else {
      failed++;
      printf("FAIL %s (%d checks)\n", test_cases[i].name, test_failures);
    }
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
