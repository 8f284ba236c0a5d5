/*
** A scheduler's store of actor records and saved stacks (see store.h for the model: classes,
** chunks, regions).
*/
#define _GNU_SOURCE
#include "store.h"

#include "alloc.h"
#include "annotate.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef SMARM_HAVE_ASAN
#include <sanitizer/lsan_interface.h>
#endif
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define STORE_VALGRIND 1
#endif
#endif

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; an older kernel refuses it: pages fault as before */
#endif

/* A chunk's header; its blocks follow, from STORE_HEADER on. */
typedef struct store_chunk {
  struct store_chunk *next, *prev; /* in its class's partial list, or an empty list (next) */
  void *free;                      /* freed blocks, linked through their first word */
  char *bump;                      /* the first block never handed out */
  uint32_t size;                   /* its class's block size */
  uint32_t live;                   /* blocks handed out */
  uint32_t emptied_pass;           /* empty: the store's trim pass count when it became so */
} store_chunk_t;

#define STORE_HEADER 64

/* A mapping chunks are carved from. */
typedef struct store_region {
  char *base;
  size_t len;
} store_region_t;

_Static_assert(sizeof(store_chunk_t) <= STORE_HEADER, "a chunk's header fits before its blocks");
_Static_assert((STORE_CHUNK & (STORE_CHUNK - 1)) == 0 && STORE_REGION % STORE_CHUNK == 0,
               "chunks are a power of two and regions whole chunks");
_Static_assert(STORE_CLASS_MAX + STORE_HEADER <= STORE_CHUNK, "a chunk holds a block of a class");

/* A free block is unaddressable but for its link, for ASan and valgrind alike, so that a stale
** record or saved stack is reported as malloc's would be. */
static void block_hide(const sm_store_t *st, void *b, size_t size)
{
#ifdef SMARM_HAVE_ASAN
  __asan_poison_memory_region((char *)b + sizeof(void *), size - sizeof(void *));
#endif
#ifdef STORE_VALGRIND
  if (SMARM_UNLIKELY(st->memcheck))
    VALGRIND_MAKE_MEM_NOACCESS((char *)b + sizeof(void *), size - sizeof(void *));
#endif
  (void)st;
  (void)b;
  (void)size;
}

static void block_show(const sm_store_t *st, void *b, size_t size)
{
#ifdef SMARM_HAVE_ASAN
  __asan_unpoison_memory_region(b, size);
#endif
#ifdef STORE_VALGRIND
  if (SMARM_UNLIKELY(st->memcheck))
    VALGRIND_MAKE_MEM_UNDEFINED(b, size);
#endif
  (void)st;
  (void)b;
  (void)size;
}

void sm_store_init(sm_store_t *st)
{
  memset(st, 0, sizeof *st);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  st->chunk = page > STORE_CHUNK ? page : STORE_CHUNK;
  SMARM_CHECK((st->chunk & (st->chunk - 1)) == 0 && STORE_REGION % st->chunk == 0,
              "a page size that divides 2 MiB");
#ifdef STORE_VALGRIND
  st->memcheck = RUNNING_ON_VALGRIND != 0;
#endif
}

void sm_store_destroy(sm_store_t *st)
{
  SMARM_ASSERT(st->live == 0);
  for (uint32_t i = 0; i < st->nregions; i++) {
    store_region_t *r = &st->regions[i];
#ifdef SMARM_HAVE_ASAN
    __lsan_unregister_root_region(r->base, r->len);
    __asan_unpoison_memory_region(r->base, r->len);
#endif
    munmap(r->base, r->len);
  }
  free(st->regions);
  free(st->dropped);
  memset(st, 0, sizeof *st);
}

static int chunk_full(const sm_store_t *st, const store_chunk_t *ch)
{
  return !ch->free && ch->bump + ch->size > (const char *)ch + st->chunk;
}

static void partial_link(sm_store_t *st, store_chunk_t *ch)
{
  store_chunk_t **head = &st->partial[ch->size / STORE_GRAIN - 1];
  ch->prev = NULL;
  ch->next = *head;
  if (*head)
    (*head)->prev = ch;
  *head = ch;
}

static void partial_unlink(sm_store_t *st, store_chunk_t *ch)
{
  if (ch->prev)
    ch->prev->next = ch->next;
  else
    st->partial[ch->size / STORE_GRAIN - 1] = ch->next;
  if (ch->next)
    ch->next->prev = ch->prev;
}

/* A mapping of len bytes aligned to a chunk's size (mapped with room to spare, the rest
** unmapped); NULL when mapping fails. */
static char *map_aligned(const sm_store_t *st, size_t len)
{
  size_t span = len + st->chunk;
  char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  char *base = (char *)(((uintptr_t)m + st->chunk - 1) & ~(uintptr_t)(st->chunk - 1));
  if (base > m)
    munmap(m, (size_t)(base - m));
  if (m + span > base + len)
    munmap(base + len, (size_t)(m + span - (base + len)));
  return base;
}

/* A new chunk's place: the next in the newest region, or the first of a new one, of
** STORE_REGION bytes or, when that cannot be mapped, of one chunk. NULL when mapping fails. */
static store_chunk_t *chunk_place(sm_store_t *st)
{
  if (st->region_next == st->region_end) {
    if (st->nregions == st->regions_cap) {
      store_region_t *more = sm_grown(st->regions, &st->regions_cap, sizeof *more, 8);
      if (!more)
        return NULL;
      st->regions = more;
    }
    size_t len = STORE_REGION;
    char *base = map_aligned(st, len);
    if (!base && !(base = map_aligned(st, len = st->chunk)))
      return NULL;
#ifdef SMARM_HAVE_ASAN
    /* LeakSanitizer scans malloc's blocks and the roots, not mappings of our own: what records
    ** and saved stacks point to (messages, fault records, the binding's state) would look
    ** leaked at an exit with actors alive. */
    __lsan_register_root_region(base, len);
#endif
    st->regions[st->nregions++] = (store_region_t){base, len};
    st->region_next = base;
    st->region_end = base + len;
  }
  store_chunk_t *ch = (store_chunk_t *)st->region_next;
  st->region_next += st->chunk;
  return ch;
}

/* A chunk for blocks of `size`, first in its class's partial list: an empty one that still
** holds memory, else one whose memory went back, else a new one; the last two are prefaulted
** in one system call (failure, on a kernel without it, leaves the pages to fault one by one). */
static store_chunk_t *chunk_for(sm_store_t *st, uint32_t size)
{
  store_chunk_t *ch = st->empty;
  if (ch) {
    st->empty = ch->next;
    st->nempty--;
  } else {
    if (st->ndropped)
      ch = (store_chunk_t *)st->dropped[--st->ndropped];
    else if (!(ch = chunk_place(st)))
      return NULL;
    madvise(ch, st->chunk, MADV_POPULATE_WRITE);
  }
  ch->free = NULL;
  ch->bump = (char *)ch + STORE_HEADER;
  ch->size = size;
  ch->live = 0;
  partial_link(st, ch);
  return ch;
}

/* Its last block was freed (it is in no list): it keeps its memory for now, at the head of the
** empty list; sm_store_trim gives the memory back if it stays empty. */
static void chunk_empty(sm_store_t *st, store_chunk_t *ch)
{
  ch->emptied_pass = st->trim_passes;
  ch->next = st->empty;
  st->empty = ch;
  st->nempty++;
}

int sm_store_trim(sm_store_t *st)
{
  uint32_t pass = st->trim_passes++;
  int pending = 0;
  uint32_t seen = 0;
  store_chunk_t **at = &st->empty;
  while (*at) {
    store_chunk_t *ch = *at;
    if (++seen <= STORE_EMPTY_KEEP) {
      at = &ch->next;
      continue;
    }
    if (ch->emptied_pass == pass) { /* emptied since the last pass: maybe about to be reused */
      pending = 1;
      at = &ch->next;
      continue;
    }
    if (st->ndropped == st->dropped_cap) {
      char **more = sm_grown(st->dropped, &st->dropped_cap, sizeof *more, 64);
      if (!more) {
        pending = 1; /* kept as they are; a later pass tries again */
        break;
      }
      st->dropped = more;
    }
    *at = ch->next;
    st->nempty--;
    madvise(ch, st->chunk, MADV_DONTNEED); /* its header is written again only when re-made */
    st->dropped[st->ndropped++] = (char *)ch;
  }
  return pending;
}

void *sm_store_alloc(sm_store_t *st, unsigned site, size_t len)
{
  SMARM_ASSERT(st->chunk); /* initialised, not destroyed */
  if (site && sm_alloc_fails(site))
    return NULL;
  if (len > STORE_CLASS_MAX) {
    void *p = malloc(len);
    st->live += p != NULL;
    return p;
  }
  uint32_t size = (uint32_t)((len + STORE_GRAIN - 1) / STORE_GRAIN * STORE_GRAIN);
  if (!size)
    size = STORE_GRAIN;
  store_chunk_t *ch = st->partial[size / STORE_GRAIN - 1];
  if (!ch && !(ch = chunk_for(st, size))) {
    void *p = malloc(len); /* no chunk to be had: malloc's arena may still have room */
    st->live += p != NULL;
    st->foreign += p != NULL;
    return p;
  }
  void *b = ch->free;
  if (b) {
    ch->free = *(void **)b;
  } else {
    b = ch->bump;
    ch->bump += size;
  }
  block_show(st, b, size);
  ch->live++;
  if (chunk_full(st, ch))
    partial_unlink(st, ch);
  st->live++;
  return b;
}

/* Whether a block of a class's size came from malloc (sm_store_alloc when no chunk could be
** had): it lies in no region. Looked for only while such blocks exist. */
static int from_malloc(const sm_store_t *st, const void *block)
{
  for (uint32_t i = 0; i < st->nregions; i++)
    if ((const char *)block >= st->regions[i].base &&
        (const char *)block < st->regions[i].base + st->regions[i].len)
      return 0;
  return 1;
}

void sm_store_free(sm_store_t *st, void *block, size_t len)
{
  st->live--;
  if (len > STORE_CLASS_MAX) {
    free(block);
    return;
  }
  if (SMARM_UNLIKELY(st->foreign) && from_malloc(st, block)) {
    st->foreign--;
    free(block);
    return;
  }
  store_chunk_t *ch = (store_chunk_t *)((uintptr_t)block & ~(uintptr_t)(st->chunk - 1));
  int was_full = chunk_full(st, ch);
  *(void **)block = ch->free;
  ch->free = block;
  block_hide(st, block, ch->size);
  if (--ch->live == 0) {
    if (!was_full)
      partial_unlink(st, ch);
    chunk_empty(st, ch);
  } else if (was_full) {
    partial_link(st, ch);
  }
}
