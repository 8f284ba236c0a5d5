/* Virtual time (smarm_config_t.clock = SMARM_CLOCK_VIRTUAL, src/core/vclock.c): the actors' clock
** starts at 0, stands still while any actor runs, and jumps to the earliest deadline once every
** scheduler is idle with nothing in flight; smarm_await (IO, other threads) holds it. Each case
** runs on two schedulers, so that the jump is the cross-thread protocol's, and names what a broken
** protocol would show: a message lost (the run never ends: ctest's timeout), a timer fired early
** (a clock value too late), or a jump while something was still in flight (events out of order). */
#define _GNU_SOURCE
#include "test.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define SEC (1000LL * 1000 * 1000)
#define MS (1000LL * 1000)

#define RUN_VIRTUAL(nsched_, fn_) CHECK_EQ(test_run_virtual((nsched_), (fn_), NULL, -1), 0)

static smarm_pid_t main_pid; /* written by the main actor before it spawns the others */

/* Sends main_pid (tag, the clock now) as one value: tag * 2^40 + clock in ms. */
static void report(uint64_t tag)
{
  CHECK_EQ(test_send_u64(main_pid, (tag << 40) | (uint64_t)(smarm_clock_ns() / MS)), 0);
}
static uint64_t tag_of(int64_t v) { return (uint64_t)v >> 40; }
static int64_t ms_of(int64_t v) { return v & ((1LL << 40) - 1); }

/* ---- The option ---------------------------------------------------------------------------- */

static void nothing(void *arg) { (void)arg; }

TEST(an_unknown_clock_is_refused)
{
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  cfg.clock = 2;
  CHECK_EQ(smarm_run(&cfg, nothing, NULL), -EINVAL);
  cfg.clock = -1;
  CHECK_EQ(smarm_run(&cfg, nothing, NULL), -EINVAL);
  CHECK_EQ(cfg.clock, -1); /* read, not written */
}

/* Outside a virtual runtime, the actors' clock is the real one. */
static void real_clock_main(void *arg)
{
  (void)arg;
  int64_t before = smarm_now_ns(), clock = smarm_clock_ns(), after = smarm_now_ns();
  CHECK(before <= clock && clock <= after);
}

TEST(the_real_clock_is_the_default)
{
  RUN(2, real_clock_main, NULL);
  int64_t before = smarm_now_ns(), clock = smarm_clock_ns(), after = smarm_now_ns();
  CHECK(before <= clock && clock <= after);
}

/* ---- The jump ------------------------------------------------------------------------------ */

static void hour_sleeper(void *arg)
{
  (void)arg;
  CHECK_EQ(smarm_sleep(3600 * SEC), 0);
  CHECK_EQ(test_send_u64(main_pid, (uint64_t)smarm_clock_ns()), 0);
}

static void hour_main(void *arg)
{
  (void)arg;
  main_pid = smarm_self();
  int64_t real_start = smarm_now_ns();
  CHECK_EQ(smarm_clock_ns(), 0);
  CHECK_EQ(smarm_spawn_on(1, hour_sleeper, NULL, NULL, NULL), 0);
  CHECK_EQ(smarm_sleep(1800 * SEC), 0);
  CHECK_EQ(smarm_clock_ns(), 1800 * SEC); /* exactly: the clock jumped to this deadline */
  CHECK_EQ(test_recv_u64(SMARM_FOREVER), 3600 * SEC);
  CHECK_EQ(smarm_clock_ns(), 3600 * SEC);
  /* Not a time limit (machines differ 10x): only far below what was simulated. */
  CHECK(smarm_now_ns() - real_start < 360 * SEC);
}

TEST(jump_across_two_schedulers)
{
  RUN_VIRTUAL(2, hour_main);
}

/* Sleeps, a receive timeout, message timers on both schedulers: each reports at its deadline,
** and the main actor, woken by each report before the clock can move on, sees them in deadline
** order, each at its own time. */
static void sleep_then_report(void *arg)
{
  uint64_t s = (uint64_t)(uintptr_t)arg;
  CHECK_EQ(smarm_sleep((int64_t)s * SEC), 0);
  report(s);
}

static void receive_timeout_then_report(void *arg)
{
  uint64_t s = (uint64_t)(uintptr_t)arg;
  smarm_msg_t *m = NULL;
  CHECK_EQ(smarm_receive((int64_t)s * SEC, &m), -ETIMEDOUT);
  report(s);
}

static void forward_one(void *arg)
{
  (void)arg;
  int64_t v = test_recv_u64(SMARM_FOREVER); /* a message timer's, carrying its delay */
  report((uint64_t)v);
}

static void order_main(void *arg)
{
  (void)arg;
  main_pid = smarm_self();
  smarm_pid_t fwd;
  CHECK_EQ(smarm_spawn_on(1, forward_one, NULL, NULL, &fwd), 0);
  CHECK_EQ(smarm_spawn_on(1, receive_timeout_then_report, (void *)(uintptr_t)30, NULL, NULL), 0);
  CHECK_EQ(smarm_spawn_on(0, sleep_then_report, (void *)(uintptr_t)10, NULL, NULL), 0);
  CHECK_EQ(smarm_spawn_on(1, sleep_then_report, (void *)(uintptr_t)40, NULL, NULL), 0);
  CHECK_EQ(smarm_spawn_on(0, sleep_then_report, (void *)(uintptr_t)50, NULL, NULL), 0);
  CHECK_EQ(smarm_spawn_on(1, sleep_then_report, (void *)(uintptr_t)50, NULL, NULL), 0);
  smarm_timer_t t;
  smarm_msg_t *m = smarm_msg_new(sizeof(uint64_t));
  uint64_t twenty = 20ull << 40 | 20000; /* to itself: reported as is */
  memcpy(smarm_msg_data(m), &twenty, sizeof twenty);
  CHECK_EQ(smarm_send_after(20 * SEC, main_pid, m, &t), 0);
  m = smarm_msg_new(sizeof(uint64_t));
  uint64_t twenty_five = 25;
  memcpy(smarm_msg_data(m), &twenty_five, sizeof twenty_five);
  CHECK_EQ(smarm_send_after(25 * SEC, fwd, m, &t), 0);
  /* a cancelled one never comes */
  m = smarm_msg_new(sizeof(uint64_t));
  uint64_t never = 35ull << 40;
  memcpy(smarm_msg_data(m), &never, sizeof never);
  CHECK_EQ(smarm_send_after(35 * SEC, main_pid, m, &t), 0);
  CHECK_EQ(smarm_cancel_timer(t), 35 * SEC);
  static const uint64_t expected[] = {10, 20, 25, 30, 40, 50, 50};
  for (size_t i = 0; i < sizeof expected / sizeof *expected; i++) {
    int64_t v = test_recv_u64(SMARM_FOREVER);
    CHECK_EQ(tag_of(v), expected[i]);
    CHECK_EQ(ms_of(v), (int64_t)expected[i] * 1000); /* it fired at its deadline */
    CHECK_EQ(smarm_clock_ns(), (int64_t)expected[i] * SEC); /* and nothing moved it since */
  }
  smarm_msg_t *late = NULL;
  CHECK_EQ(smarm_receive(3600 * SEC, &late), -ETIMEDOUT); /* the cancelled timer's: never */
  CHECK_EQ(smarm_clock_ns(), 3650 * SEC);
}

TEST(timers_receive_timeouts_and_send_after_fire_in_order)
{
  RUN_VIRTUAL(2, order_main);
}

/* A receive with a timeout of 10 s, on scheduler 1, and a message from scheduler 0 sent at 5 s
** (it wins: the clock never reaches 10 s before it is delivered) or at 15 s (too late). */
static void receive_ten(void *arg)
{
  (void)arg;
  smarm_msg_t *m = NULL;
  int rc = smarm_receive(10 * SEC, &m);
  report(rc == 0 ? 1 : 0);
  smarm_msg_free(m);
  if (rc != 0) { /* the late one still comes */
    CHECK_EQ(smarm_receive(SMARM_FOREVER, &m), 0);
    report(2);
    smarm_msg_free(m);
  }
}

static smarm_pid_t receiver_pid;

static void send_later(void *arg)
{
  CHECK_EQ(smarm_sleep((int64_t)(uintptr_t)arg * SEC), 0);
  CHECK_EQ(test_send_u64(receiver_pid, 1), 0);
}

static void beaten_main(void *arg)
{
  (void)arg;
  main_pid = smarm_self();
  CHECK_EQ(smarm_spawn_on(1, receive_ten, NULL, NULL, &receiver_pid), 0);
  CHECK_EQ(smarm_spawn_on(0, send_later, (void *)(uintptr_t)5, NULL, NULL), 0);
  int64_t v = test_recv_u64(SMARM_FOREVER);
  CHECK_EQ(tag_of(v), 1); /* the message, not the timeout */
  CHECK_EQ(ms_of(v), 5000);

  CHECK_EQ(smarm_spawn_on(1, receive_ten, NULL, NULL, &receiver_pid), 0);
  CHECK_EQ(smarm_spawn_on(0, send_later, (void *)(uintptr_t)15, NULL, NULL), 0);
  v = test_recv_u64(SMARM_FOREVER);
  CHECK_EQ(tag_of(v), 0); /* timed out, at 5 + 10 s */
  CHECK_EQ(ms_of(v), 15000);
  v = test_recv_u64(SMARM_FOREVER);
  CHECK_EQ(tag_of(v), 2); /* then the message, at 5 + 15 s */
  CHECK_EQ(ms_of(v), 20000);
}

TEST(a_message_sent_earlier_beats_a_receive_timeout)
{
  RUN_VIRTUAL(2, beaten_main);
}

/* ---- The clock stands still while an actor runs -------------------------------------------- */

static void nap_then_report(void *arg)
{
  (void)arg;
  CHECK_EQ(smarm_sleep(1), 0); /* one nanosecond: in real time, long gone before the loop ends */
  report(7);
}

static void still_main(void *arg)
{
  (void)arg;
  main_pid = smarm_self();
  CHECK_EQ(smarm_spawn_on(1, nap_then_report, NULL, NULL, NULL), 0);
  int early = 0;
  volatile uint64_t sum = 0;
  for (int i = 0; i < test_scaled(20000, 2000); i++) {
    for (int j = 0; j < 100; j++)
      sum += (uint64_t)j * (uint64_t)i; /* compute */
    smarm_yield();                      /* and give way: still runnable, so still no jump */
    smarm_msg_t *m = NULL;
    if (smarm_receive(0, &m) == 0) {
      early++;
      smarm_msg_free(m);
    }
    if (smarm_clock_ns() != 0)
      early++;
  }
  CHECK_EQ(early, 0);
  int64_t v = test_recv_u64(SMARM_FOREVER); /* now waiting: the clock moves */
  CHECK_EQ(tag_of(v), 7);
  CHECK_EQ(smarm_clock_ns(), 1);
}

TEST(the_clock_stands_still_while_an_actor_runs)
{
  RUN_VIRTUAL(2, still_main);
}

/* ---- An outside wait holds the clock ------------------------------------------------------- */

/* Handed from the awaiting actor to a thread of the test's own. */
static pthread_mutex_t hand_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hand_cond = PTHREAD_COND_INITIALIZER;
static smarm_pid_t hand_pid;
static uint64_t hand_token;

static void *waker_thread(void *arg)
{
  (void)arg;
  pthread_mutex_lock(&hand_lock);
  while (!hand_token)
    pthread_cond_wait(&hand_cond, &hand_lock);
  pthread_mutex_unlock(&hand_lock);
  /* A window for a broken protocol to jump while the actor waits (not a synchronisation: the
  ** wake below is what the actor waits for, however late it comes). */
  struct timespec ts = {0, 50 * 1000 * 1000};
  nanosleep(&ts, NULL);
  CHECK_EQ(smarm_wake(hand_pid, hand_token), 0);
  return NULL;
}

static void awaiter(void *arg)
{
  (void)arg;
  /* An await that nobody answers times out in real time, the clock standing still meanwhile. */
  uint64_t lonely = smarm_await_token();
  CHECK_EQ(smarm_await(lonely, 20 * MS), -ETIMEDOUT);
  CHECK_EQ(smarm_clock_ns(), 0);
  uint64_t token = smarm_await_token();
  pthread_mutex_lock(&hand_lock);
  hand_pid = smarm_self();
  hand_token = token;
  pthread_cond_signal(&hand_cond);
  pthread_mutex_unlock(&hand_lock);
  CHECK_EQ(smarm_await(token, SMARM_FOREVER), 0);
  report(1);
}

static void outside_main(void *arg)
{
  (void)arg;
  main_pid = smarm_self();
  hand_token = 0;
  pthread_t waker;
  CHECK_EQ(pthread_create(&waker, NULL, waker_thread, NULL), 0);
  CHECK_EQ(smarm_spawn_on(1, awaiter, NULL, NULL, NULL), 0);
  CHECK_EQ(smarm_spawn_on(0, sleep_then_report, (void *)(uintptr_t)2, NULL, NULL), 0);
  int64_t v = test_recv_u64(SMARM_FOREVER);
  CHECK_EQ(tag_of(v), 1); /* the outside wait ended first, */
  CHECK_EQ(ms_of(v), 0);  /* with the clock where it was */
  v = test_recv_u64(SMARM_FOREVER);
  CHECK_EQ(tag_of(v), 2); /* and only then did it jump */
  CHECK_EQ(ms_of(v), 2000);
  pthread_join(waker, NULL);
}

TEST(an_outside_wait_holds_the_clock)
{
  RUN_VIRTUAL(2, outside_main);
}

/* ---- Deadlock: no deadline, nothing moves; the main actor's end still ends the run ---------- */

static void wait_forever(void *arg)
{
  (void)arg;
  smarm_msg_t *m = NULL;
  smarm_receive(SMARM_FOREVER, &m); /* nobody sends: stopped at the end of the run */
  CHECK(0);
}

static void deadlock_main(void *arg)
{
  (void)arg;
  CHECK_EQ(smarm_spawn_on(1, wait_forever, NULL, NULL, NULL), 0);
  CHECK_EQ(smarm_sleep(5 * SEC), 0); /* the only deadline: the clock goes there, and no further */
  CHECK_EQ(smarm_clock_ns(), 5 * SEC);
}

TEST(a_run_with_no_deadline_left_ends_with_its_main_actor)
{
  RUN_VIRTUAL(2, deadlock_main);
}

/* ---- Stress: a lost wake-up or a premature jump ---------------------------------------------- */

/* Pairs of actors, one on each scheduler, play rounds: each sleeps 0-2 ms (virtual), sends to its
** partner and waits for the partner's message with a receive timeout of an hour. The partner's
** message is always on its way or its sleep is earlier, so no timeout may fire and the clock may
** never pass the sum of the sleeps; a jump made while a message was in flight, or a scheduler
** left asleep after one, shows as a timeout, a late clock, or a run that never ends. */
#define STRESS_TIMEOUT (3600 * SEC)

typedef struct pair_player {
  smarm_pid_t partner;
  uint32_t rng;
  int rounds;
} pair_player_t;

static pair_player_t players[2 * 256];
static _Atomic int stress_timeouts;

static void player(void *arg)
{
  pair_player_t *p = arg;
  smarm_msg_t *m = NULL;
  if (!p->partner) { /* the second of the pair learns its partner from the first message */
    CHECK_EQ(smarm_receive(SMARM_FOREVER, &m), 0);
    p->partner = smarm_msg_sender(m);
    smarm_msg_free(m);
  } else {
    CHECK_EQ(test_send_u64(p->partner, 0), 0);
  }
  for (int r = 0; r < p->rounds; r++) {
    int64_t nap = (int64_t)(test_xorshift(&p->rng) % 3) * MS;
    if (nap)
      CHECK_EQ(smarm_sleep(nap), 0);
    CHECK_EQ(test_send_u64(p->partner, (uint64_t)r), 0);
    int rc = smarm_receive(STRESS_TIMEOUT, &m);
    if (rc == 0)
      smarm_msg_free(m);
    else
      atomic_fetch_add_explicit(&stress_timeouts, 1, memory_order_relaxed);
  }
  report(3);
}

static void stress_main(void *arg)
{
  (void)arg;
  main_pid = smarm_self();
  int pairs = test_scaled(200, 20), rounds = test_scaled(100, 20);
  int other = (int)smarm_sched_count() - 1; /* the partner's scheduler */
  if (pairs > 256)
    pairs = 256;
  for (int i = 0; i < pairs; i++) {
    pair_player_t *a = &players[2 * i], *b = &players[2 * i + 1];
    *b = (pair_player_t){0, (uint32_t)(2 * i + 1), rounds};
    smarm_pid_t bp;
    CHECK_EQ(smarm_spawn_on(other, player, b, NULL, &bp), 0);
    *a = (pair_player_t){bp, (uint32_t)(2 * i + 2), rounds};
    CHECK_EQ(smarm_spawn_on(0, player, a, NULL, NULL), 0);
  }
  for (int i = 0; i < 2 * pairs; i++)
    CHECK_EQ(tag_of(test_recv_u64(SMARM_FOREVER)), 3); /* every player finished */
  CHECK_EQ(atomic_load(&stress_timeouts), 0);
  /* Each round's sleeps add at most 2 ms per player of a pair; the hour never came. */
  CHECK(smarm_clock_ns() <= (int64_t)rounds * 4 * MS);
}

TEST(stress_messages_and_timeouts_on_two_schedulers)
{
  RUN_VIRTUAL(2, stress_main);
}

/* With no spinning, every idle period registers at once and parks: the most races between a
** scheduler going idle and a message on its way to it. */
TEST(stress_without_spinning)
{
  CHECK_EQ(test_run_virtual(2, stress_main, NULL, 0), 0);
}

/* The same on one scheduler: the last to go idle is always the one that owns the deadline. */
TEST(stress_on_one_scheduler)
{
  RUN_VIRTUAL(1, stress_main);
}

TEST_MAIN()
