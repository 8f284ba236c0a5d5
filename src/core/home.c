/*
** Where message blocks come from and where they go back (see home.h for why and the protocol).
*/
#include "home.h"

sm_home_t sm_homes[SM_HOMES];
__attribute__((tls_model("initial-exec"))) _Thread_local sm_home_t *sm_home_tls;

static void *entry_block(uintptr_t e) { return (void *)(e & ~(uintptr_t)SM_HOME_NOCLASS); }

/* Frees the batches of a stack of carriers (a home's returned stack at its release). */
static void free_carriers(sm_home_carrier_t *c)
{
  while (c) {
    sm_home_carrier_t *next = c->next;
    for (unsigned i = 0; i < c->count; i++)
      free(entry_block(c->entries[i]));
    free(c);
    c = next;
  }
}

void sm_home_claim(void)
{
  SMARM_ASSERT(sm_home_tls == NULL);
  for (unsigned k = 1; k < SM_HOMES; k++) {
    sm_home_t *h = &sm_homes[k];
    int unowned = 0;
    /* acquire: pairs with the release store of the home's last owner (sm_home_release), whose
    ** exchange of SM_HOME_ORPHANED and whose emptied cache come before it */
    if (atomic_load_explicit(&h->owned, memory_order_relaxed) == 0 &&
        atomic_compare_exchange_strong_explicit(&h->owned, &unowned, 1, memory_order_acquire,
                                                memory_order_relaxed)) {
      h->cache = malloc(SM_HOME_CLASSES * sizeof *h->cache);
      if (!h->cache) { /* the thread does without */
        atomic_store_explicit(&h->owned, 0, memory_order_release);
        return;
      }
      /* Never claimed (NULL) or orphaned: nothing is there either way, as nobody pushes onto
      ** SM_HOME_ORPHANED. Pushers may push from now on. */
      atomic_store_explicit(&h->returned, NULL, memory_order_relaxed);
      h->id = (uint8_t)k;
#ifdef SM_HOME_VALGRIND
      h->memcheck = RUNNING_ON_VALGRIND != 0;
#endif
      sm_home_tls = h;
      return;
    }
  }
}

void sm_home_release(void)
{
  sm_home_t *h = sm_home_tls;
  if (!h)
    return;
  sm_home_before_idle();
  for (unsigned k = 0; k < SM_HOME_CLASSES; k++) {
    while (h->cached[k]) {
      void *b = h->cache[k][--h->cached[k]];
      sm_home_show(h, b, sm_home_class_bytes(k));
      free(b);
    }
  }
  free(h->cache);
  h->cache = NULL;
  /* acquire: pairs with the pushers' release CAS (their carriers) */
  free_carriers(atomic_exchange_explicit(&h->returned, SM_HOME_ORPHANED, memory_order_acquire));
  sm_home_tls = NULL;
  /* release: pairs with the acquire CAS of the next claim */
  atomic_store_explicit(&h->owned, 0, memory_order_release);
}

void sm_home_batch_send(void)
{
  sm_home_t *self = sm_home_tls;
  sm_home_carrier_t *c = self->batch;
  sm_home_t *h = &sm_homes[self->batch_home];
  sm_home_carrier_t *head = atomic_load_explicit(&h->returned, memory_order_relaxed);
  for (;;) {
    if (head == SM_HOME_ORPHANED) { /* its thread is gone: the blocks are freed here */
      /* Cut the batch off what a failed CAS below linked it to: the carriers that were there
      ** then, which the leaving owner took and freed (TSan saw this free them again). */
      self->batch_oldest->next = NULL;
      free_carriers(c);
      break;
    }
    self->batch_oldest->next = head;
    /* release: pairs with the owner's acquire exchange (sm_home_take_returned,
    ** sm_home_release), which then reads the carrier written here */
    if (atomic_compare_exchange_weak_explicit(&h->returned, &head, c, memory_order_release,
                                              memory_order_relaxed))
      break;
  }
  self->batch = self->batch_oldest = NULL;
  self->batch_count = 0;
}

static uint16_t room_of(size_t bytes)
{
  size_t room = (bytes - sizeof(sm_home_carrier_t)) / sizeof(uintptr_t);
  return (uint16_t)(room < SM_HOME_BATCH ? room : SM_HOME_BATCH);
}

void sm_home_batch_add(smarm_msg_t *m, unsigned k)
{
  if (SMARM_UNLIKELY((uintptr_t)m & SM_HOME_NOCLASS)) { /* (malloc's 16-byte alignment) */
    free(m);
    return;
  }
  sm_home_t *self = sm_home_tls;
  if (self->batch && self->batch_home != m->home)
    sm_home_batch_send();
  sm_home_carrier_t *c = self->batch;
  if (c && c->count < c->room) {
    c->entries[c->count++] = (uintptr_t)m | k;
  } else { /* m carries what follows: the batch's first, or the last one is full */
    /* the bytes it has (m->size is only ever set when the block is made) */
    size_t bytes = k == SM_HOME_NOCLASS ? sizeof *m + m->size : sm_home_class_bytes(k);
    sm_home_carrier_t *n = (sm_home_carrier_t *)m;
    n->next = c;
    n->count = 0;
    n->room = room_of(bytes);
    n->klass = (uint8_t)k;
    if (!c)
      self->batch_oldest = n;
    self->batch = n;
    self->batch_home = m->home;
  }
  if (++self->batch_count >= SM_HOME_BATCH)
    sm_home_batch_send();
}

/* Takes block b of class k (or SM_HOME_NOCLASS) into the cache, or frees it. */
static void keep_or_free(sm_home_t *h, void *b, unsigned k)
{
  if (k < SM_HOME_CLASSES && h->cached[k] < SM_HOME_CACHED)
    sm_home_cache_put(h, b, k);
  else
    free(b);
}

void sm_home_take_returned(void)
{
  sm_home_t *h = sm_home_tls;
  /* acquire: pairs with the pushers' release CAS (sm_home_batch_send) */
  sm_home_carrier_t *c = atomic_exchange_explicit(&h->returned, NULL, memory_order_acquire);
  while (c) {
    sm_home_carrier_t *next = c->next;
    for (unsigned i = 0; i < c->count; i++) /* their lines are not read here */
      keep_or_free(h, entry_block(c->entries[i]), (unsigned)(c->entries[i] & SM_HOME_NOCLASS));
    unsigned k = c->klass;
    ((smarm_msg_t *)c)->home = h->id; /* the carrier wrote over its header: it is this home's */
    keep_or_free(h, c, k);
    c = next;
  }
}
