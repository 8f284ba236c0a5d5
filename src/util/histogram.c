/* Log-linear histogram (see histogram.h). */
#include "histogram.h"

#include <string.h>

void sm_hist_reset(histogram_t *h) { memset(h, 0, sizeof *h); }

/* Values below 2^SUB have a bucket each; above, each power of two [2^e, 2^(e+1)) is split into
** 2^(SUB-1) linear sub-buckets of width 2^shift, shift = e - SUB + 1, and bucket
** shift * 2^(SUB-1) + (v >> shift) follows on from the exact ones without gaps. */
#define HALF (1u << (HIST_SUB_BITS - 1))

static unsigned bucket_of(uint64_t v)
{
  if (v < (1u << HIST_SUB_BITS))
    return (unsigned)v;
  unsigned e = 63u - (unsigned)__builtin_clzll(v);
  unsigned shift = e - HIST_SUB_BITS + 1;
  return shift * HALF + (unsigned)(v >> shift);
}

static uint64_t bucket_low(unsigned b, uint64_t *width)
{
  if (b < (1u << HIST_SUB_BITS)) {
    *width = 1;
    return b;
  }
  unsigned shift = b / HALF - 1;
  uint64_t top = b - shift * HALF;
  *width = (uint64_t)1 << shift;
  return top << shift;
}

void sm_hist_record(histogram_t *h, uint64_t v)
{
  h->counts[bucket_of(v)]++;
  h->count++;
  if (v > h->max)
    h->max = v;
}

void sm_hist_merge(histogram_t *into, const histogram_t *from)
{
  for (unsigned i = 0; i < HIST_BUCKETS; i++)
    into->counts[i] += from->counts[i];
  into->count += from->count;
  if (from->max > into->max)
    into->max = from->max;
}

uint64_t sm_hist_quantile(const histogram_t *h, double q)
{
  if (h->count == 0)
    return 0;
  if (q >= 1.0)
    return h->max;
  uint64_t rank = (uint64_t)(q * (double)h->count);
  if (rank >= h->count)
    rank = h->count - 1;
  uint64_t seen = 0;
  for (unsigned i = 0; i < HIST_BUCKETS; i++) {
    seen += h->counts[i];
    if (seen > rank) {
      uint64_t width, low = bucket_low(i, &width);
      uint64_t mid = low + width / 2;
      return mid > h->max ? h->max : mid;
    }
  }
  return h->max;
}

double sm_hist_mean(const histogram_t *h)
{
  if (h->count == 0)
    return 0;
  double sum = 0;
  for (unsigned i = 0; i < HIST_BUCKETS; i++) {
    if (h->counts[i]) {
      uint64_t width, low = bucket_low(i, &width);
      sum += (double)h->counts[i] * ((double)low + (double)(width - 1) / 2.0);
    }
  }
  return sum / (double)h->count;
}
