/*
** The allocation test seam (alloc.h): armed failures, counted down by whoever allocates.
*/
#include "alloc.h"

_Atomic unsigned sm_alloc_failing_sites;
static _Atomic unsigned failures_left;

void sm_alloc_fail(unsigned sites, unsigned count)
{
  /* Relaxed: a test arms the seam before it does what should fail, on a thread that then hands
  ** the work on through the runtime's own synchronisation (a send, a spawn, a stop). */
  atomic_store_explicit(&failures_left, count, memory_order_relaxed);
  atomic_store_explicit(&sm_alloc_failing_sites, count ? sites : 0, memory_order_relaxed);
}

int sm_alloc_take_failure(unsigned site)
{
  (void)site;
  unsigned left = atomic_load_explicit(&failures_left, memory_order_relaxed);
  while (left > 0) {
    if (atomic_compare_exchange_weak_explicit(&failures_left, &left, left - 1,
                                              memory_order_relaxed, memory_order_relaxed)) {
      if (left == 1) /* the last one: disarm */
        atomic_store_explicit(&sm_alloc_failing_sites, 0, memory_order_relaxed);
      return 1;
    }
  }
  return 0;
}
