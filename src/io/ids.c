/* Ids of the IO thread's open things (ids.h). */
#include "ids.h"

#include <stdlib.h>

uint64_t sm_io_id_new(io_ids_t *t, void *obj)
{
  uint32_t i;
  if (t->nfree) {
    i = t->free_slots[--t->nfree];
  } else {
    if (t->n == t->cap) {
      uint32_t cap = t->cap ? t->cap * 2 : 64;
      io_id_slot_t *more = realloc(t->slots, cap * sizeof *more);
      if (more)
        t->slots = more;
      uint32_t *fmore = realloc(t->free_slots, cap * sizeof *fmore);
      if (fmore)
        t->free_slots = fmore;
      if (!more || !fmore)
        return 0;
      t->cap = cap;
    }
    i = t->n++;
    t->slots[i].gen = 0;
  }
  t->slots[i].obj = obj;
  t->slots[i].gen++;
  return (uint64_t)t->slots[i].gen << 32 | i;
}

void *sm_io_id_get(const io_ids_t *t, uint64_t id)
{
  uint32_t i = (uint32_t)id;
  if (i >= t->n || t->slots[i].gen != (uint32_t)(id >> 32))
    return NULL;
  return t->slots[i].obj;
}

void sm_io_id_free(io_ids_t *t, uint64_t id)
{
  uint32_t i = (uint32_t)id;
  t->slots[i].obj = NULL;
  t->free_slots[t->nfree++] = i;
}

void sm_io_id_each(io_ids_t *t, void (*fn)(void *obj))
{
  for (uint32_t i = 0; i < t->n; i++)
    if (t->slots[i].obj)
      fn(t->slots[i].obj);
}
