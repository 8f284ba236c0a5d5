/*
** Stress tests: long randomized runs that hunt races between schedulers. Sizes scale with
** SMARM_STRESS_SCALE (test_scale(); 1 = full size, sanitizer builds run about 0.05; the spawn
** storm a quarter of that again under TSan: test_spawn_scale).
**
**  many_to_many_*    Hunts lost, duplicated and reordered messages, and lost wake-ups, on the
**                    inbox path: 8 senders per scheduler send numbered messages to receivers on
**                    both schedulers (randomly chosen per message) while yielding and sleeping at
**                    random; receivers randomly wait with short timeouts (so timers and futex
**                    timeouts race with deliveries). Every receiver checks, per sender, that
**                    sequence numbers are consecutive and that the count matches what the sender
**                    says it sent; the main actor checks the grand total. Run with spin_ns = 0
**                    (every idle moment parks in the kernel: the worst case for a lost wake-up)
**                    and with the default spin.
**  ping_pong_*       Hunts lost wake-ups in the park protocol (inbox.h): round trips between two
**                    schedulers that never spin, so every message has to wake a parked thread. The
**                    actors wait without timeouts (a timer would wake a scheduler that missed its
**                    wake-up and hide the bug), so a lost wake-up is a hang. A second variant runs
**                    four pairs at once, and its pongers sometimes wait with short timeouts, so
**                    timer expiries race with deliveries and wake-ups.
**  remote_spawn_storm Hunts lost or misrouted spawn requests and replies, and races between
**                    actors being created, sending and exiting on one scheduler while the other
**                    keeps spawning there: actors on both schedulers spawn_on the other one in
**                    bursts; each child reports to its parent and exits. Parents check every
**                    child reported, from the pid spawn_on returned, then ask smarm_alive about
**                    each (requests and replies of both kinds interleave) until the last is seen
**                    dead; at the end nothing is alive.
**
** Hangs: every case runs under a watchdog thread that watches a progress counter and, when it
** stands still for 10 s, fails the case and stops the runtime (smarm_stop from a foreign thread).
** Bounded receives alone cannot catch a lost wake-up here: the scheduler wakes for the receive's
** own timer, finds the message in its inbox and delivers it, so the receive succeeds late.
*/
#define _GNU_SOURCE
#include "test.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#define MS (1000LL * 1000)
#define LONG_WAIT TEST_HANG_GUARD_NS /* only a hang guard (test.h) */

static int64_t load(const int64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

static uint64_t msg_u64(smarm_msg_t *m)
{
  uint64_t v = UINT64_MAX;
  if (smarm_msg_size(m) == sizeof v)
    memcpy(&v, smarm_msg_data(m), sizeof v);
  return v;
}

static smarm_msg_t *recv_forever(void)
{
  smarm_msg_t *m = NULL;
  int rc = smarm_receive(SMARM_FOREVER, &m);
  CHECK_EQ(rc, 0);
  return rc == 0 ? m : NULL;
}

/* Progress of the running case: every case bumps it as it goes. */
static int64_t progress;

static void advance(int64_t n) { __atomic_add_fetch(&progress, n, __ATOMIC_RELAXED); }

typedef struct watchdog {
  pthread_t thread;
  int64_t finished; /* set when smarm_run returned */
  int64_t fired;    /* no progress for LONG_WAIT: the runtime was stopped */
} watchdog_t;

static void *watchdog_main(void *arg)
{
  watchdog_t *w = arg;
  int64_t last = -1, since = smarm_now_ns();
  while (!load(&w->finished)) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    int64_t p = load(&progress), now = smarm_now_ns();
    if (p != last) {
      last = p;
      since = now;
    } else if (now - since > LONG_WAIT) {
      __atomic_store_n(&w->fired, 1, __ATOMIC_RELEASE);
      smarm_stop();
      break;
    }
  }
  return NULL;
}

/* Runs fn as the main actor under the watchdog and prints the time it took. */
static int run_cfg(unsigned nsched, int64_t spin_ns, smarm_actor_fn fn, void *arg)
{
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  cfg.schedulers = nsched;
  cfg.spin_ns = spin_ns;
  watchdog_t w = {0};
  __atomic_store_n(&progress, 0, __ATOMIC_RELAXED);
  CHECK_EQ(pthread_create(&w.thread, NULL, watchdog_main, &w), 0);
  int64_t t0 = smarm_now_ns();
  int rc = smarm_run(&cfg, fn, arg);
  printf("  (%.2f s)\n", (double)(smarm_now_ns() - t0) / 1e9);
  __atomic_store_n(&w.finished, 1, __ATOMIC_RELEASE);
  pthread_join(w.thread, NULL);
  if (load(&w.fired))
    printf("  no progress for 10 s (lost wake-up or lost message?): stopped\n");
  CHECK_EQ(load(&w.fired), 0);
  return rc;
}

/* ---- (a) many senders to many receivers ---- */

#define M2M_SENDERS_PER_SCHED 8
#define M2M_RECEIVERS_PER_SCHED 2
#define M2M_SENDERS (2 * M2M_SENDERS_PER_SCHED)
#define M2M_RECEIVERS (2 * M2M_RECEIVERS_PER_SCHED)
#define M2M_TOTAL 2000000.0

/* A message: kind (1 data, 2 end) << 56 | sender << 40 | n (data: sequence number for this
** receiver; end: how many data messages this sender sent this receiver). */
#define M2M_MSG(kind, sender, n) (((uint64_t)(kind) << 56) | ((uint64_t)(sender) << 40) | (n))

typedef struct m2m {
  smarm_pid_t main;
  smarm_pid_t receivers[M2M_RECEIVERS];
  uint64_t per_sender;
  int64_t received[M2M_RECEIVERS];  /* data messages each receiver took */
  int64_t sent;                      /* data messages sent, all senders */
  int64_t timeouts;                  /* short waits that timed out */
} m2m_t;

static m2m_t m2m;

static void m2m_receiver(void *arg)
{
  uint32_t me = (uint32_t)(uintptr_t)arg;
  uint32_t rng = me * 7919u + 17;
  uint64_t next[M2M_SENDERS] = {0};
  int ended = 0, broken = 0;
  int64_t count = 0, timeouts = 0;
  while (ended < M2M_SENDERS) {
    smarm_msg_t *m = NULL;
    uint32_t r = test_xorshift(&rng);
    if (r % 4 == 0) {
      /* Short waits, many of them timing out: a timer and a delivery race for this actor. */
      int64_t waited = 0, step = 1000 + (int64_t)(r >> 8) % 200000;
      int rc;
      while ((rc = smarm_receive(step, &m)) == -ETIMEDOUT && waited < LONG_WAIT) {
        waited += step;
        timeouts++;
      }
      CHECK_EQ(rc, 0);
    } else if (r % 4 == 1) {
      if (smarm_receive(0, &m) == -ETIMEDOUT)
        m = recv_forever();
    } else {
      m = recv_forever();
    }
    if (!m)
      break;
    uint64_t v = msg_u64(m);
    smarm_pid_t from = smarm_msg_sender(m);
    smarm_msg_free(m);
    uint32_t kind = (uint32_t)(v >> 56), s = (uint32_t)(v >> 40) & 0xffff;
    uint64_t n = v & (((uint64_t)1 << 40) - 1);
    CHECK(s < M2M_SENDERS);
    if (s >= M2M_SENDERS)
      break;
    CHECK_EQ(smarm_pid_sched(from), s % 2);
    if (kind == 1) {
      if (count % 256 == 0)
        advance(256);
      if (n != next[s] && broken < 10) {
        CHECK_EQ(n, next[s]); /* lost, duplicated or reordered */
        broken++;
      }
      next[s] = n + 1;
      count++;
    } else {
      CHECK_EQ(kind, 2);
      CHECK_EQ(next[s], n); /* everything this sender sent here came before its end */
      ended++;
    }
  }
  __atomic_store_n(&m2m.received[me], count, __ATOMIC_RELEASE);
  __atomic_add_fetch(&m2m.timeouts, timeouts, __ATOMIC_RELAXED);
  CHECK_EQ(test_send_u64(m2m.main, me), 0);
}

static void m2m_sender(void *arg)
{
  uint32_t me = (uint32_t)(uintptr_t)arg;
  uint32_t rng = me * 104729u + 3;
  uint64_t seq[M2M_RECEIVERS] = {0};
  uint64_t burst = 0;
  for (uint64_t i = 0; i < m2m.per_sender; i++) {
    uint32_t r = test_xorshift(&rng);
    uint32_t to = r % M2M_RECEIVERS;
    CHECK_EQ(test_send_u64(m2m.receivers[to], M2M_MSG(1, me, seq[to])), 0);
    seq[to]++;
    r >>= 4;
    /* Bursts of random length, then a pause: a yield, or a sleep of 1-100 microseconds (when
    ** every actor of a scheduler sleeps, the scheduler parks). */
    if (burst == 0) {
      burst = r % 64;
      if (r % 4 == 0)
        smarm_yield();
      else
        smarm_sleep(1000 + (int64_t)((r >> 12) % 100) * 1000);
    } else {
      burst--;
    }
  }
  uint64_t total = 0;
  for (uint32_t k = 0; k < M2M_RECEIVERS; k++) {
    CHECK_EQ(test_send_u64(m2m.receivers[k], M2M_MSG(2, me, seq[k])), 0);
    total += seq[k];
  }
  __atomic_add_fetch(&m2m.sent, (int64_t)total, __ATOMIC_RELAXED);
}

static void main_m2m(void *arg)
{
  (void)arg;
  memset(&m2m, 0, sizeof m2m);
  m2m.main = smarm_self();
  m2m.per_sender = (uint64_t)(M2M_TOTAL * test_scale() / M2M_SENDERS);
  if (m2m.per_sender == 0)
    m2m.per_sender = 1;
  /* Receivers k on scheduler k % 2, senders s on scheduler s % 2. */
  for (uint32_t k = 0; k < M2M_RECEIVERS; k++)
    CHECK_EQ(smarm_spawn_on((int)(k % 2), m2m_receiver, (void *)(uintptr_t)k, NULL,
                            &m2m.receivers[k]), 0);
  for (uint32_t s = 0; s < M2M_SENDERS; s++)
    CHECK_EQ(smarm_spawn_on((int)(s % 2), m2m_sender, (void *)(uintptr_t)s, NULL, NULL), 0);
  uint32_t done = 0;
  for (uint32_t k = 0; k < M2M_RECEIVERS; k++) {
    int64_t r = test_recv_u64(SMARM_FOREVER);
    CHECK(r >= 0 && r < M2M_RECEIVERS);
    if (r < 0)
      return;
    done |= 1u << r;
  }
  CHECK_EQ(done, (1u << M2M_RECEIVERS) - 1);
  int64_t total = 0;
  for (uint32_t k = 0; k < M2M_RECEIVERS; k++)
    total += load(&m2m.received[k]);
  CHECK_EQ(load(&m2m.sent), (int64_t)(m2m.per_sender * M2M_SENDERS));
  CHECK_EQ(total, (int64_t)(m2m.per_sender * M2M_SENDERS));
  smarm_stats_t st;
  CHECK_EQ(smarm_stats_read(-1, &st), 0);
  printf("  %" PRId64 " messages, %" PRIu64 " parks, %" PRIu64 " wakes, %" PRId64
         " short waits timed out",
         total, st.parks, st.wakes, load(&m2m.timeouts));
}

TEST(many_to_many_no_spin) { CHECK_EQ(run_cfg(2, 0, main_m2m, NULL), 0); }
TEST(many_to_many_default_spin) { CHECK_EQ(run_cfg(2, -1, main_m2m, NULL), 0); }

/* ---- (b) ping-pong between schedulers that never spin ---- */

#define PP_ROUNDS 100000.0

typedef struct pp {
  smarm_pid_t main;
  smarm_pid_t peer;
  uint64_t rounds;
  int timed;    /* use short receive timeouts now and then */
  int64_t done; /* rounds completed */
} pp_t;

/* Answers every value v with v + 1, up to the last round's. */
static void pp_ponger(void *arg)
{
  pp_t *p = arg;
  uint32_t rng = 99;
  for (;;) {
    smarm_msg_t *m = NULL;
    int rc;
    if (p->timed && test_xorshift(&rng) % 8 == 0) {
      int64_t waited = 0;
      while ((rc = smarm_receive(20 * 1000, &m)) == -ETIMEDOUT && waited < LONG_WAIT)
        waited += 20 * 1000;
      CHECK_EQ(rc, 0);
    } else {
      m = recv_forever();
    }
    if (!m)
      return;
    uint64_t v = msg_u64(m);
    smarm_pid_t from = smarm_msg_sender(m);
    smarm_msg_free(m);
    CHECK_EQ(test_send_u64(from, v + 1), 0);
    if (v + 2 >= 2 * p->rounds)
      return;
  }
}

static void pp_pinger(void *arg)
{
  pp_t *p = arg;
  uint64_t v = 0;
  for (uint64_t r = 0; r < p->rounds; r++) {
    CHECK_EQ(test_send_u64(p->peer, v), 0);
    smarm_msg_t *m = recv_forever();
    if (!m)
      return;
    uint64_t got = msg_u64(m);
    smarm_msg_free(m);
    if (got != v + 1) {
      CHECK_EQ(got, v + 1);
      return;
    }
    v = got + 1;
    __atomic_store_n(&p->done, (int64_t)r + 1, __ATOMIC_RELEASE);
    advance(1);
  }
  CHECK_EQ(test_send_u64(p->main, 1), 0);
}

typedef struct pp_setup {
  int pairs;
  int timed;
} pp_setup_t;

static void main_pp(void *arg)
{
  pp_setup_t *setup = arg;
  static pp_t pairs[4];
  uint64_t rounds = (uint64_t)(PP_ROUNDS * test_scale() / setup->pairs);
  if (rounds == 0)
    rounds = 1;
  for (int i = 0; i < setup->pairs; i++) {
    pairs[i] = (pp_t){smarm_self(), 0, rounds, setup->timed, 0};
    /* Pair i: ponger on scheduler (i + 1) % 2, pinger on i % 2. */
    CHECK_EQ(smarm_spawn_on((i + 1) % 2, pp_ponger, &pairs[i], NULL, &pairs[i].peer), 0);
    CHECK_EQ(smarm_spawn_on(i % 2, pp_pinger, &pairs[i], NULL, NULL), 0);
  }
  /* Waits without a timer too: scheduler 0 must be woken by the pingers' reports. */
  for (int i = 0; i < setup->pairs; i++)
    CHECK_EQ(test_recv_u64(SMARM_FOREVER), 1);
  for (int i = 0; i < setup->pairs; i++)
    CHECK_EQ(load(&pairs[i].done), (int64_t)rounds);
  smarm_stats_t st;
  CHECK_EQ(smarm_stats_read(-1, &st), 0);
  CHECK(st.parks > 0);
  printf("  %" PRIu64 " round trips x %d, %" PRIu64 " parks, %" PRIu64 " wakes", rounds,
         setup->pairs, st.parks, st.wakes);
}

TEST(ping_pong_no_spin)
{
  pp_setup_t s = {1, 0};
  CHECK_EQ(run_cfg(2, 0, main_pp, &s), 0);
}

TEST(ping_pong_no_spin_pairs_and_timeouts)
{
  pp_setup_t s = {4, 1};
  CHECK_EQ(run_cfg(2, 0, main_pp, &s), 0);
}

/* ---- (c) remote spawn storm ---- */

#define STORM_SPAWNERS_PER_SCHED 4
#define STORM_SPAWNERS (2 * STORM_SPAWNERS_PER_SCHED)
#define STORM_TOTAL 400000.0

typedef struct storm {
  smarm_pid_t main;
  uint64_t per_spawner;
  int sleeps;       /* spawners pause now and then (timers: off when hunting lost wake-ups) */
  int64_t children; /* children that ran */
  int64_t asks;     /* smarm_alive questions, most of them to the other scheduler */
} storm_t;

static storm_t storm;

/* arg: parent pid. Reports (child's own pid) to the parent, sometimes after a yield. */
static void storm_child(void *arg)
{
  smarm_pid_t parent = (smarm_pid_t)(uintptr_t)arg;
  __atomic_add_fetch(&storm.children, 1, __ATOMIC_RELAXED);
  advance(1);
  if (smarm_self() % 3 == 0)
    smarm_yield();
  CHECK_EQ(test_send_u64(parent, smarm_self()), 0);
}

static void storm_spawner(void *arg)
{
  uint32_t me = (uint32_t)(uintptr_t)arg;
  uint32_t rng = me * 31337u + 5;
  int here = smarm_sched_index(), other = 1 - here;
  smarm_pid_t batch[8];
  uint64_t made = 0;
  while (made < storm.per_spawner) {
    uint32_t r = test_xorshift(&rng);
    uint32_t n = 1 + r % 8;
    if (n > storm.per_spawner - made)
      n = (uint32_t)(storm.per_spawner - made);
    for (uint32_t i = 0; i < n; i++) {
      int where = (r >> 8) % 16 == 0 ? SMARM_SCHED_ANY : other;
      int rc = smarm_spawn_on(where, storm_child, (void *)(uintptr_t)smarm_self(), NULL,
                              &batch[i]);
      CHECK_EQ(rc, 0);
      if (rc < 0)
        return;
      if (where == other)
        CHECK_EQ(smarm_pid_sched(batch[i]), other);
    }
    /* Every child of the batch reports once, with the pid spawn_on gave us. */
    uint32_t seen = 0;
    for (uint32_t i = 0; i < n; i++) {
      smarm_msg_t *m = recv_forever();
      if (!m)
        return;
      smarm_pid_t child = (smarm_pid_t)msg_u64(m);
      CHECK_EQ(smarm_msg_sender(m), child);
      smarm_msg_free(m);
      uint32_t k = 0;
      while (k < n && batch[k] != child)
        k++;
      CHECK(k < n);
      if (k < n) {
        CHECK_EQ(seen & (1u << k), 0);
        seen |= 1u << k;
      }
    }
    /* Ask after the batch: each child ends right after it reported, so the answers race with
    ** the ends (either is right), and alive's requests to the other scheduler interleave with
    ** the spawn requests of the other spawners. The last child must be seen dead in the end. */
    for (uint32_t i = 0; i < n; i++) {
      int a = smarm_alive(batch[i]);
      CHECK(a == 0 || a == 1);
    }
    int64_t asks = n + 1;
    while (smarm_alive(batch[n - 1]) == 1) {
      smarm_yield();
      asks++;
    }
    __atomic_add_fetch(&storm.asks, asks, __ATOMIC_RELAXED);
    made += n;
    if (storm.sleeps && (r >> 16) % 32 == 0)
      smarm_sleep(2000);
  }
  CHECK_EQ(test_send_u64(storm.main, made), 0);
}

static void main_storm(void *arg)
{
  memset(&storm, 0, sizeof storm);
  storm.main = smarm_self();
  storm.sleeps = *(int *)arg;
  storm.per_spawner = (uint64_t)(STORM_TOTAL * test_spawn_scale() / STORM_SPAWNERS);
  if (storm.per_spawner == 0)
    storm.per_spawner = 1;
  for (uint32_t i = 0; i < STORM_SPAWNERS; i++)
    CHECK_EQ(smarm_spawn_on((int)(i % 2), storm_spawner, (void *)(uintptr_t)i, NULL, NULL), 0);
  uint64_t made = 0;
  for (uint32_t i = 0; i < STORM_SPAWNERS; i++) {
    int64_t v = test_recv_u64(SMARM_FOREVER);
    CHECK(v >= 0);
    if (v < 0)
      return;
    made += (uint64_t)v;
  }
  uint64_t want = storm.per_spawner * STORM_SPAWNERS;
  CHECK_EQ(made, want);
  CHECK_EQ(load(&storm.children), (int64_t)want);
  smarm_stats_t st = {0};
  WAIT_UNTIL(smarm_stats_read(-1, &st) == 0 && st.live == 1, 100 * 1000);
  CHECK_EQ(st.live, 1);
  CHECK_EQ(st.spawned, 1 + STORM_SPAWNERS + want);
  printf("  %" PRIu64 " spawn_on calls, %" PRId64 " alive questions", want, load(&storm.asks));
}

TEST(remote_spawn_storm)
{
  int sleeps = 1;
  CHECK_EQ(run_cfg(2, -1, main_storm, &sleeps), 0);
}

TEST(remote_spawn_storm_no_spin)
{
  int sleeps = 0;
  CHECK_EQ(run_cfg(2, 0, main_storm, &sleeps), 0);
}

TEST_MAIN()
