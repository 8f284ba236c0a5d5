/*
** The pinned LuaJIT's patches (deps/patches/), each checked through the public C API on the
** variant it was built into. A state runs on a counting allocator that knows every block's size:
** LuaJIT tells the size of each block it frees, and a size that differs from the block's is the
** accounting error the patches fix (the checking build asserts on it at lua_close).
**
** luajit-closure-oom.patch: a closure made while memory runs out (FNEW, or loading a dumped
** function with upvalues) is made after its upvalues, so that an out-of-memory error can no
** longer leave a closure that claims fewer upvalues than it was allocated for.
**
** luajit-alloc-segments.patch: two states growing side by side (so that their mappings
** interleave and never merge) map a few dozen segments each for 64 MB, not one per 128 KB. The
** allocator's mmap calls are counted by interposing mmap (LuaJIT is linked statically); under
** the sanitizers LuaJIT uses the system allocator, and this case has nothing to count there.
** Under an address-space limit (RLIMIT_AS) a state still grows to the limit, mapping what it
** needs when a larger segment no longer fits (natively only: under qemu the limit is the
** emulator's).
*/
#define _GNU_SOURCE /* syscall, mmap64 */
#include <lauxlib.h>
#include <lua.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COUNT_MMAPS 0 /* the sanitizers' own mmap stays in place */
#else
#define COUNT_MMAPS 1
static long mmaps; /* calls since the program began */

/* LuaJIT's allocator maps its segments through these (built with 64-bit file offsets, it calls
** mmap64; glibc's own calls go elsewhere). */
static void *counted_mmap(void *addr, size_t len, int prot, int flags, int fd, long off)
{
  mmaps++;
  return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
  return counted_mmap(addr, len, prot, flags, fd, (long)off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
  return counted_mmap(addr, len, prot, flags, fd, (long)off);
}
#endif

#define BLOCKS 8192 /* far more than a bare state holds */

typedef struct {
  void *p[BLOCKS];
  size_t size[BLOCKS];
  long fail_at;     /* the allocation (counted from arming) that fails; -1: none */
  long count;       /* allocations since arming */
  int wrong_sizes;  /* frees or reallocations told a size the block does not have */
  int lost;         /* blocks the table could not hold */
} heap_t;

static long slot_of(heap_t *h, void *p)
{
  for (long i = 0; i < BLOCKS; i++)
    if (h->p[i] == p)
      return i;
  return -1;
}

static void *counting_alloc(void *ud, void *p, size_t osize, size_t nsize)
{
  heap_t *h = ud;
  long i = p ? slot_of(h, p) : -1;
  if (p && (i < 0 || h->size[i] != osize))
    h->wrong_sizes++;
  if (nsize == 0) {
    if (i >= 0)
      h->p[i] = NULL;
    free(p);
    return NULL;
  }
  if (h->fail_at >= 0 && h->count++ == h->fail_at)
    return NULL;
  void *q = realloc(p, nsize);
  if (!q)
    return NULL;
  if (i < 0)
    i = slot_of(h, NULL);
  if (i < 0) {
    h->lost++;
    return q;
  }
  h->p[i] = q;
  h->size[i] = nsize;
  return q;
}

typedef struct {
  char bytes[4096];
  size_t n;
} dump_t;

static int to_dump(lua_State *L, const void *p, size_t n, void *ud)
{
  (void)L;
  dump_t *d = ud;
  if (d->n + n > sizeof d->bytes)
    return 1;
  memcpy(d->bytes + d->n, p, n);
  d->n += n;
  return 0;
}

/* Makes a closure with two upvalues, with the fail_at-th allocation failing: by FNEW (a chunk
** that returns a new closure) or by loading the closure's dump. Returns the wrong sizes seen. */
static int make_closure_failing(int by_load, long fail_at, int *failed)
{
  heap_t *h = calloc(1, sizeof *h);
  h->fail_at = -1;
  lua_State *L = lua_newstate(counting_alloc, h);
  if (!L) {
    fprintf(stderr, "lua_newstate failed\n");
    exit(2);
  }
  const char *chunk = "local a, b = 1, 2; return function() return a, b end";
  if (luaL_loadstring(L, chunk) != 0) {
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
    exit(2);
  }
  static dump_t dump;
  if (by_load) {
    dump.n = 0;
    if (lua_pcall(L, 0, 1, 0) != 0 || lua_dump(L, to_dump, &dump) != 0) {
      fprintf(stderr, "could not dump the closure\n");
      exit(2);
    }
    lua_pop(L, 1);
  }
  h->count = 0;
  h->fail_at = fail_at;
  int rc = by_load ? luaL_loadbuffer(L, dump.bytes, dump.n, "=closure")
                   : lua_pcall(L, 0, 1, 0);
  h->fail_at = -1;
  *failed = rc != 0;
  lua_close(L);
  int wrong = h->wrong_sizes;
  for (long i = 0; i < BLOCKS; i++)
    if (h->p[i]) {
      fprintf(stderr, "  a block of %zu bytes was never freed\n", h->size[i]);
      wrong++;
    }
  if (h->lost) {
    fprintf(stderr, "the test's block table is too small\n");
    exit(2);
  }
  free(h);
  return wrong;
}

/* Grows two states by 64 MB each, a table at a time in turn; returns the mmap calls made. */
static long mmaps_to_grow_two_states(void)
{
#if COUNT_MMAPS
  lua_State *a = luaL_newstate(), *b = luaL_newstate();
  if (!a || !b) {
    fprintf(stderr, "luaL_newstate failed\n");
    exit(2);
  }
  lua_gc(a, LUA_GCSTOP, 0);
  lua_gc(b, LUA_GCSTOP, 0);
  long before = mmaps;
  for (int i = 0; i < 64 * 1024; i++) { /* 64 MB: 1,024 bytes of array each */
    lua_createtable(a, 128, 0);
    luaL_ref(a, LUA_REGISTRYINDEX);
    lua_createtable(b, 128, 0);
    luaL_ref(b, LUA_REGISTRYINDEX);
  }
  long made = mmaps - before;
  lua_close(a);
  lua_close(b);
  return made;
#else
  return -1;
#endif
}

#if COUNT_MMAPS && defined(__x86_64__)
#define LIMIT_CHECKED 1
/* The process's mapped bytes now (VmSize), or 0. */
static long mapped_bytes(void)
{
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %ld kB", &kb) == 1)
      break;
  if (f)
    fclose(f);
  return kb * 1024;
}

static int grow_until_full(lua_State *L)
{
  for (;;) {
    lua_createtable(L, 128, 0);
    luaL_ref(L, LUA_REGISTRYINDEX);
  }
  return 0;
}
#else
#define LIMIT_CHECKED 0
#endif

/* With 56 MB of address space left, the bytes a state holds when it runs out; -1: not checked. */
static long bytes_under_a_limit(void)
{
#if LIMIT_CHECKED
  struct rlimit old, lim;
  long now = mapped_bytes();
  if (!now || getrlimit(RLIMIT_AS, &old) != 0)
    return -1;
  lua_State *L = luaL_newstate();
  lua_gc(L, LUA_GCSTOP, 0);
  lim = old;
  lim.rlim_cur = (rlim_t)(now + 56L * 1024 * 1024);
  setrlimit(RLIMIT_AS, &lim);
  int rc = lua_cpcall(L, grow_until_full, NULL);
  long held = (long)lua_gc(L, LUA_GCCOUNT, 0) * 1024;
  setrlimit(RLIMIT_AS, &old);
  lua_close(L);
  return rc == LUA_ERRMEM ? held : 0;
#else
  return -1;
#endif
}

int main(void)
{
  long held = bytes_under_a_limit();
  if (held >= 0 && held < 40L * 1024 * 1024) {
    fprintf(stderr, "with 56 MB of address space left a state ran out at %ld bytes\n", held);
    return 1;
  }
  if (held >= 0)
    printf("with 56 MB of address space left a state grew to %ld MB\n", held >> 20);
  int bad = 0;
  long made = mmaps_to_grow_two_states();
  if (made < 0)
    printf("segments: the system allocator (a sanitizer build), nothing to count\n");
  else if (made > 200) {
    fprintf(stderr, "two states of 64 MB made %ld mmap calls: segments of 128 KB\n", made);
    bad++;
  } else
    printf("two states of 64 MB each: %ld mmap calls\n", made);
  for (int by_load = 0; by_load <= 1; by_load++) {
    int failed = 1;
    /* every allocation of the call in turn, until one call needs no more than the ones before */
    for (long k = 0; failed && k < 1000; k++) {
      int wrong = make_closure_failing(by_load, k, &failed);
      if (wrong) {
        fprintf(stderr, "%s with allocation %ld failing: %d block(s) freed with a wrong size or "
                        "never freed\n", by_load ? "load" : "FNEW", k, wrong);
        bad++;
      }
    }
    if (failed) {
      fprintf(stderr, "%s never succeeded\n", by_load ? "load" : "FNEW");
      bad++;
    }
  }
  if (bad)
    return 1;
  printf("closures made while memory runs out: every block freed with its own size\n");
  return 0;
}
