/*
** Allocations the core must survive failing, and a test seam to make them fail.
**
** The core's allocations whose failure is reachable from running actors (message blocks, a
** parked actor's saved stack, fault records) go through sm_alloc() / sm_calloc(), which are
** malloc() and calloc() unless a test armed failures with sm_alloc_fail(): then the next
** `count` calls at one of the armed sites return NULL, as malloc does when memory is out. That
** is how spec/c/test_oom.c reaches the out-of-memory paths (a saved stack that cannot be saved,
** a new actor that finds no stack slot, a runtime that stops with nothing left to allocate)
** without exhausting the machine. Unarmed,
** the seam costs one relaxed load of a word nobody writes.
**
** Any thread: the counters are atomics (a test arms them from an actor or from the thread that
** calls smarm_run, while schedulers allocate).
*/
#ifndef SMARM_CORE_ALLOC_H
#define SMARM_CORE_ALLOC_H

#include "check.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

enum sm_alloc_site {
  SM_ALLOC_MSG = 1u << 0,        /* message blocks (message.c: sends, signals, control items) */
  SM_ALLOC_STACK_SAVE = 1u << 1, /* a parked actor's stack copied out of a shared slot */
  SM_ALLOC_FAULTS = 1u << 2,     /* fault records: an actor's state, monitors, reasons */
  SM_ALLOC_STACK_SLOT = 1u << 3, /* a stack slot's record or a stack size's (stack.c), made as
                                    an actor first runs */
  SM_ALLOC_ALL = (1u << 4) - 1,
};

/* Test seam: the next `count` allocations at any of `sites` (a mask of sm_alloc_site) fail;
** count 0 disarms. */
void sm_alloc_fail(unsigned sites, unsigned count);

extern _Atomic unsigned sm_alloc_failing_sites; /* armed sites; 0 almost always */
int sm_alloc_take_failure(unsigned site);       /* 1: this call is to fail (one used up) */

/* Whether this allocation at `site` is to fail (for allocators of their own: home.h's blocks). */
static inline int sm_alloc_fails(unsigned site)
{
  return SMARM_UNLIKELY(atomic_load_explicit(&sm_alloc_failing_sites, memory_order_relaxed) &
                        site) &&
         sm_alloc_take_failure(site);
}

static inline void *sm_alloc(unsigned site, size_t size)
{
  return sm_alloc_fails(site) ? NULL : malloc(size);
}

static inline void *sm_calloc(unsigned site, size_t n, size_t size)
{
  return sm_alloc_fails(site) ? NULL : calloc(n, size);
}

/* A full array: arr (of *cap elements of `size` bytes) with twice the room (`first` elements for
** a new one). Returns the array, or NULL with arr and *cap as they were. (Plain realloc: the
** bookkeeping arrays of the stack pool and the store, not a site of the test seam.) */
static inline void *sm_grown(void *arr, uint32_t *cap, size_t size, uint32_t first)
{
  if (*cap > UINT32_MAX / 2)
    return NULL;
  uint32_t n = *cap ? *cap * 2 : first;
  void *more = realloc(arr, n * size);
  if (more)
    *cap = n;
  return more;
}

#endif
