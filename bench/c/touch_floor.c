/*
** The floor under a million waiting actors (bench/spawn.lua and bench/spawn_on.lua spread at a
** million): how long this machine takes to give a process new memory, touched once, a page at
** a time. A waiting Lua actor holds about 1.8 KB that nobody touched before it was spawned (its
** saved stack, its coroutine, its record), so a million of them need about 1.8 GB of first
** touches, whatever the runtime does; on a virtual machine each first touch of a guest page can
** also be a fault in the host. Maps SMARM_TOUCH_MB (default 1800) of anonymous memory and writes
** one byte in each 4 KiB page, timed, twice: as is, and with MADV_HUGEPAGE (transparent huge
** pages where the kernel has them for madvised memory). Each pass is a fresh mapping.
** Run: build/release/bench/c/touch_floor
*/
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now_s(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Seconds to touch every page of a new mapping of `bytes`, or a negative value without one. */
static double touch_pass(size_t bytes, int huge)
{
  char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return -1;
  if (huge)
    madvise(p, bytes, MADV_HUGEPAGE); /* advice: refused or ignored, the pass runs as is */
  double t0 = now_s();
  for (size_t i = 0; i < bytes; i += 4096)
    ((volatile char *)p)[i] = 1;
  double dt = now_s() - t0;
  munmap(p, bytes);
  return dt;
}

int main(void)
{
  const char *env = getenv("SMARM_TOUCH_MB");
  long mb = env ? atol(env) : 1800;
  if (mb <= 0) {
    fprintf(stderr, "touch_floor: SMARM_TOUCH_MB must be a positive number of MiB\n");
    return 2;
  }
  size_t bytes = (size_t)mb << 20;
  for (int huge = 0; huge <= 1; huge++) {
    double dt = touch_pass(bytes, huge);
    if (dt < 0) {
      fprintf(stderr, "touch_floor: cannot map %ld MiB\n", mb);
      return 1;
    }
    printf("scenario=touch_floor variant=%s mib=%ld seconds=%.3f ns_per_page=%.0f\n",
           huge ? "madv_hugepage" : "pages", mb, dt, dt * 1e9 / (double)(bytes / 4096));
  }
  return 0;
}
