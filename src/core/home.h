/*
** Where message blocks come from and where they go back: a cache of blocks per scheduler
** thread, and a way home for blocks freed far from the thread that allocated them.
**
** glibc gives each thread an arena and frees a block into the arena it came from, under that
** arena's lock. A message is allocated by its sender's scheduler and freed by its receiver's. In
** two-way traffic glibc's per-thread cache (tcache) hid that: the receiver's free filled its own
** cache and its next allocation took the block back. One-way traffic (spawns on another
** scheduler, a producer feeding a consumer) overflowed it: the receiver took the sender's arena
** lock at every free while the sender took it at every allocation, and the loser of each race
** slept in the kernel (futex): 97% of the futex calls of a million spawns spread over two
** schedulers (docs/perf.md).
**
** So each scheduler thread claims a home (sm_home_claim) for the time it runs:
**   - A message block of at most SM_HOME_CLASS_MAX bytes is allocated in a size class (a
**     multiple of 64 bytes) and, when freed on a thread with a home, kept in that thread's
**     cache of its class (SM_HOME_CACHED a class), whichever thread allocated it; the thread's
**     next allocation of that class takes it. Two-way traffic keeps bouncing a few blocks.
**   - A block the cache has no room for, allocated by another home, joins the thread's batch
**     for that home (the block records its home: smarm_msg_t.home). A full batch, or any batch
**     when the thread is about to idle, goes to its home's list of returned blocks in one
**     compare-and-swap; the home takes them, into its cache or free(), at its loop's next pass,
**     at its next look at the clock (sched_poll: a busy scheduler's loop may never run), or when
**     an allocation finds its class empty.
**   - Threads without a home (the IO thread, an embedder's) free with free(), as do homes for
**     blocks of no home, of their own, and of more than SM_HOME_SMALL payload bytes (a batch
**     must not hold megabytes back, and copying such a block costs more than the lock).
** At most SM_HOMES - 1 threads have a home at once; others do without.
**
** Neither a cache nor a batch writes into the blocks it holds. A cache is an array of addresses;
** a batch is written into its first block, the carrier (sm_home_carrier_t): the addresses of the
** others, each with its class in its low bits. A block freed on one thread was last written
** there, and the first touch of each from its home costs a transfer of its cache line between
** cores (hundreds of ns on the VMs users deploy to): when the cache and the way home were lists
** linked through the blocks, the home read each block's link and size to take a batch, one
** transfer waiting for the next, and a spawner on another scheduler spent a third of its time
** there (docs/perf.md). Now taking a batch reads its carrier only, and a block's lines move
** when it is next written, by its next message, where the core need not wait for them.
**
** Protocol (home.c has it next to the code):
**   sm_homes[h].owned: taken by a CAS 0 -> 1 (sm_home_claim), given back by its owner.
**   sm_homes[h].returned: a stack of carriers. Any thread pushes one with a CAS (release: the
**   carrier it wrote, and its own last uses of the blocks, come before whatever the owner does
**   with them); the owner takes all with an exchange (acquire). At release the owner exchanges
**   in SM_HOME_ORPHANED and frees what was there; a pusher that reads SM_HOME_ORPHANED frees its
**   batch itself. Any thread may free any block, so a block whose home was released and claimed
**   again by another thread goes to that one: late, never wrong.
**   Everything else in sm_homes[h] (cache, batch) is its owner's alone; sm_home_tls points at it.
*/
#ifndef SMARM_CORE_HOME_H
#define SMARM_CORE_HOME_H

#include "annotate.h"
#include "check.h"
#include "message.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define SM_HOME_VALGRIND 1
#endif
#endif

#define SM_HOMES 256          /* home 0 is none: 255 threads at once have one */
#define SM_HOME_CLASSES 9     /* blocks of 64, 128, ... 576 bytes, header included */
#define SM_HOME_CLASS_MAX (64 * SM_HOME_CLASSES)
#define SM_HOME_CACHED 256    /* blocks a thread keeps of each class */
#define SM_HOME_BATCH 32      /* blocks a thread gathers before it sends them home */
#define SM_HOME_SMALL 4096    /* payload bytes above which a block is freed where it is */

#define SM_HOME_NOCLASS 15     /* a carrier entry's class bits: a block past the classes */

/* The class of a block of `total` bytes (header included), or SM_HOME_NOCLASS past them; and
** the bytes a block of class k has. */
static inline unsigned sm_home_class(size_t total)
{
  return total <= SM_HOME_CLASS_MAX ? (unsigned)(total - 1) / 64 : SM_HOME_NOCLASS;
}

static inline size_t sm_home_class_bytes(unsigned k) { return 64 * (size_t)(k + 1); }

/* A carrier, written over a block on its way home (any block is at least 64 bytes): the
** addresses of blocks that follow it, each with its class (or SM_HOME_NOCLASS) in its low 4 bits,
** which malloc's 16-byte alignment leaves free. A batch is a chain of carriers, one when its
** first block has room for the rest. */
typedef struct sm_home_carrier {
  struct sm_home_carrier *next; /* the next carrier of its batch, then of a returned stack */
  uint16_t count;               /* entries in use */
  uint16_t room;                /* entries its block has room for (at most SM_HOME_BATCH) */
  uint8_t klass;                /* the carrier's own class, or SM_HOME_NOCLASS */
  uintptr_t entries[];
} sm_home_carrier_t;

#define SM_HOME_ORPHANED ((sm_home_carrier_t *)1) /* `returned` of a home nobody holds */

typedef struct {
  /* Any thread (the protocol above). */
  _Alignas(64) _Atomic(sm_home_carrier_t *) returned;
  _Atomic int owned;
  /* The owner's. */
  _Alignas(64) uint8_t id;
  uint8_t memcheck; /* the owner runs under valgrind (sm_home_hide) */
  uint8_t batch_home;   /* the home of the blocks in the batch */
  uint16_t batch_count; /* its blocks, carriers included */
  sm_home_carrier_t *batch, *batch_oldest; /* its carriers, newest first; NULL: no batch */
  uint16_t cached[SM_HOME_CLASSES];
  void *(*cache)[SM_HOME_CACHED]; /* cache[k]: cached[k] blocks, the newest last (made at the
                                  ** claim: only homes in use have one) */
} sm_home_t;

extern sm_home_t sm_homes[SM_HOMES];
extern __attribute__((tls_model("initial-exec"))) _Thread_local sm_home_t *sm_home_tls;

/* The calling thread takes a home / gives it back (a scheduler thread's start and end; release
** sends its batch home and frees its cache and what was returned to it). */
void sm_home_claim(void);
void sm_home_release(void);

/* Adds m, of class k (sm_home_class), to this thread's batch for its home. */
void sm_home_batch_add(smarm_msg_t *m, unsigned k);
void sm_home_batch_send(void);
void sm_home_take_returned(void);

/* A cached block is freed memory to ASan and memcheck: a use after free or a double free (whose
** release reads `owning`) of a message that went into a cache is reported as without the cache.
** (One in a batch or a returned list is not poisoned.)
** (memcheck's requests cost a few cycles each even outside valgrind: made only where the thread
** found itself under it when it claimed its home.) */
static inline void sm_home_hide(const sm_home_t *h, void *block, size_t size)
{
#ifdef SMARM_HAVE_ASAN
  ASAN_POISON_MEMORY_REGION(block, size);
#endif
#ifdef SM_HOME_VALGRIND
  if (SMARM_UNLIKELY(h->memcheck))
    VALGRIND_MAKE_MEM_NOACCESS(block, size);
#endif
  (void)h;
  (void)block;
  (void)size;
}

static inline void sm_home_show(const sm_home_t *h, void *block, size_t size)
{
#ifdef SMARM_HAVE_ASAN
  ASAN_UNPOISON_MEMORY_REGION(block, size);
#endif
#ifdef SM_HOME_VALGRIND
  if (SMARM_UNLIKELY(h->memcheck))
    VALGRIND_MAKE_MEM_UNDEFINED(block, size);
#endif
  (void)h;
  (void)block;
  (void)size;
}

/* Puts block m of class k into this thread's cache (which has room). */
static inline void sm_home_cache_put(sm_home_t *h, smarm_msg_t *m, unsigned k)
{
  h->cache[k][h->cached[k]++] = m;
  sm_home_hide(h, m, sm_home_class_bytes(k));
}

/* The owner's pass: takes the blocks other threads returned, if any. */
static inline void sm_home_collect(void)
{
  sm_home_t *h = sm_home_tls;
  if (h && atomic_load_explicit(&h->returned, memory_order_relaxed))
    sm_home_take_returned();
}

/* A message block of `total` bytes (header and payload), NULL when memory is out; its home is
** set. (The allocation seam of alloc.h is the caller's.) */
static inline smarm_msg_t *sm_home_msg_alloc(size_t total)
{
  sm_home_t *h = sm_home_tls;
  unsigned k = sm_home_class(total);
  if (k == SM_HOME_NOCLASS) {
    smarm_msg_t *m = malloc(total);
    if (m)
      m->home = h ? h->id : 0;
    return m;
  }
  /* An empty class takes the blocks returned so far: a sender that never idles looks at the
  ** clock only every 64 decisions, and may allocate thousands of blocks in between. */
  if (h && !h->cached[k])
    sm_home_collect();
  if (h && h->cached[k]) { /* keeps the home it has */
    smarm_msg_t *m = h->cache[k][--h->cached[k]];
    sm_home_show(h, m, sm_home_class_bytes(k));
#ifdef SM_HOME_VALGRIND
    if (SMARM_UNLIKELY(h->memcheck)) /* the home it keeps was written when it was made */
      VALGRIND_MAKE_MEM_DEFINED(&m->home, sizeof m->home);
#endif
    return m;
  }
  smarm_msg_t *m = malloc(sm_home_class_bytes(k)); /* any block of the class may take its place */
  if (m)
    m->home = h ? h->id : 0;
  return m;
}

/* Frees a message block (its drop hook has run). */
static inline void sm_home_msg_free(smarm_msg_t *m)
{
  sm_home_t *h = sm_home_tls;
  if (h) {
    unsigned k = sm_home_class(sizeof *m + m->size);
    if (k != SM_HOME_NOCLASS && h->cached[k] < SM_HOME_CACHED) {
      sm_home_cache_put(h, m, k);
      return;
    }
    if (m->home != h->id && m->home != 0 && m->size <= SM_HOME_SMALL) {
      sm_home_batch_add(m, k);
      return;
    }
  }
  free(m);
}

/* Before the thread idles: its batch goes home (no block waits on a sleeping thread). */
static inline void sm_home_before_idle(void)
{
  sm_home_t *h = sm_home_tls;
  if (h && h->batch)
    sm_home_batch_send();
}

#endif
