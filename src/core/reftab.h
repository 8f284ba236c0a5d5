/*
** A hash table of records keyed by a 64-bit reference, owned by one scheduler thread.
**
** Intrusive and chained: a record embeds a reftab_node_t, so inserting allocates nothing but the
** occasional larger bucket array, and a table that cannot grow (out of memory) keeps working
** with longer chains. Used for monitors, which a busy server may hold by the hundred thousand. Keys are refs (smarm_make_ref), already spread by the counter they come
** from; the multiplication spreads their low bits over the bucket index.
*/
#ifndef SMARM_CORE_REFTAB_H
#define SMARM_CORE_REFTAB_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct reftab_node {
  uint64_t key;
  struct reftab_node *next;
} reftab_node_t;

typedef struct reftab {
  reftab_node_t **buckets; /* mask + 1 of them, or NULL while empty */
  uint32_t mask;
  uint32_t count;
} reftab_t;

static inline uint32_t reftab_index(const reftab_t *t, uint64_t key)
{
  return (uint32_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & t->mask;
}

static inline reftab_node_t *reftab_find(const reftab_t *t, uint64_t key)
{
  if (!t->buckets)
    return NULL;
  reftab_node_t *n = t->buckets[reftab_index(t, key)];
  while (n && n->key != key)
    n = n->next;
  return n;
}

/* Doubles the bucket array (keeps the old one when out of memory). */
static inline void reftab_grow(reftab_t *t)
{
  uint32_t size = t->buckets ? (t->mask + 1) * 2 : 16;
  reftab_node_t **b = calloc(size, sizeof *b);
  if (!b)
    return;
  reftab_t bigger = {b, size - 1, t->count};
  for (uint32_t i = 0; t->buckets && i <= t->mask; i++) {
    reftab_node_t *n = t->buckets[i];
    while (n) {
      reftab_node_t *next = n->next;
      uint32_t j = reftab_index(&bigger, n->key);
      n->next = b[j];
      b[j] = n;
      n = next;
    }
  }
  free(t->buckets);
  *t = bigger;
}

/* n->key must be set and not in the table yet. Returns 0, or -ENOMEM when there is no bucket
** array at all. */
static inline int reftab_insert(reftab_t *t, reftab_node_t *n)
{
  if (!t->buckets || t->count > t->mask)
    reftab_grow(t);
  if (!t->buckets)
    return -ENOMEM;
  uint32_t i = reftab_index(t, n->key);
  n->next = t->buckets[i];
  t->buckets[i] = n;
  t->count++;
  return 0;
}

static inline void reftab_destroy(reftab_t *t)
{
  free(t->buckets);
  t->buckets = NULL;
  t->mask = t->count = 0;
}

static inline void reftab_remove(reftab_t *t, reftab_node_t *n)
{
  reftab_node_t **at = &t->buckets[reftab_index(t, n->key)];
  while (*at != n)
    at = &(*at)->next;
  *at = n->next;
  t->count--;
}

#endif
