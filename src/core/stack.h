/*
** Actor stacks: guarded mappings, pooled per scheduler, shared by copying when there are more
** actors than guarded stacks.
**
** A slot is a PROT_NONE guard below `size` usable bytes, in a mapping made PROT_NONE for up to
** STACK_BATCH_SLOTS slots of its size at once: one mmap, and one munmap at the pool's end,
** instead of one each per slot; each slot's stack is opened (made writable) by its own
** mprotect. A slot given up to make room for another size leaves its place reserved (PROT_NONE,
** its memory given back) for the next slot of its size. Every actor is bound to one
** slot from its first run (not its spawn: sched.c bind_first_slot) to its end and its stack
** always lives at that slot's addresses (C frames hold pointers into themselves, so a stack can
** never move). While there are fewer actors than the scheduler's budget of slots, each actor
** has a slot of its own and nothing is ever copied.
** Beyond the budget (one guard costs two kernel mappings, and vm.max_map_count must also cover
** the program), new actors are bound to slots that already have actors, round robin: only one
** of them, the occupant, has its bytes in the slot; the others keep the used part of their stack
** (from their saved stack pointer to the top, typically a few hundred bytes for a parked C actor)
** in a block of the scheduler's store (store.h), and are copied back in, evicting the occupant,
** before they run. Every actor therefore runs on a guarded stack, and a parked actor costs only
** its used bytes.
**
** Memory goes back to the OS at two watermarks: a released slot whose stack went deeper than
** STACK_KEEP_BYTES has the deeper pages dropped at once (MADV_DONTNEED; see went_deep() for how
** that is seen without touching a page); free slots beyond the
** STACK_FREE_KEEP most recently used of their size are dropped whole by sm_stack_pool_trim(), which
** the scheduler calls when it goes idle, at most once a second, and which drops only slots that
** were already free at its previous pass: a slot must stay unused for a second or more. So
** bursts of spawns and exits, even with idle gaps between them, pay no syscalls and no page
** faults (the slots stay mapped for reuse, costing address space but no memory), while memory
** left free after a burst goes back within a few seconds of idleness. The same idle pass moves
** actors parked since its previous pass out of their slots as sharing does (sm_stack_evict: the
** used bytes to the scheduler's store, every page of the slot dropped), so an actor waiting
** long costs its used bytes, not the pages its deepest calls touched.
**
** Each slot's stack starts at a different offset ("colour", below STACK_COLOR_SPAN) from the top
** of its mapping. Slots are mapped at a fixed stride, so without it the hot top frames of every
** parked actor would sit at the same address modulo 4 KiB and 64 KiB and fight over the same few
** sets of the L1 and L2 caches: a ring of 100 actors measured 3.5x slower per hop than one of 10.
** The span costs address space only (it is never touched above the top).
**
** Owner: one scheduler thread; nothing here is shared.
*/
#ifndef SMARM_CORE_STACK_H
#define SMARM_CORE_STACK_H

#include "store.h"

#include <stddef.h>
#include <stdint.h>

#define STACK_GUARD_BYTES (16 * 1024)
#define STACK_KEEP_BYTES (64 * 1024)
#define STACK_FREE_KEEP 64
#define STACK_MIN_BYTES (16 * 1024)
#define STACK_MAX_BYTES ((size_t)1 << 30)
#define STACK_TRIM_PERIOD_NS INT64_C(1000000000) /* sm_stack_pool_trim at most this often */
#define STACK_COLOR_SPAN (32 * 1024) /* see slot_colour() */
#define STACK_BATCH_SLOTS 16
#define STACK_BATCH_MAX_BYTES ((size_t)8 << 20) /* a batch of big stacks holds fewer slots */

struct actor;
struct stack_class;

typedef struct stack_slot {
  char *lo;                  /* lowest usable byte; the guard is just below */
  size_t guard;              /* guard bytes below lo (a whole number of pages) */
  size_t size;               /* usable bytes requested (the stack has size + its colour) */
  char *top;                 /* where the stack starts: lo + size + colour */
  struct actor *occupant;    /* actor whose bytes are in the slot now, or NULL */
  uint32_t bound;            /* actors whose stack lives at these addresses */
  struct stack_slot *next_free;
  struct stack_class *cls;
  int trimmed;               /* free, and its pages were dropped */
  uint32_t freed_pass;       /* the pool's trim pass count when the slot was last freed */
} stack_slot_t;

/* One mapping that holds the places of several slots of one size (slot_place). */
typedef struct stack_batch {
  char *base;
  size_t len;
} stack_batch_t;

/* All slots of one size. */
typedef struct stack_class {
  size_t size;
  stack_slot_t **all;        /* every mapped slot of this size: candidates for sharing */
  uint32_t count, cap;
  uint32_t hand;             /* round-robin position for the next shared binding */
  char *batch_next;          /* the next slot's place in the last batch mapped for this size */
  uint32_t batch_left;       /* slots of that batch not handed out yet */
  char **spare_places;       /* places of slots of this size given up (reserved, PROT_NONE) */
  uint32_t nspare, spare_cap;
  stack_slot_t *free_list;   /* slots bound to no actor, most recently used first */
  uint32_t free_count;
  struct stack_class *next;
} stack_class_t;

typedef struct stack_pool {
  stack_class_t *classes;
  uint32_t mapped;           /* slots mapped in all classes */
  uint32_t budget;           /* most slots this pool may map (see sm_stack_bind) */
  size_t page;
  size_t guard;              /* STACK_GUARD_BYTES rounded up to whole pages */
  uint32_t colors;           /* slots mapped so far: picks the next slot's colour */
  struct stack_batch *batches; /* every batch mapped (sm_stack_pool_destroy unmaps them) */
  uint32_t nbatches, batches_cap;
  uint32_t trim_passes;      /* sm_stack_pool_trim calls so far */
} stack_pool_t;

void sm_stack_pool_init(stack_pool_t *pool, uint32_t budget);
/* Unmaps everything. No actor may be bound any more. */
void sm_stack_pool_destroy(stack_pool_t *pool);

/* Rounds a requested stack size to what the pool hands out; 0 if out of range. */
size_t sm_stack_round_size(const stack_pool_t *pool, size_t size);

/* Binds an actor about to run for the first time to a slot of at least `size` bytes (already
** rounded): a free slot of that size; else a new one while the budget allows (giving up a free
** slot of another size to make room if need be); else a free slot of a larger size; else a
** bound slot of that size or larger, shared; else, with no such slot, a new one beyond the
** budget (the budget bounds kernel mappings, but an actor should not die
** for want of a stack of its size). NULL only when mapping fails or a record cannot be allocated
** (-ENOMEM). */
stack_slot_t *sm_stack_bind(stack_pool_t *pool, size_t size);

/* sm_stack_bind's first choice only: a free slot of exactly `size` (no system call, no
** allocation), or NULL. */
stack_slot_t *sm_stack_bind_free(stack_pool_t *pool, size_t size);

/* The actor bound to slot is gone (it must not be the occupant any more). */
void sm_stack_unbind(stack_pool_t *pool, stack_slot_t *slot);

/* Drops the pages of free slots beyond the STACK_FREE_KEEP most recently used of each size that
** were free already at the previous call (a walk of the free lists; the scheduler calls it at
** most once a second). Returns whether a later call may drop more (the scheduler then wakes for
** it). */
int sm_stack_pool_trim(stack_pool_t *pool);

/* Copies the used part of a suspended stack, [sp, top), to a new block of the store (store.h).
** NULL when memory is out: the bytes stay where they are (the scheduler then ends that actor,
** sched.c). */
void *sm_stack_save(sm_store_t *store, stack_slot_t *slot, const void *sp, uint32_t *len_out);

/* sm_stack_save, then the slot is left without occupant and all its pages are dropped (its
** occupant has parked for long: sched.c trim_parked_stacks). NULL when memory is out: nothing
** changed. */
void *sm_stack_evict(sm_store_t *store, stack_slot_t *slot, const void *sp, uint32_t *len_out);

/* Copies saved bytes back to the top of the slot and frees the block. */
void sm_stack_restore(sm_store_t *store, stack_slot_t *slot, void *saved, size_t len);

/* Frees saved bytes that will never run again (an actor that ends with the runtime). */
void sm_stack_drop_saved(sm_store_t *store, void *saved, size_t len);

static inline void *stack_top(const stack_slot_t *slot) { return slot->top; }

/* Bytes the actor's stack may use: from its top down to lo. */
static inline size_t stack_depth(const stack_slot_t *slot) { return (size_t)(slot->top - slot->lo); }

/* Is addr inside slot's guard? (Async-signal-safe: reads two fields.) */
static inline int stack_in_guard(const stack_slot_t *slot, const void *addr)
{
  const char *a = (const char *)addr;
  return a >= slot->lo - slot->guard && a < slot->lo;
}

#endif
