/*
** A bounded walk over a term of Erlang's external term format (see etf.h).
*/
#include "etf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t fail(etf_error_t *err, enum etf_fault fault, size_t at)
{
  err->fault = fault;
  err->at = at;
  return 0;
}

const char *sm_etf_fault_text(enum etf_fault fault)
{
  switch (fault) {
  case ETF_FAULT_TRUNCATED: return "truncated term";
  case ETF_FAULT_UNKNOWN_TAG: return "unknown tag";
  case ETF_FAULT_TOO_DEEP: return "term nested too deeply";
  case ETF_FAULT_COMPRESSED: return "a compressed term (not supported)";
  case ETF_FAULT_CACHE_REF: return "an atom cache reference";
  case ETF_FAULT_NOT_ATOM: return "not an atom";
  case ETF_FAULT_BAD_BITS: return "bad bit count of a bitstring";
  case ETF_FAULT_BAD_ARITY: return "bad arity of a fun";
  case ETF_FAULT_TUPLE_TOO_BIG: return "a tuple of more than 16777215 elements";
  default: return "malformed term";
  }
}

size_t sm_etf_atom(const unsigned char *b, size_t n, size_t at, const char **s, size_t *len,
                   int *latin1, etf_error_t *err)
{
  if (at >= n)
    return fail(err, ETF_FAULT_TRUNCATED, at);
  unsigned char tag = b[at];
  size_t hdr = tag == ETF_ATOM || tag == ETF_ATOM_UTF8               ? 3
               : tag == ETF_SMALL_ATOM || tag == ETF_SMALL_ATOM_UTF8 ? 2
                                                                     : 0;
  if (!hdr)
    return fail(err, tag == ETF_ATOM_CACHE_REF ? ETF_FAULT_CACHE_REF : ETF_FAULT_NOT_ATOM, at);
  if (n - at < hdr)
    return fail(err, ETF_FAULT_TRUNCATED, at);
  size_t size = hdr == 3 ? (size_t)b[at + 1] << 8 | b[at + 2] : b[at + 1];
  if (n - at - hdr < size)
    return fail(err, ETF_FAULT_TRUNCATED, at);
  *s = (const char *)b + at + hdr;
  *len = size;
  *latin1 = tag == ETF_ATOM || tag == ETF_SMALL_ATOM;
  return at + hdr + size;
}

size_t sm_etf_skip(const unsigned char *b, size_t n, size_t at, int depth, etf_error_t *err)
{
  const char *s;
  size_t len;
  int latin1;
  if (depth >= ETF_MAX_DEPTH)
    return fail(err, ETF_FAULT_TOO_DEEP, at);
  if (at >= n)
    return fail(err, ETF_FAULT_TRUNCATED, at);
  const unsigned char *p = b + at;
  size_t left = n - at - 1, fixed;
  switch (*p) {
  case ETF_SMALL_INTEGER: fixed = 1; break;
  case ETF_INTEGER: fixed = 4; break;
  case ETF_NEW_FLOAT: fixed = 8; break;
  case ETF_FLOAT: fixed = 31; break;
  case ETF_NIL: fixed = 0; break;
  case ETF_ATOM: case ETF_SMALL_ATOM: case ETF_ATOM_UTF8: case ETF_SMALL_ATOM_UTF8:
    return sm_etf_atom(b, n, at, &s, &len, &latin1, err);
  case ETF_STRING: case ETF_SMALL_BIG:
  case ETF_BINARY: case ETF_BIT_BINARY: case ETF_LARGE_BIG: case ETF_NEW_FUN: {
    /* a length, then that many bytes (and a sign byte, a bits byte) */
    size_t hdr = *p == ETF_STRING ? 2 : *p == ETF_SMALL_BIG ? 1 : 4;
    if (left < hdr)
      return fail(err, ETF_FAULT_TRUNCATED, at);
    size_t size = hdr == 1 ? p[1] : hdr == 2 ? (size_t)p[1] << 8 | p[2] : sm_etf_be32(p + 1);
    if (*p == ETF_NEW_FUN) { /* its size counts itself */
      /* erl_interface's ei_skip_term reads a fun's fields (ei_decode_fun: arity, uniq, index,
      ** free count, then module, old index, old uniq and pid, with the lengths they hold), so
      ** they are walked too, each within the fun's own size */
      if (size < 29 || left < size)
        return fail(err, ETF_FAULT_TRUNCATED, at);
      size_t end = at + 1 + size, q = at + 1 + 29;
      uint64_t fields = 4 + (uint64_t)sm_etf_be32(p + 26); /* module ... pid, free vars */
      for (uint64_t i = 0; i < fields; i++)
        if (!(q = sm_etf_skip(b, end, q, depth + 1, err)))
          return 0;
      return q == end ? end : fail(err, ETF_FAULT_TRUNCATED, at);
    } else if (*p == ETF_BIT_BINARY && left > hdr && ((p[5] == 0) != (size == 0) || p[5] > 8)) {
      /* the bits of its last byte that count: 1 to 8, 0 only with no bytes (erts' rule) */
      return fail(err, ETF_FAULT_BAD_BITS, at);
    } else {
      fixed = hdr + size + (*p == ETF_SMALL_BIG || *p == ETF_LARGE_BIG || *p == ETF_BIT_BINARY);
    }
    break;
  }
  case ETF_PID: case ETF_NEW_PID: case ETF_PORT: case ETF_NEW_PORT: case ETF_V4_PORT:
  case ETF_REFERENCE: case ETF_NEW_REFERENCE: case ETF_NEWER_REFERENCE: {
    int ref = *p == ETF_NEW_REFERENCE || *p == ETF_NEWER_REFERENCE;
    if (ref && left < 2)
      return fail(err, ETF_FAULT_TRUNCATED, at);
    size_t q = sm_etf_atom(b, n, at + (ref ? 3 : 1), &s, &len, &latin1, err);
    if (!q)
      return 0;
    size_t rest = *p == ETF_PID ? 9 : *p == ETF_NEW_PID ? 12 : *p == ETF_PORT ? 5
                  : *p == ETF_NEW_PORT ? 8 : *p == ETF_V4_PORT ? 12 : *p == ETF_REFERENCE ? 5
                  : (*p == ETF_NEW_REFERENCE ? 1 : 4) + 4 * ((size_t)p[1] << 8 | p[2]);
    return n - q < rest ? fail(err, ETF_FAULT_TRUNCATED, at) : q + rest;
  }
  case ETF_EXPORT: { /* fun M:F/A: two atoms (erts refuses anything else), then the arity, which
                     ** erts takes only as a small integer of at least 0 (it writes a byte) */
    size_t q = at + 1;
    for (int i = 0; i < 2; i++)
      if (!(q = sm_etf_atom(b, n, q, &s, &len, &latin1, err)))
        return 0;
    if (q < n && b[q] != ETF_SMALL_INTEGER &&
        (b[q] != ETF_INTEGER || (n - q > 4 && (sm_etf_be32(b + q + 1) & 0x80000000u))))
      return fail(err, ETF_FAULT_BAD_ARITY, q);
    return sm_etf_skip(b, n, q, depth + 1, err);
  }
  case ETF_SMALL_TUPLE: case ETF_LARGE_TUPLE: case ETF_LIST: case ETF_MAP: {
    size_t hdr = *p == ETF_SMALL_TUPLE ? 1 : 4;
    if (left < hdr)
      return fail(err, ETF_FAULT_TRUNCATED, at);
    uint64_t count = hdr == 1 ? p[1] : sm_etf_be32(p + 1);
    if (*p == ETF_LARGE_TUPLE && count > ETF_TUPLE_ARITY_MAX) /* smarm.term.encode refuses it */
      return fail(err, ETF_FAULT_TUPLE_TOO_BIG, at);
    if (*p == ETF_MAP)
      count *= 2;
    if (*p == ETF_LIST)
      count++; /* the tail */
    size_t q = at + 1 + hdr;
    for (uint64_t i = 0; i < count; i++)
      if (!(q = sm_etf_skip(b, n, q, depth + 1, err)))
        return 0;
    return q;
  }
  case ETF_COMPRESSED:
    return fail(err, ETF_FAULT_COMPRESSED, at);
  case ETF_ATOM_CACHE_REF: /* only in the distribution's headers, which smarm does not ask for */
    return fail(err, ETF_FAULT_CACHE_REF, at);
  default:
    return fail(err, ETF_FAULT_UNKNOWN_TAG, at);
  }
  return left < fixed ? fail(err, ETF_FAULT_TRUNCATED, at) : at + 1 + fixed;
}

/* ---- Writers -------------------------------------------------------------------------------- */

#define NUMBER_MAX 11    /* a small big of 8 digits: tag, count, sign, digits */
#define ATOM_HEAD_MAX 3

static unsigned char *be32(unsigned char *o, uint32_t v)
{
  o[0] = (unsigned char)(v >> 24);
  o[1] = (unsigned char)(v >> 16);
  o[2] = (unsigned char)(v >> 8);
  o[3] = (unsigned char)v;
  return o + 4;
}

#define MAX_EXACT 9007199254740992.0 /* 2^53: every integer up to it is a double */

static size_t number(unsigned char *out, double n)
{
  unsigned char *o = out;
  if (n == floor(n) && fabs(n) <= MAX_EXACT) {
    if (n >= 0 && n <= 255) {
      *o++ = ETF_SMALL_INTEGER;
      *o++ = (unsigned char)n;
    } else if (n >= INT32_MIN && n <= INT32_MAX) {
      *o++ = ETF_INTEGER;
      o = be32(o, (uint32_t)(int32_t)n);
    } else { /* a small big: digit count, sign, the magnitude's bytes least significant first */
      uint64_t m = (uint64_t)fabs(n);
      unsigned char *count = o + 1;
      *o++ = ETF_SMALL_BIG;
      o++;
      *o++ = n < 0;
      for (*count = 0; m; m >>= 8, (*count)++)
        *o++ = (unsigned char)m;
    }
    return (size_t)(o - out);
  }
  uint64_t u;
  memcpy(&u, &n, sizeof u);
  *o++ = ETF_NEW_FLOAT;
  o = be32(o, (uint32_t)(u >> 32));
  o = be32(o, (uint32_t)u);
  return (size_t)(o - out);
}

static size_t atom_head(unsigned char *out, size_t len)
{
  if (len <= 255) {
    out[0] = ETF_SMALL_ATOM_UTF8;
    out[1] = (unsigned char)len;
    return 2;
  }
  out[0] = ETF_ATOM_UTF8;
  out[1] = (unsigned char)(len >> 8);
  out[2] = (unsigned char)len;
  return 3;
}

static size_t pid_tail(unsigned char out[12], uint64_t id_serial, uint32_t creation)
{
  unsigned char *o = be32(out, (uint32_t)id_serial);
  o = be32(o, (uint32_t)(id_serial >> 32));
  be32(o, creation);
  return 12;
}

static size_t ref_head(unsigned char out[3])
{
  out[0] = ETF_NEWER_REFERENCE;
  out[1] = 0;
  out[2] = 3;
  return 3;
}

static size_t ref_tail(unsigned char out[16], uint64_t ref, uint32_t creation)
{
  unsigned char *o = be32(out, creation);
  o = be32(o, (uint32_t)ref);
  o = be32(o, (uint32_t)(ref >> 32));
  be32(o, 0);
  return 16;
}

/* ---- The growing buffer --------------------------------------------------------------------- */

void sm_etf_put(etf_buf_t *buf, const void *p, size_t n)
{
  if (buf->failed || (buf->cap - buf->len < n && buf->grow(buf, n) < 0)) {
    buf->failed = 1;
    return;
  }
  memcpy(buf->b + buf->len, p, n);
  buf->len += n;
}

void sm_etf_put_u8(etf_buf_t *buf, unsigned v)
{
  unsigned char b = (unsigned char)v;
  sm_etf_put(buf, &b, 1);
}

void sm_etf_put_u32(etf_buf_t *buf, uint32_t v)
{
  unsigned char b[4];
  be32(b, v);
  sm_etf_put(buf, b, 4);
}

void sm_etf_put_atom(etf_buf_t *buf, const char *name, size_t len)
{
  unsigned char head[ATOM_HEAD_MAX];
  sm_etf_put(buf, head, atom_head(head, len));
  sm_etf_put(buf, name, len);
}

void sm_etf_put_number(etf_buf_t *buf, double n)
{
  unsigned char b[NUMBER_MAX];
  sm_etf_put(buf, b, number(b, n));
}

void sm_etf_put_local_pid(etf_buf_t *buf, const char *node, size_t len, uint64_t id_serial,
                          uint32_t creation)
{
  unsigned char b[12];
  sm_etf_put_u8(buf, ETF_NEW_PID);
  sm_etf_put_atom(buf, node, len);
  sm_etf_put(buf, b, pid_tail(b, id_serial, creation));
}

void sm_etf_put_local_ref(etf_buf_t *buf, const char *node, size_t len, uint64_t ref,
                          uint32_t creation)
{
  unsigned char b[16];
  sm_etf_put(buf, b, ref_head(b));
  sm_etf_put_atom(buf, node, len);
  sm_etf_put(buf, b, ref_tail(b, ref, creation));
}

static int key_order(const void *a, const void *b)
{
  const etf_pair_t *x = a, *y = b;
  size_t nx = x->key_end - x->at, ny = y->key_end - y->at;
  int c = memcmp(x->p, y->p, nx < ny ? nx : ny);
  return c ? c : (nx > ny) - (nx < ny);
}

int sm_etf_order_pairs(const etf_buf_t *buf, etf_pair_t *pair, size_t n)
{
  for (size_t i = 0; i < n; i++) /* the buffer is written: its bytes stay where they are now */
    pair[i].p = buf->b + pair[i].at;
  qsort(pair, n, sizeof *pair, key_order);
  for (size_t i = 1; i < n; i++)
    if (key_order(&pair[i - 1], &pair[i]) == 0)
      return 1;
  return 0;
}

int sm_etf_sort_pairs(etf_buf_t *buf, etf_pair_t *pair, size_t n)
{
  if (n < 2)
    return 0;
  size_t from = pair[0].at, len = pair[n - 1].end - from;
  unsigned char *sorted = malloc(len), *q = sorted;
  if (!sorted)
    return -1;
  sm_etf_order_pairs(buf, pair, n);
  for (size_t i = 0; i < n; i++) {
    memcpy(q, pair[i].p, pair[i].end - pair[i].at);
    q += pair[i].end - pair[i].at;
  }
  memcpy(buf->b + from, sorted, len);
  free(sorted);
  return 0;
}
