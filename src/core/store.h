/*
** What a scheduler's actors hold while they live, in a store of the scheduler's own: their records
** (actor_t) and, while parked out of a shared slot, their saved stacks (stack.h: the used part of a
** stack copied out, a few hundred bytes for a C actor and 900 for a Lua one).
**
** A million waiting actors hold a million of each. From malloc, each new page of them cost a page
** fault, and each step of a scheduler thread's glibc arena an mprotect: on the virtual machines
** users deploy to, a fault costs microseconds, and those were the larger part of the time to spawn
** a million waiting actors (docs/perf.md, "Saved stacks and records in a store"). The store hands
** out blocks of a size class from chunks of STORE_CHUNK bytes (or a page: see below), each chunk
** holding one class, and prefaults each chunk in one system call when it is first used (madvise
** MADV_POPULATE_WRITE, where the kernel has it). A class is a multiple of STORE_GRAIN bytes, up to
** STORE_CLASS_MAX; larger blocks come from malloc. Blocks of a class lie at a stride of its size: a
** caller that touches one field of many blocks picks a size that is not a power of two (sched.c's
** records).
**
** Chunks are carved from regions of STORE_REGION bytes mapped as needed and kept until the store
** ends (address space only). When memory is so short that a region cannot be mapped, a region of
** one chunk is tried, and when not even that, malloc (whose arena may have room that is already
** reserved: under `ulimit -v` a new mapping fails first); such a block is told from a chunk's by a
** look through the regions, made only while such blocks exist. A chunk whose last block is freed
** becomes empty and keeps its memory, for the next class that needs a chunk. When the scheduler
** idles it trims its stacks and the store (at most once a second, sched.c): every empty chunk
** beyond the STORE_EMPTY_KEEP most recently emptied that was empty already at the previous pass
** gives its memory back to the kernel (MADV_DONTNEED) and keeps its place, to be prefaulted again
** when reused. A burst of actors therefore leaves little memory behind a few seconds after they are
** gone, without a system call on the busy path, and actors that come and go, or park and wake, over
** and over reuse the same few blocks: a class hands out the freed blocks of its first chunk first.
**
** A chunk is aligned to its size, so a block's chunk is its address rounded down: a block has no
** header, and freeing takes its length (a record's size, a saved stack's length, which its actor
** keeps). A chunk is whole pages: where a page is larger than STORE_CHUNK (aarch64 kernels with 64
** KiB pages), a chunk is a page, since the kernel's advice works on whole pages and would otherwise
** reach into the neighbouring chunk.
**
** Owner: its scheduler's thread; nothing here is shared.
*/
#ifndef SMARM_CORE_STORE_H
#define SMARM_CORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#define STORE_GRAIN 16
#define STORE_CLASS_MAX 4096
#define STORE_CLASSES (STORE_CLASS_MAX / STORE_GRAIN)
#define STORE_CHUNK ((size_t)32 * 1024) /* or the page size, if larger */
#define STORE_REGION ((size_t)2 * 1024 * 1024)
#define STORE_EMPTY_KEEP 8

struct store_chunk;
struct store_region;

typedef struct sm_store {
  size_t chunk;               /* a chunk's bytes: STORE_CHUNK or the page size, a power of two */
  struct store_chunk *partial[STORE_CLASSES]; /* chunks of each class with a free block */
  struct store_chunk *empty;  /* empty chunks that hold their memory (linked through them) */
  uint32_t nempty;
  uint32_t trim_passes;       /* sm_store_trim calls so far */
  char **dropped;             /* empty chunks whose memory went back to the kernel */
  uint32_t ndropped, dropped_cap;
  char *region_next;          /* the next chunk's place in the newest region */
  char *region_end;
  struct store_region *regions; /* every region mapped (sm_store_destroy unmaps them) */
  uint32_t nregions, regions_cap;
  size_t live;                /* blocks handed out and not freed, malloc'ed ones included */
  size_t foreign;             /* of those, blocks of a class's size from malloc (below) */
  int memcheck;               /* running under valgrind: free blocks are marked unaddressable */
} sm_store_t;

void sm_store_init(sm_store_t *st);
/* Unmaps everything. Every block must have been freed. */
void sm_store_destroy(sm_store_t *st);

/* Gives back the memory of chunks that stayed empty since the previous call (above). Returns
** whether a later call may give back more. */
int sm_store_trim(sm_store_t *st);

/* A block of at least len bytes; NULL when memory is out, or when `site` (alloc.h's
** sm_alloc_site; 0: none) is armed to fail by the test seam. */
void *sm_store_alloc(sm_store_t *st, unsigned site, size_t len);
/* Frees a block of sm_store_alloc(st, site, len), told the same len. */
void sm_store_free(sm_store_t *st, void *block, size_t len);

#endif
