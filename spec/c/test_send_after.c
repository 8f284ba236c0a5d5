/* Message timers (smarm_send_after, smarm_cancel_timer; src/core/send_after.c), on one scheduler
** and across two. Absence is checked after a sleep on the timer's own scheduler whose deadline
** is later: that scheduler fires deadlines in order, so a timer that was not cancelled would have
** sent its message first, however slow the machine. */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include <errno.h>
#include <string.h>

#define MS (1000LL * 1000)
#define WAIT TEST_HANG_GUARD_NS

static smarm_msg_t *u64_msg(uint64_t v)
{
  smarm_msg_t *m = smarm_msg_new(sizeof v);
  memcpy(smarm_msg_data(m), &v, sizeof v);
  return m;
}

/* A marker: SLEEP_FOR | ns, a message that makes the forwarder sleep ns first. */
#define SLEEP_FOR (1ULL << 62)

/* Forwards every message to the pid of its first one; a marker makes it sleep first (on its
** scheduler: any timer due before then fires first), then forward it. */
static void forwarder(void *arg)
{
  smarm_pid_t to = *(smarm_pid_t *)arg;
  smarm_msg_t *m;
  while (smarm_receive(SMARM_FOREVER, &m) == 0) {
    uint64_t v;
    memcpy(&v, smarm_msg_data(m), sizeof v);
    if (v & SLEEP_FOR)
      smarm_sleep((int64_t)(v & ~SLEEP_FOR));
    CHECK_EQ(smarm_send(to, m), 0);
  }
}

/* The target: this actor (where 0) or a forwarder on the other scheduler (where 1). */
static smarm_pid_t target_for(int where)
{
  static smarm_pid_t me;
  me = smarm_self();
  if (!where)
    return me;
  smarm_pid_t pid;
  CHECK_EQ(smarm_spawn_on(1, forwarder, &me, NULL, &pid), 0);
  smarm_yield(); /* it has read `me` by the time it gets a message */
  return pid;
}

/* Waits until nothing more can come from the target, whose timers were due within delay ns of
** being set: a sleep of twice that here, or on the forwarder's scheduler (a marker), ends after
** them. What a timer sent the forwarder before its sleep ended waits in its mailbox behind the
** marker (forwarded after it), so it comes before the next message through, 8. */
static void expect_nothing_more(smarm_pid_t target, int where, int64_t delay)
{
  if (where) {
    CHECK_EQ(test_send_u64(target, SLEEP_FOR | (uint64_t)(2 * delay)), 0);
    CHECK_EQ(test_recv_u64(WAIT), (int64_t)(SLEEP_FOR | (uint64_t)(2 * delay)));
    CHECK_EQ(test_send_u64(target, 8), 0);
    CHECK_EQ(test_recv_u64(WAIT), 8);
  } else {
    smarm_sleep(2 * delay);
  }
  smarm_msg_t *m;
  CHECK_EQ(smarm_receive(0, &m), -ETIMEDOUT);
}

static void main_order(void *arg)
{
  int where = *(int *)arg;
  smarm_pid_t t = target_for(where);
  smarm_timer_t a, b, c;
  if (!where) { /* latest first, so the heap orders them; on the virtual clock (see the test),
                ** which stands still while this actor runs: no stall between two calls of a
                ** slow machine reorders their deadlines */
    CHECK_EQ(smarm_send_after(1000 * MS, t, u64_msg(3), &c), 0);
    CHECK_EQ(smarm_send_after(500 * MS, t, u64_msg(2), &b), 0);
    CHECK_EQ(smarm_send_after(0, t, u64_msg(1), &a), 0);
  } else { /* each set is a round trip of any length: deadlines in the order of the calls */
    CHECK_EQ(smarm_send_after(0, t, u64_msg(1), &a), 0);
    CHECK_EQ(smarm_send_after(10 * MS, t, u64_msg(2), &b), 0);
    CHECK_EQ(smarm_send_after(30 * MS, t, u64_msg(3), &c), 0);
  }
  CHECK(a.ref != b.ref && b.ref != c.ref);
  CHECK_EQ(test_recv_u64(WAIT), 1);
  CHECK_EQ(test_recv_u64(WAIT), 2);
  CHECK_EQ(test_recv_u64(WAIT), 3);
  /* fired: nothing left to cancel */
  CHECK_EQ(smarm_cancel_timer(a), -ENOENT);
  CHECK_EQ(smarm_cancel_timer(c), -ENOENT);
}

TEST(timers_fire_in_deadline_order_here_and_across)
{
  int here = 0, there = 1;
  CHECK_EQ(test_run_virtual(1, main_order, &here, -1), 0);
  RUN(2, main_order, &there);
}

static void main_cancel(void *arg)
{
  int where = *(int *)arg;
  smarm_pid_t t = target_for(where);
  smarm_timer_t tm;
  /* The deadline counts from the call, and across schedulers the set and the cancel are a round
  ** trip each: a stall longer than the delay (a slow machine, a thread not run) lets the timer
  ** fire first. Its message then comes (-ENOENT), and it is set again with twice the delay. */
  int64_t delay = 50 * MS, left = -ENOENT;
  for (int n = 1; n <= 8; n++) { /* up to 6.4 s */
    CHECK_EQ(smarm_send_after(delay, t, u64_msg(7), &tm), 0);
    left = smarm_cancel_timer(tm);
    if (left != -ENOENT || n == 8)
      break;
    CHECK_EQ(test_recv_u64(WAIT), 7);
    delay *= 2;
  }
  CHECK(left >= 0 && left <= delay);
  CHECK_EQ(smarm_cancel_timer(tm), -ENOENT); /* once */
  expect_nothing_more(t, where, delay);
}

TEST(a_cancelled_timer_never_sends_here_and_across)
{
  int here = 0, there = 1;
  RUN(1, main_cancel, &here);
  RUN(2, main_cancel, &there);
}

/* A timer aimed at an actor goes with it: after the target's end, cancel finds nothing. */
static void main_target_ends(void *arg)
{
  int where = *(int *)arg;
  smarm_pid_t pid, me = smarm_self();
  CHECK_EQ(smarm_spawn_on(where, forwarder, &me, NULL, &pid), 0); /* waits for messages */
  smarm_ref_t ref;
  CHECK_EQ(smarm_monitor(pid, &ref), 0);
  smarm_timer_t tm, late;
  CHECK_EQ(smarm_send_after(3600LL * 1000 * MS, pid, u64_msg(1), &tm), 0);
  CHECK_EQ(smarm_exit_signal(pid, SMARM_EXIT_KILL, NULL, 0), 0);
  smarm_msg_t *m;
  CHECK_EQ(smarm_receive(WAIT, &m), 0);
  CHECK_EQ(smarm_msg_kind(m), SMARM_MSG_DOWN);
  smarm_msg_free(m);
  CHECK_EQ(smarm_cancel_timer(tm), -ENOENT);
  /* a timer for a dead actor is taken and sends nothing */
  CHECK_EQ(smarm_send_after(0, pid, u64_msg(2), &late), 0);
  CHECK_EQ(smarm_cancel_timer(late), -ENOENT);
}

TEST(a_timer_goes_with_its_target)
{
  int here = 0, there = 1;
  RUN(2, main_target_ends, &here);
  RUN(2, main_target_ends, &there);
}

/* Many pending timers, on both schedulers; every other one cancelled, the rest left pending
** when the run ends (freed with their schedulers: ASan and valgrind look). */
static void main_many(void *arg)
{
  (void)arg;
  int n = test_scaled(20000, 200);
  smarm_timer_t *tms = calloc((size_t)n, sizeof *tms);
  smarm_pid_t me = smarm_self(), there;
  CHECK_EQ(smarm_spawn_on(1, forwarder, &me, NULL, &there), 0);
  uint32_t rng = 12345;
  for (int i = 0; i < n; i++) {
    int64_t ns = (int64_t)(test_xorshift(&rng) % 1000) * 1000 * MS + 3600LL * 1000 * MS;
    CHECK_EQ(smarm_send_after(ns, i % 2 ? there : me, u64_msg((uint64_t)i + 1), &tms[i]), 0);
  }
  for (int i = 0; i < n; i += 2)
    CHECK(smarm_cancel_timer(tms[i]) > 0);
  free(tms);
}

TEST(many_pending_timers_cancelled_or_left_at_the_end)
{
  RUN(2, main_many, NULL);
}

/* Timers aimed at names (smarm_send_after_name): the name is looked up as the timer fires, here
** or on the other scheduler; nobody holding it then: nothing is sent. A cancel finds it before
** it fires. Some are left pending at the run's end (freed with their scheduler: ASan and
** valgrind look). */
static void main_names(void *arg)
{
  (void)arg;
  smarm_pid_t me = smarm_self(), there;
  smarm_timer_t tm;
  /* nobody holds it as it fires: a sleep on this scheduler with a later deadline ends after it */
  CHECK_EQ(smarm_send_after_name(0, "c-nobody", u64_msg(1), &tm), 0);
  CHECK_EQ(smarm_pid_sched(tm.to), smarm_pid_sched(me));
  CHECK_EQ(smarm_pid_gen(tm.to), 0u);
  expect_nothing_more(me, 0, 10 * MS);
  CHECK_EQ(smarm_cancel_timer(tm), -ENOENT);
  /* set before the name is held: whoever holds it at the deadline gets it, here and there */
  CHECK_EQ(smarm_send_after_name(50 * MS, "c-here", u64_msg(2), &tm), 0);
  CHECK_EQ(smarm_register("c-here", me), 0);
  CHECK_EQ(test_recv_u64(WAIT), 2);
  CHECK_EQ(smarm_spawn_on(1, forwarder, &me, NULL, &there), 0);
  CHECK_EQ(smarm_register("c-there", there), 0);
  CHECK_EQ(smarm_send_after_name(0, "c-there", u64_msg(3), &tm), 0);
  CHECK_EQ(test_recv_u64(WAIT), 3);
  CHECK_EQ(smarm_cancel_timer(tm), -ENOENT);
  /* cancelled before it fires: never sent */
  CHECK_EQ(smarm_send_after_name(3600LL * 1000 * MS, "c-here", u64_msg(4), &tm), 0);
  CHECK(smarm_cancel_timer(tm) > 0);
  CHECK_EQ(smarm_cancel_timer(tm), -ENOENT);
  /* left pending at the end, every other one cancelled first */
  for (int i = 0; i < 100; i++) {
    CHECK_EQ(smarm_send_after_name(3600LL * 1000 * MS, i % 3 ? "c-here" : "c-gone",
                                   u64_msg((uint64_t)i), &tm), 0);
    if (i % 2)
      CHECK(smarm_cancel_timer(tm) > 0);
  }
  smarm_msg_t *m;
  CHECK_EQ(smarm_receive(0, &m), -ETIMEDOUT);
}

TEST(timers_aimed_at_names_look_them_up_as_they_fire)
{
  RUN(2, main_names, NULL);
}

static void main_bad(void *arg)
{
  (void)arg;
  smarm_timer_t tm;
  smarm_msg_t *m = u64_msg(1);
  CHECK_EQ(smarm_send_after(-1, smarm_self(), m, &tm), -EINVAL);
  CHECK_EQ(smarm_send_after(0, smarm_self(), NULL, &tm), -EINVAL);
  CHECK_EQ(smarm_send_after(0, 0, m, &tm), -EINVAL);
  CHECK_EQ(smarm_send_after(0, smarm_self(), m, NULL), -EINVAL);
  char long_name[SMARM_NAME_MAX + 2];
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  CHECK_EQ(smarm_send_after_name(0, "", m, &tm), -EINVAL);
  CHECK_EQ(smarm_send_after_name(0, NULL, m, &tm), -EINVAL);
  CHECK_EQ(smarm_send_after_name(0, long_name, m, &tm), -EINVAL);
  CHECK_EQ(smarm_send_after_name(-1, "x", m, &tm), -EINVAL);
  CHECK_EQ(smarm_send_after_name(0, "x", m, NULL), -EINVAL);
  smarm_msg_free(m); /* still the caller's after -EINVAL */
  tm.to = smarm_self();
  tm.ref = 0;
  CHECK_EQ(smarm_cancel_timer(tm), -ENOENT);
}

TEST(bad_timer_arguments)
{
  RUN(1, main_bad, NULL);
  smarm_timer_t tm = {0, 0};
  smarm_msg_t *m = u64_msg(1);
  CHECK_EQ(smarm_send_after(0, 1, m, &tm), -EPERM);
  CHECK_EQ(smarm_send_after_name(0, "x", m, &tm), -EPERM);
  smarm_msg_free(m);
  CHECK_EQ(smarm_cancel_timer(tm), -EPERM);
}

TEST_MAIN()
