/* The store of actor records and saved stacks (src/core/store.h), on its own: blocks of every
** class and beyond keep their bytes while others come and go, a freed block is handed out again
** first, empty chunks give their memory back only after a trim pass that found them empty
** already and spare the live blocks beside them, the test seam fails an allocation of its site
** only, and new chunks are resident before anything writes them where the kernel prefaults.
** Stacks copied out to the store and back in under a runtime are test_stack's
** (shared_stacks_keep_locals and the cases after it); records come and go with every spawn of
** every test. */
#define _GNU_SOURCE
#include "test.h"

#include "core/alloc.h"
#include "core/store.h"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer) ||                       \
    defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
#define TEST_HAVE_SANITIZER 1
#endif
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define TEST_HAVE_VALGRIND 1
#endif
#endif

#define BLOCKS 3000

static size_t len_of(unsigned i)
{
  static const size_t lens[] = {1, 31, 32, 33, 300, 872, 1000, STORE_CLASS_MAX, STORE_CLASS_MAX + 1,
                                20000};
  return lens[i % (sizeof lens / sizeof lens[0])];
}

static int holds(const unsigned char *b, size_t len, unsigned i)
{
  for (size_t k = 0; k < len; k++)
    if (b[k] != (unsigned char)(i + k))
      return 0;
  return 1;
}

static void fill(unsigned char *b, size_t len, unsigned i)
{
  for (size_t k = 0; k < len; k++)
    b[k] = (unsigned char)(i + k);
}

TEST(blocks_keep_their_bytes)
{
  static unsigned char *blocks[BLOCKS];
  sm_store_t st;
  sm_store_init(&st);
  uint32_t rng = 7;
  for (unsigned round = 0; round < 4; round++) {
    for (unsigned i = 0; i < BLOCKS; i++) {
      if (blocks[i])
        continue;
      blocks[i] = sm_store_alloc(&st, 0, len_of(i));
      CHECK(blocks[i] != NULL);
      fill(blocks[i], len_of(i), i + round);
      if (len_of(i) <= STORE_CLASS_MAX) /* from a chunk aligned to its size: within it */
        CHECK((uintptr_t)blocks[i] % STORE_GRAIN == 0);
    }
    int bad = 0;
    for (unsigned i = 0; i < BLOCKS; i++) /* free about half, in no order */
      if (test_xorshift(&rng) % 2) {
        unsigned held = (unsigned)(blocks[i][0] - (unsigned char)i); /* the round that filled it */
        bad += !holds(blocks[i], len_of(i), i + held);
        sm_store_free(&st, blocks[i], len_of(i));
        blocks[i] = NULL;
      }
    CHECK_EQ(bad, 0);
  }
  for (unsigned i = 0; i < BLOCKS; i++)
    if (blocks[i]) {
      sm_store_free(&st, blocks[i], len_of(i));
      blocks[i] = NULL;
    }
  CHECK_EQ(st.live, 0);
  sm_store_destroy(&st);
}

TEST(a_freed_block_is_handed_out_again_first)
{
  sm_store_t st;
  sm_store_init(&st);
  void *a = sm_store_alloc(&st, 0, 900), *b = sm_store_alloc(&st, 0, 900);
  void *small = sm_store_alloc(&st, 0, 100);
  CHECK(a && b && small && a != b);
  sm_store_free(&st, a, 900);
  void *other = sm_store_alloc(&st, 0, 100);
  CHECK(other != a); /* another class */
  void *again = sm_store_alloc(&st, 0, 910);
  CHECK(again == a); /* 910 and 900 round to one class */
  CHECK_EQ(st.live, 4);
  sm_store_free(&st, again, 910);
  sm_store_free(&st, b, 900);
  sm_store_free(&st, small, 100);
  sm_store_free(&st, other, 100);
  CHECK_EQ(st.live, 0);
  sm_store_destroy(&st);
}

static void *chunk_of(const sm_store_t *st, void *block)
{
  return (void *)((uintptr_t)block & ~(uintptr_t)(st->chunk - 1));
}

enum { TRIM_BLOCKS = 2000 }; /* 1 KB blocks: about 64 chunks of 32 KiB, 32 of 64 KiB */

TEST(empty_chunks_give_memory_back_after_a_pass)
{
  static void *blocks[TRIM_BLOCKS];
  sm_store_t st;
  sm_store_init(&st);
  for (int i = 0; i < TRIM_BLOCKS; i++) {
    blocks[i] = sm_store_alloc(&st, 0, 1024);
    CHECK(blocks[i] != NULL);
    memset(blocks[i], 1, 1024);
  }
  for (int i = 0; i < TRIM_BLOCKS; i++)
    sm_store_free(&st, blocks[i], 1024);
  uint32_t chunks = st.nempty;
  CHECK(chunks >= 30);
  CHECK_EQ(st.ndropped, 0);
  CHECK_EQ(sm_store_trim(&st), 1); /* emptied since the last pass: not yet */
  CHECK_EQ(st.ndropped, 0);
  CHECK_EQ(sm_store_trim(&st), 0);
  CHECK_EQ(st.nempty, STORE_EMPTY_KEEP);
  CHECK_EQ(st.ndropped, chunks - STORE_EMPTY_KEEP);
  /* Blocks come from the kept chunks first, then from those given back. */
  void *again = sm_store_alloc(&st, 0, 64);
  int from_kept = 0;
  for (int i = 0; i < TRIM_BLOCKS; i++)
    from_kept |= chunk_of(&st, blocks[i]) == chunk_of(&st, again);
  CHECK(from_kept);
  sm_store_free(&st, again, 64);
  CHECK_EQ(st.live, 0);
  sm_store_destroy(&st);
}

/* Memory given back is a chunk's own: blocks in the chunks beside it keep their bytes (with a
** page larger than a chunk, advice on one chunk reached its neighbour and zeroed live blocks). */
TEST(giving_memory_back_spares_the_chunks_beside)
{
  static unsigned char *blocks[TRIM_BLOCKS];
  sm_store_t st;
  sm_store_init(&st);
  char *first = NULL;
  for (unsigned i = 0; i < TRIM_BLOCKS; i++) {
    blocks[i] = sm_store_alloc(&st, 0, 1024);
    CHECK(blocks[i] != NULL);
    fill(blocks[i], 1024, i);
    if (!first || (char *)chunk_of(&st, blocks[i]) < first)
      first = chunk_of(&st, blocks[i]);
  }
  for (unsigned i = 0; i < TRIM_BLOCKS; i++) /* every other chunk emptied */
    if ((((char *)chunk_of(&st, blocks[i]) - first) / (ptrdiff_t)st.chunk) % 2 == 0) {
      sm_store_free(&st, blocks[i], 1024);
      blocks[i] = NULL;
    }
  sm_store_trim(&st);
  sm_store_trim(&st);
  CHECK(st.ndropped > 0);
  int bad = 0, kept = 0;
  for (unsigned i = 0; i < TRIM_BLOCKS; i++)
    if (blocks[i]) {
      kept++;
      bad += !holds(blocks[i], 1024, i);
      sm_store_free(&st, blocks[i], 1024);
    }
  CHECK(kept > 0);
  CHECK_EQ(bad, 0);
  CHECK_EQ(st.live, 0);
  sm_store_destroy(&st);
}

TEST(the_test_seam_fails_an_allocation_of_its_site)
{
  sm_store_t st;
  sm_store_init(&st);
  sm_alloc_fail(SM_ALLOC_STACK_SAVE, 1);
  void *record = sm_store_alloc(&st, 0, 248); /* no site: never failed by the seam */
  CHECK(record != NULL);
  CHECK(sm_store_alloc(&st, SM_ALLOC_STACK_SAVE, 500) == NULL);
  void *b = sm_store_alloc(&st, SM_ALLOC_STACK_SAVE, 500);
  CHECK(b != NULL);
  CHECK_EQ(st.live, 2);
  sm_store_free(&st, b, 500);
  sm_store_free(&st, record, 248);
  sm_store_destroy(&st);
}

static long not_resident(void *p, size_t len)
{
  static unsigned char vec[64];
  long page = sysconf(_SC_PAGESIZE);
  size_t n = len / (size_t)page;
  if (n > sizeof vec || mincore(p, len, vec) != 0)
    return -1;
  long missing = 0;
  for (size_t i = 0; i < n; i++)
    missing += !(vec[i] & 1);
  return missing;
}

TEST(new_chunks_are_prefaulted)
{
  size_t len = 4 * (size_t)sysconf(_SC_PAGESIZE);
  char *probe = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(probe != MAP_FAILED);
  int prefaults = madvise(probe, len, 23 /* MADV_POPULATE_WRITE */) == 0 &&
                  not_resident(probe, len) == 0;
  munmap(probe, len);
  if (!prefaults)
    SKIP("this kernel does not prefault (older than 5.14, or qemu's user mode)");
  sm_store_t st;
  sm_store_init(&st);
  void *b = sm_store_alloc(&st, 0, 2000);
  CHECK(b != NULL);
  CHECK_EQ(not_resident(chunk_of(&st, b), st.chunk), 0);
  sm_store_free(&st, b, 2000);
  sm_store_destroy(&st);
}

#ifndef TEST_HAVE_SANITIZER
/* With no new mapping to be had (RLIMIT_AS at what the process holds, as under `ulimit -v`), a
** block comes from malloc's arena, which still has room reserved, and goes back there. In a
** child, so that the limit binds nothing else. */
static int exhausted_store_child(void)
{
  enum { N = 1000 };
  static void *blocks[N];
#ifdef M_TRIM_THRESHOLD
  mallopt(M_TRIM_THRESHOLD, 1 << 30); /* the heap grown here is kept once freed (glibc) */
#endif
  for (int i = 0; i < N; i++)
    if (!(blocks[i] = malloc(1000)))
      return 3;
  for (int i = 0; i < N; i++)
    free(blocks[i]);
  long pages = 0, page = sysconf(_SC_PAGESIZE);
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%ld", &pages) != 1)
    return 3;
  fclose(f);
  struct rlimit lim;
  if (getrlimit(RLIMIT_AS, &lim) != 0)
    return 3;
  rlim_t want = (rlim_t)(pages * page + (64 << 10));
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < want)
    return 3; /* a tighter limit already holds (ulimit -v): not this case's to test */
  lim.rlim_cur = want;
  if (setrlimit(RLIMIT_AS, &lim) != 0)
    return 3;
  if (mmap(NULL, 4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) !=
      MAP_FAILED)
    return 3; /* the limit does not bind (qemu's user mode ignores it) */
  void *probe = malloc(1000);
  if (!probe)
    return 3; /* a malloc that keeps no room it reserved (not glibc's) */
  free(probe);
  sm_store_t st;
  sm_store_init(&st);
  for (int i = 0; i < N; i++) {
    if (!(blocks[i] = sm_store_alloc(&st, 0, 1000)))
      return 1;
    memset(blocks[i], 7, 1000);
  }
  if (st.foreign == 0)
    return 2;
  for (int i = 0; i < N; i++)
    sm_store_free(&st, blocks[i], 1000);
  int ok = st.foreign == 0 && st.live == 0;
  sm_store_destroy(&st);
  return ok ? 0 : 4;
}
#endif

TEST(with_no_mapping_to_be_had_blocks_come_from_malloc)
{
#ifdef TEST_HAVE_SANITIZER
  SKIP("RLIMIT_AS cannot hold a sanitizer's shadow memory");
#else
#ifdef TEST_HAVE_VALGRIND
  if (RUNNING_ON_VALGRIND)
    SKIP("valgrind maps memory of its own under the limit");
#endif
  fflush(NULL);
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0)
    _exit(exhausted_store_child());
  int status = 0;
  CHECK_EQ(waitpid(child, &status, 0), child);
  CHECK(WIFEXITED(status));
  if (WEXITSTATUS(status) == 3)
    SKIP("the address-space limit could not be set to bind here");
  CHECK_EQ(WEXITSTATUS(status), 0);
#endif
}

TEST_MAIN()
