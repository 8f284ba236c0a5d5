/*
** The walk over Erlang's external term format (src/util/etf.c): what the node's packet parser
** relies on before erl_interface reads a byte (src/io/dist.c). Under ASan a read past the bytes
** given is caught; the walk must say where every term ends, or fail, for any bytes at all.
*/
#include "test.h"

#include "util/etf.h"

#include <stdlib.h>
#include <string.h>

/* term_to_binary({ok, [1, <<"ab">>], #{a => 1.5}, self()}) without its version byte, from OTP 25 */
static const unsigned char sample[] = {
  104, 4, 100, 0, 2, 'o', 'k', 108, 0, 0, 0, 2, 97, 1, 109, 0, 0, 0, 2, 'a', 'b', 106,
  116, 0, 0, 0, 1, 100, 0, 1, 'a', 70, 63, 248, 0, 0, 0, 0, 0, 0,
  88, 100, 0, 13, 'n', 'o', 'n', 'o', 'd', 'e', '@', 'n', 'o', 'h', 'o', 's', 't',
  0, 0, 0, 85, 0, 0, 0, 0, 0, 0, 0, 0};

TEST(a_whole_term_ends_at_its_last_byte)
{
  etf_error_t err = {0, 0};
  CHECK_EQ(sm_etf_skip(sample, sizeof sample, 0, 0, &err), sizeof sample);
  /* every shorter prefix is truncated, and says so */
  for (size_t n = 0; n < sizeof sample; n++) {
    CHECK_EQ(sm_etf_skip(sample, n, 0, 0, &err), 0);
    CHECK_EQ(err.fault, ETF_FAULT_TRUNCATED);
    CHECK(err.at <= n); /* the tag at fault, or where the next one was due */
  }
}

TEST(lengths_that_claim_more_than_there_is_fail)
{
  /* a binary of 16 MiB in 7 bytes; a list of 2^32 - 1 elements; a fun of size 2 */
  static const unsigned char bin[] = {109, 1, 0, 0, 0, 'x', 'y'};
  static const unsigned char list[] = {108, 255, 255, 255, 255, 106};
  static const unsigned char fun[] = {112, 0, 0, 0, 2, 0};
  etf_error_t err;
  CHECK_EQ(sm_etf_skip(bin, sizeof bin, 0, 0, &err), 0);
  CHECK_EQ(sm_etf_skip(list, sizeof list, 0, 0, &err), 0);
  CHECK_EQ(sm_etf_skip(fun, sizeof fun, 0, 0, &err), 0);
  /* a fun whose size covers only itself: ei_decode_fun would read its fields past the end */
  static const unsigned char bare_fun[] = {112, 0, 0, 0, 4};
  CHECK_EQ(sm_etf_skip(bare_fun, sizeof bare_fun, 0, 0, &err), 0);
  static unsigned char deep[2 * ETF_MAX_DEPTH + 1];
  for (int i = 0; i < ETF_MAX_DEPTH; i++) {
    deep[2 * i] = ETF_SMALL_TUPLE;
    deep[2 * i + 1] = 1;
  }
  deep[2 * ETF_MAX_DEPTH] = ETF_NIL;
  CHECK_EQ(sm_etf_skip(deep, sizeof deep, 0, 0, &err), 0);
  CHECK_EQ(err.fault, ETF_FAULT_TOO_DEEP);
  static const unsigned char cache_ref[] = {82, 0};
  CHECK_EQ(sm_etf_skip(cache_ref, sizeof cache_ref, 0, 0, &err), 0);
  CHECK_EQ(err.fault, ETF_FAULT_CACHE_REF);
}

/* What erts' binary_to_term refuses, though every length holds: a fun M:F/A whose M or F is not
** an atom (its __tostring read them as atoms), a bitstring whose last byte has no bits or more
** than 8 (it printed as #Bits<200>, and went back to Erlang that way). */
TEST(what_erts_refuses_fails)
{
  static const unsigned char export_int[] = {113, 97, 1, 119, 1, 'f', 97, 2};
  static const unsigned char export_list[] = {113, 119, 1, 'm', 106, 97, 2};
  static const unsigned char export_ok[] = {113, 119, 1, 'm', 119, 1, 'f', 97, 2};
  static const unsigned char export_list_arity[] = {113, 119, 1, 'm', 119, 1, 'f', 106};
  static const unsigned char export_minus_1[] = {113, 119, 1, 'm', 119, 1, 'f', 98, 255, 255,
                                                 255, 255};
  static const unsigned char export_int_ok[] = {113, 119, 1, 'm', 119, 1, 'f', 98, 0, 0, 0, 3};
  static const unsigned char bits_200[] = {77, 0, 0, 0, 1, 200, 0};
  static const unsigned char bits_0[] = {77, 0, 0, 0, 1, 0, 0};
  static const unsigned char bits_empty[] = {77, 0, 0, 0, 0, 1};
  static const unsigned char bits_ok[] = {77, 0, 0, 0, 1, 8, 0};
  etf_error_t err;
  CHECK_EQ(sm_etf_skip(export_int, sizeof export_int, 0, 0, &err), 0);
  CHECK_EQ(err.fault, ETF_FAULT_NOT_ATOM);
  CHECK_EQ(err.at, 1);
  CHECK_EQ(sm_etf_skip(export_list, sizeof export_list, 0, 0, &err), 0);
  CHECK_EQ(err.fault, ETF_FAULT_NOT_ATOM);
  CHECK_EQ(err.at, 4);
  CHECK_EQ(sm_etf_skip(export_ok, sizeof export_ok, 0, 0, &err), sizeof export_ok);
  CHECK_EQ(sm_etf_skip(export_list_arity, sizeof export_list_arity, 0, 0, &err), 0);
  CHECK_EQ(err.fault, ETF_FAULT_BAD_ARITY);
  CHECK_EQ(err.at, 7);
  CHECK_EQ(sm_etf_skip(export_minus_1, sizeof export_minus_1, 0, 0, &err), 0);
  CHECK_EQ(err.fault, ETF_FAULT_BAD_ARITY);
  CHECK_EQ(sm_etf_skip(export_int_ok, sizeof export_int_ok, 0, 0, &err), sizeof export_int_ok);
  CHECK_EQ(sm_etf_skip(bits_200, sizeof bits_200, 0, 0, &err), 0);
  CHECK_EQ(err.fault, ETF_FAULT_BAD_BITS);
  CHECK_EQ(sm_etf_skip(bits_0, sizeof bits_0, 0, 0, &err), 0);
  CHECK_EQ(err.fault, ETF_FAULT_BAD_BITS);
  CHECK_EQ(sm_etf_skip(bits_empty, sizeof bits_empty, 0, 0, &err), 0);
  CHECK_EQ(err.fault, ETF_FAULT_BAD_BITS);
  CHECK_EQ(sm_etf_skip(bits_ok, sizeof bits_ok, 0, 0, &err), sizeof bits_ok);
}

/* A tuple holds at most 16777215 elements (erts' MAX_ARITY): smarm.term.encode refuses more, and
** the walk refused none, so a packet could carry a term that a receiver's decode then took and
** could not send back. It fails at the tuple's tag, before its elements. */
TEST(a_tuple_past_erlangs_limit_fails)
{
  size_t count = 16777216, n = 5 + count;
  unsigned char *b = malloc(n);
  CHECK(b != NULL);
  memset(b, ETF_NIL, n);
  memcpy(b, (const unsigned char[]){ETF_LARGE_TUPLE, 1, 0, 0, 0}, 5);
  etf_error_t err = {0, 0};
  CHECK_EQ(sm_etf_skip(b, n, 0, 0, &err), 0);
  CHECK(strcmp(sm_etf_fault_text(err.fault), "a tuple of more than 16777215 elements") == 0);
  CHECK_EQ(err.at, 0);
  memcpy(b, (const unsigned char[]){ETF_LARGE_TUPLE, 0, 255, 255, 255}, 5); /* one fewer: whole */
  CHECK_EQ(sm_etf_skip(b, n - 1, 0, 0, &err), n - 1);
  free(b);
}

/* Random bytes after each tag, in a buffer of exactly their size (ASan sees one byte past it):
** the walk ends within the bytes or fails. */
TEST(random_bytes_never_lead_it_past_the_end)
{
  static const unsigned char tags[] = {70, 77, 88, 89, 90, 97, 98, 99, 100, 101, 102, 103, 104,
                                       105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115,
                                       116, 118, 119, 120};
  srand(1234);
  for (int round = 0; round < 200000; round++) {
    size_t n = 1 + (size_t)(rand() % 48);
    unsigned char *b = malloc(n);
    CHECK(b != NULL);
    b[0] = tags[rand() % (int)sizeof tags];
    for (size_t i = 1; i < n; i++) /* small lengths often, so that some terms are whole */
      b[i] = (unsigned char)(rand() % 4 == 0 ? rand() : rand() % 4);
    etf_error_t err;
    size_t end = sm_etf_skip(b, n, 0, 0, &err);
    CHECK(end <= n);
    if (end == 0)
      CHECK(err.fault != ETF_FAULT_NONE && err.at <= n);
    free(b);
  }
}

TEST_MAIN()
