/*
** Invariant checks and small compiler helpers shared by the core.
**
** SMARM_CHECK is always on: it guards states that must never happen whatever the build, and
** aborts with file:line and what was wrong. SMARM_ASSERT is for invariants that cost time to
** check; it compiles away unless SMARM_DEBUG is defined (debug and sanitizer builds).
*/
#ifndef SMARM_CORE_CHECK_H
#define SMARM_CORE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define SMARM_LIKELY(x) __builtin_expect(!!(x), 1)
#define SMARM_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Hot words written by different threads sit 128 bytes apart: x86 and aarch64 prefetchers pull
** 64-byte lines in pairs, so 64 is not enough to stop false sharing. */
#define SMARM_CACHE_PAD 128

#define SMARM_CHECK(cond, what)                                                                \
  do {                                                                                         \
    if (SMARM_UNLIKELY(!(cond))) {                                                             \
      fprintf(stderr, "smarm: %s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond,      \
              what);                                                                           \
      abort();                                                                                 \
    }                                                                                          \
  } while (0)

#ifdef SMARM_DEBUG
#define SMARM_ASSERT(cond) SMARM_CHECK(cond, "assertion")
#else
#define SMARM_ASSERT(cond) ((void)0)
#endif

#endif
