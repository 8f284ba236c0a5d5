/*
** Erlang terms in Lua (see lterm.h), and Erlang's external term format (ETF) both ways.
**
** The mapping, chosen so that both round trips give back what went in (docs/api.md):
**   Lua nil            <-> the atom nil, where Lua can hold a nil (the whole value, a tuple's
**                          element); a list's element or a map's key or value nil is the atom
**                          value smarm.atom("nil"), which encodes as nil again
**   true, false        <-> the atoms true and false
**   number             --> an integer when integral and within 2^53, else a float;
**                      <-- integers within 2^53 and floats (so 2.0 comes back as 2: Lua has one
**                          number type); other integers stay opaque terms
**   string             <-> binary
**   smarm.binary(s)    --> binary (it arrives as a string)
**   smarm.atom(s)      <-> other atoms (Latin-1 ones arrive as UTF-8)
**   smarm.tuple(t)     <-> tuple: t[1..n], n = t.n when it is a number, else #t; a decoded tuple
**                          with a nil element has n set
**   table              --> a list when its keys are exactly 1..#t, [] when empty, else a map;
**                      <-- lists (strings, which are lists of bytes, too)
**   smarm.map(t)       <-> map (a map is marked, so #{} and #{1 => a} stay maps)
**   opaque terms       <-> pids, refs and ports (of Erlang nodes), funs, big integers, bit
**                          strings, improper lists, and maps with two keys that are one Lua key
**                          (1 and 1.0, 0.0 and -0.0): the same bytes go back
** Cycles, functions, coroutines, other userdata, NaN and infinities have no term and raise,
** naming the path; so do this runtime's own pids and refs, until it is a node.
**
** Decoding trusts nothing: every length is checked against the bytes left, nesting is bounded
** (ETF_MAX_DEPTH, and the C stack left: each container checks it before its elements, as the
** checked gsub does, see lreentry.h), and a size hint never asks for more slots than the bytes
** could fill.
**
** Decoding is linear in the bytes, whatever their shape. An improper list or a map whose keys
** collide in Lua shows what it is only at its end or at a later key, and then it and its elements
** are one opaque term: decoding its elements first, then walking and copying it whole, cost each
** level of such terms nested in one another a pass over all of them (200 levels: 200 passes). So
** the first pass hopes that there are none and gives up at the first one; a scan then lists every
** such list and map that no other holds (each byte walked once), and a last pass decodes, taking
** each listed one as it stands. A term without any pays nothing more.
*/
#include "lterm.h"

#include "io/dist.h"
#include "lbinary.h"
#include "ljx.h"
#include "lpath.h"
#include "lpid.h"
#include "lreentry.h"
#include "lvm.h"
#include "smarm.h"
#include "util/etf.h"

#include <lauxlib.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EXACT (UINT64_C(1) << 53) /* every integer up to 2^53 is a double */
#define ATOM_MAX_CHARS 255           /* Erlang's limit */

/* Registry keys: the metatables of atoms, opaque terms, tuples and maps, and the intern tables
** (weak values) of atoms (by name) and opaque terms (by bytes). */
static const char atom_mt_key, opaque_mt_key, tuple_mt_key, map_mt_key, atoms_key, opaques_key;

#define ATOM_MAGIC UINT64_C(0x736d61726d61746d)   /* "smarmatm" */
#define OPAQUE_MAGIC UINT64_C(0x736d61726d74726d) /* "smarmtrm" */

typedef struct blob {
  uint64_t magic; /* ATOM_MAGIC or OPAQUE_MAGIC */
  size_t len;
  unsigned char bytes[]; /* an atom's name, or an opaque term's external format */
} blob_t;

static blob_t *test_blob(lua_State *L, int idx)
{
  if (lua_type(L, idx) != LUA_TUSERDATA || lua_objlen(L, idx) < sizeof(blob_t))
    return NULL;
  blob_t *b = lua_touserdata(L, idx);
  return (b->magic == ATOM_MAGIC || b->magic == OPAQUE_MAGIC) &&
                 lua_objlen(L, idx) == sizeof(blob_t) + b->len
             ? b
             : NULL;
}

enum lterm_kind sm_lterm_to_blob(lua_State *L, int idx, const char **s, size_t *n)
{
  blob_t *b = test_blob(L, idx);
  if (!b)
    return LTERM_NONE;
  *s = (const char *)b->bytes;
  *n = b->len;
  return b->magic == ATOM_MAGIC ? LTERM_ATOM : LTERM_OPAQUE;
}

static const unsigned char *skip_term(lua_State *L, const unsigned char *start,
                                      const unsigned char *p, const unsigned char *end,
                                      int depth);

/* sm_lterm_push_blob, for bytes already walked. */
static void intern_blob(lua_State *L, enum lterm_kind kind, const char *s, size_t n)
{
  lvm_push_registry_table(L, kind == LTERM_ATOM ? &atoms_key : &opaques_key, "v");
  lua_pushlstring(L, s, n);
  lua_pushvalue(L, -1);
  lua_rawget(L, -3);
  if (!lua_isnil(L, -1)) { /* [intern, key, value] */
    lua_replace(L, -3);
    lua_pop(L, 1);
    return;
  }
  lua_pop(L, 1);
  blob_t *b = lua_newuserdata(L, sizeof *b + n);
  b->magic = kind == LTERM_ATOM ? ATOM_MAGIC : OPAQUE_MAGIC;
  b->len = n;
  memcpy(b->bytes, s, n);
  lvm_push_registry(L, kind == LTERM_ATOM ? &atom_mt_key : &opaque_mt_key);
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -2); /* [intern, key, value, key, value] */
  lua_pushvalue(L, -2);
  lua_rawset(L, -5);
  lua_replace(L, -3);
  lua_pop(L, 1);
}

void sm_lterm_push_blob(lua_State *L, enum lterm_kind kind, const char *s, size_t n)
{
  if (kind == LTERM_OPAQUE) { /* one whole term, of a kind that stays opaque */
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0 || skip_term(L, p, p, p + n, 0) != p + n)
      luaL_error(L, "smarm: malformed opaque term");
  }
  intern_blob(L, kind, s, n);
}

enum lterm_kind sm_lterm_table_kind(lua_State *L, int idx)
{
  if (!lua_getmetatable(L, idx))
    return LTERM_NONE;
  enum lterm_kind kind = LTERM_NONE;
  lvm_push_registry(L, &tuple_mt_key);
  if (lua_rawequal(L, -1, -2))
    kind = LTERM_TUPLE;
  lua_pop(L, 1);
  if (kind == LTERM_NONE) {
    lvm_push_registry(L, &map_mt_key);
    if (lua_rawequal(L, -1, -2))
      kind = LTERM_MAP;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return kind;
}

void sm_lterm_mark_table(lua_State *L, int idx, enum lterm_kind kind)
{
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  lvm_push_registry(L, kind == LTERM_TUPLE ? &tuple_mt_key : &map_mt_key);
  lua_setmetatable(L, idx);
}

/* Pushes the atom of that UTF-8 name: true and false as booleans, nil as Lua nil when nil_ok. */
static void push_atom(lua_State *L, const char *s, size_t n, int nil_ok)
{
  if (n == 4 && memcmp(s, "true", 4) == 0)
    lua_pushboolean(L, 1);
  else if (n == 5 && memcmp(s, "false", 5) == 0)
    lua_pushboolean(L, 0);
  else if (n == 3 && memcmp(s, "nil", 3) == 0 && nil_ok)
    lua_pushnil(L);
  else
    sm_lterm_push_blob(L, LTERM_ATOM, s, n);
}

/* How many characters the UTF-8 text has, or -1 if it is not well-formed UTF-8. */
static long utf8_chars(const unsigned char *s, size_t n)
{
  long chars = 0;
  for (size_t i = 0; i < n; chars++) {
    unsigned char c = s[i];
    size_t more = c < 0x80 ? 0 : c >= 0xc2 && c < 0xe0 ? 1 : c >= 0xe0 && c < 0xf0 ? 2
                                                           : c >= 0xf0 && c < 0xf5  ? 3
                                                                                    : 9;
    if (more == 9 || n - i <= more)
      return more == 0 ? chars + 1 : -1;
    for (size_t k = 1; k <= more; k++)
      if ((s[i + k] & 0xc0) != 0x80)
        return -1;
    /* as Erlang refuses (binary_to_term is badarg): overlong forms (E0 80..9F, F0 80..8F),
    ** surrogates (ED A0..BF) and code points past U+10FFFF (F4 90..BF) */
    unsigned char d = more >= 2 ? s[i + 1] : 0x80; /* (a second byte exists: checked above) */
    if ((c == 0xe0 && d < 0xa0) || (c == 0xed && d > 0x9f) || (c == 0xf0 && d < 0x90) ||
        (c == 0xf4 && d > 0x8f))
      return -1;
    i += more + 1;
  }
  return chars;
}

/* ---- Encoding ------------------------------------------------------------------------------ */

typedef struct tenc {
  lua_State *L;
  const char *root;  /* the whole value's name in errors */
  int buf_idx;       /* stack slot of the buffer userdata */
  int visiting_idx;  /* stack slot of the set of tables being encoded (cycles) */
  etf_buf_t out;     /* its bytes: that userdata's (grow_userdata) */
  int nkeys;         /* tables entered: keys[0..nkeys-1] are the stack slots of their keys */
  int keys[ETF_MAX_DEPTH + 1];
  int in_key;        /* > 0 while a table that is a map's key is encoded (sm_etf_sort_pairs) */
} tenc_t;

static void enc_fail(tenc_t *e, int nkeys, const char *what)
{
  lpath_t p = {"", 0};
  for (int i = 0; i < nkeys; i++)
    sm_lpath_key(&p, e->L, e->keys[i], 0);
  const char *path = e->root[0] == '\0' && p.s[0] == '.' ? p.s + 1 : p.s;
  luaL_error(e->L, "%s%s %s", e->root, path, what);
}

/* Erlang's tuples hold at most 2^24 - 1 elements: more would only make bytes that no node
** reads, slowly (a tuple{ n = 1e8 } of nils took 12 s). NaN fails every comparison. */
int sm_lterm_tuple_arity_ok(double n)
{
  return n >= 0 && n <= ETF_TUPLE_ARITY_MAX && n == (double)(size_t)n;
}

/* The buffer grows as a new userdata in its stack slot (an error half-way leaks nothing). */
static int grow_userdata(etf_buf_t *b, size_t need)
{
  tenc_t *e = b->ctx;
  size_t cap = b->cap * 2;
  while (cap - b->len < need)
    cap *= 2;
  unsigned char *nb = lua_newuserdata(e->L, cap);
  memcpy(nb, b->b, b->len);
  lua_replace(e->L, e->buf_idx);
  b->b = nb;
  b->cap = cap;
  return 0;
}

static void enc_number(tenc_t *e, lua_Number n)
{
  if (!isfinite(n))
    enc_fail(e, e->nkeys, "is not a finite number (Erlang has no NaN or infinity)");
  sm_etf_put_number(&e->out, n);
}

static void enc_value(tenc_t *e, int idx, int depth);

/* Whether the key at idx may encode to the same term as another key of its table: a table (two
** alike), or a userdata that is no atom or opaque term (a binary, the same bytes as a string).
** Strings, numbers, booleans, atoms and opaque terms are one Lua value per term. */
static int key_may_repeat(lua_State *L, int idx)
{
  int type = lua_type(L, idx);
  const char *s;
  size_t n;
  return type == LUA_TTABLE || (type == LUA_TUSERDATA && !sm_lterm_to_blob(L, idx, &s, &n));
}

/* The element at key `key` (pushed by the caller) of the table at t, with the key on the path. */
static void enc_field(tenc_t *e, int t, int depth)
{
  lua_State *L = e->L;
  int key = lua_gettop(L);
  e->keys[e->nkeys - 1] = key;
  lua_pushvalue(L, key);
  lua_rawget(L, t);
  enc_value(e, lua_gettop(L), depth + 1);
  lua_pop(L, 2);
}

static void enc_table(tenc_t *e, int t, int depth)
{
  lua_State *L = e->L;
  if (depth >= ETF_MAX_DEPTH)
    enc_fail(e, e->nkeys, "is nested too deeply");
  /* its elements nest a level deeper on the C stack, which keeps its reserve below the outermost
  ** table, as the decoder's containers do (enter_container): a deep value encoded where little
  ** is left (inside nested callbacks) reached the guard page, which aborts the process */
  if (depth > 0 && smarm_stack_headroom() < LREENTRY_RESERVE)
    enc_fail(e, e->nkeys, "is nested too deeply for the actor's C stack");
  luaL_checkstack(L, 8, "term too deep");
  lua_pushvalue(L, t);
  lua_rawget(L, e->visiting_idx);
  if (!lua_isnil(L, -1))
    enc_fail(e, e->nkeys, "is a table that contains itself (a term cannot)");
  lua_pop(L, 1);
  lua_pushvalue(L, t);
  lua_pushboolean(L, 1);
  lua_rawset(L, e->visiting_idx);
  int level = e->nkeys++;
  e->keys[level] = t; /* replaced by each key before anything below can fail */
  enum lterm_kind kind = sm_lterm_table_kind(L, t);
  if (kind == LTERM_TUPLE) {
    lua_pushliteral(L, "n");
    lua_rawget(L, t);
    lua_Number arity = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1)
                                                      : (lua_Number)lua_objlen(L, t);
    lua_pop(L, 1);
    if (!sm_lterm_tuple_arity_ok(arity))
      enc_fail(e, e->nkeys - 1, lua_pushfstring(L, "is a tuple of %f elements (Erlang's hold "
                                                   "0 to 16777215)", arity));
    size_t n = (size_t)arity;
    if (n <= 255) {
      sm_etf_put_u8(&e->out, ETF_SMALL_TUPLE);
      sm_etf_put_u8(&e->out, (unsigned)n);
    } else {
      sm_etf_put_u8(&e->out, ETF_LARGE_TUPLE);
      sm_etf_put_u32(&e->out, (uint32_t)n);
    }
    for (size_t i = 1; i <= n; i++) {
      lua_pushnumber(L, (lua_Number)i);
      enc_field(e, t, depth);
    }
  } else {
    /* count the pairs; a plain table whose keys are all whole numbers from 1 to the count is
    ** a list (count distinct keys in 1..count are exactly 1..count) */
    size_t count = 0;
    int list = kind == LTERM_NONE, alike = 0;
    lua_pushnil(L);
    while (lua_next(L, t)) {
      lua_pop(L, 1);
      count++;
      if (list) {
        lua_Number k = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : 0;
        list = k >= 1 && k == floor(k);
      }
      alike = alike || key_may_repeat(L, lua_gettop(L));
    }
    if (list) {
      lua_pushnil(L);
      while (list && lua_next(L, t)) {
        list = lua_tonumber(L, -2) <= (lua_Number)count;
        lua_pop(L, 1);
      }
      if (!list)
        lua_pop(L, 1); /* the key lua_next left */
    }
    if (list && count == 0) {
      sm_etf_put_u8(&e->out, ETF_NIL);
    } else if (list) {
      sm_etf_put_u8(&e->out, ETF_LIST);
      sm_etf_put_u32(&e->out, (uint32_t)count);
      for (size_t i = 1; i <= count; i++) {
        lua_pushnumber(L, (lua_Number)i);
        enc_field(e, t, depth);
      }
      sm_etf_put_u8(&e->out, ETF_NIL);
    } else {
      if (count > UINT32_MAX)
        enc_fail(e, level, "has too many keys for a map");
      sm_etf_put_u8(&e->out, ETF_MAP);
      sm_etf_put_u32(&e->out, (uint32_t)count);
      /* Distinct Lua keys may be one term (two tables alike, a string and a binary of its
      ** bytes): Erlang refuses a map with a key twice. Only a map with such a key pays for the
      ** check, a set of the keys' bytes. */
      int seen = 0, spans = 0;
      etf_pair_t *span = NULL;
      size_t i = 0;
      if (e->in_key && count > 1) {
        span = lua_newuserdata(L, count * sizeof *span);
        spans = lua_gettop(L);
      }
      if (alike) {
        lua_newtable(L);
        seen = lua_gettop(L);
      }
      lua_pushnil(L);
      while (lua_next(L, t)) {
        int key = lua_gettop(L) - 1;
        e->keys[level] = key;
        size_t at = e->out.len;
        int table_key = lua_type(L, key) == LUA_TTABLE;
        e->in_key += table_key;
        enc_value(e, key, depth + 1);
        e->in_key -= table_key;
        if (span && i < count) /* inside a key, its maps' pairs go in one order (etf.h) */
          span[i] = (etf_pair_t){at, e->out.len, 0, NULL};
        if (seen) {
          lua_pushlstring(L, (const char *)e->out.b + at, e->out.len - at);
          lua_pushvalue(L, -1);
          lua_rawget(L, seen);
          if (!lua_isnil(L, -1))
            enc_fail(e, level + 1, "is a key that another key of its table encodes to as well "
                                   "(an Erlang map has each key once)");
          lua_pop(L, 1);
          lua_pushboolean(L, 1);
          lua_rawset(L, seen);
        }
        enc_value(e, key + 1, depth + 1);
        if (span && i < count)
          span[i].end = e->out.len;
        i++;
        lua_pop(L, 1);
      }
      if (span && i == count && sm_etf_sort_pairs(&e->out, span, count) < 0)
        luaL_error(L, "not enough memory");
      if (seen)
        lua_remove(L, seen);
      if (spans)
        lua_remove(L, spans);
    }
  }
  e->nkeys = level;
  lua_pushvalue(L, t);
  lua_pushnil(L);
  lua_rawset(L, e->visiting_idx);
}

static void enc_value(tenc_t *e, int idx, int depth)
{
  lua_State *L = e->L;
  switch (lua_type(L, idx)) {
  case LUA_TNIL:
    sm_etf_put_atom(&e->out, "nil", 3);
    return;
  case LUA_TBOOLEAN:
    if (lua_toboolean(L, idx))
      sm_etf_put_atom(&e->out, "true", 4);
    else
      sm_etf_put_atom(&e->out, "false", 5);
    return;
  case LUA_TNUMBER:
    enc_number(e, lua_tonumber(L, idx));
    return;
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    if (n > UINT32_MAX)
      enc_fail(e, e->nkeys, "is a string too long for a binary");
    sm_etf_put_u8(&e->out, ETF_BINARY);
    sm_etf_put_u32(&e->out, (uint32_t)n);
    sm_etf_put(&e->out, s, n);
    return;
  }
  case LUA_TTABLE:
    enc_table(e, idx, depth);
    return;
  case LUA_TUSERDATA: {
    const char *s;
    size_t n;
    enum lterm_kind kind = sm_lterm_to_blob(L, idx, &s, &n);
    if (kind == LTERM_ATOM) {
      sm_etf_put_atom(&e->out, s, n);
      return;
    }
    if (kind == LTERM_OPAQUE) {
      sm_etf_put(&e->out, s, n);
      return;
    }
    sm_binary_t *bin = sm_lbinary_test(L, idx);
    if (bin) { /* a binary as the string it reads as */
      if (bin->len > UINT32_MAX)
        enc_fail(e, e->nkeys, "is a binary too long for Erlang");
      sm_etf_put_u8(&e->out, ETF_BINARY);
      sm_etf_put_u32(&e->out, (uint32_t)bin->len);
      sm_etf_put(&e->out, bin->bytes, bin->len);
      return;
    }
    smarm_pid_t pid;
    smarm_ref_t ref;
    int is_pid = sm_lsmarm_to_pid(L, idx, &pid);
    if (is_pid || sm_lsmarm_to_ref(L, idx, &ref)) {
      const char *node;
      size_t nn;
      uint32_t creation;
      if (!sm_dist_identity(&node, &nn, &creation))
        enc_fail(e, e->nkeys, "is a pid or ref of this runtime, which is not an Erlang node");
      uint64_t v = is_pid ? pid : ref;
      if (is_pid) /* dist.h: the smarm pid is the Erlang pid's ID and serial */
        sm_etf_put_local_pid(&e->out, node, nn, v, creation);
      else
        sm_etf_put_local_ref(&e->out, node, nn, v, creation);
      return;
    }
    break;
  }
  default:
    break;
  }
  char what[64];
  snprintf(what, sizeof what, "is a %s (it has no Erlang term)", luaL_typename(L, idx));
  enc_fail(e, e->nkeys, what);
}

/* Pushes the external format of the value at idx (with the version byte) as a string. */
static void encode_value(lua_State *L, int idx, const char *root)
{
  tenc_t *e = lua_newuserdata(L, sizeof *e); /* the state, off the C stack: it is large */
  int state = lua_gettop(L);
  e->L = L;
  e->root = root;
  e->nkeys = 0;
  e->in_key = 0;
  e->out = (etf_buf_t){NULL, 0, 256, 0, grow_userdata, e};
  e->out.b = lua_newuserdata(L, e->out.cap);
  e->buf_idx = lua_gettop(L);
  lua_newtable(L);
  e->visiting_idx = lua_gettop(L);
  sm_etf_put_u8(&e->out, ETF_VERSION);
  enc_value(e, idx, 0);
  lua_pushlstring(L, (const char *)e->out.b, e->out.len);
  lua_replace(L, state);
  lua_settop(L, state);
}

/* (value, root): encode_value under sm_ljx_call_held */
static int encode_held(lua_State *L)
{
  encode_value(L, 1, lua_touserdata(L, 2));
  return 1;
}

/* encode_value with the collector held over a table: a map is walked with lua_next while its
** keys and values are encoded, which allocates (the buffer, the set of tables being visited), and
** an allocation's GC step may run a finalizer that changes the map. One that took the key the
** walk stood on and grew the map made the next lua_next raise "invalid key to 'next'"; one that
** added or took keys made the map's pairs other than the count written before them (a term that
** decodes as something else, or not at all). Nothing here runs Lua code. A big value's garbage
** (the buffer outgrown, the visiting set) waits for the collector until the encoding is done. */
static void push_encoded(lua_State *L, int idx, const char *root)
{
  if (lua_type(L, idx) != LUA_TTABLE) {
    encode_value(L, idx, root);
    return;
  }
  lua_pushvalue(L, idx);
  lua_pushlightuserdata(L, (void *)root);
  sm_ljx_call_held(L, encode_held, 2, 1);
}

/* ---- Decoding ------------------------------------------------------------------------------ */

/* Raises "smarm.term.decode: <why> at byte <offset + 1>". */
static void bad(lua_State *L, const unsigned char *start, const unsigned char *p, const char *why)
{
  luaL_error(L, "smarm.term.decode: %s at byte %d", why, (int)(p - start) + 1);
}


/* The atom at p: its name in *s, *n (Latin-1 or UTF-8 as *latin1 says); returns the end.
** Raises on a malformed one. */
static const unsigned char *read_atom(lua_State *L, const unsigned char *start,
                                      const unsigned char *p, const unsigned char *end,
                                      const char **s, size_t *n, int *latin1)
{
  etf_error_t err;
  size_t at = sm_etf_atom(start, (size_t)(end - start), (size_t)(p - start), s, n, latin1, &err);
  if (!at)
    bad(L, start, start + err.at, sm_etf_fault_text(err.fault));
  return start + at;
}

/* The end of the term at p, without decoding it; raises if it runs past end or is malformed. */
static const unsigned char *skip_term(lua_State *L, const unsigned char *start,
                                      const unsigned char *p, const unsigned char *end,
                                      int depth)
{
  etf_error_t err;
  size_t at = sm_etf_skip(start, (size_t)(end - start), (size_t)(p - start), depth, &err);
  if (!at)
    bad(L, start, start + err.at, sm_etf_fault_text(err.fault));
  return start + at;
}

/* A list or a map that decodes as an opaque term: its bytes [at, end). */
typedef struct span {
  const unsigned char *at, *end;
} span_t;

typedef struct tdec {
  lua_State *L;
  const unsigned char *start, *p, *end;
  lua_Number number; /* the last number that dec_leaf met */
  int known;         /* the last pass: the scan listed the opaque lists and maps in spans */
  int spans_idx;     /* the stack slot of the userdata that holds spans (0: none yet) */
  span_t *spans;     /* in the order of their bytes, none inside another */
  size_t nspans, cap, next; /* next: the first that the last pass has not reached */
} tdec_t;

static const unsigned char *need(tdec_t *d, size_t n)
{
  if ((size_t)(d->end - d->p) < n)
    bad(d->L, d->start, d->p, "truncated term");
  const unsigned char *at = d->p;
  d->p += n;
  return at;
}

/* Pushes the opaque term that starts at `at` and ends at d->p (walked: it is whole). */
static void push_opaque_here(tdec_t *d, const unsigned char *at)
{
  intern_blob(d->L, LTERM_OPAQUE, (const char *)at, (size_t)(d->p - at));
}

/* What kind of Lua number a term is (0: none). Two terms that decode as the same number are
** one Erlang term only if they are of one kind: 1 and 1.0 are two map keys, and so are 0.0
** and -0.0 (since OTP 27), but not 1 as a small integer and 1 as a big one. */
enum { NOT_NUMBER, INTEGER_NUMBER, FLOAT_NUMBER, NEGATIVE_FLOAT_NUMBER };

static int float_kind(lua_Number v)
{
  return signbit(v) ? NEGATIVE_FLOAT_NUMBER : FLOAT_NUMBER;
}

/* The big integer at `at` (tag, size, sign, digits): INTEGER_NUMBER with its value in
** d->number if it is within 2^53, else NOT_NUMBER, pushed as an opaque term when `push`. */
static int dec_big(tdec_t *d, const unsigned char *at, size_t size, int push)
{
  unsigned sign = *need(d, 1);
  const unsigned char *digits = need(d, size);
  if (sign > 1)
    bad(d->L, d->start, at, "bad sign of a big integer");
  size_t used = size;
  while (used && digits[used - 1] == 0)
    used--;
  if (used <= 7) {
    uint64_t m = 0;
    for (size_t i = used; i-- > 0;)
      m = m << 8 | digits[i];
    if (m <= MAX_EXACT) { /* compared as integers: (double)(2^53 + 1) would be 2^53 */
      d->number = sign ? -(lua_Number)m : (lua_Number)m;
      return INTEGER_NUMBER;
    }
  }
  if (push)
    push_opaque_here(d, at);
  return NOT_NUMBER;
}

/* If the pid or ref at `at` (whole, ending at d->p) is one of this node's, pushes the smarm pid
** or ref it stands for and returns 1 (dist.h says how they map). */
static int push_own(tdec_t *d, const unsigned char *at)
{
  const char *node, *s;
  size_t nn, n;
  uint32_t creation;
  int latin1;
  if ((at[0] != ETF_NEW_PID && at[0] != ETF_NEWER_REFERENCE) ||
      !sm_dist_identity(&node, &nn, &creation))
    return 0;
  if (at[0] == ETF_NEWER_REFERENCE && (at[1] != 0 || at[2] != 3))
    return 0;
  const unsigned char *q = read_atom(d->L, d->start, at + (at[0] == ETF_NEW_PID ? 1 : 3), d->end,
                                     &s, &n, &latin1);
  if (n != nn || memcmp(s, node, n) != 0)
    return 0;
  if (at[0] == ETF_NEW_PID) { /* ID, serial, creation */
    if (sm_etf_be32(q + 8) != creation)
      return 0;
    smarm_pid_t pid = (uint64_t)sm_etf_be32(q + 4) << 32 | sm_etf_be32(q);
    /* A pid this node never gave out (its numbers are any 32 bits of the term): generation 0, or
    ** a scheduler field no runtime has (SMARM_PID_SCHED_REMOTE among them, which would name
    ** whatever other node's process holds that alias). Left opaque, it names nobody, as a pid
    ** of this node's earlier run does; as a smarm pid its key would break the intern table
    ** (lpid.c, pid_key: NaN, or a ref's key). */
    if (smarm_pid_gen(pid) == 0 || smarm_pid_sched(pid) >= SMARM_SCHED_MAX)
      return 0;
    sm_lsmarm_push_pid(d->L, pid);
  } else { /* creation, then three numbers: the low and high halves, 0 */
    if (sm_etf_be32(q) != creation || sm_etf_be32(q + 12) != 0)
      return 0;
    smarm_ref_t ref = (uint64_t)sm_etf_be32(q + 8) << 32 | sm_etf_be32(q + 4);
    /* Refs count up from 1 and stay below 2^53 (lpid.c, ref_key: exact only there): any other
    ** is none this node made, and as a smarm ref two of them would share an intern key. */
    if (ref == 0 || ref >= (UINT64_C(1) << 53))
      return 0;
    sm_lsmarm_push_ref(d->L, ref);
  }
  return 1;
}

/* The decoder's cases that need buffers of their own, out of line: every level of a nested term
** has a frame of dec_term on the C stack, and their buffers in it made that frame 1 KiB. */

/* The atom at `at` (any of its encodings), checked, and pushed as push_atom pushes it when
** `push`. */
static __attribute__((noinline)) void dec_atom(tdec_t *d, const unsigned char *at, int nil_ok,
                                               int push)
{
  const char *s;
  size_t n;
  int latin1;
  d->p = read_atom(d->L, d->start, at, d->end, &s, &n, &latin1);
  long chars = latin1 ? (long)n : utf8_chars((const unsigned char *)s, n);
  if (chars > ATOM_MAX_CHARS) /* binary_to_term refuses it; smarm.atom too */
    bad(d->L, d->start, at, "an atom of more than 255 characters");
  if (!latin1 && chars < 0) /* smarm.atom refuses such a name too */
    bad(d->L, d->start, at, "an atom that is not UTF-8");
  if (!push)
    return;
  if (latin1) { /* Latin-1 to UTF-8: what Erlang calls the same atom */
    char utf8[2 * ATOM_MAX_CHARS];
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
      unsigned char c = (unsigned char)s[i];
      if (c < 0x80) {
        utf8[o++] = (char)c;
      } else {
        utf8[o++] = (char)(0xc0 | c >> 6);
        utf8[o++] = (char)(0x80 | (c & 0x3f));
      }
    }
    push_atom(d->L, utf8, o, nil_ok);
  } else {
    push_atom(d->L, s, n, nil_ok);
  }
}

/* The float at `at` in the old format: "%.20e" in 31 bytes. */
static __attribute__((noinline)) lua_Number dec_old_float(tdec_t *d, const unsigned char *at)
{
  char text[32];
  memcpy(text, need(d, 31), 31);
  text[31] = '\0';
  char *stop;
  double v = strtod(text, &stop);
  if (stop == text || !isfinite(v))
    bad(d->L, d->start, at, "bad float");
  return v;
}

/* Before the elements of the container at `at`, `depth` levels down: they nest a level deeper on
** the C stack, which must keep its reserve (lreentry.h) for what a level calls (an opaque term's
** walk, ETF_MAX_DEPTH levels at most; an allocation's collection step) and for an error's
** unwinding. The outermost container's elements are decoded within the reserve (a level takes
** little of it): a flat term, as a DOWN's {Name, Node}, decodes wherever a call may be made. */
static void enter_container(tdec_t *d, const unsigned char *at, int depth)
{
  if (depth > 0 && smarm_stack_headroom() < LREENTRY_RESERVE)
    bad(d->L, d->start, at, "term nested too deeply for the actor's C stack");
}

/* The count of the tuple at `at` whose tag d->p has passed (Erlang's limit checked). */
static uint32_t tuple_arity(tdec_t *d, const unsigned char *at, unsigned char tag)
{
  uint32_t n = tag == ETF_SMALL_TUPLE ? *need(d, 1) : sm_etf_be32(need(d, 4));
  if (n > ETF_TUPLE_ARITY_MAX) /* smarm.term.encode refuses it, and erts' make_tuple */
    bad(d->L, d->start, at, sm_etf_fault_text(ETF_FAULT_TUPLE_TOO_BIG));
  return n;
}

/* The term at `at`, whose tag d->p has passed, of any kind but a list, a tuple or a map: checked,
** d->p moved past it, and pushed when `push`. Returns its kind of number if it decodes as a
** number (the value in d->number), else NOT_NUMBER. Both walks use it (dec_term, scan_term), so
** they check the same. */
static inline __attribute__((always_inline)) int dec_leaf(tdec_t *d, const unsigned char *at,
                                              unsigned char tag, int depth, int nil_ok, int push)
{
  lua_State *L = d->L;
  int kind = INTEGER_NUMBER;
  switch (tag) {
  case ETF_SMALL_INTEGER:
    d->number = *need(d, 1);
    break;
  case ETF_INTEGER:
    d->number = (int32_t)sm_etf_be32(need(d, 4));
    break;
  case ETF_NEW_FLOAT: {
    const unsigned char *b = need(d, 8);
    union {
      uint64_t u;
      double f;
    } v = {(uint64_t)sm_etf_be32(b) << 32 | sm_etf_be32(b + 4)};
    if (!isfinite(v.f)) /* no Erlang float is NaN or infinite (binary_to_term refuses them) */
      bad(L, d->start, at, "bad float");
    d->number = v.f;
    kind = float_kind(v.f);
    break;
  }
  case ETF_FLOAT:
    d->number = dec_old_float(d, at);
    kind = float_kind(d->number);
    break;
  case ETF_SMALL_BIG:
    kind = dec_big(d, at, *need(d, 1), push);
    break;
  case ETF_LARGE_BIG:
    kind = dec_big(d, at, sm_etf_be32(need(d, 4)), push);
    break;
  case ETF_ATOM: case ETF_SMALL_ATOM: case ETF_ATOM_UTF8: case ETF_SMALL_ATOM_UTF8:
    dec_atom(d, at, nil_ok, push);
    return NOT_NUMBER;
  case ETF_BINARY: {
    size_t n = sm_etf_be32(need(d, 4));
    const char *s = (const char *)need(d, n);
    if (push)
      lua_pushlstring(L, s, n);
    return NOT_NUMBER;
  }
  case ETF_STRING: { /* a list of bytes */
    const unsigned char *b = need(d, 2);
    size_t n = (size_t)b[0] << 8 | b[1];
    const unsigned char *s = need(d, n);
    if (push) {
      lua_createtable(L, (int)n, 0);
      for (size_t i = 0; i < n; i++) {
        lua_pushnumber(L, s[i]);
        lua_rawseti(L, -2, (int)i + 1);
      }
    }
    return NOT_NUMBER;
  }
  case ETF_NIL:
    if (push)
      lua_createtable(L, 0, 0);
    return NOT_NUMBER;
  default: /* pids, refs, ports, funs, bit strings: opaque, but this node's own pids and refs */
    d->p = skip_term(L, d->start, at, d->end, depth);
    if (push && !push_own(d, at))
      push_opaque_here(d, at);
    return NOT_NUMBER;
  }
  if (push && kind != NOT_NUMBER)
    lua_pushnumber(L, d->number);
  return kind;
}

/* Lists the list or map at `at` (ending at d->p) as opaque, in place of the ones inside it,
** which were listed from index `inside` on. */
static void add_span(tdec_t *d, const unsigned char *at, size_t inside)
{
  d->nspans = inside;
  if (d->nspans == d->cap) { /* a new userdata in the slot: an error half-way leaks nothing */
    size_t cap = d->cap ? 2 * d->cap : 16;
    span_t *spans = lua_newuserdata(d->L, cap * sizeof *spans);
    if (d->nspans)
      memcpy(spans, d->spans, d->nspans * sizeof *spans);
    lua_replace(d->L, d->spans_idx);
    d->spans = spans;
    d->cap = cap;
  }
  d->spans[d->nspans++] = (span_t){at, d->p};
}

/* The tag of the term at d->p, `depth` levels down, read (d->p past it); both walks start
** each term here. */
static unsigned char term_tag(tdec_t *d, int depth)
{
  if (depth >= ETF_MAX_DEPTH)
    bad(d->L, d->start, d->p, "term nested too deeply");
  luaL_checkstack(d->L, 6, "term too deep");
  return *need(d, 1);
}

/* The scan: walks the term at d->p as dec_term decodes it, with the same checks, building
** nothing, and lists in d->spans every list or map that decodes as an opaque term (an improper
** list; a map with two keys that are one Lua number) and that no other one holds. Returns what
** dec_leaf returns (NOT_NUMBER for a container). */
static int scan_term(tdec_t *d, int depth)
{
  lua_State *L = d->L;
  const unsigned char *at = d->p;
  unsigned char tag = term_tag(d, depth);
  switch (tag) {
  case ETF_LIST: {
    uint32_t n = sm_etf_be32(need(d, 4));
    enter_container(d, at, depth);
    size_t inside = d->nspans;
    for (uint32_t i = 0; i < n; i++)
      scan_term(d, depth + 1);
    if (d->p < d->end && *d->p == ETF_NIL) {
      d->p++;
      return NOT_NUMBER;
    }
    scan_term(d, depth + 1); /* the tail */
    add_span(d, at, inside);
    return NOT_NUMBER;
  }
  case ETF_SMALL_TUPLE: case ETF_LARGE_TUPLE: {
    uint32_t n = tuple_arity(d, at, tag);
    enter_container(d, at, depth);
    for (uint32_t i = 0; i < n; i++)
      scan_term(d, depth + 1);
    return NOT_NUMBER;
  }
  case ETF_MAP: {
    uint32_t n = sm_etf_be32(need(d, 4));
    enter_container(d, at, depth);
    size_t inside = d->nspans;
    int numbers = 0, opaque = 0; /* numbers: the slot of { [key] = its kinds of number met,
                                    ** a bit each } */
    for (uint32_t i = 0; i < n; i++) {
      const unsigned char *key = d->p;
      int kind = scan_term(d, depth + 1);
      if (kind != NOT_NUMBER) {
        if (!numbers) {
          lua_newtable(L);
          numbers = lua_gettop(L);
        }
        lua_pushnumber(L, d->number);
        lua_rawget(L, numbers);
        int was = (int)lua_tointeger(L, -1);
        lua_pop(L, 1);
        if (was & 1 << kind) /* one term twice: refused here too, inside an opaque term */
          bad(L, d->start, key, "a map with a key twice");
        opaque |= was != 0; /* two kinds of one number: two keys to Erlang, one to Lua */
        lua_pushnumber(L, d->number);
        lua_pushinteger(L, was | 1 << kind);
        lua_rawset(L, numbers);
      }
      scan_term(d, depth + 1);
    }
    if (numbers)
      lua_remove(L, numbers);
    if (opaque)
      add_span(d, at, inside);
    return NOT_NUMBER;
  }
  default:
    return dec_leaf(d, at, tag, depth, 0, 0);
  }
}

/* In the last pass: if the list or map at `at` is one that the scan listed, pushes it as an
** opaque term, moves d->p past it and returns 1. */
static int at_span(tdec_t *d, const unsigned char *at)
{
  while (d->next < d->nspans && d->spans[d->next].at < at)
    d->next++;
  if (d->next == d->nspans || d->spans[d->next].at != at)
    return 0;
  d->p = d->spans[d->next++].end;
  push_opaque_here(d, at);
  return 1;
}

/* Decodes the term at d->p and pushes it; returns 0. In the first pass, returns 1 instead at an
** improper list, or at a map with a key that another one is in Lua, with no more than its own
** value pushed (decode starts again). */
static int dec_term(tdec_t *d, int depth, int nil_ok)
{
  lua_State *L = d->L;
  const unsigned char *at = d->p;
  unsigned char tag = term_tag(d, depth);
  switch (tag) {
  case ETF_LIST: {
    if (d->known && at_span(d, at))
      return 0;
    uint32_t n = sm_etf_be32(need(d, 4));
    enter_container(d, at, depth);
    /* each element takes a byte at least: a bad count cannot ask for more slots */
    lua_createtable(L, n <= (size_t)(d->end - d->p) ? (int)n : 0, 0);
    for (uint32_t i = 0; i < n; i++) {
      if (dec_term(d, depth + 1, 0))
        return 1;
      lua_rawseti(L, -2, (int)i + 1);
    }
    if (d->p < d->end && *d->p == ETF_NIL) {
      d->p++;
      return 0;
    }
    if (d->known) /* never: the scan listed every improper list that the last pass meets */
      bad(L, d->start, at, "malformed term");
    return 1;
  }
  case ETF_SMALL_TUPLE: case ETF_LARGE_TUPLE: {
    uint32_t n = tuple_arity(d, at, tag);
    enter_container(d, at, depth);
    lua_createtable(L, n <= (size_t)(d->end - d->p) ? (int)n : 0, 1);
    sm_lterm_mark_table(L, -1, LTERM_TUPLE);
    int holes = 0;
    for (uint32_t i = 0; i < n; i++) {
      if (dec_term(d, depth + 1, 1))
        return 1;
      if (lua_isnil(L, -1)) {
        holes = 1;
        lua_pop(L, 1);
      } else {
        lua_rawseti(L, -2, (int)i + 1);
      }
    }
    if (holes) {
      lua_pushnumber(L, n);
      lua_setfield(L, -2, "n");
    }
    return 0;
  }
  case ETF_MAP: {
    if (d->known && at_span(d, at))
      return 0;
    uint32_t n = sm_etf_be32(need(d, 4));
    enter_container(d, at, depth);
    lua_createtable(L, 0, n <= (size_t)(d->end - d->p) / 2 ? (int)n : 0);
    sm_lterm_mark_table(L, -1, LTERM_MAP);
    for (uint32_t i = 0; i < n; i++) {
      const unsigned char *key = d->p;
      if (dec_term(d, depth + 1, 0))
        return 1;
      /* Only numbers are one Lua key for two terms (1 and 1.0). Any other Lua key is one term:
      ** atoms, binaries and opaque terms are interned by their bytes, every table is new. A key
      ** that Erlang has twice is no map to it (binary_to_term refuses it, no node sends one): as
      ** a number it is refused, any other keeps its last value, as checking every key would
      ** slow the decoding of maps by a third. */
      if (lua_type(L, -1) == LUA_TNUMBER) {
        lua_pushvalue(L, -1);
        lua_rawget(L, -3);
        if (!lua_isnil(L, -1)) { /* (no value is nil: the atom nil is smarm.atom("nil") here) */
          if (!d->known) /* two numbers may be two keys: the scan tells */
            return 1;
          bad(L, d->start, key, "a map with a key twice"); /* numbers of two kinds were listed */
        }
        lua_pop(L, 1);
      }
      if (dec_term(d, depth + 1, 0))
        return 1;
      lua_rawset(L, -3);
    }
    return 0;
  }
  default:
    dec_leaf(d, at, tag, depth, nil_ok, 1);
    return 0;
  }
}

/* Decodes the term at d->p (past the version byte) and pushes it: the first pass, and if it gives
** up, the scan and the last pass (see the top of this file). */
static void decode_term(tdec_t *d)
{
  lua_State *L = d->L;
  int top = lua_gettop(L);
  const unsigned char *from = d->p;
  if (!dec_term(d, 0, 1))
    return;
  lua_settop(L, top);
  lua_pushnil(L); /* the spans' slot */
  d->spans_idx = top + 1;
  d->p = from;
  scan_term(d, 0);
  d->p = from;
  d->known = 1;
  dec_term(d, 0, 1);
  lua_remove(L, d->spans_idx);
}

void sm_lterm_encode(lua_State *L, int idx, const char *root)
{
  idx = idx < 0 && idx > LUA_REGISTRYINDEX ? lua_gettop(L) + idx + 1 : idx;
  push_encoded(L, idx, root);
}

void sm_lterm_decode(lua_State *L, const void *p, size_t n, const char *what)
{
  const unsigned char *s = p;
  tdec_t d = {L, s, s, s + n, 0, 0, 0, NULL, 0, 0, 0};
  if (n == 0 || *s != ETF_VERSION)
    luaL_error(L, "%s: no version byte (131)", what);
  d.p++;
  decode_term(&d);
}

typedef struct term_bytes {
  const void *p;
  size_t n;
  const char *what;
} term_bytes_t;

static int decode_protected(lua_State *L)
{
  const term_bytes_t *b = lua_touserdata(L, 1);
  sm_lterm_decode(L, b->p, b->n, b->what);
  return 1;
}

void sm_lterm_decode_or_bad(lua_State *L, const void *p, size_t n, const char *what)
{
  term_bytes_t b = {p, n, what};
  lua_pushcfunction(L, decode_protected);
  lua_pushlightuserdata(L, &b);
  if (lua_pcall(L, 1, 1, 0) == 0)
    return;
  lua_createtable(L, 0, 2);
  lua_pushliteral(L, "bad_term");
  lua_setfield(L, -2, "smarm");
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, "reason");
  lua_remove(L, -2);
}

int sm_lterm_pid_node(lua_State *L, int idx, const char **node, size_t *n)
{
  blob_t *b = test_blob(L, idx);
  int latin1;
  if (!b || b->magic != OPAQUE_MAGIC || (b->bytes[0] != ETF_NEW_PID && b->bytes[0] != ETF_PID))
    return 0;
  read_atom(L, b->bytes, b->bytes + 1, b->bytes + b->len, node, n, &latin1);
  return 1;
}

/* ---- Opaque terms for people ------------------------------------------------------------- */

static const char *opaque_type(const blob_t *b)
{
  switch (b->bytes[0]) {
  case ETF_PID: case ETF_NEW_PID: return "pid";
  case ETF_REFERENCE: case ETF_NEW_REFERENCE: case ETF_NEWER_REFERENCE: return "ref";
  case ETF_PORT: case ETF_NEW_PORT: case ETF_V4_PORT: return "port";
  case ETF_NEW_FUN: case ETF_EXPORT: return "fun";
  case ETF_SMALL_BIG: case ETF_LARGE_BIG: return "integer";
  case ETF_BIT_BINARY: return "bitstring";
  case ETF_MAP: return "map"; /* with two keys that are one Lua key */
  default: return "list"; /* improper */
  }
}

/* Pushes a big integer's decimal digits (at most 64 bytes of magnitude: beyond, its size). */
static void push_big_text(lua_State *L, const unsigned char *p)
{
  size_t size = p[0] == ETF_SMALL_BIG ? p[1] : sm_etf_be32(p + 1);
  const unsigned char *sign = p + (p[0] == ETF_SMALL_BIG ? 2 : 5);
  if (size > 64) {
    lua_pushfstring(L, "#Integer<%d bytes>", (int)size);
    return;
  }
  unsigned char mag[64];
  memcpy(mag, sign + 1, size);
  char digits[160];
  size_t nd = 0;
  for (;;) { /* divide the little-endian magnitude by 10 until it is 0 */
    unsigned rem = 0;
    int nonzero = 0;
    for (size_t i = size; i-- > 0;) {
      unsigned cur = rem << 8 | mag[i];
      mag[i] = (unsigned char)(cur / 10);
      rem = cur % 10;
      nonzero |= mag[i];
    }
    digits[nd++] = (char)('0' + rem);
    if (!nonzero)
      break;
  }
  char text[162];
  size_t o = 0;
  if (*sign)
    text[o++] = '-';
  while (nd)
    text[o++] = digits[--nd];
  lua_pushlstring(L, text, o);
}

static int m_opaque_tostring(lua_State *L)
{
  blob_t *b = test_blob(L, 1);
  const unsigned char *p = b->bytes, *end = b->bytes + b->len;
  const char *node = "";
  size_t nn = 0;
  int latin1;
  switch (p[0]) {
  case ETF_SMALL_BIG: case ETF_LARGE_BIG:
    push_big_text(L, p);
    return 1;
  case ETF_PID: case ETF_NEW_PID: {
    const unsigned char *q = read_atom(L, p, p + 1, end, &node, &nn, &latin1);
    char numbers[32]; /* Erlang's ID and Serial are unsigned 32 bits (pushfstring has no %u) */
    snprintf(numbers, sizeof numbers, "%u.%u", (unsigned)sm_etf_be32(q),
             (unsigned)sm_etf_be32(q + 4));
    lua_pushlstring(L, node, nn);
    lua_pushfstring(L, "#Pid<%s.%s>", lua_tostring(L, -1), numbers);
    return 1;
  }
  case ETF_NEW_REFERENCE: case ETF_NEWER_REFERENCE: { /* its first five numbers at most */
    size_t ids = (size_t)p[1] << 8 | p[2];
    const unsigned char *q = read_atom(L, p, p + 3, end, &node, &nn, &latin1);
    q += p[0] == ETF_NEW_REFERENCE ? 1 : 4;
    char numbers[64] = ""; /* a ref of no numbers (Len 0) leaves it empty */
    size_t o = 0;
    for (size_t i = 0; i < ids && i < 5; i++)
      o += (size_t)snprintf(numbers + o, sizeof numbers - o, ".%u",
                            (unsigned)sm_etf_be32(q + 4 * i));
    lua_pushlstring(L, node, nn);
    lua_pushfstring(L, "#Ref<%s%s>", lua_tostring(L, -1), numbers);
    return 1;
  }
  case ETF_REFERENCE: case ETF_PORT: case ETF_NEW_PORT: case ETF_V4_PORT: {
    const unsigned char *q = read_atom(L, p, p + 1, end, &node, &nn, &latin1);
    lua_pushlstring(L, node, nn);
    lua_pushfstring(L, "#%s<%s.%d>", p[0] == ETF_REFERENCE ? "Ref" : "Port", lua_tostring(L, -1),
                    (int)sm_etf_be32(q + (p[0] == ETF_V4_PORT ? 4 : 0)));
    return 1;
  }
  case ETF_EXPORT: {
    const char *m, *f;
    size_t mn, fn;
    const unsigned char *q = read_atom(L, p, p + 1, end, &m, &mn, &latin1);
    q = read_atom(L, p, q, end, &f, &fn, &latin1);
    lua_pushlstring(L, m, mn);
    lua_pushlstring(L, f, fn);
    lua_pushfstring(L, "#Fun<%s:%s/%d>", lua_tostring(L, -2), lua_tostring(L, -1),
                    q < end && *q == ETF_SMALL_INTEGER && q + 1 < end ? q[1] : -1);
    return 1;
  }
  case ETF_BIT_BINARY: {
    uint32_t bytes = sm_etf_be32(p + 1); /* the last one holds p[5] bits */
    lua_pushfstring(L, "#Bits<%d>", (int)(bytes ? (bytes - 1) * 8 + p[5] : 0));
    return 1;
  }
  default:
    lua_pushfstring(L, "#Term<%s>", p[0] == ETF_NEW_FUN ? "fun"
                                    : p[0] == ETF_MAP ? "map" : "improper list");
    return 1;
  }
}

static int m_atom_tostring(lua_State *L)
{
  blob_t *b = test_blob(L, 1);
  lua_pushlstring(L, (const char *)b->bytes, b->len);
  return 1;
}

/* ---- The Lua functions --------------------------------------------------------------------- */

const char *sm_lterm_atom_fault(const char *s, size_t n)
{
  long chars = utf8_chars((const unsigned char *)s, n);
  if (chars < 0)
    return "not UTF-8";
  if (chars > ATOM_MAX_CHARS)
    return "more than 255 characters";
  return NULL;
}

/* smarm.atom(name) -> the atom (true and false: the booleans) */
static int l_atom(lua_State *L)
{
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  long chars = utf8_chars((const unsigned char *)s, n);
  if (chars < 0)
    return luaL_argerror(L, 1, "an atom's name must be UTF-8");
  if (chars > ATOM_MAX_CHARS)
    return luaL_argerror(L, 1, "an atom's name has at most 255 characters");
  push_atom(L, s, n, 0);
  return 1;
}

static int mark(lua_State *L, enum lterm_kind kind)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  enum lterm_kind was = sm_lterm_table_kind(L, 1);
  if (was == LTERM_NONE && lua_getmetatable(L, 1))
    return luaL_argerror(L, 1, "the table has a metatable of its own");
  sm_lterm_mark_table(L, 1, kind);
  lua_settop(L, 1);
  return 1;
}

/* smarm.tuple(t) -> t, marked as a tuple; smarm.map(t) -> t, marked as a map */
static int l_tuple(lua_State *L) { return mark(L, LTERM_TUPLE); }
static int l_map(lua_State *L) { return mark(L, LTERM_MAP); }

/* smarm.term.encode(value) -> string */
static int l_encode(lua_State *L)
{
  lua_settop(L, 1);
  push_encoded(L, 1, "smarm.term.encode: value");
  return 1;
}

/* smarm.term.decode(s [, pos]) -> value, the position after it */
static int l_decode(lua_State *L)
{
  size_t n;
  const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
  lua_Integer pos = luaL_optinteger(L, 2, 1);
  if (pos < 1 || (size_t)pos > n + 1)
    return luaL_argerror(L, 2, "position out of the string");
  tdec_t d = {L, s, s + pos - 1, s + n, 0, 0, 0, NULL, 0, 0, 0};
  if (d.p >= d.end || *d.p != ETF_VERSION)
    bad(L, d.start, d.p, "no version byte (131)");
  d.p++;
  decode_term(&d);
  lua_pushinteger(L, (lua_Integer)(d.p - s) + 1);
  return 2;
}

/* smarm.term.type(value) -> "atom", "tuple", "map", "pid", "ref", "port", "fun", "integer",
** "bitstring", "list" (an improper one), or nil for another value */
static int l_type(lua_State *L)
{
  const char *s;
  size_t n;
  enum lterm_kind kind = lua_istable(L, 1) ? sm_lterm_table_kind(L, 1)
                                           : sm_lterm_to_blob(L, 1, &s, &n);
  switch (kind) {
  case LTERM_ATOM: lua_pushliteral(L, "atom"); break;
  case LTERM_TUPLE: lua_pushliteral(L, "tuple"); break;
  case LTERM_MAP: lua_pushliteral(L, "map"); break;
  case LTERM_OPAQUE: lua_pushstring(L, opaque_type(test_blob(L, 1))); break;
  default: lua_pushnil(L);
  }
  return 1;
}

static void new_metatable(lua_State *L, const void *key, const char *name, lua_CFunction tostr)
{
  lua_createtable(L, 0, 3);
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__name");
  if (tostr) {
    lua_pushcfunction(L, tostr);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pushstring(L, name); /* getmetatable says what it is; setmetatable cannot change it */
  lua_setfield(L, -2, "__metatable");
  lvm_set_registry_once(L, key);
}

void sm_lterm_register(lua_State *L, int module)
{
  new_metatable(L, &atom_mt_key, "smarm.atom", m_atom_tostring);
  new_metatable(L, &opaque_mt_key, "smarm.term", m_opaque_tostring);
  new_metatable(L, &tuple_mt_key, "smarm.tuple", NULL);
  new_metatable(L, &map_mt_key, "smarm.map", NULL);
  static const luaL_Reg top[] = {
    {"atom", l_atom}, {"tuple", l_tuple}, {"map", l_map}, {NULL, NULL},
  };
  static const luaL_Reg term[] = {
    {"encode", l_encode}, {"decode", l_decode}, {"type", l_type}, {NULL, NULL},
  };
  for (const luaL_Reg *r = top; r->name; r++) {
    lua_pushcfunction(L, r->func);
    lua_setfield(L, module, r->name);
  }
  lua_newtable(L);
  luaL_register(L, NULL, term);
  lua_setfield(L, module, "term");
}
