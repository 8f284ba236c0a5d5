/*
** Telling the sanitizers and Valgrind about our stack switches.
**
** ASan keeps shadow state per stack and TSan per "fiber"; both go wrong (false reports, crashes)
** if a thread changes stacks behind their back. Every switch in sched.c is bracketed by
** fiber_before_switch() on the leaving side and fiber_after_switch() on the arriving side. In
** builds without sanitizers every function here is empty and compiles to nothing.
**
**  - ASan: __sanitizer_start_switch_fiber(save, target_bottom, target_size) before, and
**    __sanitizer_finish_switch_fiber(save, ...) after. A side that will never be resumed passes a
**    NULL save so its fake stack is released.
**  - TSan: one fiber object per actor, created as the actor is bound to its
**    stack slot (its first run: sched.c bind_first_slot), destroyed after its last switch;
**    __tsan_switch_to_fiber(target, 0) right before the switch (flag 0: the switch synchronises,
**    which is true, since both sides run on one thread).
*/
#ifndef SMARM_CORE_ANNOTATE_H
#define SMARM_CORE_ANNOTATE_H

#include <stddef.h>

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#define SMARM_HAVE_ASAN 1
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
#define SMARM_HAVE_TSAN 1
#include <sanitizer/tsan_interface.h>
#endif

/* Empty without a sanitizer (a GNU C extension: size 0), so an actor pays nothing for it. */
typedef struct fiber {
#ifdef SMARM_HAVE_ASAN
  const void *stack_lo; /* lowest usable address of the stack (ASan's "bottom") */
  size_t stack_size;
  void *asan_fake;
#endif
#ifdef SMARM_HAVE_TSAN
  void *tsan;
#endif
} fiber_t;

/* The fiber of the thread's own stack (the scheduler context). */
static inline void fiber_init_thread(fiber_t *f, const void *lo, size_t size)
{
#ifdef SMARM_HAVE_ASAN
  f->stack_lo = lo;
  f->stack_size = size;
  f->asan_fake = NULL;
#endif
#ifdef SMARM_HAVE_TSAN
  f->tsan = __tsan_get_current_fiber();
#endif
  (void)f;
  (void)lo;
  (void)size;
}

static inline void fiber_create(fiber_t *f, const void *lo, size_t size)
{
#ifdef SMARM_HAVE_ASAN
  f->stack_lo = lo;
  f->stack_size = size;
  f->asan_fake = NULL;
#endif
#ifdef SMARM_HAVE_TSAN
  f->tsan = __tsan_create_fiber(0);
#endif
  (void)f;
  (void)lo;
  (void)size;
}

/* Called after the last switch away from f (never on f's own stack). */
static inline void fiber_destroy(fiber_t *f)
{
#ifdef SMARM_HAVE_TSAN
  if (f->tsan)
    __tsan_destroy_fiber(f->tsan);
  f->tsan = NULL;
#endif
  (void)f;
}

static inline void fiber_before_switch(fiber_t *from, fiber_t *to, int from_is_dying)
{
#ifdef SMARM_HAVE_ASAN
  __sanitizer_start_switch_fiber(from_is_dying ? NULL : &from->asan_fake, to->stack_lo,
                                 to->stack_size);
#endif
#ifdef SMARM_HAVE_TSAN
  __tsan_switch_to_fiber(to->tsan, 0);
#endif
  (void)from;
  (void)to;
  (void)from_is_dying;
}

static inline void fiber_after_switch(fiber_t *self)
{
#ifdef SMARM_HAVE_ASAN
  __sanitizer_finish_switch_fiber(self->asan_fake, NULL, NULL);
#endif
  (void)self;
}

/* Memory we copy stack bytes into or out of may carry stale ASan redzones of frames that no
** longer exist there; declare it addressable first. */
static inline void fiber_unpoison(const void *p, size_t n)
{
#ifdef SMARM_HAVE_ASAN
  __asan_unpoison_memory_region(p, n);
#endif
  (void)p;
  (void)n;
}

#endif
