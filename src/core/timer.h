/*
** Per-scheduler timers: a binary min-heap of deadlines, owned by one scheduler thread.
**
** Each parked actor with a deadline (sleep, receive with a timeout) embeds one deadline_t; the heap
** holds pointers to them and keeps each one's index current, so a timer can be removed in
** O(log n) when its actor is woken early (a message arrived).
*/
#ifndef SMARM_CORE_TIMER_H
#define SMARM_CORE_TIMER_H

#include <stdint.h>

typedef struct timer {
  int64_t deadline;  /* CLOCK_MONOTONIC ns */
  int32_t index;     /* position in the heap, -1 when not queued */
} deadline_t;

typedef struct timer_heap {
  deadline_t **items;
  uint32_t count, cap;
} timer_heap_t;

void sm_timer_heap_init(timer_heap_t *h);
void sm_timer_heap_destroy(timer_heap_t *h);
/* Returns 0 or -ENOMEM. */
int sm_timer_add(timer_heap_t *h, deadline_t *t);
void sm_timer_remove(timer_heap_t *h, deadline_t *t);
static inline deadline_t *timer_first(const timer_heap_t *h) { return h->count ? h->items[0] : 0; }

#endif
