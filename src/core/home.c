/*
** Where message blocks come from and where they go back (see home.h for why and the protocol).
*/
#include "home.h"

sm_home_t sm_homes[SM_HOMES];
__attribute__((tls_model("initial-exec"))) _Thread_local sm_home_t *sm_home_tls;

static void free_chain(sm_home_link_t *b)
{
  while (b) {
    sm_home_link_t *next = b->next;
    free(b);
    b = next;
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
    for (sm_home_link_t *b = h->cache[k]; b; b = h->cache[k]) {
      h->cache[k] = b->next;
      sm_home_show(h, b, 64 * (size_t)(k + 1));
      free(b);
    }
    h->cached[k] = 0;
  }
  /* acquire: pairs with the pushers' release CAS (their chains' links) */
  free_chain(atomic_exchange_explicit(&h->returned, SM_HOME_ORPHANED, memory_order_acquire));
  sm_home_tls = NULL;
  /* release: pairs with the acquire CAS of the next claim */
  atomic_store_explicit(&h->owned, 0, memory_order_release);
}

void sm_home_batch_send(void)
{
  sm_home_t *self = sm_home_tls;
  sm_home_t *h = &sm_homes[self->batch_home];
  sm_home_link_t *head = atomic_load_explicit(&h->returned, memory_order_relaxed);
  for (;;) {
    if (head == SM_HOME_ORPHANED) { /* its thread is gone: the blocks are freed here */
      /* Cut the batch off what a failed CAS below linked it to: the chain that was there then,
      ** which the leaving owner took and freed (TSan saw this free it again, at a shutdown). */
      self->batch_tail->next = NULL;
      free_chain(self->batch_head);
      break;
    }
    self->batch_tail->next = head;
    /* release: pairs with the owner's acquire exchange (sm_home_take_returned,
    ** sm_home_release), which then reads the links written above */
    if (atomic_compare_exchange_weak_explicit(&h->returned, &head, self->batch_head,
                                              memory_order_release, memory_order_relaxed))
      break;
  }
  self->batch_head = self->batch_tail = NULL;
  self->batch_count = 0;
}

void sm_home_batch_add(smarm_msg_t *m)
{
  sm_home_t *self = sm_home_tls;
  sm_home_link_t *b = (sm_home_link_t *)m;
  if (self->batch_count && self->batch_home != m->home)
    sm_home_batch_send();
  if (!self->batch_count) {
    self->batch_home = m->home;
    self->batch_tail = b;
    b->next = NULL;
  } else {
    b->next = self->batch_head;
  }
  self->batch_head = b;
  if (++self->batch_count >= SM_HOME_BATCH)
    sm_home_batch_send();
}

void sm_home_take_returned(void)
{
  sm_home_t *h = sm_home_tls;
  /* acquire: pairs with the pushers' release CAS (sm_home_batch_send) */
  sm_home_link_t *b = atomic_exchange_explicit(&h->returned, NULL, memory_order_acquire);
  while (b) {
    sm_home_link_t *next = b->next;
    smarm_msg_t *m = (smarm_msg_t *)b;
    size_t total = sizeof *m + m->size;
    unsigned k = (unsigned)(total - 1) / 64;
    if (total <= SM_HOME_CLASS_MAX && h->cached[k] < SM_HOME_CACHED) {
      sm_home_cache_put(h, m, k);
    } else {
      free(b);
    }
    b = next;
  }
}
