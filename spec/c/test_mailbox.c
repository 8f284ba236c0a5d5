/* Mailboxes: local and remote send/receive, timeouts, polling, selective receive, per-pair FIFO
** order, senders, dead and bad pids, payload sizes, messages from threads that are no actors
** (smarm_send_outside), and messages left behind at exit and at
** shutdown (the ASan build's leak check is what catches those being lost instead of freed). */
#define _GNU_SOURCE
#include "test.h"

#include <stdatomic.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>

#define MS (1000LL * 1000)
/* Receives that must succeed wait this long, so a lost message fails a CHECK instead of hanging. */
#define LONG_WAIT TEST_HANG_GUARD_NS /* only a hang guard (test.h) */

static void noop(void *arg) { (void)arg; }

static uint64_t load(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void store(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

/* The value of a one-u64 message (UINT64_MAX if it has another size). */
static uint64_t msg_u64(smarm_msg_t *m)
{
  uint64_t v = UINT64_MAX;
  if (smarm_msg_size(m) == sizeof v)
    memcpy(&v, smarm_msg_data(m), sizeof v);
  return v;
}

/* Waits (sleeping) until *flag >= want; 0 if it never happened within LONG_WAIT. */
static int wait_flag(uint64_t *flag, uint64_t want)
{
  for (int i = 0; i < 100000; i++) {
    if (load(flag) >= want)
      return 1;
    smarm_sleep(100 * 1000);
  }
  return load(flag) >= want;
}

/* Replies v + 1 to the sender of every v; ends on 0. */
static void echo(void *arg)
{
  smarm_pid_t expect_from = (smarm_pid_t)(uintptr_t)arg;
  for (;;) {
    smarm_msg_t *m;
    int rc = smarm_receive(LONG_WAIT, &m);
    CHECK_EQ(rc, 0);
    if (rc < 0)
      return;
    uint64_t v = msg_u64(m);
    smarm_pid_t from = smarm_msg_sender(m);
    smarm_msg_free(m);
    if (expect_from)
      CHECK_EQ(from, expect_from);
    if (v == 0)
      return;
    CHECK_EQ(test_send_u64(from, v + 1), 0);
  }
}

/* ---- local and remote round trips ---- */

static void round_trips(int sched)
{
  smarm_pid_t me = smarm_self(), pid = 0;
  CHECK_EQ(smarm_spawn_on(sched, echo, (void *)(uintptr_t)me, NULL, &pid), 0);
  CHECK_EQ(smarm_pid_sched(pid), sched);
  for (uint64_t v = 1; v <= 100; v++) {
    CHECK_EQ(test_send_u64(pid, v), 0);
    smarm_msg_t *m = NULL;
    CHECK_EQ(smarm_receive(LONG_WAIT, &m), 0);
    if (!m)
      return;
    CHECK_EQ(msg_u64(m), v + 1);
    CHECK_EQ(smarm_msg_sender(m), pid);
    smarm_msg_free(m);
  }
  CHECK_EQ(test_send_u64(pid, 0), 0);
}

static void main_local(void *arg)
{
  (void)arg;
  round_trips(0);
  /* An actor can send to itself. */
  CHECK_EQ(test_send_u64(smarm_self(), 77), 0);
  smarm_msg_t *m = NULL;
  CHECK_EQ(smarm_receive(0, &m), 0);
  if (m) {
    CHECK_EQ(msg_u64(m), 77);
    CHECK_EQ(smarm_msg_sender(m), smarm_self());
    smarm_msg_free(m);
  }
}

TEST(local_send_receive) { RUN(1, main_local, NULL); }

static void main_remote(void *arg)
{
  (void)arg;
  round_trips(1);
  round_trips(0);
  round_trips(1);
}

TEST(remote_send_receive) { RUN(2, main_remote, NULL); }

/* ---- timeouts and polling ---- */

static int match_tag(const smarm_msg_t *m, void *ud);

static void send_after(void *arg)
{
  smarm_pid_t to = (smarm_pid_t)(uintptr_t)arg;
  smarm_sleep(2 * MS);
  CHECK_EQ(test_send_u64(to, 5), 0);
}

static void main_timeout(void *arg)
{
  (void)arg;
  smarm_msg_t *m = NULL;
  int64_t t0 = smarm_now_ns();
  CHECK_EQ(smarm_receive(30 * MS, &m), -ETIMEDOUT);
  CHECK(smarm_now_ns() - t0 >= 30 * MS);

  /* A message that comes before the timeout ends the wait, and the dropped timer leaves no trace:
  ** later timed waits still last their full time. */
  int sched = smarm_sched_count() > 1 ? 1 : 0;
  CHECK_EQ(smarm_spawn_on(sched, send_after, (void *)(uintptr_t)smarm_self(), NULL, NULL), 0);
  m = NULL;
  CHECK_EQ(smarm_receive(LONG_WAIT, &m), 0);
  if (m) {
    CHECK_EQ(msg_u64(m), 5);
    smarm_msg_free(m);
  }
  t0 = smarm_now_ns();
  CHECK_EQ(smarm_sleep(40 * MS), 0);
  CHECK(smarm_now_ns() - t0 >= 40 * MS);
  t0 = smarm_now_ns();
  CHECK_EQ(smarm_receive(20 * MS, &m), -ETIMEDOUT);
  CHECK(smarm_now_ns() - t0 >= 20 * MS);
}

TEST(receive_timeout) { RUN(1, main_timeout, NULL); }
TEST(receive_timeout_two_schedulers) { RUN(2, main_timeout, NULL); }

static void main_huge_timeout(void *arg)
{
  (void)arg;
  /* Negative timeouts and ones whose deadline would pass INT64_MAX wait without end: they must
  ** neither time out at once nor fail. */
  static const int64_t timeouts[] = {INT64_MAX, INT64_MAX - 1, SMARM_FOREVER, -5};
  int sched = smarm_sched_count() > 1 ? 1 : 0;
  for (size_t i = 0; i < sizeof timeouts / sizeof timeouts[0]; i++) {
    CHECK_EQ(smarm_spawn_on(sched, send_after, (void *)(uintptr_t)smarm_self(), NULL, NULL), 0);
    smarm_msg_t *m = NULL;
    CHECK_EQ(smarm_receive(timeouts[i], &m), 0);
    if (m) {
      CHECK_EQ(msg_u64(m), 5);
      smarm_msg_free(m);
    }
    CHECK_EQ(smarm_spawn_on(sched, send_after, (void *)(uintptr_t)smarm_self(), NULL, NULL), 0);
    uint64_t tag = 0; /* matches the value 5, tagged 0 */
    m = NULL;
    CHECK_EQ(smarm_receive_match(match_tag, &tag, timeouts[i], &m), 0);
    smarm_msg_free(m);
  }
}

TEST(receive_huge_timeout_waits) { RUN(2, main_huge_timeout, NULL); }

static void set_flag(void *arg) { store(arg, 1); }

static void main_poll(void *arg)
{
  (void)arg;
  static uint64_t ran;
  store(&ran, 0);
  smarm_msg_t *m = NULL;
  /* A poll on an empty mailbox does not park: the runnable actor does not get to run. */
  CHECK_EQ(smarm_spawn(set_flag, &ran, NULL, NULL), 0);
  CHECK_EQ(smarm_receive(0, &m), -ETIMEDOUT);
  CHECK_EQ(load(&ran), 0);
  /* Queued messages come out of polls in order. */
  for (uint64_t v = 1; v <= 3; v++)
    CHECK_EQ(test_send_u64(smarm_self(), v), 0);
  for (uint64_t v = 1; v <= 3; v++) {
    m = NULL;
    CHECK_EQ(smarm_receive(0, &m), 0);
    if (m) {
      CHECK_EQ(msg_u64(m), v);
      smarm_msg_free(m);
    }
  }
  CHECK_EQ(smarm_receive(0, &m), -ETIMEDOUT);
  CHECK_EQ(load(&ran), 0);
  smarm_yield();
  CHECK_EQ(load(&ran), 1);
}

TEST(receive_zero_polls) { RUN(1, main_poll, NULL); }

/* Remote side of poll_sees_remote_send: for every "go r" it sends r, then raises the flag. */
typedef struct poll_peer {
  smarm_pid_t main;
  uint64_t flag;
} poll_peer_t;

static void poll_peer(void *arg)
{
  poll_peer_t *p = arg;
  for (;;) {
    int64_t r = test_recv_u64(LONG_WAIT);
    CHECK(r >= 0);
    if (r <= 0)
      return;
    CHECK_EQ(test_send_u64(p->main, (uint64_t)r), 0);
    store(&p->flag, (uint64_t)r);
  }
}

static void main_poll_remote(void *arg)
{
  (void)arg;
  static poll_peer_t peer;
  peer.main = smarm_self();
  store(&peer.flag, 0);
  smarm_pid_t pid;
  CHECK_EQ(smarm_spawn_on(1, poll_peer, &peer, NULL, &pid), 0);
  for (uint64_t r = 1; r <= 400; r++) {
    CHECK_EQ(test_send_u64(pid, r), 0);
    switch (r % 4) {
    case 0: /* sleeping: the scheduler may park */
      CHECK(wait_flag(&peer.flag, r));
      break;
    case 1: /* yielding: the scheduler never parks, but looks at its inbox */
      for (long i = 0; i < 100000000 && load(&peer.flag) < r; i++) {
        smarm_yield();
        if (i % 64 == 63)
          sched_yield(); /* for Valgrind, see below */
      }
      CHECK(load(&peer.flag) >= r);
      break;
    default: { /* spinning on the flag alone: nothing but the poll looks at the inbox (the OS
               ** yield is for Valgrind, which runs one thread at a time) */
      int64_t t0 = smarm_now_ns();
      while (load(&peer.flag) < r && smarm_now_ns() - t0 < LONG_WAIT)
        sched_yield();
      CHECK(load(&peer.flag) >= r);
      break;
    }
    }
    /* The send happened before the flag: a poll must see the message. */
    if (r % 4 == 3)
      CHECK_EQ(smarm_mailbox_size(), 1);
    smarm_msg_t *m = NULL;
    CHECK_EQ(smarm_receive(0, &m), 0);
    if (m) {
      CHECK_EQ(msg_u64(m), r);
      CHECK_EQ(smarm_msg_sender(m), pid);
      smarm_msg_free(m);
    }
  }
  CHECK_EQ(test_send_u64(pid, 0), 0);
}

TEST(poll_sees_earlier_remote_send) { RUN(2, main_poll_remote, NULL); }

/* ---- selective receive ---- */

/* Messages are (tag << 32 | seq). */
#define TAGGED(tag, seq) (((uint64_t)(tag) << 32) | (uint64_t)(seq))

static int match_tag(const smarm_msg_t *m, void *ud)
{
  uint64_t v = UINT64_MAX;
  if (smarm_msg_size(m) == sizeof v)
    memcpy(&v, smarm_msg_data((smarm_msg_t *)m), sizeof v);
  return (v >> 32) == *(uint64_t *)ud;
}

static int match_multiple_of_3(const smarm_msg_t *m, void *ud)
{
  (*(int *)ud)++;
  uint64_t v;
  memcpy(&v, smarm_msg_data((smarm_msg_t *)m), sizeof v);
  return v % 3 == 0;
}

static int match_none(const smarm_msg_t *m, void *ud)
{
  (void)m;
  (void)ud;
  return 0;
}

/* Receives everything queued now and checks it is exactly want[0..n) in order. */
static void expect_queue(const uint64_t *want, size_t n)
{
  CHECK_EQ(smarm_mailbox_size(), n);
  for (size_t i = 0; i < n; i++) {
    smarm_msg_t *m = NULL;
    CHECK_EQ(smarm_receive(0, &m), 0);
    if (!m)
      return;
    CHECK_EQ(msg_u64(m), want[i]);
    smarm_msg_free(m);
  }
  smarm_msg_t *m = NULL;
  CHECK_EQ(smarm_receive(0, &m), -ETIMEDOUT);
}

static void main_select(void *arg)
{
  (void)arg;
  for (uint64_t v = 1; v <= 10; v++)
    CHECK_EQ(test_send_u64(smarm_self(), v), 0);
  smarm_msg_t *m = NULL;
  int calls = 0;
  CHECK_EQ(smarm_receive_match(match_multiple_of_3, &calls, 0, &m), 0);
  CHECK_EQ(calls, 3); /* scanned from the oldest, stopped at the first match */
  if (m) {
    CHECK_EQ(msg_u64(m), 3);
    smarm_msg_free(m);
  }
  CHECK_EQ(smarm_mailbox_size(), 9);
  m = NULL;
  CHECK_EQ(smarm_receive_match(match_multiple_of_3, &calls, LONG_WAIT, &m), 0);
  if (m) {
    CHECK_EQ(msg_u64(m), 6);
    smarm_msg_free(m);
  }
  CHECK_EQ(smarm_receive_match(match_none, NULL, 0, &m), -ETIMEDOUT);
  /* The last message can be taken too (the queue's tail must follow). */
  m = NULL;
  uint64_t tag = 0;
  CHECK_EQ(test_send_u64(smarm_self(), TAGGED(5, 1)), 0);
  tag = 5;
  CHECK_EQ(smarm_receive_match(match_tag, &tag, 0, &m), 0);
  if (m) {
    CHECK_EQ(msg_u64(m), TAGGED(5, 1));
    smarm_msg_free(m);
  }
  CHECK_EQ(test_send_u64(smarm_self(), 11), 0);
  static const uint64_t rest[] = {1, 2, 4, 5, 7, 8, 9, 10, 11};
  expect_queue(rest, sizeof rest / sizeof rest[0]);
}

TEST(selective_receive_takes_first_match) { RUN(1, main_select, NULL); }

static int match_any(const smarm_msg_t *m, void *ud)
{
  (void)m;
  (*(int *)ud)++;
  return 1;
}

/* Once p[2] is raised, sends the actor p[0] one message, then raises p[1]. */
static void send_then_flag(void *arg)
{
  uint64_t *p = arg;
  CHECK(wait_flag(&p[2], 1));
  CHECK_EQ(test_send_u64((smarm_pid_t)p[0], 42), 0);
  store(&p[1], 1);
}

static void main_receive_first(void *arg)
{
  (void)arg;
  smarm_msg_t *m = NULL;
  int calls = 0;
  CHECK_EQ(smarm_receive_first(match_any, &calls, &m), -EAGAIN); /* empty */
  CHECK_EQ(calls, 0);
  CHECK_EQ(smarm_receive_first(NULL, NULL, &m), -EINVAL);
  CHECK_EQ(smarm_receive_first(match_any, &calls, NULL), -EINVAL);
  for (uint64_t v = 1; v <= 3; v++)
    CHECK_EQ(test_send_u64(smarm_self(), v), 0);
  /* only the first message is looked at: refused, it stays, and so do the others */
  CHECK_EQ(smarm_receive_first(match_multiple_of_3, &calls, &m), -EAGAIN);
  CHECK_EQ(calls, 1);
  CHECK_EQ(smarm_mailbox_size(), 3);
  CHECK_EQ(smarm_receive_first(match_any, &calls, &m), 0);
  if (m) {
    CHECK_EQ(msg_u64(m), 1);
    smarm_msg_free(m);
  }
  static const uint64_t rest[] = {2, 3};
  expect_queue(rest, sizeof rest / sizeof rest[0]);
}

/* A message waiting in the scheduler's inbox comes first: nothing is taken until a receive takes
** it in (behind what the mailbox holds). Never preempted (a switch would take the inbox in). */
static void inbox_first(void *arg)
{
  uint64_t *done = arg;
  CHECK_EQ(test_send_u64(smarm_self(), 1), 0);
  static uint64_t ask[3];
  ask[0] = smarm_self();
  ask[1] = ask[2] = 0;
  CHECK(smarm_spawn_on(1, send_then_flag, ask, NULL, NULL) == 0); /* may park: what came in
                                                                   ** meanwhile is taken in */
  store(&ask[2], 1);
  while (!load(&ask[1]))
    sched_yield(); /* no smarm call: the inbox is not taken in */
  smarm_msg_t *m = NULL;
  int calls = 0;
  CHECK_EQ(smarm_receive_first(match_any, &calls, &m), -EAGAIN);
  CHECK_EQ(calls, 0);
  static const uint64_t rest[] = {1, 42};
  expect_queue(rest, sizeof rest / sizeof rest[0]);
  store(done, 1);
}

static void main_receive_first_inbox(void *arg)
{
  (void)arg;
  static uint64_t done;
  done = 0;
  smarm_spawn_opts_t opts = {.slice_ns = -1};
  CHECK(smarm_spawn_on(0, inbox_first, &done, &opts, NULL) == 0);
  CHECK(wait_flag(&done, 1));
}

TEST(receive_first_takes_only_the_first_and_only_when_nothing_comes_before)
{
  smarm_msg_t *m = NULL;
  CHECK_EQ(smarm_receive_first(match_none, NULL, &m), -EPERM); /* not an actor */
  RUN(1, main_receive_first, NULL);
  RUN(2, main_receive_first_inbox, NULL);
}

/* Sends `n` messages tagged 1 (sleeping now and then so the receiver parks between them), then
** one tagged 2. */
typedef struct late_sender {
  smarm_pid_t to;
  uint32_t n;
} late_sender_t;

static void late_sender(void *arg)
{
  late_sender_t *p = arg;
  for (uint32_t i = 0; i < p->n; i++) {
    CHECK_EQ(test_send_u64(p->to, TAGGED(1, i)), 0);
    if (i % 10 == 9)
      smarm_sleep(100 * 1000);
    else if (i % 3 == 0)
      smarm_yield();
  }
  CHECK_EQ(test_send_u64(p->to, TAGGED(2, 0)), 0);
}

static void main_select_late(void *arg)
{
  (void)arg;
  static late_sender_t ls;
  static uint64_t want[300];
  for (int sched = 0; sched < 2; sched++) {
    ls = (late_sender_t){smarm_self(), 300};
    /* One message that is already queued and does not match. */
    CHECK_EQ(test_send_u64(smarm_self(), TAGGED(3, 0)), 0);
    CHECK_EQ(smarm_spawn_on(sched, late_sender, &ls, NULL, NULL), 0);
    smarm_msg_t *m = NULL;
    uint64_t tag = 2;
    CHECK_EQ(smarm_receive_match(match_tag, &tag, LONG_WAIT, &m), 0);
    if (m) {
      CHECK_EQ(msg_u64(m), TAGGED(2, 0));
      smarm_msg_free(m);
    }
    /* Everything else is still there, in order. */
    m = NULL;
    CHECK_EQ(smarm_receive(0, &m), 0);
    if (m) {
      CHECK_EQ(msg_u64(m), TAGGED(3, 0));
      smarm_msg_free(m);
    }
    for (uint32_t i = 0; i < 300; i++)
      want[i] = TAGGED(1, i);
    expect_queue(want, 300);
  }
}

TEST(selective_receive_waits_for_late_match) { RUN(2, main_select_late, NULL); }

/* Sends a non-matching message about every millisecond until told to stop (or 20000 of them,
** which takes at least 20 s), then a "done" message holding the count. */
typedef struct drip {
  smarm_pid_t to;
  uint64_t stop;
  uint64_t finished;
} drip_t;

static void drip(void *arg)
{
  drip_t *d = arg;
  uint32_t n = 0;
  do { /* one at least, however late this actor starts */
    CHECK_EQ(test_send_u64(d->to, TAGGED(1, n)), 0);
    n++;
    smarm_sleep(MS);
  } while (!load(&d->stop) && n < 20000);
  store(&d->finished, 1);
  CHECK_EQ(test_send_u64(d->to, TAGGED(4, n)), 0);
}

static void main_select_timeout(void *arg)
{
  (void)arg;
  static drip_t d;
  int sched = smarm_sched_count() > 1 ? 1 : 0;
  smarm_msg_t *m = NULL;
  uint64_t tag = 2;
  /* Nothing there, nothing coming. */
  int64_t t0 = smarm_now_ns();
  CHECK_EQ(smarm_receive_match(match_tag, &tag, 20 * MS, &m), -ETIMEDOUT);
  CHECK(smarm_now_ns() - t0 >= 20 * MS);

  /* Non-matching messages queued before and arriving during the wait: they do not end it early,
  ** and they do not push the deadline back (the drip goes on far longer than the timeout). */
  for (uint32_t i = 0; i < 5; i++)
    CHECK_EQ(test_send_u64(smarm_self(), TAGGED(3, i)), 0);
  d = (drip_t){.to = smarm_self()};
  CHECK_EQ(smarm_spawn_on(sched, drip, &d, NULL, NULL), 0);
  t0 = smarm_now_ns();
  CHECK_EQ(smarm_receive_match(match_tag, &tag, 50 * MS, &m), -ETIMEDOUT);
  CHECK(smarm_now_ns() - t0 >= 50 * MS);
  CHECK_EQ(load(&d.finished), 0);
  store(&d.stop, 1);
  /* Wait for "done", selectively, then check the rest: 5 local ones, then the drip in order. */
  m = NULL;
  tag = 4;
  CHECK_EQ(smarm_receive_match(match_tag, &tag, LONG_WAIT, &m), 0);
  uint32_t n = 0;
  if (m) {
    n = (uint32_t)msg_u64(m);
    smarm_msg_free(m);
  }
  CHECK(n > 0);
  CHECK_EQ(smarm_mailbox_size(), 5 + n);
  for (uint32_t i = 0; i < 5 + n; i++) {
    m = NULL;
    CHECK_EQ(smarm_receive(0, &m), 0);
    if (!m)
      break;
    CHECK_EQ(msg_u64(m), i < 5 ? TAGGED(3, i) : TAGGED(1, i - 5));
    smarm_msg_free(m);
  }
}

TEST(selective_receive_timeout) { RUN(2, main_select_timeout, NULL); }
TEST(selective_receive_timeout_local) { RUN(1, main_select_timeout, NULL); }

/* ---- FIFO per sender-receiver pair ---- */

#define FIFO_N 10000

typedef struct fifo_sender {
  smarm_pid_t to;
  uint32_t id;
} fifo_sender_t;

static void fifo_sender(void *arg)
{
  fifo_sender_t *p = arg;
  uint32_t rng = p->id * 2654435761u + 1;
  for (uint32_t i = 0; i < FIFO_N; i++) {
    CHECK_EQ(test_send_u64(p->to, TAGGED(p->id, i)), 0);
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    if (rng % 16 == 0)
      smarm_yield();
    else if (rng % 1024 == 1)
      smarm_sleep(10 * 1000);
  }
}

/* Senders 0..n-1 on schedulers id % nsched send FIFO_N numbered messages each to the main actor. */
static void fifo_run(unsigned nsenders)
{
  static fifo_sender_t senders[8];
  static smarm_pid_t pids[8];
  static uint32_t next[8];
  unsigned nsched = smarm_sched_count(), breaks = 0;
  for (unsigned i = 0; i < nsenders; i++) {
    senders[i] = (fifo_sender_t){smarm_self(), i};
    next[i] = 0;
    CHECK_EQ(smarm_spawn_on((int)(i % nsched), fifo_sender, &senders[i], NULL, &pids[i]), 0);
  }
  for (uint32_t k = 0; k < nsenders * FIFO_N; k++) {
    smarm_msg_t *m = NULL;
    CHECK_EQ(smarm_receive(LONG_WAIT, &m), 0);
    if (!m)
      return;
    uint64_t v = msg_u64(m);
    uint32_t id = (uint32_t)(v >> 32), seq = (uint32_t)v;
    CHECK(id < nsenders);
    if (id < nsenders) {
      CHECK_EQ(smarm_msg_sender(m), pids[id]);
      if (seq != next[id] && breaks++ < 10) {
        CHECK_EQ(seq, next[id]);
      }
      next[id] = seq;
      next[id]++;
    }
    smarm_msg_free(m);
  }
  for (unsigned i = 0; i < nsenders; i++)
    CHECK_EQ(next[i], FIFO_N);
  smarm_msg_t *m = NULL;
  CHECK_EQ(smarm_receive(0, &m), -ETIMEDOUT);
}

static void main_fifo(void *arg)
{
  fifo_run((unsigned)(uintptr_t)arg);
}

TEST(fifo_per_pair_local) { RUN(1, main_fifo, (void *)(uintptr_t)3); }
TEST(fifo_per_pair_remote) { RUN(2, main_fifo, (void *)(uintptr_t)4); }

/* ---- dead and bad receivers ---- */

static void say_bye(void *arg)
{
  CHECK_EQ(test_send_u64((smarm_pid_t)(uintptr_t)arg, 9), 0);
}

static void main_dead(void *arg)
{
  (void)arg;
  smarm_pid_t me = smarm_self(), dead = 0;
  /* Local: -ESRCH, and the caller still owns the message (intact, can be sent elsewhere). */
  CHECK_EQ(smarm_spawn(noop, NULL, NULL, &dead), 0);
  smarm_yield();
  smarm_msg_t *m = smarm_msg_new(16);
  CHECK(m != NULL);
  if (!m)
    return;
  memset(smarm_msg_data(m), 0xAB, 16);
  CHECK_EQ(smarm_send(dead, m), -ESRCH);
  CHECK_EQ(smarm_msg_size(m), 16);
  CHECK_EQ(((unsigned char *)smarm_msg_data(m))[15], 0xAB);
  CHECK_EQ(smarm_send(me, m), 0);
  m = NULL;
  CHECK_EQ(smarm_receive(0, &m), 0);
  if (m) {
    CHECK_EQ(smarm_msg_size(m), 16);
    CHECK_EQ(((unsigned char *)smarm_msg_data(m))[0], 0xAB);
    smarm_msg_free(m);
  }
  m = smarm_msg_new(8);
  CHECK_EQ(smarm_send(dead, m), -ESRCH);
  smarm_msg_free(m);

  /* Remote: accepted (0), then dropped by the receiving scheduler. */
  CHECK_EQ(smarm_spawn_on(1, say_bye, (void *)(uintptr_t)me, NULL, &dead), 0);
  CHECK_EQ(test_recv_u64(LONG_WAIT), 9);
  smarm_sleep(MS); /* it ended right after saying bye; either way the send must succeed */
  smarm_stats_t before, after;
  CHECK_EQ(smarm_stats_read(0, &before), 0);
  for (int i = 0; i < 100; i++) {
    m = smarm_msg_new(1000);
    CHECK_EQ(smarm_send(dead, m), 0);
  }
  /* A pid on scheduler 1 whose slot was never handed out. */
  smarm_pid_t never = ((smarm_pid_t)1 << (SMARM_PID_SLOT_BITS + SMARM_PID_GEN_BITS)) |
                      ((smarm_pid_t)123456 << SMARM_PID_GEN_BITS) | 1;
  CHECK_EQ(test_send_u64(never, 1), 0);
  CHECK_EQ(smarm_stats_read(0, &after), 0);
  CHECK_EQ(after.remote_sent - before.remote_sent, 101);
  /* Scheduler 1 has processed them (FIFO from this sender) once an echo there answers. */
  smarm_pid_t e;
  CHECK_EQ(smarm_spawn_on(1, echo, NULL, NULL, &e), 0);
  CHECK_EQ(test_send_u64(e, 1), 0);
  CHECK_EQ(test_recv_u64(LONG_WAIT), 2);
  CHECK_EQ(test_send_u64(e, 0), 0);
}

TEST(send_to_dead_pid) { RUN(2, main_dead, NULL); }

static void main_bad(void *arg)
{
  (void)arg;
  smarm_msg_t *m = smarm_msg_new(8);
  CHECK(m != NULL);
  smarm_pid_t sched2 = ((smarm_pid_t)2 << (SMARM_PID_SLOT_BITS + SMARM_PID_GEN_BITS)) |
                       ((smarm_pid_t)1 << SMARM_PID_GEN_BITS) | 1;
  smarm_pid_t schedmax = ((smarm_pid_t)(SMARM_SCHED_MAX - 1)
                          << (SMARM_PID_SLOT_BITS + SMARM_PID_GEN_BITS)) | 1;
  CHECK_EQ(smarm_send(0, m), -EINVAL);
  CHECK_EQ(smarm_send(sched2, m), -ESRCH);   /* schedulers this runtime lacks: dead pids */
  CHECK_EQ(smarm_send(schedmax, m), -ESRCH);
  CHECK_EQ(smarm_send(smarm_self(), NULL), -EINVAL);
  CHECK_EQ(smarm_send(0, NULL), -EINVAL);
  smarm_stats_t st;
  CHECK_EQ(smarm_stats_read(-1, &st), 0);
  CHECK_EQ(st.remote_sent, 0);
  /* Still the caller's: usable afterwards. */
  CHECK_EQ(smarm_send(smarm_self(), m), 0);
  CHECK_EQ(smarm_mailbox_size(), 1);
  m = NULL;
  CHECK_EQ(smarm_receive(0, &m), 0);
  smarm_msg_free(m);
  CHECK_EQ(smarm_receive(0, NULL), -EINVAL);
  CHECK_EQ(smarm_receive_match(match_tag, NULL, 0, NULL), -EINVAL);
}

TEST(bad_pids_and_null_msg) { RUN(2, main_bad, NULL); }

/* ---- mailbox size ---- */

typedef struct sizer {
  smarm_pid_t to;
  uint64_t flag;
} sizer_t;

static void send_four(void *arg)
{
  sizer_t *p = arg;
  for (uint64_t v = 100; v < 104; v++)
    CHECK_EQ(test_send_u64(p->to, v), 0);
  store(&p->flag, 1);
}

static void main_size(void *arg)
{
  (void)arg;
  static sizer_t sz;
  CHECK_EQ(smarm_mailbox_size(), 0);
  for (uint64_t v = 1; v <= 3; v++)
    CHECK_EQ(test_send_u64(smarm_self(), v), 0);
  CHECK_EQ(smarm_mailbox_size(), 3);
  sz = (sizer_t){smarm_self(), 0};
  CHECK_EQ(smarm_spawn_on(1, send_four, &sz, NULL, NULL), 0);
  CHECK(wait_flag(&sz.flag, 1));
  CHECK_EQ(smarm_mailbox_size(), 7); /* counts what another scheduler delivered too */
  static const uint64_t want[] = {1, 2, 3, 100, 101, 102, 103};
  CHECK_EQ(test_recv_u64(0), 1);
  CHECK_EQ(smarm_mailbox_size(), 6);
  expect_queue(want + 1, 6);
  CHECK_EQ(smarm_mailbox_size(), 0);
}

TEST(mailbox_size_counts_queued) { RUN(2, main_size, NULL); }

/* ---- payloads ---- */

#define BIG (1024 * 1024)

static unsigned char pattern(size_t i, unsigned salt)
{
  return (unsigned char)(i * 31 + (i >> 9) + salt);
}

static int check_pattern(smarm_msg_t *m, size_t size, unsigned salt)
{
  if (smarm_msg_size(m) != size)
    return 0;
  const unsigned char *p = smarm_msg_data(m);
  for (size_t i = 0; i < size; i++)
    if (p[i] != pattern(i, salt))
      return 0;
  return 1;
}

/* Receives messages and sends each very block back to its sender; ends on a 1-byte message. */
static void bounce(void *arg)
{
  (void)arg;
  for (;;) {
    smarm_msg_t *m = NULL;
    CHECK_EQ(smarm_receive(LONG_WAIT, &m), 0);
    if (!m)
      return;
    if (smarm_msg_size(m) == 1) {
      smarm_msg_free(m);
      return;
    }
    CHECK_EQ(smarm_send(smarm_msg_sender(m), m), 0);
  }
}

static void payload_trip(smarm_pid_t to, size_t size, unsigned salt)
{
  smarm_msg_t *m = smarm_msg_new(size);
  CHECK(m != NULL);
  if (!m)
    return;
  CHECK_EQ(smarm_msg_size(m), size);
  unsigned char *p = smarm_msg_data(m);
  for (size_t i = 0; i < size; i++)
    p[i] = pattern(i, salt);
  CHECK_EQ(smarm_send(to, m), 0);
  m = NULL;
  CHECK_EQ(smarm_receive(LONG_WAIT, &m), 0);
  if (!m)
    return;
  CHECK(check_pattern(m, size, salt));
  CHECK_EQ(smarm_msg_sender(m), to);
  smarm_msg_free(m);
}

static void main_payload(void *arg)
{
  (void)arg;
  CHECK(smarm_msg_new((size_t)1 << 32) == NULL);
  for (int sched = 0; sched < 2; sched++) {
    smarm_pid_t b;
    CHECK_EQ(smarm_spawn_on(sched, bounce, NULL, NULL, &b), 0);
    payload_trip(b, 0, 0);
    payload_trip(b, 3, 1);
    payload_trip(b, 4096 + 17, 2);
    payload_trip(b, BIG, 3);
    payload_trip(b, BIG, 4);
    payload_trip(b, 0, 5);
    smarm_msg_t *m = smarm_msg_new(1);
    CHECK_EQ(smarm_send(b, m), 0);
  }
}

TEST(zero_size_and_large_payloads) { RUN(2, main_payload, NULL); }

/* ---- messages nobody receives are freed ---- */

#define HOARD 200

typedef struct hoarder {
  smarm_pid_t main;
  uint64_t seen;
} hoarder_t;

/* Never receives: waits until its mailbox holds `want` messages, reports, then ends (or parks
** for good when `park` is set). */
typedef struct hoard_arg {
  hoarder_t *h;
  size_t want;
  int park;
} hoard_arg_t;

static void hoard(void *arg)
{
  hoard_arg_t *a = arg;
  WAIT_UNTIL(smarm_mailbox_size() >= a->want, 100 * 1000);
  store(&a->h->seen, smarm_mailbox_size());
  CHECK_EQ(test_send_u64(a->h->main, 1), 0);
  if (a->park) {
    smarm_msg_t *m;
    smarm_receive_match(match_none, NULL, SMARM_FOREVER, &m);
    CHECK(0); /* never returns */
  }
}

static void flood(void *arg)
{
  smarm_pid_t to = (smarm_pid_t)(uintptr_t)arg;
  for (int i = 0; i < HOARD / 2; i++) {
    smarm_msg_t *m = smarm_msg_new(100 + (size_t)i);
    CHECK_EQ(smarm_send(to, m), 0);
  }
}

static void main_hoard_exit(void *arg)
{
  (void)arg;
  static hoarder_t h;
  static hoard_arg_t ha;
  for (int sched = 0; sched < 2; sched++) {
    h = (hoarder_t){smarm_self(), 0};
    ha = (hoard_arg_t){&h, HOARD, 0};
    smarm_pid_t pid;
    CHECK_EQ(smarm_spawn_on(sched, hoard, &ha, NULL, &pid), 0);
    CHECK_EQ(smarm_spawn_on(0, flood, (void *)(uintptr_t)pid, NULL, NULL), 0);
    CHECK_EQ(smarm_spawn_on(1, flood, (void *)(uintptr_t)pid, NULL, NULL), 0);
    CHECK_EQ(test_recv_u64(LONG_WAIT), 1);
    CHECK_EQ(load(&h.seen), HOARD);
  }
  /* Every other actor ends soon (their messages with them). */
  smarm_stats_t st = {0};
  for (int i = 0; i < 100000; i++) {
    CHECK_EQ(smarm_stats_read(-1, &st), 0);
    if (st.live == 1)
      break;
    smarm_sleep(100 * 1000);
  }
  CHECK_EQ(st.live, 1);
}

TEST(queued_messages_freed_when_receiver_exits) { RUN(2, main_hoard_exit, NULL); }

/* Keeps sending to `to` until the runtime stops under it. */
static void endless_flood(void *arg)
{
  smarm_pid_t to = (smarm_pid_t)(uintptr_t)arg;
  for (uint64_t i = 0;; i++) {
    smarm_msg_t *m = smarm_msg_new(64);
    CHECK(m != NULL);
    if (smarm_send(to, m) < 0)
      smarm_msg_free(m);
    if (i % 64 == 0) {
      smarm_yield();
      sched_yield(); /* for Valgrind, which runs one thread at a time and not fairly */
    }
  }
}

static void main_hoard_shutdown(void *arg)
{
  (void)arg;
  static hoarder_t h;
  static hoard_arg_t ha[2];
  h = (hoarder_t){smarm_self(), 0};
  smarm_pid_t pids[2];
  for (int sched = 0; sched < 2; sched++) {
    ha[sched] = (hoard_arg_t){&h, HOARD, 1};
    CHECK_EQ(smarm_spawn_on(sched, hoard, &ha[sched], NULL, &pids[sched]), 0);
    CHECK_EQ(smarm_spawn_on(0, flood, (void *)(uintptr_t)pids[sched], NULL, NULL), 0);
    CHECK_EQ(smarm_spawn_on(1, flood, (void *)(uintptr_t)pids[sched], NULL, NULL), 0);
    CHECK_EQ(test_recv_u64(LONG_WAIT), 1);
    CHECK_EQ(load(&h.seen), HOARD);
  }
  /* Messages still on their way when the runtime stops: floods across schedulers, both ways, and
  ** unreceived messages in the main actor's own mailbox. */
  CHECK_EQ(smarm_spawn_on(1, endless_flood, (void *)(uintptr_t)pids[0], NULL, NULL), 0);
  CHECK_EQ(smarm_spawn_on(1, endless_flood, (void *)(uintptr_t)smarm_self(), NULL, NULL), 0);
  CHECK_EQ(smarm_spawn_on(0, endless_flood, (void *)(uintptr_t)pids[1], NULL, NULL), 0);
  for (int i = 0; i < 50; i++) {
    CHECK_EQ(test_send_u64(pids[1], (uint64_t)i), 0);
    CHECK_EQ(test_send_u64(smarm_self(), (uint64_t)i), 0);
    smarm_yield();
  }
  smarm_sleep(MS);
  CHECK(smarm_mailbox_size() >= 50);
}

TEST(messages_in_flight_at_shutdown_are_freed) { RUN(2, main_hoard_shutdown, NULL); }

/* ---- owning messages: the drop hook runs for every one freed without being taken over ---- */

static _Atomic int dropped;

static void count_drop(smarm_msg_t *m)
{
  (void)m;
  atomic_fetch_add(&dropped, 1);
}

static smarm_msg_t *owning_msg(void)
{
  smarm_msg_t *m = smarm_msg_new(8);
  smarm_msg_set_owning(m, 1);
  return m;
}

static void exits_at_once(void *arg) { (void)arg; }

static void holds_then_exits(void *arg)
{
  (void)arg;
  smarm_sleep(20 * 1000 * 1000); /* messages pile up; it ends without receiving them */
}

static void main_owning(void *arg)
{
  (void)arg;
  /* received and taken over: no drop */
  smarm_msg_t *m = owning_msg();
  CHECK_EQ(smarm_send(smarm_self(), m), 0);
  CHECK_EQ(smarm_receive(0, &m), 0);
  smarm_msg_set_owning(m, 0);
  smarm_msg_free(m);
  CHECK_EQ(atomic_load(&dropped), 0);
  /* received and freed as is: dropped */
  CHECK_EQ(smarm_send(smarm_self(), owning_msg()), 0);
  CHECK_EQ(smarm_receive(0, &m), 0);
  smarm_msg_free(m);
  CHECK_EQ(atomic_load(&dropped), 1);
  /* to a dead remote actor: dropped on arrival */
  smarm_pid_t dead;
  CHECK_EQ(smarm_spawn_on(1, exits_at_once, NULL, NULL, &dead), 0);
  WAIT_UNTIL(smarm_alive(dead) == 0, MS);
  CHECK_EQ(smarm_alive(dead), 0);
  CHECK_EQ(smarm_send(dead, owning_msg()), 0);
  /* left in the mailbox of an actor that ends */
  smarm_pid_t holder;
  CHECK_EQ(smarm_spawn_on(1, holds_then_exits, NULL, NULL, &holder), 0);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(smarm_send(holder, owning_msg()), 0);
  WAIT_UNTIL(atomic_load(&dropped) >= 5, MS); /* it ends (before or after they arrive) */
  CHECK_EQ(atomic_load(&dropped), 5);
}

TEST(owning_messages_run_the_drop_hook)
{
  smarm_msg_set_drop_hook(count_drop);
  atomic_store(&dropped, 0);
  RUN(2, main_owning, NULL);
  smarm_msg_set_drop_hook(NULL);
}

/* ---- smarm_send_outside: a plain thread's messages ------------------------------------------ */

#define OUTSIDE_N 20000

static smarm_pid_t outside_to[2]; /* an actor on each scheduler */
static smarm_pid_t outside_dead;  /* an actor that has ended */

/* A pid of scheduler k (slot 1, generation 1): well formed, whether or not anyone has it. */
static smarm_pid_t pid_of_sched(unsigned k)
{
  return (smarm_pid_t)k << (SMARM_PID_SLOT_BITS + SMARM_PID_GEN_BITS) |
         (smarm_pid_t)1 << SMARM_PID_GEN_BITS | 1;
}

static smarm_msg_t *u64_msg(uint64_t v)
{
  smarm_msg_t *m = smarm_msg_new(sizeof v);
  CHECK(m != NULL);
  memcpy(smarm_msg_data(m), &v, sizeof v);
  return m;
}

/* The plain thread: OUTSIDE_N numbers to each receiver, interleaved, and some to a dead pid. */
static void *outside_sender(void *arg)
{
  (void)arg;
  for (uint64_t i = 0; i < OUTSIDE_N; i++) {
    for (int r = 0; r < 2; r++)
      CHECK_EQ(smarm_send_outside(outside_to[r], u64_msg(i)), 0);
    if (i % 1000 == 0) /* dropped where it arrives (the ASan build's leak check watches) */
      CHECK_EQ(smarm_send_outside(outside_dead, u64_msg(i)), 0);
  }
  smarm_msg_t *m = u64_msg(0);
  CHECK_EQ(smarm_send_outside(0, m), -EINVAL);
  CHECK_EQ(smarm_send_outside(outside_to[0], NULL), -EINVAL);
  CHECK_EQ(smarm_send_outside(pid_of_sched(999), m), -ESRCH); /* no such scheduler */
  smarm_msg_free(m);
  return NULL;
}

/* A receiver: every number in order, each from sender 0; tells main. */
static void outside_receiver(void *arg)
{
  smarm_pid_t main_pid = (smarm_pid_t)(uintptr_t)arg;
  for (uint64_t i = 0; i < OUTSIDE_N; i++) {
    smarm_msg_t *m;
    CHECK_EQ(smarm_receive(LONG_WAIT, &m), 0);
    CHECK_EQ(msg_u64(m), i);
    CHECK_EQ(smarm_msg_sender(m), (smarm_pid_t)0);
    smarm_msg_free(m);
  }
  CHECK_EQ(test_send_u64(main_pid, 1), 0);
}

static void main_outside(void *arg)
{
  (void)arg;
  smarm_pid_t me = smarm_self();
  CHECK_EQ(smarm_spawn(noop, NULL, NULL, &outside_dead), 0);
  for (int r = 0; r < 2; r++)
    CHECK_EQ(smarm_spawn_on((unsigned)r, outside_receiver, (void *)(uintptr_t)me, NULL,
                            &outside_to[r]), 0);
  while (smarm_alive(outside_dead) == 1)
    smarm_yield();
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, outside_sender, NULL), 0);
  CHECK_EQ(test_recv_u64(LONG_WAIT), 1);
  CHECK_EQ(test_recv_u64(LONG_WAIT), 1);
  CHECK_EQ(pthread_join(t, NULL), 0);
}

TEST(a_plain_threads_messages_arrive_in_order_on_every_scheduler)
{
  smarm_msg_t *m = u64_msg(1);
  CHECK_EQ(smarm_send_outside(pid_of_sched(0), m), -ESRCH); /* no runtime runs */
  smarm_msg_free(m);
  RUN(2, main_outside, NULL);
}

TEST_MAIN()
