/* Message blocks and their homes (src/core/home.h), on plain threads: blocks allocated on one
** thread and freed on another come back to their home and are used again; blocks of a home that
** is gone are freed where they are; homes are claimed again after their threads end; threads
** without a home allocate and free as malloc does. The ASan build's leak check and valgrind are
** what catch a block lost or freed twice on the way. */
#define _GNU_SOURCE
#include "test.h"

#include "core/home.h"

#include <pthread.h>

#define BLOCKS 20000

/* A hand-over between two threads: a mutex and a list, so nothing of home.h is used to pass. */
typedef struct {
  pthread_mutex_t lock;
  smarm_msg_t *head;
  int done;
} queue_t;

static void queue_push(queue_t *q, smarm_msg_t *m)
{
  pthread_mutex_lock(&q->lock);
  m->next = q->head;
  q->head = m;
  pthread_mutex_unlock(&q->lock);
}

static smarm_msg_t *queue_take(queue_t *q, int *done)
{
  pthread_mutex_lock(&q->lock);
  smarm_msg_t *m = q->head;
  q->head = NULL;
  *done = q->done;
  pthread_mutex_unlock(&q->lock);
  return m;
}

/* Sizes of every kind: cached classes, a block past the classes, one past SM_HOME_SMALL. */
static size_t size_of(unsigned i)
{
  static const size_t sizes[] = {0, 8, 40, 100, 300, SM_HOME_CLASS_MAX, 2000, SM_HOME_SMALL + 1};
  return sizes[i % (sizeof sizes / sizeof sizes[0])];
}

static void fill(smarm_msg_t *m, unsigned i)
{
  memset(smarm_msg_data(m), (int)(i & 0xff), smarm_msg_size(m));
}

static int intact(smarm_msg_t *m, unsigned i)
{
  const unsigned char *d = smarm_msg_data(m);
  for (size_t k = 0; k < smarm_msg_size(m); k++)
    if (d[k] != (i & 0xff))
      return 0;
  return 1;
}

typedef struct {
  queue_t q;
  int consumer_has_home;
  _Atomic unsigned freed; /* blocks the consumer freed */
  int bad;                /* blocks that arrived changed */
} one_way_t;

static void *consumer(void *p)
{
  one_way_t *w = p;
  if (w->consumer_has_home)
    sm_home_claim();
  for (;;) {
    int done;
    smarm_msg_t *m = queue_take(&w->q, &done);
    while (m) {
      smarm_msg_t *next = m->next;
      unsigned i;
      memcpy(&i, &m->to, sizeof i); /* the producer's index, kept in the header */
      if (!intact(m, i))
        w->bad++;
      sm_msg_release(m);
      atomic_fetch_add_explicit(&w->freed, 1, memory_order_relaxed);
      m = next;
    }
    if (done)
      break;
    sm_home_before_idle(); /* as a scheduler does before it waits */
    sched_yield();
  }
  if (w->consumer_has_home)
    sm_home_release();
  return NULL;
}

/* A producer with a home sends BLOCKS blocks one way; the consumer frees them. */
static void one_way(int consumer_has_home)
{
  one_way_t w = {.consumer_has_home = consumer_has_home};
  pthread_mutex_init(&w.q.lock, NULL);
  sm_home_claim();
  sm_home_t *home = sm_home_tls;
  CHECK(home != NULL);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, consumer, &w), 0);
  unsigned came_back = 0; /* allocations served by a block the consumer returned */
  for (unsigned i = 0; i < BLOCKS; i++) {
    unsigned cached_before = home->cached[0];
    sm_home_collect();
    if (home->cached[0] > cached_before)
      came_back++;
    smarm_msg_t *m = sm_msg_new(MSG_USER, size_of(i));
    CHECK(m != NULL);
    CHECK_EQ(m->home, home->id);
    m->to = 0;
    memcpy(&m->to, &i, sizeof i);
    fill(m, i);
    queue_push(&w.q, m);
    if (i % 64 == 63) /* let the consumer keep up: the blocks go round */
      while (atomic_load_explicit(&w.freed, memory_order_relaxed) + 64 < i)
        sched_yield();
  }
  pthread_mutex_lock(&w.q.lock);
  w.q.done = 1;
  pthread_mutex_unlock(&w.q.lock);
  CHECK_EQ(pthread_join(t, NULL), 0);
  CHECK_EQ(w.bad, 0);
  CHECK_EQ(atomic_load(&w.freed), BLOCKS);
  if (consumer_has_home)
    CHECK(came_back > 0); /* the small blocks went home and were taken again */
  else
    CHECK_EQ(came_back, 0); /* without a home the consumer frees them itself */
  sm_home_release();
  CHECK(sm_home_tls == NULL);
  pthread_mutex_destroy(&w.q.lock);
}

TEST(one_way_between_homes) { one_way(1); }

TEST(one_way_to_a_thread_without_home) { one_way(0); }

/* A thread that frees what it is given, with a home of its own, and ends (which sends its batch
** home). */
static void *free_them(void *p)
{
  smarm_msg_t **blocks = p;
  sm_home_claim();
  for (smarm_msg_t **b = blocks; *b; b++)
    sm_msg_release(*b);
  sm_home_release();
  return NULL;
}

/* A sender that never looks at the clock takes its blocks back when a class runs dry. */
TEST(an_empty_class_takes_the_blocks_returned)
{
  enum { N = SM_HOME_CACHED + 4 * SM_HOME_BATCH };
  static smarm_msg_t *blocks[N + 1];
  sm_home_claim();
  sm_home_t *home = sm_home_tls;
  for (unsigned i = 0; i < N; i++) {
    blocks[i] = sm_msg_new(MSG_USER, 8);
    CHECK(blocks[i] != NULL);
  }
  CHECK_EQ(home->cached[0], 0);
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, free_them, blocks), 0);
  CHECK_EQ(pthread_join(t, NULL), 0);
  CHECK(atomic_load(&home->returned) != NULL); /* what the freer's cache had no room for */
  smarm_msg_t *m = sm_msg_new(MSG_USER, 8);
  CHECK(m != NULL);
  CHECK(atomic_load(&home->returned) == NULL);
  CHECK(home->cached[0] > 0);
  sm_msg_release(m);
  sm_home_release();
}

/* Blocks that outlive their home's thread: freed by whoever frees them, and never pushed to a
** home nobody takes from (the leak check would see them). */
typedef struct {
  smarm_msg_t *blocks[SM_HOME_CACHED + 3 * SM_HOME_BATCH];
  unsigned n;
} orphans_t;

static void *orphan_maker(void *p)
{
  orphans_t *o = p;
  sm_home_claim();
  for (o->n = 0; o->n < sizeof o->blocks / sizeof o->blocks[0]; o->n++) {
    o->blocks[o->n] = sm_msg_new(MSG_USER, 16);
    CHECK(o->blocks[o->n] != NULL);
  }
  sm_home_release();
  return NULL;
}

TEST(blocks_of_a_home_that_is_gone)
{
  orphans_t o;
  pthread_t t;
  sm_home_claim(); /* first: the maker gets another home */
  CHECK_EQ(pthread_create(&t, NULL, orphan_maker, &o), 0);
  CHECK_EQ(pthread_join(t, NULL), 0);
  uint8_t gone = o.blocks[0]->home;
  CHECK(gone != sm_home_tls->id);
  /* SM_HOME_CACHED of them stay in this thread's cache, the rest go to the home that is gone in
  ** batches, and are freed here: none is left on its list. */
  for (unsigned i = 0; i < o.n; i++)
    sm_msg_release(o.blocks[i]);
  sm_home_before_idle();
  CHECK(atomic_load(&sm_homes[gone].returned) == SM_HOME_ORPHANED);
  sm_home_release();
}

/* Threads that come and go: each gets a home, gives it back, and homes never run out. */
static void *claim_and_release(void *p)
{
  int *got = p;
  sm_home_claim();
  *got = sm_home_tls != NULL;
  smarm_msg_t *m = sm_msg_new(MSG_USER, 8);
  CHECK(m != NULL);
  sm_msg_release(m); /* into the cache, which release empties */
  sm_home_release();
  return NULL;
}

TEST(homes_are_claimed_again)
{
  for (int i = 0; i < 3 * SM_HOMES; i++) {
    int got = 0;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, claim_and_release, &got), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    if (!got) {
      CHECK(got);
      return;
    }
  }
}

/* The runtime's own schedulers: a message sent one way across schedulers again and again. */
static void sink(void *arg)
{
  (void)arg;
  for (;;) {
    int64_t v = test_recv_u64(TEST_HANG_GUARD_NS);
    CHECK(v >= 0);
    if (v <= 0)
      return;
  }
}

static void source(void *arg)
{
  (void)arg;
  smarm_pid_t to;
  CHECK_EQ(smarm_spawn_on(1, sink, NULL, NULL, &to), 0);
  for (uint64_t i = 1; i <= BLOCKS; i++) {
    CHECK_EQ(test_send_u64(to, i), 0);
    if (i % 100 == 0)
      smarm_yield();
  }
  /* The sink frees them on its scheduler and sends them back here: this scheduler takes them
  ** into its cache although its only actor never parks (it yields with nothing else to run, so
  ** the scheduler's loop never runs). */
  int64_t end = smarm_now_ns() + TEST_HANG_GUARD_NS;
  while (sm_home_tls->cached[0] == 0 && smarm_now_ns() < end)
    smarm_yield();
  CHECK(sm_home_tls->cached[0] > 0);
  CHECK_EQ(test_send_u64(to, 0), 0);
}

TEST(one_way_across_schedulers) { RUN(2, source, NULL); }

TEST_MAIN()
