/*
** Two clocks for bracketing short operations: the cycle counter (serialised so the bracketed
** work cannot leak out of it) and the monotonic wall clock. The benchmark measures the bracket's
** own cost back to back and subtracts it, and derives the effective GHz (cycles per ns) from the
** totals so each lens checks the other.
**
** x86-64: lfence;rdtsc opens (earlier instructions finish first), rdtscp;lfence closes (the
** bracketed work finishes first, later work does not start early). aarch64: the virtual counter
** behind isb barriers; it ticks at the generic timer's frequency, not the core clock, so there
** "cycles" are timer ticks (ghz reports that frequency).
*/
#ifndef SMARM_UTIL_TIMING_H
#define SMARM_UTIL_TIMING_H

#include <stdint.h>
#include <time.h>

static inline uint64_t cycles_begin(void)
{
#if defined(__x86_64__)
  uint32_t lo, hi;
  __asm__ volatile("lfence\n\trdtsc" : "=a"(lo), "=d"(hi)::"memory");
  return ((uint64_t)hi << 32) | lo;
#elif defined(__aarch64__)
  uint64_t v;
  __asm__ volatile("isb\n\tmrs %0, cntvct_el0" : "=r"(v)::"memory");
  return v;
#endif
}

static inline uint64_t cycles_end(void)
{
#if defined(__x86_64__)
  uint32_t lo, hi, aux;
  __asm__ volatile("rdtscp\n\tlfence" : "=a"(lo), "=d"(hi), "=c"(aux)::"memory");
  return ((uint64_t)hi << 32) | lo;
#elif defined(__aarch64__)
  uint64_t v;
  __asm__ volatile("isb\n\tmrs %0, cntvct_el0\n\tisb" : "=r"(v)::"memory");
  return v;
#endif
}

static inline int64_t wall_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif
