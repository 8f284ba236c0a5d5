/*
** Actor stacks (see stack.h for the model: guarded slots, pooling, sharing by copy).
*/
#define _GNU_SOURCE
#include "stack.h"

#include "alloc.h"
#include "annotate.h"
#include "check.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>
#define SMARM_HAVE_VALGRIND 1
#endif
#endif

void sm_stack_pool_init(stack_pool_t *pool, uint32_t budget)
{
  memset(pool, 0, sizeof *pool);
  pool->budget = budget ? budget : 1;
  pool->page = (size_t)sysconf(_SC_PAGESIZE);
  /* On kernels with 64 KiB pages a 16 KiB guard would be one partial page. */
  pool->guard = (STACK_GUARD_BYTES + pool->page - 1) & ~(pool->page - 1);
}

size_t sm_stack_round_size(const stack_pool_t *pool, size_t size)
{
  if (size < STACK_MIN_BYTES)
    size = STACK_MIN_BYTES;
  if (size > STACK_MAX_BYTES)
    return 0;
  return (size + pool->page - 1) & ~(pool->page - 1);
}

/* The pool's class of slots of `size` bytes, or NULL if it has none. */
static stack_class_t *class_of(const stack_pool_t *pool, size_t size)
{
  stack_class_t *c = pool->classes;
  while (c && c->size != size)
    c = c->next;
  return c;
}

/* The same, made if need be; NULL when memory is out. */
static stack_class_t *class_for(stack_pool_t *pool, size_t size)
{
  stack_class_t *c = class_of(pool, size);
  if (c)
    return c;
  c = sm_calloc(SM_ALLOC_STACK_SLOT, 1, sizeof *c);
  if (!c)
    return NULL;
  c->size = size;
  c->next = pool->classes;
  pool->classes = c;
  return c;
}

/* Registration with Valgrind, kept beside the slot so it can be undone. */
typedef struct slot_with_id {
  stack_slot_t slot;
  unsigned valgrind_id;
} slot_with_id_t;

/* The k-th slot's colour (stack.h): 384 different offsets below STACK_COLOR_SPAN. Within its
** page the top lies 1 KiB to 4 KiB - 64 from the page's start, in 48 steps of 64 bytes (17 is
** prime to 48, so neighbours land 17 lines apart), so that a parked Lua actor's frames (about
** 600 bytes) stay in one page; the page itself is one of 8, which changes every 48 slots. */
static size_t slot_colour(uint32_t k)
{
  return (size_t)((k / 48u) % 8u) * 4096u + 1024u + (size_t)((k * 17u) % 48u) * 64u;
}

/* Whether class c has room to remember one more place given up (made if need be). */
static int spare_room(stack_class_t *c)
{
  if (c->nspare < c->spare_cap)
    return 1;
  char **p = sm_grown(c->spare_places, &c->spare_cap, sizeof *p, 8);
  if (!p)
    return 0;
  c->spare_places = p;
  return 1;
}

/* The place (len bytes) of a new slot of class c: one a slot of its size gave up, or the next
** one of its batch, mapping a new batch when that one is used up (as many slots as the budget
** has left, from 1 to STACK_BATCH_SLOTS, within STACK_BATCH_MAX_BYTES). NULL when mapping
** fails. */
static char *slot_place(stack_pool_t *pool, stack_class_t *c, size_t len)
{
  if (c->nspare)
    return c->spare_places[--c->nspare];
  if (!c->batch_left) {
    if (pool->nbatches == pool->batches_cap) {
      stack_batch_t *b = sm_grown(pool->batches, &pool->batches_cap, sizeof *b, 8);
      if (!b)
        return NULL;
      pool->batches = b;
    }
    uint32_t n = pool->budget > pool->mapped ? pool->budget - pool->mapped : 1;
    if (n > STACK_BATCH_SLOTS)
      n = STACK_BATCH_SLOTS;
    if ((size_t)n * len > STACK_BATCH_MAX_BYTES)
      n = len >= STACK_BATCH_MAX_BYTES ? 1 : (uint32_t)(STACK_BATCH_MAX_BYTES / len);
    /* PROT_NONE until a slot's stack is opened in it (slot_map): the rest of a batch is never
    ** one writable range that a kernel with transparent huge pages "always" on could back with
    ** a huge page at a slot's first touch */
    char *base = mmap(NULL, (size_t)n * len, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (base == MAP_FAILED)
      return NULL;
    pool->batches[pool->nbatches++] = (stack_batch_t){base, (size_t)n * len};
    c->batch_next = base + (size_t)n * len;
    c->batch_left = n;
  }
  /* from the top down, as the kernel placed one mapping after another: handed out upwards,
  ** a ring of 1,000 actors measured 6% slower per hop (docs/perf.md, "Stack slots mapped in
  ** batches") */
  c->batch_next -= len;
  c->batch_left--;
  return c->batch_next;
}

static stack_slot_t *slot_map(stack_pool_t *pool, stack_class_t *c)
{
  if (c->count == c->cap) {
    stack_slot_t **all = sm_grown(c->all, &c->cap, sizeof *all, 16);
    if (!all)
      return NULL;
    c->all = all;
  }
  slot_with_id_t *s = sm_calloc(SM_ALLOC_STACK_SLOT, 1, sizeof *s);
  if (!s)
    return NULL;
  size_t len = pool->guard + c->size + STACK_COLOR_SPAN;
  char *base = slot_place(pool, c, len);
  if (!base) {
    free(s);
    return NULL;
  }
  if (mprotect(base + pool->guard, len - pool->guard, PROT_READ | PROT_WRITE) != 0) {
    if (spare_room(c)) /* the place serves the next try, which opens it again */
      c->spare_places[c->nspare++] = base;
    free(s);
    return NULL;
  }
#ifdef MADV_NOHUGEPAGE
  /* A stack of 2 MiB or more holds aligned 2 MiB ranges that a kernel with transparent huge
  ** pages "always" on would back with a huge page at the first touch: 2 MiB resident for an
  ** actor that uses a few KiB. Smaller slots cannot hold such a range. */
  if (c->size >= 2 * 1024 * 1024)
    madvise(base + pool->guard, c->size + STACK_COLOR_SPAN, MADV_NOHUGEPAGE);
#endif
  s->slot.lo = base + pool->guard;
  s->slot.guard = pool->guard;
  s->slot.size = c->size;
  s->slot.top = s->slot.lo + c->size + slot_colour(pool->colors++);
  s->slot.cls = c;
#ifdef SMARM_HAVE_VALGRIND
  s->valgrind_id = VALGRIND_STACK_REGISTER(s->slot.lo, s->slot.top);
#endif
  c->all[c->count++] = &s->slot;
  pool->mapped++;
  return &s->slot;
}

static void slot_forget(stack_slot_t *slot)
{
  slot_with_id_t *s = (slot_with_id_t *)slot;
#ifdef SMARM_HAVE_VALGRIND
  VALGRIND_STACK_DEREGISTER(s->valgrind_id);
#endif
  free(s);
}

/* Gives a free slot (off every list, its class with spare_room) up: its memory goes back and its
** place stays reserved, PROT_NONE, for the next slot of its size (slot_place). Never unmapped:
** another mapping could take its addresses, and the munmap of its batch at the pool's end would
** then destroy it. */
static void slot_give_up(stack_slot_t *slot)
{
  stack_class_t *c = slot->cls;
  char *place = slot->lo - slot->guard;
  size_t len = slot->guard + slot->size + STACK_COLOR_SPAN;
  madvise(place, len, MADV_DONTNEED);
  mprotect(place, len, PROT_NONE);
  c->spare_places[c->nspare++] = place;
  slot_forget(slot);
}

void sm_stack_pool_destroy(stack_pool_t *pool)
{
  stack_class_t *c = pool->classes;
  while (c) {
    stack_class_t *next = c->next;
    for (uint32_t i = 0; i < c->count; i++)
      slot_forget(c->all[i]);
    free(c->all);
    free(c->spare_places);
    free(c);
    c = next;
  }
  for (uint32_t i = 0; i < pool->nbatches; i++)
    munmap(pool->batches[i].base, pool->batches[i].len);
  free(pool->batches);
  pool->batches = NULL;
  pool->nbatches = pool->batches_cap = 0;
  pool->classes = NULL;
  pool->mapped = 0;
}

/* Takes the first free slot of c off its free list (NULL if none). */
static stack_slot_t *take_free(stack_class_t *c)
{
  stack_slot_t *slot = c->free_list;
  if (slot) {
    c->free_list = slot->next_free;
    c->free_count--;
    slot->trimmed = 0;
  }
  return slot;
}

/* Drops one free slot of a class other than `keep` (its memory goes back, its place stays
** reserved), to give its budget to another size. */
static int reclaim_free_slot(stack_pool_t *pool, stack_class_t *keep)
{
  for (stack_class_t *c = pool->classes; c; c = c->next) {
    if (c == keep || !c->free_list || !spare_room(c))
      continue;
    stack_slot_t *slot = take_free(c);
    for (uint32_t i = 0; i < c->count; i++) {
      if (c->all[i] == slot) {
        c->all[i] = c->all[--c->count];
        break;
      }
    }
    slot_give_up(slot);
    pool->mapped--;
    return 1;
  }
  return 0;
}

/* A free slot of the smallest class of at least `size` that has one, taken (NULL if none). */
static stack_slot_t *take_free_at_least(stack_pool_t *pool, size_t size)
{
  stack_class_t *best = NULL;
  for (stack_class_t *c = pool->classes; c; c = c->next)
    if (c->size >= size && c->free_list && (!best || c->size < best->size))
      best = c;
  return best ? take_free(best) : NULL;
}

/* The smallest class of at least `size` that has slots to share. */
static stack_class_t *class_to_share(stack_pool_t *pool, size_t size)
{
  stack_class_t *best = NULL;
  for (stack_class_t *c = pool->classes; c; c = c->next)
    if (c->size >= size && c->count > 0 && (!best || c->size < best->size))
      best = c;
  return best;
}

stack_slot_t *sm_stack_bind(stack_pool_t *pool, size_t size)
{
  stack_class_t *c = class_for(pool, size);
  if (!c)
    return NULL;
  stack_slot_t *slot = take_free(c);
  if (!slot) {
    if (pool->mapped >= pool->budget)
      reclaim_free_slot(pool, c);
    if (pool->mapped < pool->budget)
      slot = slot_map(pool, c);
    if (!slot) /* the budget is spent (or mapping failed): a free larger slot will do */
      slot = take_free_at_least(pool, size);
    if (!slot) {
      /* Share. Every slot of at least this size is bound now (free ones were taken above), so
      ** none is on a free list. Round robin spreads the sharers evenly, so a slot's sharers are
      ** the actors that ran least recently among those bound to it. */
      stack_class_t *share = class_to_share(pool, size);
      if (share)
        slot = share->all[share->hand++ % share->count];
      else
        slot = slot_map(pool, c); /* nothing big enough to share: exceed the budget */
      if (!slot)
        return NULL;
    }
  }
  slot->bound++;
  return slot;
}

stack_slot_t *sm_stack_bind_free(stack_pool_t *pool, size_t size)
{
  stack_class_t *c = class_of(pool, size);
  stack_slot_t *slot = c ? take_free(c) : NULL;
  if (slot)
    slot->bound++;
  return slot;
}

/* Valgrind marks stack memory below the stack pointer it last saw there as inaccessible; we copy
** a parked stack's bytes from the scheduler's stack, so vouch for them. */
static void vouch_for(const void *p, size_t n, int defined)
{
#ifdef SMARM_HAVE_VALGRIND
  if (defined)
    VALGRIND_MAKE_MEM_DEFINED(p, n);
  else
    VALGRIND_MAKE_MEM_UNDEFINED(p, n);
#endif
  (void)p;
  (void)n;
  (void)defined;
}

/* Whether some actor bound to this slot went deeper than STACK_KEEP_BYTES below its top, seen
** as non-zero words in a ring just below that depth (untouched memory reads as zero). That ring
** is read only when the first line of the top's own page was written: a read of a page no
** actor touched is not free, since a kernel that does not map the shared zero page (a
** firecracker guest's does not) allocates and zeroes a page for it, and that cost every slot a
** page for nothing (16 MiB for the default 4,096 slots; most actors never leave the top page,
** which the slot's colour leaves 1 to 4 KiB deep). The line is cleared after each look, so
** a slot reads the deep ring again only after an actor went below its first 1 KiB again. An
** actor that jumped over that line (a large frame left unwritten there) is not seen; its pages
** go back at the idle trim instead. The slot holds nobody's frames here (bound is 0). Both
** places may carry stale ASan redzones, hence no_sanitize_address. */
__attribute__((no_sanitize_address)) static int went_deep(const stack_slot_t *slot)
{
  volatile uint64_t *line = (uint64_t *)((uintptr_t)stack_top(slot) & ~(uintptr_t)4095);
  uint64_t any = 0;
  vouch_for((const void *)line, 8 * sizeof *line, 1);
  for (int i = 0; i < 8; i++)
    any |= line[i];
  if (!any)
    return 0;
  for (int i = 0; i < 8; i++)
    line[i] = 0;
  const volatile uint64_t *w = (const uint64_t *)((char *)stack_top(slot) - STACK_KEEP_BYTES) - 8;
  any = 0;
  vouch_for((const void *)w, 8 * sizeof *w, 1);
  for (int i = 0; i < 8; i++)
    any |= w[i];
  return any != 0;
}

void sm_stack_unbind(stack_pool_t *pool, stack_slot_t *slot)
{
  SMARM_ASSERT(slot->bound > 0);
  if (--slot->bound > 0)
    return;
  SMARM_ASSERT(slot->occupant == NULL);
  stack_class_t *c = slot->cls;
  if (stack_depth(slot) > STACK_KEEP_BYTES && went_deep(slot)) {
    /* The word ring just below the kept top was written: the stack went deeper than the
    ** watermark (untouched memory reads as zero), so drop the deep pages. Measured from the
    ** coloured top, as went_deep and the idle trim measure. */
    madvise(slot->lo, stack_depth(slot) - STACK_KEEP_BYTES, MADV_DONTNEED);
  }
  slot->trimmed = 0;
  slot->freed_pass = pool->trim_passes;
  slot->next_free = c->free_list;
  c->free_list = slot;
  c->free_count++;
}

int sm_stack_pool_trim(stack_pool_t *pool)
{
  uint32_t pass = pool->trim_passes++;
  int pending = 0;
  for (stack_class_t *c = pool->classes; c; c = c->next) {
    if (c->free_count <= STACK_FREE_KEEP)
      continue;
    uint32_t seen = 0;
    for (stack_slot_t *s = c->free_list; s; s = s->next_free) {
      if (++seen <= STACK_FREE_KEEP || s->trimmed)
        continue;
      if (s->freed_pass == pass) { /* freed since the last pass: maybe about to be reused */
        pending = 1;
        continue;
      }
      madvise(s->lo, stack_depth(s), MADV_DONTNEED);
      s->trimmed = 1;
    }
  }
  return pending;
}

void *sm_stack_save(sm_store_t *store, stack_slot_t *slot, const void *sp, uint32_t *len_out)
{
  char *top = stack_top(slot);
  SMARM_CHECK((const char *)sp >= slot->lo && (const char *)sp < top, "saved sp outside its stack");
  size_t len = (size_t)(top - (const char *)sp);
  void *buf = sm_store_alloc(store, SM_ALLOC_STACK_SAVE, len);
  if (!buf)
    return NULL; /* the caller ends the actor (sched.c: make_resident) */
  fiber_unpoison(sp, len);
  vouch_for(sp, len, 1);
  memcpy(buf, sp, len);
  *len_out = (uint32_t)len; /* a stack is at most STACK_MAX_BYTES */
  return buf;
}

void *sm_stack_evict(sm_store_t *store, stack_slot_t *slot, const void *sp, uint32_t *len_out)
{
  void *saved = sm_stack_save(store, slot, sp, len_out);
  if (!saved)
    return NULL;
  slot->occupant = NULL;
  madvise(slot->lo, stack_depth(slot), MADV_DONTNEED);
  return saved;
}

void sm_stack_restore(sm_store_t *store, stack_slot_t *slot, void *saved, size_t len)
{
  char *dst = (char *)stack_top(slot) - len;
  fiber_unpoison(dst, len);
  vouch_for(dst, len, 0);
  memcpy(dst, saved, len);
  sm_store_free(store, saved, len);
}

void sm_stack_drop_saved(sm_store_t *store, void *saved, size_t len)
{
  if (saved)
    sm_store_free(store, saved, len);
}
