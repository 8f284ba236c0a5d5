/*
** The floor under a million waiting actors (bench/spawn.lua and bench/spawn_on.lua spread at a
** million): how long this machine takes to give a process new memory, touched once, a page at
** a time. A waiting Lua actor holds about 1.6 KB (1.8 KB resident with the allocators' overhead)
** that nobody touched before it was spawned (its saved stack, its coroutine, its record), so a
** million of them need that many first touches, whatever the runtime does; on a virtual machine
** the first touch of a guest page can also be a fault in the host. Maps SMARM_TOUCH_MB (default
** 1800) MiB of anonymous memory and writes one byte in each 4 KiB page, timed, split between
** SMARM_TOUCH_THREADS threads (default 1; spawn_on's spread touches from two schedulers), once
** per variant named on the command line, in that order, each a fresh mapping: `pages` (as is)
** and `madv_hugepage` (transparent huge pages where the kernel gives them to madvised memory).
** The second pass may find guest pages the first one freed already backed by the host: run
** both orders. Run: build/release/bench/c/touch_floor [pages|madv_hugepage ...]
*/
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef struct part {
  char *from;
  size_t bytes;
} part_t;

static double now_s(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *touch_part(void *arg)
{
  const part_t *p = arg;
  for (size_t i = 0; i < p->bytes; i += 4096)
    ((volatile char *)p->from)[i] = 1;
  return NULL;
}

/* Seconds to touch every page of a new mapping of `bytes` from `nthreads` threads, or a negative
** value when it could not be mapped or a thread not started. *advised: madvise's success. */
static double touch_pass(size_t bytes, int huge, int nthreads, int *advised)
{
  char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return -1;
  *advised = huge && madvise(p, bytes, MADV_HUGEPAGE) == 0;
  part_t parts[64];
  pthread_t threads[64];
  size_t share = (bytes / (size_t)nthreads) & ~(size_t)4095;
  for (int k = 0; k < nthreads; k++) {
    parts[k].from = p + (size_t)k * share;
    parts[k].bytes = k == nthreads - 1 ? bytes - (size_t)k * share : share;
  }
  double t0 = now_s();
  int started = 0;
  for (; started < nthreads; started++)
    if (pthread_create(&threads[started], NULL, touch_part, &parts[started]) != 0)
      break;
  for (int k = 0; k < started; k++)
    pthread_join(threads[k], NULL);
  double dt = now_s() - t0;
  munmap(p, bytes);
  return started == nthreads ? dt : -1;
}

int main(int argc, char **argv)
{
  const char *env = getenv("SMARM_TOUCH_MB");
  long mb = env ? atol(env) : 1800;
  env = getenv("SMARM_TOUCH_THREADS");
  int nthreads = env ? atoi(env) : 1;
  if (mb <= 0 || mb > (1L << 30) || nthreads < 1 || nthreads > 64) {
    fprintf(stderr, "touch_floor: SMARM_TOUCH_MB is 1 to 2^30 MiB, SMARM_TOUCH_THREADS 1 to 64\n");
    return 2;
  }
  static const char *const both[] = {"pages", "madv_hugepage"};
  const char *const *variants = argc > 1 ? (const char *const *)argv + 1 : both;
  int nvariants = argc > 1 ? argc - 1 : 2;
  size_t bytes = (size_t)mb << 20;
  for (int v = 0; v < nvariants; v++) {
    int huge = strcmp(variants[v], "madv_hugepage") == 0;
    if (!huge && strcmp(variants[v], "pages") != 0) {
      fprintf(stderr, "touch_floor: unknown variant '%s' (pages, madv_hugepage)\n", variants[v]);
      return 2;
    }
    int advised = 0;
    double dt = touch_pass(bytes, huge, nthreads, &advised);
    if (dt < 0) {
      fprintf(stderr, "touch_floor: cannot map %ld MiB or start %d threads\n", mb, nthreads);
      return 1;
    }
    printf("scenario=touch_floor variant=%s mib=%ld threads=%d advised=%d seconds=%.3f "
           "ns_per_page=%.0f\n",
           variants[v], mb, nthreads, advised, dt, dt * 1e9 / (double)(bytes / 4096));
  }
  return 0;
}
