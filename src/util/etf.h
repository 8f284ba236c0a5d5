/*
** Erlang's external term format (term_to_binary's): its tags, a bounded walk over a term, and
** writers (etf.c). Both readers of terms from outside use the walk before they trust a length: the
** Lua layer's decoder (src/lua/lterm.c) and the node's packet parser (src/io/dist.c, before it
** hands bytes to erl_interface's decoders, which trust every length they read). Both writers of
** terms use the writers: the Lua encoder (lterm.c) and the translation of exit reasons
** (src/lua/codec.c). No Lua, no libuv, no allocation but the buffer owner's: any thread.
*/
#ifndef SMARM_UTIL_ETF_H
#define SMARM_UTIL_ETF_H

#include <stddef.h>
#include <stdint.h>

/* erts' external.h names them *_EXT */
enum etf_tag {
  ETF_VERSION = 131,
  ETF_NEW_FLOAT = 70, ETF_BIT_BINARY = 77, ETF_COMPRESSED = 80, ETF_ATOM_CACHE_REF = 82,
  ETF_NEW_PID = 88, ETF_NEW_PORT = 89, ETF_NEWER_REFERENCE = 90, ETF_SMALL_INTEGER = 97,
  ETF_INTEGER = 98, ETF_FLOAT = 99, ETF_ATOM = 100, ETF_REFERENCE = 101, ETF_PORT = 102,
  ETF_PID = 103, ETF_SMALL_TUPLE = 104, ETF_LARGE_TUPLE = 105, ETF_NIL = 106, ETF_STRING = 107,
  ETF_LIST = 108, ETF_BINARY = 109, ETF_SMALL_BIG = 110, ETF_LARGE_BIG = 111, ETF_NEW_FUN = 112,
  ETF_EXPORT = 113, ETF_NEW_REFERENCE = 114, ETF_SMALL_ATOM = 115, ETF_MAP = 116,
  ETF_ATOM_UTF8 = 118, ETF_SMALL_ATOM_UTF8 = 119, ETF_V4_PORT = 120
};

#define ETF_MAX_DEPTH 200 /* nesting, as the Lua layer's encoder and decoder allow */
#define ETF_TUPLE_ARITY_MAX 16777215 /* erts' MAX_ARITY (erl_vm.h): the most elements of a tuple */

/* Why a walk stopped: sm_etf_fault_text names it for people. */
enum etf_fault {
  ETF_FAULT_NONE, ETF_FAULT_TRUNCATED, ETF_FAULT_UNKNOWN_TAG, ETF_FAULT_TOO_DEEP,
  ETF_FAULT_COMPRESSED, ETF_FAULT_CACHE_REF, ETF_FAULT_NOT_ATOM, ETF_FAULT_BAD_BITS,
  ETF_FAULT_BAD_ARITY, ETF_FAULT_TUPLE_TOO_BIG
};

typedef struct etf_error {
  enum etf_fault fault;
  size_t at; /* the offset of the tag or length at fault */
} etf_error_t;

/* "truncated term", "unknown tag", ... */
const char *sm_etf_fault_text(enum etf_fault fault);

/* The offset just past the term at b[at] within b[0..n), at `depth` levels of nesting already;
** 0 on a malformed term (a length past n, an unknown tag, deeper than ETF_MAX_DEPTH, what erts
** refuses in a fun's names or a bitstring's bit count, a tuple of more than ETF_TUPLE_ARITY_MAX
** elements), with *err saying why and where. */
size_t sm_etf_skip(const unsigned char *b, size_t n, size_t at, int depth, etf_error_t *err);

/* The atom at b[at] (any of its four encodings): its name in *s, *len (Latin-1 or UTF-8, as
** *latin1 says); returns the offset past it, or 0 with *err. */
size_t sm_etf_atom(const unsigned char *b, size_t n, size_t at, const char **s, size_t *len,
                   int *latin1, etf_error_t *err);

/* A growing buffer that terms are written into: its owner says how it grows (grow makes room for
** `need` more bytes, or returns -1: the buffer is then `failed` and takes nothing more). */
typedef struct etf_buf {
  unsigned char *b;
  size_t len, cap;
  int failed;
  int (*grow)(struct etf_buf *buf, size_t need);
  void *ctx; /* the owner's */
} etf_buf_t;

void sm_etf_put(etf_buf_t *buf, const void *p, size_t n);
void sm_etf_put_u8(etf_buf_t *buf, unsigned v);
void sm_etf_put_u32(etf_buf_t *buf, uint32_t v); /* big-endian */
void sm_etf_put_atom(etf_buf_t *buf, const char *name, size_t len); /* UTF-8 */
/* A whole number within 2^53 as an integer (small, 32-bit or small big), anything else as a
** float; the caller refuses NaN and infinities. */
void sm_etf_put_number(etf_buf_t *buf, double n);
/* This node's pid (ID and serial in 64 bits) or ref, with the node's name and creation. */
void sm_etf_put_local_pid(etf_buf_t *buf, const char *node, size_t len, uint64_t id_serial,
                          uint32_t creation);
void sm_etf_put_local_ref(etf_buf_t *buf, const char *node, size_t len, uint64_t ref,
                          uint32_t creation);

/* A map's pair written into a buffer: its bytes [at, end), its key's [at, key_end); `p` is
** sm_etf_sort_pairs' own. */
typedef struct etf_pair {
  size_t at, key_end, end;
  const unsigned char *p;
} etf_pair_t;

/* Orders `pair` (not the bytes) by its keys' bytes in buf, a key that begins another first, and
** says whether two keys are the same bytes (1) or not (0): Erlang refuses a map with a key twice.
*/
int sm_etf_order_pairs(const etf_buf_t *buf, etf_pair_t *pair, size_t n);
/* Puts the n pairs written one after another into buf (from pair[0].at to pair[n - 1].end) in
** that order, and `pair` too (its offsets are then the pairs' old places). Every map inside a
** map's key is written so, by smarm.term.encode (lterm.c) and by the reasons that go to Erlang
** (codec.c): two keys that are maps with the same pairs set in different orders are then the
** same bytes, as they are one term to Erlang. Returns 0, or -1 when memory is out (buf
** unchanged). */
int sm_etf_sort_pairs(etf_buf_t *buf, etf_pair_t *pair, size_t n);

static inline uint32_t sm_etf_be32(const unsigned char *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

#endif
