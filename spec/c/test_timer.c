/* The per-scheduler timer heap (src/core/timer.c), white-box: deadlines added in any order come
** out in order, removal from anywhere keeps the heap a heap, every timer knows its index. */
#include "test.h"

#include "core/timer.h"

#define N 1000

/* Whether every parent is due no later than its children and every index is right. */
static int heap_ok(const timer_heap_t *h)
{
  for (uint32_t i = 0; i < h->count; i++) {
    if (h->items[i]->index != (int32_t)i)
      return 0;
    if (i > 0 && h->items[(i - 1) / 2]->deadline > h->items[i]->deadline)
      return 0;
  }
  return 1;
}

/* Pops every timer; checks they come out in deadline order and leave with index -1. Returns how
** many came out. */
static uint32_t drain_in_order(timer_heap_t *h)
{
  uint32_t n = 0;
  int64_t last = INT64_MIN;
  int ordered = 1;
  deadline_t *t;
  while ((t = timer_first(h)) != NULL) {
    ordered &= t->deadline >= last;
    last = t->deadline;
    sm_timer_remove(h, t);
    ordered &= t->index == -1;
    n++;
  }
  CHECK(ordered);
  return n;
}

TEST(deadlines_come_out_in_order)
{
  static deadline_t ts[N];
  timer_heap_t h;
  sm_timer_heap_init(&h);
  uint32_t rng = 12345;
  for (int i = 0; i < N; i++) {
    ts[i] = (deadline_t){(int64_t)(test_xorshift(&rng) % 100000), -1};
    CHECK_EQ(sm_timer_add(&h, &ts[i]), 0);
  }
  CHECK(heap_ok(&h));
  CHECK_EQ(drain_in_order(&h), N);
  sm_timer_heap_destroy(&h);
}

TEST(equal_and_sorted_deadlines)
{
  static deadline_t ts[N];
  timer_heap_t h;
  sm_timer_heap_init(&h);
  for (int i = 0; i < N; i++) { /* descending, with runs of equal deadlines */
    ts[i] = (deadline_t){(N - i) / 7, -1};
    CHECK_EQ(sm_timer_add(&h, &ts[i]), 0);
  }
  CHECK(heap_ok(&h));
  CHECK_EQ(drain_in_order(&h), N);
  for (int i = 0; i < N; i++) { /* ascending */
    ts[i] = (deadline_t){i, -1};
    CHECK_EQ(sm_timer_add(&h, &ts[i]), 0);
  }
  CHECK_EQ(drain_in_order(&h), N);
  sm_timer_heap_destroy(&h);
}

TEST(removal_from_anywhere_keeps_the_heap)
{
  static deadline_t ts[N];
  timer_heap_t h;
  sm_timer_heap_init(&h);
  uint32_t rng = 777;
  for (int i = 0; i < N; i++) {
    ts[i] = (deadline_t){(int64_t)(test_xorshift(&rng) % 5000), -1};
    CHECK_EQ(sm_timer_add(&h, &ts[i]), 0);
  }
  /* every third one leaves early (an actor woken by a message), some twice (a no-op) */
  uint32_t removed = 0;
  int ok = 1;
  for (int i = 0; i < N; i += 3) {
    sm_timer_remove(&h, &ts[i]);
    sm_timer_remove(&h, &ts[i]);
    removed++;
    ok &= ts[i].index == -1;
    if (i % 30 == 0)
      ok &= heap_ok(&h);
  }
  CHECK(ok);
  CHECK(heap_ok(&h));
  CHECK_EQ(h.count, N - removed);
  /* re-added with new deadlines, mixed with the rest */
  for (int i = 0; i < N; i += 3) {
    ts[i].deadline = (int64_t)(test_xorshift(&rng) % 5000);
    CHECK_EQ(sm_timer_add(&h, &ts[i]), 0);
  }
  CHECK(heap_ok(&h));
  CHECK_EQ(drain_in_order(&h), N);
  sm_timer_heap_destroy(&h);
}

TEST(destroy_leaves_timers_unqueued)
{
  deadline_t a = {5, -1}, b = {3, -1};
  timer_heap_t h;
  sm_timer_heap_init(&h);
  CHECK(timer_first(&h) == NULL);
  CHECK_EQ(sm_timer_add(&h, &a), 0);
  CHECK_EQ(sm_timer_add(&h, &b), 0);
  CHECK(timer_first(&h) == &b);
  sm_timer_heap_destroy(&h);
  CHECK_EQ(a.index, -1);
  CHECK_EQ(b.index, -1);
  CHECK(timer_first(&h) == NULL);
}

TEST_MAIN()
