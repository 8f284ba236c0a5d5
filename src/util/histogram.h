/*
** A log-linear histogram (HdrHistogram's idea): constant time and no allocation per sample,
** under 1% relative precision (128 linear sub-buckets per power of two), mergeable. Values are
** unsigned integers; callers pick the unit (the benchmarks record picoseconds and
** centi-cycles). Used by bench/c and by the Lua harness (smarm.histogram, lua/smarm/bench.lua).
*/
#ifndef SMARM_UTIL_HISTOGRAM_H
#define SMARM_UTIL_HISTOGRAM_H

#include <stdint.h>

#define HIST_SUB_BITS 8
#define HIST_BUCKETS (64 << (HIST_SUB_BITS - 1))

typedef struct histogram {
  uint64_t count;
  uint64_t max;
  uint64_t counts[HIST_BUCKETS];
} histogram_t;

void sm_hist_reset(histogram_t *h);
void sm_hist_record(histogram_t *h, uint64_t v);
void sm_hist_merge(histogram_t *into, const histogram_t *from);
/* Value at quantile q in [0, 1] (the middle of its bucket; the exact max for q = 1). */
uint64_t sm_hist_quantile(const histogram_t *h, double q);
/* Mean of the recorded values (bucket midpoints). */
double sm_hist_mean(const histogram_t *h);

#endif
