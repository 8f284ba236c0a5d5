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
** luajit-copy-closure.patch: luaJIT_copyclosure makes a new closure of a Lua function, with its
** own upvalues (nil), and nothing for anything else; while memory runs out it fails as cleanly
** as a load.
**
** luajit-stitch-retry.patch: the code after a classic C function, whose first recordings are
** stopped by a hook change (as a preemption's arming makes one), is compiled once a recording
** goes through, rather than left to the interpreter after the first stop.
**
** luajit-stitch-oom.patch: out of memory while a stitched trace is set up (its continuation's IR
** constants growing the IR buffer) leaves the Lua stack as it was; the checking build asserted
** "unbalanced stack", a plain one went on with its frames three slots off.
**
** luajit-alloc-populate.patch: a segment mapped as the heap grows has its pages resident before
** anything writes them, where the kernel prefaults (MADV_POPULATE_WRITE); not checked where the
** build has the system allocator (the sanitizers' builds) or the kernel does not prefault (an
** older one, or qemu's user mode, which accepts the advice and ignores it).
**
** luajit-finalizer-count.patch (the collector counts the finalizers it calls) is not checked
** here: only the binding's src/lua/ljx.c reads the count, and spec/message_spec.lua checks what
** it is for (a table that finalizers clear and refill while it is encoded loses no key).
*/
#define _DEFAULT_SOURCE /* mincore, madvise, MAP_ANONYMOUS */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <luajit.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

/* A state on the counting allocator, no allocation failing yet; its heap in *h. */
static lua_State *counting_state(heap_t **h)
{
  *h = calloc(1, sizeof **h);
  lua_State *L = NULL;
  if (*h) {
    (*h)->fail_at = -1;
    L = lua_newstate(counting_alloc, *h);
  }
  if (!L) {
    fprintf(stderr, "lua_newstate failed\n");
    exit(2);
  }
  return L;
}

/* After lua_close: the frees told a wrong size, and the blocks never freed (each named on
** stderr); frees h. */
static int closed_heap_problems(heap_t *h)
{
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

enum { BY_FNEW, BY_LOAD, BY_COPY };
static const char *const how_name[] = {"FNEW", "load", "copy"};

static int copy_global_f(lua_State *L)
{
  lua_getglobal(L, "f");
  return luaJIT_copyclosure(L, -1);
}

/* Makes a closure with two upvalues, with the fail_at-th allocation failing: by FNEW (a chunk
** that returns a new closure), by loading the closure's dump, or by copying the closure. Returns
** the wrong sizes seen. */
static int make_closure_failing(int how, long fail_at, int *failed)
{
  int by_load = how == BY_LOAD;
  heap_t *h;
  lua_State *L = counting_state(&h);
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
  } else if (how == BY_COPY) {
    if (lua_pcall(L, 0, 1, 0) != 0) {
      fprintf(stderr, "could not make the closure\n");
      exit(2);
    }
    lua_setglobal(L, "f");
  }
  h->count = 0;
  h->fail_at = fail_at;
  int rc;
  if (by_load)
    rc = luaL_loadbuffer(L, dump.bytes, dump.n, "=closure");
  else if (how == BY_COPY)
    rc = lua_cpcall(L, copy_global_f, NULL);
  else
    rc = lua_pcall(L, 0, 1, 0);
  h->fail_at = -1;
  *failed = rc != 0;
  lua_close(L);
  return closed_heap_problems(h);
}

/* A copy is a function of its own: the same code, its own upvalues starting at nil; a C
** function or any other value gives 0 and pushes nothing. */
static int copy_semantics(void)
{
  lua_State *L = luaL_newstate();
  const char *chunk = "local a, b = 1, 2; return function() return a, b end";
  int bad = 0;
  if (luaL_loadstring(L, chunk) != 0 || lua_pcall(L, 0, 1, 0) != 0)
    exit(2);
  int f = lua_gettop(L);
  if (luaJIT_copyclosure(L, f) != 1 || lua_gettop(L) != f + 1 || !lua_isfunction(L, -1) ||
      lua_rawequal(L, f, -1))
    bad++;
  int g = lua_gettop(L);
  const char *name = lua_getupvalue(L, g, 1);
  if (!name || strcmp(name, "a") != 0 || !lua_isnil(L, -1))
    bad++;
  lua_settop(L, g);
  lua_pushinteger(L, 10);
  lua_setupvalue(L, g, 1);
  lua_pushinteger(L, 20);
  lua_setupvalue(L, g, 2);
  lua_pushvalue(L, g);
  lua_call(L, 0, 2);
  if (lua_tointeger(L, -2) != 10 || lua_tointeger(L, -1) != 20)
    bad++;
  lua_settop(L, g);
  lua_pushvalue(L, f);
  lua_call(L, 0, 2); /* the original keeps its own */
  if (lua_tointeger(L, -2) != 1 || lua_tointeger(L, -1) != 2)
    bad++;
  lua_settop(L, g);
  lua_getglobal(L, "print");
  lua_pushinteger(L, 3);
  if (luaJIT_copyclosure(L, -2) != 0 || luaJIT_copyclosure(L, -1) != 0 || lua_gettop(L) != g + 2)
    bad++;
  lua_close(L);
  if (bad)
    fprintf(stderr, "luaJIT_copyclosure: %d wrong result(s)\n", bad);
  return bad;
}

/* For stitch_retried: stop_next() makes the next call of stop() (through the FFI, so that it
** runs while the trace around it is recorded) change the hook to none, as it was; that stops the
** recording, as a hook armed from a signal handler does. */
static lua_State *stitch_L;
static int stop_armed;

static int stop_next(lua_State *L)
{
  (void)L;
  stop_armed = 1;
  return 0;
}

static void stop(void)
{
  if (stop_armed) {
    stop_armed = 0;
    lua_sethook(stitch_L, NULL, 0, 0);
  }
}

static int nothing(lua_State *L)
{
  (void)L;
  return 0;
}

/* A loop calls nothing() (a classic C function) on line 11 and stop() on line 13. Once the
** loop's trace ends at nothing() (stitched), the code after it is recorded from line 11 (the
** call's line, as jit.attach reports it); the first three such recordings are stopped at
** stop(). A fourth must follow and be compiled. */
static int stitch_retried(void)
{
  static const char chunk[] =
      "local nothing, stop_fn, stop_next = ...\n"                                  /* 1 */
      "local util, ffi = require('jit.util'), require('ffi')\n"                    /* 2 */
      "local stop, starts, stopped, compiled = ffi.cast('void (*)(void)', stop_fn), {}, 0, false\n"
      "local function event(what, tr, func, pc)\n"                                 /* 4 */
      "  if what == 'start' then starts[tr] = util.funcinfo(func, pc).currentline\n"
      "    if starts[tr] == 11 and stopped < 3 then stopped = stopped + 1; stop_next() end\n"
      "  elseif what == 'stop' and starts[tr] == 11 then compiled = true\n"        /* 7 */
      "  end\n"                                                                    /* 8 */
      "end\n"                                                                      /* 9 */
      "jit.attach(event, 'trace'); local n = 0; for i = 1, 1000 do\n"              /* 10 */
      "  nothing()\n"                                                              /* 11 */
      "  n = n + i\n"                                                              /* 12 */
      "  stop()\n"                                                                 /* 13 */
      "end\n"                                                                      /* 14 */
      "jit.attach(event)\n"
      "return stopped, compiled\n";
  lua_State *L = stitch_L = luaL_newstate();
  luaL_openlibs(L);
  int bad = 0;
  if (luaL_dostring(L, "return jit.status()") != 0 || !lua_toboolean(L, -1)) {
    printf("stitched traces: not checked (the JIT is off here)\n");
    lua_close(L);
    return 0;
  }
  lua_settop(L, 0);
  if (luaL_loadstring(L, chunk) != 0) {
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
    exit(2);
  }
  lua_pushcfunction(L, nothing);
  lua_pushlightuserdata(L, (void *)(uintptr_t)stop);
  lua_pushcfunction(L, stop_next);
  if (lua_pcall(L, 3, 2, 0) != 0) {
    fprintf(stderr, "stitched traces: %s\n", lua_tostring(L, -1));
    bad++;
  } else if (lua_tointeger(L, -2) != 3 || !lua_toboolean(L, -1)) {
    fprintf(stderr, "stitched traces: %d recording(s) of the code after a C function stopped, "
                    "and %s compiled after them\n", (int)lua_tointeger(L, -2),
            lua_toboolean(L, -1) ? "it was" : "it was never");
    bad++;
  } else {
    printf("stitched traces: recorded again after three stops, then compiled\n");
  }
  lua_close(L);
  return bad;
}

/* For stitch_oom: a loop whose trace stitches at nothing() (a classic C function), after `nk`
** number constants in its body that fill the IR buffer's constants to different depths, so that
** the stitch's own constants grow the buffer at one of them. */
static void stitch_chunk(char *buf, size_t size, int nk)
{
  size_t n = (size_t)snprintf(buf, size, "local nothing = ...\n"
                                         "jit.opt.start('hotloop=1')\n"
                                         "return function(rounds)\n"
                                         "  local s = 0\n"
                                         "  for i = 1, rounds do\n"
                                         "    s = s + i");
  for (int k = 0; k < nk && n < size; k++)
    n += (size_t)snprintf(buf + n, size - n, " + %d.5", k + 1);
  if (n < size)
    snprintf(buf + n, size - n, "\n    nothing()\n    s = s - 1\n  end\n  return s\nend\n");
}

/* What the chunk's loop returns for `rounds` after `nk` constants: the sum over the rounds of
** i, plus the constants k + 1.5 for k = 0..nk-1 (nk + nk^2/2 in all), less 1. */
static double stitch_sum(int nk, int rounds)
{
  double per = 0;
  for (int k = 0; k < nk; k++)
    per += k + 1.5;
  return (double)rounds * (rounds + 1) / 2 + rounds * (per - 1);
}

/* Runs the loop with the fail_at-th allocation of its first run failing; that run must end with
** its sum or "not enough memory", and a second run with its sum. Returns the problems seen
** (a broken stack aborts the checking build, and crashes a plain one); *failed tells whether an
** allocation failed. */
static int stitch_failing(int nk, long fail_at, int *failed)
{
  static char chunk[4096];
  heap_t *h;
  lua_State *L = counting_state(&h);
  luaL_openlibs(L);
  stitch_chunk(chunk, sizeof chunk, nk);
  lua_pushcfunction(L, nothing);
  if (luaL_loadstring(L, chunk) != 0 || (lua_insert(L, -2), lua_pcall(L, 1, 1, 0)) != 0) {
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
    exit(2);
  }
  int bad = 0, base = lua_gettop(L);
  for (int run = 0; run < 2; run++) {
    lua_pushvalue(L, base);
    lua_pushinteger(L, 100);
    h->count = 0;
    h->fail_at = run == 0 ? fail_at : -1;
    int rc = lua_pcall(L, 1, 1, 0);
    if (run == 0)
      *failed = h->count > fail_at;
    h->fail_at = -1;
    if (rc == 0 ? lua_tonumber(L, -1) != stitch_sum(nk, 100)
                : run == 1 || !lua_isstring(L, -1) ||
                      strcmp(lua_tostring(L, -1), "not enough memory") != 0) {
      fprintf(stderr, "stitched trace, %d constant(s), allocation %ld failing: run %d gave %s\n",
              nk, fail_at, run + 1, lua_tostring(L, -1) ? lua_tostring(L, -1) : "?");
      bad++;
    }
    if (lua_gettop(L) != base + 1) {
      fprintf(stderr, "stitched trace, %d constant(s), allocation %ld failing: %d value(s) left "
                      "where 1 was expected\n", nk, fail_at, lua_gettop(L) - base);
      bad++;
    }
    lua_settop(L, base);
  }
  lua_close(L);
  return bad + closed_heap_problems(h);
}

static int stitch_oom(void)
{
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  int on = luaL_dostring(L, "return jit.status()") == 0 && lua_toboolean(L, -1);
  lua_close(L);
  if (!on) {
    printf("stitched traces out of memory: not checked (the JIT is off here)\n");
    return 0;
  }
  int bad = 0;
  for (int nk = 0; nk < 48; nk += 3) {
    int failed = 1;
    for (long k = 0; failed && k < 2000; k++)
      bad += stitch_failing(nk, k, &failed);
    if (failed) {
      fprintf(stderr, "stitched trace, %d constant(s): every run met a failing allocation\n", nk);
      bad++;
    }
  }
  if (!bad)
    printf("stitched traces out of memory: the stack as it was, every allocation in turn\n");
  return bad;
}

/* The pages of [p, p + len) that are not resident (p page-aligned). */
static long pages_not_resident(char *p, size_t len)
{
  long page = sysconf(_SC_PAGESIZE);
  unsigned char vec[64];
  size_t n = len / (size_t)page;
  if (n > sizeof vec || mincore(p, len, vec) != 0)
    return -1;
  long missing = 0;
  for (size_t i = 0; i < n; i++)
    missing += !(vec[i] & 1);
  return missing;
}

static int kernel_prefaults(void)
{
  size_t len = 4 * (size_t)sysconf(_SC_PAGESIZE);
  char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return 0;
  int yes = madvise(p, len, 23 /* MADV_POPULATE_WRITE */) == 0 && pages_not_resident(p, len) == 0;
  munmap(p, len);
  return yes;
}

/* Userdata of 24 KB, which LuaJIT does not write past their header, made until the heap has
** grown well past its first segment; the whole pages inside the payloads of the later ones must
** be resident. Returns the pages that were not (-1: mincore failed). */
static long grown_heap_not_resident(void)
{
  enum { UDATA = 24 * 1024, FIRST = 16, CHECKED = 48 };
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  lua_State *L = luaL_newstate();
  long missing = 0;
  lua_gc(L, LUA_GCSTOP, 0);
  for (int i = 0; i < FIRST + CHECKED; i++) {
    char *u = lua_newuserdata(L, UDATA); /* kept on the stack */
    uintptr_t lo = ((uintptr_t)u + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)u + UDATA) & ~(page - 1);
    if (i < FIRST || hi <= lo)
      continue;
    long m = pages_not_resident((char *)lo, hi - lo);
    if (m < 0) {
      missing = -1;
      break;
    }
    missing += m;
  }
  lua_close(L);
  return missing;
}

static int populate(void)
{
  lua_State *L = luaL_newstate();
  void *allocd = NULL;
  lua_getallocf(L, &allocd);
  lua_close(L);
  if (!allocd) { /* LUAJIT_USE_SYSMALLOC: its blocks come from malloc */
    printf("heap segments: not checked (this LuaJIT uses the system allocator)\n");
    return 0;
  }
  if (!kernel_prefaults()) {
    printf("heap segments: not checked (this kernel does not prefault)\n");
    return 0;
  }
  long missing = grown_heap_not_resident();
  if (missing != 0) {
    fprintf(stderr, "heap segments: %ld page(s) inside fresh userdata not resident\n", missing);
    return 1;
  }
  printf("heap segments: prefaulted as the heap grows\n");
  return 0;
}

int main(void)
{
  int bad = copy_semantics() + populate() + stitch_retried() + stitch_oom();
  for (int how = BY_FNEW; how <= BY_COPY; how++) {
    int failed = 1;
    /* every allocation of the call in turn, until one call needs no more than the ones before */
    for (long k = 0; failed && k < 1000; k++) {
      int wrong = make_closure_failing(how, k, &failed);
      if (wrong) {
        fprintf(stderr, "%s with allocation %ld failing: %d block(s) freed with a wrong size or "
                        "never freed\n", how_name[how], k, wrong);
        bad++;
      }
    }
    if (failed) {
      fprintf(stderr, "%s never succeeded\n", how_name[how]);
      bad++;
    }
  }
  if (bad)
    return 1;
  printf("closures made or copied while memory runs out: every block freed with its own size; "
         "copies are closures of their own\n");
  return 0;
}
