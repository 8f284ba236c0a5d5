/*
** Binary min-heap of timers (see timer.h).
*/
#include "timer.h"

#include <errno.h>
#include <stdlib.h>

void sm_timer_heap_init(timer_heap_t *h)
{
  h->items = NULL;
  h->count = h->cap = 0;
}

void sm_timer_heap_destroy(timer_heap_t *h)
{
  for (uint32_t i = 0; i < h->count; i++)
    h->items[i]->index = -1;
  free(h->items);
  sm_timer_heap_init(h);
}

static void place(timer_heap_t *h, uint32_t i, deadline_t *t)
{
  h->items[i] = t;
  t->index = (int32_t)i;
}

static void sift_up(timer_heap_t *h, uint32_t i)
{
  deadline_t *t = h->items[i];
  while (i > 0) {
    uint32_t parent = (i - 1) / 2;
    if (h->items[parent]->deadline <= t->deadline)
      break;
    place(h, i, h->items[parent]);
    i = parent;
  }
  place(h, i, t);
}

static void sift_down(timer_heap_t *h, uint32_t i)
{
  deadline_t *t = h->items[i];
  for (;;) {
    uint32_t child = 2 * i + 1;
    if (child >= h->count)
      break;
    if (child + 1 < h->count && h->items[child + 1]->deadline < h->items[child]->deadline)
      child++;
    if (t->deadline <= h->items[child]->deadline)
      break;
    place(h, i, h->items[child]);
    i = child;
  }
  place(h, i, t);
}

int sm_timer_add(timer_heap_t *h, deadline_t *t)
{
  if (h->count == h->cap) {
    uint32_t cap = h->cap ? h->cap * 2 : 64;
    deadline_t **items = realloc(h->items, cap * sizeof *items);
    if (!items)
      return -ENOMEM;
    h->items = items;
    h->cap = cap;
  }
  h->items[h->count] = t;
  sift_up(h, h->count++);
  return 0;
}

void sm_timer_remove(timer_heap_t *h, deadline_t *t)
{
  if (t->index < 0)
    return;
  uint32_t i = (uint32_t)t->index;
  t->index = -1;
  deadline_t *last = h->items[--h->count];
  if (i == h->count)
    return;
  place(h, i, last);
  if (i > 0 && h->items[(i - 1) / 2]->deadline > last->deadline)
    sift_up(h, i);
  else
    sift_down(h, i);
}
