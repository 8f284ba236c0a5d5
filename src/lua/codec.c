/*
** Message codec (see codec.h). Encoding writes into a buffer on the C stack and, when that is not
** enough, into a growable Lua userdata, so an error raised half-way (a function inside the
** message) leaks nothing; the finished bytes are copied once into the message block. A string
** message is written straight into its block. The path named in an error is built from the keys
** on the stack only when something fails. The tables already seen (shared references, cycles)
** are remembered by address in a small array on the C stack, and only beyond SEEN_FAST tables in
** a Lua table; the receiver registers only the tables a REF points back to (STABLE). So a message
** of a few tables costs the sender no Lua allocation, and the receiver only its own tables.
*/
#include "codec.h"

#include "io/dist.h"
#include "io/io.h"
#include "lbinary.h"
#include "lhandle.h"
#include "lpath.h"
#include "lterm.h"
#include "ljx.h"
#include "lpid.h"
#include "lshape.h"
#include "lrebind.h"
#include "lvm.h"
#include "util/etf.h"

#include <lauxlib.h>
#include <luajit.h>

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum tag {
  T_NIL, T_FALSE, T_TRUE, T_NUM, T_STR, T_PID, T_TABLE, T_REF, T_END, T_HANDLE, T_HLIST, T_SREF,
  T_STABLE, /* a TABLE that a later REF points back to (the encoder rewrites the tag) */
  T_FROM,   /* a call's reply handle: the caller's pid and the alias */
  T_CALL,   /* only first: a call's request (caller, alias, then the request's value) */
  T_TIMER,  /* a message timer: its target and its ref */
  T_FUNC,   /* a Lua function: bytecode, then each upvalue (a value or a JOIN) */
  T_SFUNC,  /* a FUNC that a later REF or JOIN points back to (the encoder rewrites the tag) */
  T_NAMED,  /* a value the receiver finds by name (lrebind.h): module [, field] */
  T_JOIN,   /* only as an upvalue: shares the cell of an upvalue of a function met before */
  T_ATOM,   /* an Erlang atom (lterm.h): its name as a string */
  T_OPAQUE, /* an opaque Erlang term: its bytes as a string */
  T_TUPLE,  /* before a TABLE or STABLE: the table is a tuple (lterm.h) */
  T_MAP,    /* before a TABLE or STABLE: the table is a map */
  T_BLIST,  /* only first (after an HLIST): the binaries' list, a varint count, then pointers */
  T_BIN,    /* a binary of the list: its index */
  T_BINV,   /* a binary's bytes, in plain data (exit reasons: the core copies their bytes) */
  T_VALUES  /* only first (after the lists): a transfer, a count and that many values */
};

/* Tables (and functions) remembered by address in the encoder's own array before it needs a Lua
** table; the same for upvalue cells. */
#define SEEN_FAST 16
#define CELLS_FAST 32
/* Binaries that have stack slots at the decoder before it puts them in a table. */
#define BINS_FAST 16

/* Long strings. A string of CODEC_SHARED_STRING bytes or more that the sending VM has a binary
** of, or makes one of as it meets the string again (sm_lbinary_push_shared), travels in the
** binaries' list (T_BIN), once per message however often it occurs there (the bins table maps
** it to its index), its entry marked LISTED_STRING (a low bit that malloc's alignment leaves
** free); the receiver makes its string of the block's bytes and releases the entry's reference.
** Such a string is not copied again at the sender, and a block read by another scheduler is
** read from memory its sender wrote once: a copy per message into a new block crossed between
** the cores twice (written by the sender over lines the receiver had read, then read). A string
** met for the first time is copied (T_STR), as is every string of plain data (exit reasons). */
#define LISTED_STRING 1

/* A handle in the list: codec flags, kind index, the kind's bits, 8-byte id, 8-byte timeout,
** 4-byte descriptor. */
#define HANDLE_BYTES 23
#define HANDLE_TAKEN 1 /* codec flag: a decoder made this handle's userdata, which owns it now,
                          or the sender kept it (sm_codec_abandon): the drop hook leaves it */

typedef struct enc {
  lua_State *L;
  int buf_idx;          /* stack slot of the buffer userdata (nil while `local` is used); 0
                           until a table or a long value needs the slots (ensure_slots) */
  int seen_idx;         /* stack slot of the Lua table: table -> offset of its tag, for the tables
                           after the first SEEN_FAST (nil until then) */
  int cells_idx;        /* stack slot of the Lua table: upvalue cell (lua_upvalueid) -> where it
                           was first met (offset of its function's tag * 256 + upvalue number),
                           for the cells after the first CELLS_FAST (nil until then) */
  int data_only;        /* sm_codec_encode_data: functions and named userdata refused */
  int names_idx;        /* stack slot of the VM's names (sm_lrebind_push_names; nil until the
                           first function or userdata) */
  int bins_idx;         /* stack slot of the table of the binaries' userdata met, in list order
                           (nil until the first): it keeps each alive, so its block too, until
                           the block made holds a reference (a finalizer run by an allocation
                           here may change the message) */
  const char *root;     /* the name of the whole value in error messages ("message") */
  int root_arg;         /* > 0: instead, a transfer's "argument[root_arg]", written into
                           root_buf only for an error (root_of) */
  char root_buf[32];
  unsigned char local[256];
  unsigned char *buf;
  size_t len, cap;
  uint32_t ntables;     /* tables met so far */
  const void *seen_ptr[SEEN_FAST]; /* the first tables met (lua_topointer) */
  size_t seen_at[SEEN_FAST];       /* and the offsets of their tags in buf */
  uint32_t ncells;                  /* upvalue cells met so far */
  const void *cell_id[CELLS_FAST];  /* the first ones (lua_upvalueid) */
  uint64_t cell_at[CELLS_FAST];     /* and where (as in cells_idx) */
  int nkeys;            /* tables entered: keys[0..nkeys-1] are the stack slots of their keys */
  int in_key;           /* encoding keys[nkeys - 1] itself, not its value */
  int keys[CODEC_MAX_DEPTH + 1];
  unsigned char key_is_upvalue[CODEC_MAX_DEPTH + 1]; /* keys[i] is an upvalue's name */
  uint32_t nbins;       /* binaries met (their userdata: at bins_idx) */
  uint32_t nstrings;    /* of them, long strings' */
  codec_moves_t *moves; /* the handles met, in list order */
  int held;             /* this encode runs with the collector held (encode_held) */
  int restart;          /* a table moved under its walk: to be done again, held (table_moved) */
  int walks;            /* tables being walked (enc_table) */
  size_t first_end;     /* a transfer: where its first value's encoding ends in buf */
  lhandle_t handles[CODEC_MAX_HANDLES];
} enc_t;

/* A table's entries may have moved while enc_table walked it (sm_ljx_table_next): an
** allocation of the encoder ran a GC step, and a finalizer ran, which may have grown, rehashed,
** or cleared and refilled the table, so that the walk would skip or repeat entries (a key the
** table held throughout went missing from the message). Any finalizer counts, the binding's own
** (a binary's, a socket's) too. The encode stops (each walk ends at its next entry) and is done
** again with the collector held (encode_held), where no finalizer runs. Nothing is paid until a
** walk meets a finalizer: most messages allocate nothing on the Lua heap, and finalizers run
** only in the last phase of a collection cycle; a message that meets them is encoded twice. */
static void table_moved(enc_t *e)
{
  if (e->held) /* nothing runs there that could move it (the names are looked up first) */
    luaL_error(e->L, "%s: a table changed while it was encoded", e->root && *e->root ? e->root
                                                                                   : "message");
  e->restart = 1;
}

static int abs_index(lua_State *L, int idx)
{
  return idx > 0 || idx <= LUA_REGISTRYINDEX ? idx : lua_gettop(L) + idx + 1;
}

/* Pushes the five slots (binaries, buffer, seen tables, upvalue cells, names) as nils. Done
** before the first table or function is entered, so that nothing is pushed above the key and
** value a table's walk holds; a scalar message needs them only for a binary or a long value. */
#define ENC_SLOTS 5
static void ensure_slots(enc_t *e)
{
  if (e->buf_idx)
    return;
  lua_pushnil(e->L);
  e->bins_idx = lua_gettop(e->L);
  lua_pushnil(e->L);
  e->buf_idx = lua_gettop(e->L);
  lua_pushnil(e->L);
  e->seen_idx = lua_gettop(e->L);
  lua_pushnil(e->L);
  e->cells_idx = lua_gettop(e->L);
  lua_pushnil(e->L);
  e->names_idx = lua_gettop(e->L);
}

/* registry[&spare_key]: the VM's spare encode buffer (a userdata of at most SPARE_MAX bytes). An
** encode that outgrows `local` takes it (the slot is then empty: an encode nested in this one,
** from a finalizer, or one of another actor while this one parks, grows its own) and puts its
** buffer back when it succeeds, so a run of big messages grows no buffer, and makes no garbage,
** per message. An encode that raises leaves its buffer to the collector. */
static const char spare_key;
#define SPARE_MAX (64 * 1024)

/* Takes the spare buffer into the buffer's slot when it holds at least `need` bytes. */
static int take_spare(enc_t *e, size_t need)
{
  lua_State *L = e->L;
  lvm_push_registry(L, &spare_key);
  size_t cap = lua_type(L, -1) == LUA_TUSERDATA ? lua_objlen(L, -1) : 0;
  if (cap < need) {
    lua_pop(L, 1);
    return 0;
  }
  unsigned char *nb = lua_touserdata(L, -1);
  lua_replace(L, e->buf_idx);
  lua_pushlightuserdata(L, (void *)&spare_key);
  lua_pushnil(L);
  lua_rawset(L, LUA_REGISTRYINDEX);
  memcpy(nb, e->buf, e->len);
  e->buf = nb;
  e->cap = cap;
  return 1;
}

static void fail_at(enc_t *e, int nkeys, const char *rest);

/* The most an encoding's buffer (a userdata) may hold: LuaJIT's limit on a userdata's size. A
** string alone is not encoded into it (encode_string), and may be up to the block's limit. */
#define ENC_MAX ((size_t)0x7fffff00)

static void reserve(enc_t *e, size_t n)
{
  if (e->len + n <= e->cap)
    return;
  if (n > ENC_MAX - e->len)
    fail_at(e, 0, " is too big to copy: its encoding passes 2 GiB (a string sent alone may be "
                  "up to 4 GiB; a smarm.binary is shared, not copied)");
  ensure_slots(e);
  if (e->buf == e->local && take_spare(e, e->len + n))
    return;
  size_t cap = e->cap * 2;
  while (cap < e->len + n)
    cap *= 2;
  if (cap > ENC_MAX)
    cap = ENC_MAX;
  unsigned char *nb = lua_newuserdata(e->L, cap);
  memcpy(nb, e->buf, e->len);
  lua_replace(e->L, e->buf_idx); /* in its slot: a table walk keeps its key and value on top */
  e->buf = nb;
  e->cap = cap;
}

/* At a successful encode's end: its buffer becomes the VM's spare (sizes beyond SPARE_MAX are
** left to the collector, not kept for the run). */
static void give_back_buffer(enc_t *e)
{
  if (e->buf == e->local || e->cap > SPARE_MAX)
    return;
  lua_pushlightuserdata(e->L, (void *)&spare_key);
  lua_pushvalue(e->L, e->buf_idx);
  lua_rawset(e->L, LUA_REGISTRYINDEX);
}

static void put_byte(enc_t *e, unsigned char b)
{
  reserve(e, 1);
  e->buf[e->len++] = b;
}

static void put_bytes(enc_t *e, const void *p, size_t n)
{
  reserve(e, n);
  memcpy(e->buf + e->len, p, n);
  e->len += n;
}

/* Writes v as a varint (7 bits a byte, low first) at out (room for 10); returns its length. */
static size_t varint(unsigned char *out, uint64_t v)
{
  size_t n = 0;
  do {
    unsigned char b = v & 0x7f;
    v >>= 7;
    out[n++] = (unsigned char)(b | (v ? 0x80 : 0));
  } while (v);
  return n;
}

static void put_varint(enc_t *e, uint64_t v)
{
  unsigned char b[10];
  put_bytes(e, b, varint(b, v));
}

/* The name of the whole value, for an error. */
static const char *root_of(enc_t *e)
{
  if (e->root_arg > 0) {
    snprintf(e->root_buf, sizeof e->root_buf, "argument[%d]", e->root_arg);
    return e->root_buf;
  }
  return e->root;
}

/* Raises "<root><path of the first nkeys keys><rest>": the keys are still on the stack, each
** where lua_next left it. */
static void fail_at(enc_t *e, int nkeys, const char *rest)
{
  lpath_t p;
  p.s[0] = '\0';
  p.len = 0;
  for (int i = 0; i < nkeys; i++)
    sm_lpath_key(&p, e->L, e->keys[i], e->key_is_upvalue[i]);
  /* an empty root (spawn_on's: "function[upvalue 'x']", "argument[2]") drops the first dot */
  const char *root = root_of(e);
  const char *path = root[0] == '\0' && p.s[0] == '.' ? p.s + 1 : p.s;
  luaL_error(e->L, "%s%s%s", root, path, rest);
}

/* Raises "<path> is <what>", or "<path> has a key that is <what>" for a key. */
static void fail_as(enc_t *e, int idx, const char *what)
{
  char rest[96];
  if (e->nkeys > 0 && idx == e->keys[e->nkeys - 1] && e->in_key) {
    /* the key itself cannot travel: named like any other key that cannot */
    snprintf(rest, sizeof rest, " has a key that is %s", what);
    fail_at(e, e->nkeys - 1, rest);
  }
  snprintf(rest, sizeof rest, " is %s", what);
  fail_at(e, e->nkeys, rest);
}

static void fail(enc_t *e, int idx)
{
  char what[32];
  snprintf(what, sizeof what, "a %s", luaL_typename(e->L, idx));
  fail_as(e, idx, what);
}

/* ---- Encoding ------------------------------------------------------------------------------ */

static void enc_value(enc_t *e, int idx, int depth);

static void check_depth(enc_t *e, int depth)
{
  if (depth >= CODEC_MAX_DEPTH) {
    char rest[64];
    snprintf(rest, sizeof rest, " is nested too deeply (more than %d levels)", CODEC_MAX_DEPTH);
    fail_at(e, e->nkeys, rest);
  }
}

/* The offset of the tag of the table at idx if it was met before, else -1. */
static int64_t seen_offset(enc_t *e, int idx)
{
  const void *t = lua_topointer(e->L, idx);
  uint32_t fast = e->ntables < SEEN_FAST ? e->ntables : SEEN_FAST;
  for (uint32_t i = 0; i < fast; i++)
    if (e->seen_ptr[i] == t)
      return (int64_t)e->seen_at[i];
  if (e->ntables <= SEEN_FAST)
    return -1;
  lua_pushvalue(e->L, idx);
  lua_rawget(e->L, e->seen_idx);
  int64_t at = lua_isnil(e->L, -1) ? -1 : (int64_t)lua_tonumber(e->L, -1);
  lua_pop(e->L, 1);
  return at;
}

/* Remembers the table at idx, whose tag is about to be written at e->len. */
static void seen_add(enc_t *e, int idx)
{
  if (e->ntables < SEEN_FAST) {
    e->seen_ptr[e->ntables] = lua_topointer(e->L, idx);
    e->seen_at[e->ntables] = e->len;
  } else {
    if (lua_isnil(e->L, e->seen_idx)) {
      lua_newtable(e->L);
      lua_replace(e->L, e->seen_idx);
    }
    lua_pushvalue(e->L, idx);
    lua_pushnumber(e->L, (lua_Number)e->len);
    lua_rawset(e->L, e->seen_idx);
  }
  e->ntables++;
}

/* REF to the table or function at idx if it was met before (a shared reference or a cycle):
** its tag becomes `shared_tag` (STABLE, SFUNC), so that the receiver registers it. Returns
** whether it wrote one. */
static int put_back_ref(enc_t *e, int idx, unsigned char shared_tag)
{
  ensure_slots(e);
  int64_t at = seen_offset(e, idx);
  if (at < 0)
    return 0;
  e->buf[at] = shared_tag;
  put_byte(e, T_REF);
  put_varint(e, (uint64_t)at);
  return 1;
}

/* A key the receiver's table will likely keep in its array part (the size hint's count). */
static int array_like(lua_Number n)
{
  return n >= 1 && n <= (lua_Number)UINT32_MAX && n == (lua_Number)(uint32_t)n;
}

/* At most the bytes put_scalar writes. */
static size_t scalar_size(const ljx_scalar_t *v)
{
  return v->type == LUA_TSTRING ? 11 + v->len : 9;
}

/* A number, string or boolean read in place (ljx_scalar_t), as enc_value writes it, at out
** (scalar_size bytes of room): returns the bytes written. */
static size_t write_scalar(unsigned char *out, const ljx_scalar_t *v)
{
  switch (v->type) {
  case LUA_TNUMBER:
    out[0] = T_NUM;
    memcpy(out + 1, &v->n, sizeof v->n);
    return 1 + sizeof v->n;
  case LUA_TSTRING: {
    out[0] = T_STR;
    size_t h = 1 + varint(out + 1, v->len);
    memcpy(out + h, v->s, v->len);
    return h + v->len;
  }
  default:
    out[0] = v->n != 0 ? T_TRUE : T_FALSE;
    return 1;
  }
}

/* Whether v, read in place, is a long string the encoder may share (enc_value). */
static int shareable(const enc_t *e, const ljx_scalar_t *v)
{
  return v->type == LUA_TSTRING && v->len >= CODEC_SHARED_STRING && !e->data_only;
}

static void enc_table(enc_t *e, int idx, int depth)
{
  lua_State *L = e->L;
  if (put_back_ref(e, idx, T_STABLE))
    return;
  check_depth(e, depth);
  enum lterm_kind kind = sm_lterm_table_kind(L, idx); /* a tuple or map keeps its mark */
  if (kind != LTERM_NONE)
    put_byte(e, kind == LTERM_TUPLE ? T_TUPLE : T_MAP);
  seen_add(e, idx);
  /* TABLE, then how many array-like and other keys follow (patched at the end), so that the
  ** receiver makes the table at its final size */
  put_byte(e, T_TABLE);
  size_t sizes_at = e->len;
  put_bytes(e, "\0\0\0\0\0\0\0\0", 8);
  uint32_t narray = 0, nhash = 0;
  luaL_checkstack(L, 6, "message too deep");
  int level = e->nkeys++;
  /* The entries read in place: those of numbers, strings and booleans written at once, the
  ** others (and long strings) pushed and encoded as values (ljx.h: nothing here changes the
  ** table). */
  const void *t = lua_topointer(L, idx);
  uint32_t at = 0;
  ljx_layout_t layout;
  ljx_scalar_t ks, vs;
  int scalars;
  e->walks++;
  while (!e->restart && (scalars = sm_ljx_table_next(L, t, &at, &layout, &ks, &vs)) != 0) {
    if (scalars == LJX_TABLE_MOVED) {
      table_moved(e);
      break;
    }
    if (scalars > 0 && !shareable(e, &ks) && !shareable(e, &vs)) {
      size_t need = scalar_size(&ks) + scalar_size(&vs);
      if (e->len + need > e->cap) { /* growing may collect: read the entry again after */
        reserve(e, need);
        at--;
        continue;
      }
      if (ks.type == LUA_TNUMBER && array_like(ks.n))
        narray++;
      else
        nhash++;
      /* room made: nothing allocates while the entry's strings are read */
      e->len += write_scalar(e->buf + e->len, &ks);
      e->len += write_scalar(e->buf + e->len, &vs);
      continue;
    }
    sm_ljx_table_push_entry(L, idx, at - 1);
    int value = lua_gettop(L), key = value - 1;
    switch (lua_type(L, key)) { /* keys: no nil or NaN possible; refuse what cannot travel */
    case LUA_TNUMBER:
      if (array_like(lua_tonumber(L, key)))
        narray++;
      else
        nhash++;
      break;
    case LUA_TTABLE: case LUA_TSTRING: case LUA_TBOOLEAN: case LUA_TUSERDATA:
    case LUA_TFUNCTION:
      nhash++;
      break;
    default: {
      char rest[64];
      snprintf(rest, sizeof rest, " has a key that is a %s", luaL_typename(L, key));
      fail_at(e, level, rest);
    }
    }
    e->keys[level] = key;
    e->key_is_upvalue[level] = 0;
    e->in_key = 1; /* a key that fails is named as a key (fail) */
    enc_value(e, key, depth + 1);
    e->in_key = 0;
    enc_value(e, value, depth + 1);
    lua_pop(L, 2);
  }
  e->walks--;
  e->nkeys = level;
  put_byte(e, T_END);
  memcpy(e->buf + sizes_at, &narray, 4);
  memcpy(e->buf + sizes_at + 4, &nhash, 4);
}

/* NAMED for the value at idx if the receiver's VM can find it by name (lrebind.h); tables only
** as an upvalue. Returns whether it did. */
static int enc_named(enc_t *e, int idx, int tables)
{
  lua_State *L = e->L;
  ensure_slots(e);
  luaL_checkstack(L, 6, "message");
  if (lua_isnil(L, e->names_idx)) {
    luaL_checkstack(L, 12, "message");
    if (!e->walks || e->held) {
      sm_lrebind_push_names(L);
    } else if (!sm_lrebind_push_names_made(L)) { /* remaking the names may run a script's
      ** package.searchpath, Lua code that may change the table being walked in ways its
      ** layout does not show (CI saw a key lost): the encode is done again, held, the names
      ** looked up before it. The index made last runs nothing and is taken in the walk. */
      e->restart = 1;
      return 1; /* (nothing written: the encode is done again) */
    }
    lua_replace(L, e->names_idx);
  }
  enum lrebind_kind k = sm_lrebind_find(L, e->names_idx, idx, tables);
  if (k == LREBIND_NONE)
    return 0;
  int names = k == LREBIND_FIELD ? 2 : 1;
  put_byte(e, T_NAMED);
  for (int i = 0; i < 2; i++) {
    size_t n = 0;
    const char *s = i < names ? lua_tolstring(L, -names + i, &n) : "";
    put_varint(e, n);
    put_bytes(e, s, n);
  }
  lua_pop(L, names);
  return 1;
}

/* Where the upvalue cell `id` was met before, or -1 after remembering it as met at `here`. */
static int64_t cell_seen(enc_t *e, const void *id, uint64_t here)
{
  uint32_t fast = e->ncells < CELLS_FAST ? e->ncells : CELLS_FAST;
  for (uint32_t i = 0; i < fast; i++)
    if (e->cell_id[i] == id)
      return (int64_t)e->cell_at[i];
  lua_State *L = e->L;
  if (e->ncells > CELLS_FAST) {
    lua_pushlightuserdata(L, (void *)id);
    lua_rawget(L, e->cells_idx);
    int64_t at = lua_isnil(L, -1) ? -1 : (int64_t)lua_tonumber(L, -1);
    lua_pop(L, 1);
    if (at >= 0)
      return at;
  }
  if (e->ncells < CELLS_FAST) {
    e->cell_id[e->ncells] = id;
    e->cell_at[e->ncells] = here;
  } else {
    if (lua_isnil(L, e->cells_idx)) {
      lua_newtable(L);
      lua_replace(L, e->cells_idx);
    }
    lua_pushlightuserdata(L, (void *)id);
    lua_pushnumber(L, (lua_Number)here);
    lua_rawset(L, e->cells_idx);
  }
  e->ncells++;
  return -1;
}

static int dump_writer(lua_State *L, const void *p, size_t n, void *b)
{
  (void)L;
  luaL_addlstring(b, p, n);
  return 0;
}

/* The bytecode of the functions this VM sent: registry[&dumps_key] = { [function] = bytecode },
** weak keys: a function sent again (a worker spawned in a loop) is not dumped again. */
static const char dumps_key;

/* Pushes the bytecode of the Lua function at idx (root_of(e) names the message in an error). */
static void push_bytecode(enc_t *e, int idx)
{
  lua_State *L = e->L;
  lvm_push_registry_table(L, &dumps_key, "k");
  int cache = lua_gettop(L);
  lua_pushvalue(L, idx);
  lua_rawget(L, cache);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    luaL_Buffer b;
    lua_pushvalue(L, idx); /* lua_dump dumps the function on top */
    luaL_buffinit(L, &b);
    int failed = lua_dump(L, dump_writer, &b);
    luaL_pushresult(&b);
    if (failed == LUA_ERRMEM) /* lua_dump runs protected: memory is all that fails there */
      luaL_error(L, "not enough memory");
    if (failed)
      luaL_error(L, "%s: cannot dump a function", root_of(e));
    lua_remove(L, -2);
    lua_pushvalue(L, idx);
    lua_pushvalue(L, -2);
    lua_rawset(L, cache);
  }
  lua_remove(L, cache);
}

/* FUNC: the function's bytecode (with debug info, so that tracebacks keep names and lines),
** then each upvalue: JOIN (where its cell was met before) or its value, named when the receiver
** can find it by name (a module, a function of one, a standard global), else copied like any
** value, functions included. */
static void enc_function(enc_t *e, int idx, int depth)
{
  lua_State *L = e->L;
  if (put_back_ref(e, idx, T_SFUNC))
    return;
  if (lua_iscfunction(L, idx))
    fail_as(e, idx, "a C function that no loaded module holds");
  check_depth(e, depth);
  luaL_checkstack(L, 8, "message too deep");
  size_t fn_at = e->len;
  seen_add(e, idx);
  put_byte(e, T_FUNC);
  push_bytecode(e, idx);
  size_t n;
  const char *code = lua_tolstring(L, -1, &n);
  put_varint(e, n);
  put_bytes(e, code, n);
  lua_pop(L, 1);
  int nups = 0;
  while (lua_getupvalue(L, idx, nups + 1)) {
    lua_pop(L, 1);
    nups++;
  }
  put_byte(e, (unsigned char)nups); /* LuaJIT: at most 60 */
  int level = e->nkeys++;
  for (int i = 1; i <= nups && !e->restart; i++) {
    int64_t where = cell_seen(e, lua_upvalueid(L, idx, i), (uint64_t)fn_at * 256 + (uint64_t)i);
    if (where >= 0) { /* a cell shared with a function met before, which the receiver registers */
      e->buf[where / 256] = T_SFUNC;
      put_byte(e, T_JOIN);
      put_varint(e, (uint64_t)where / 256);
      put_byte(e, (unsigned char)(where % 256));
      continue;
    }
    const char *name = lua_getupvalue(L, idx, i);
    int v = lua_gettop(L);
    if (name && name[0])
      lua_pushstring(L, name);
    else
      lua_pushfstring(L, "#%d", i);
    e->keys[level] = v + 1;
    e->key_is_upvalue[level] = 1;
    /* a userdata goes through enc_value, which takes pids, refs, timers and handles as values
    ** before it looks for a name (a module's field may hold a pid: that is state, not code) */
    if (lua_type(L, v) == LUA_TUSERDATA || !enc_named(e, v, 1))
      enc_value(e, v, depth + 1);
    lua_settop(L, v - 1);
  }
  e->nkeys = level;
}

/* The binary at idx into the list (with as_string, the binary on top, of the bytes of the string
** at idx; popped): its reference is taken once the block is made; until then its userdata is
** kept in the table at bins_idx, at [i] (from 1), with a true at [-i] and i - 1 at [the string]
** for a string's. */
static void enc_listed(enc_t *e, int idx, int as_string)
{
  lua_State *L = e->L;
  if (e->nbins >= INT32_MAX - 1) {
    const char *root = root_of(e);
    luaL_error(L, "%s holds too many binaries", *root ? root : "message");
  }
  ensure_slots(e);
  luaL_checkstack(L, 3, "message");
  if (lua_isnil(L, e->bins_idx)) {
    lua_createtable(L, 4, 0);
    lua_replace(L, e->bins_idx);
  }
  if (as_string) { /* the string's binary is on top (sm_lbinary_push_shared) */
    lua_pushboolean(L, 1);
    lua_rawseti(L, e->bins_idx, -(int)e->nbins - 1);
    lua_pushvalue(L, idx);
    lua_pushnumber(L, e->nbins);
    lua_rawset(L, e->bins_idx);
    e->nstrings++;
  } else {
    lua_pushvalue(L, idx);
  }
  lua_rawseti(L, e->bins_idx, (int)e->nbins + 1);
  put_byte(e, T_BIN);
  put_varint(e, e->nbins);
  e->nbins++;
}

/* The binary at idx: in the list, or its bytes in plain data. */
static void enc_binary(enc_t *e, int idx, const sm_binary_t *bin)
{
  if (e->data_only) {
    put_byte(e, T_BINV);
    put_varint(e, bin->len);
    put_bytes(e, bin->bytes, bin->len);
    return;
  }
  enc_listed(e, idx, 0);
}

static void enc_value(enc_t *e, int idx, int depth)
{
  lua_State *L = e->L;
  switch (lua_type(L, idx)) {
  case LUA_TNIL:
    put_byte(e, T_NIL);
    return;
  case LUA_TBOOLEAN:
    put_byte(e, lua_toboolean(L, idx) ? T_TRUE : T_FALSE);
    return;
  case LUA_TNUMBER: {
    lua_Number n = lua_tonumber(L, idx);
    put_byte(e, T_NUM);
    put_bytes(e, &n, sizeof n);
    return;
  }
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    if (n >= CODEC_SHARED_STRING && !e->data_only) {
      ensure_slots(e); /* before anything is pushed above a table's walk */
      luaL_checkstack(L, 4, "message");
      if (e->nstrings) { /* listed in this message already: its entry again */
        lua_pushvalue(L, idx);
        lua_rawget(L, e->bins_idx);
        if (lua_type(L, -1) == LUA_TNUMBER) {
          put_byte(e, T_BIN);
          put_varint(e, (uint64_t)lua_tonumber(L, -1));
          lua_pop(L, 1);
          return;
        }
        lua_pop(L, 1);
      }
      if (sm_lbinary_push_shared(L, idx)) {
        enc_listed(e, idx, 1);
        return;
      }
    }
    put_byte(e, T_STR);
    put_varint(e, n);
    put_bytes(e, s, n);
    return;
  }
  case LUA_TTABLE:
    enc_table(e, idx, depth);
    return;
  case LUA_TFUNCTION:
    if (e->data_only)
      break;
    if (!enc_named(e, idx, 0))
      enc_function(e, idx, depth);
    return;
  case LUA_TUSERDATA: {
    smarm_pid_t pid;
    if (sm_lsmarm_to_pid(L, idx, &pid)) {
      put_byte(e, T_PID);
      put_bytes(e, &pid, sizeof pid);
      return;
    }
    smarm_ref_t ref;
    if (sm_lsmarm_to_ref(L, idx, &ref)) {
      put_byte(e, T_SREF);
      put_bytes(e, &ref, sizeof ref);
      return;
    }
    sm_binary_t *bin = sm_lbinary_test(L, idx);
    if (bin) {
      enc_binary(e, idx, bin);
      return;
    }
    int from = sm_lsmarm_to_from(L, idx, &pid, &ref);
    if (from || sm_lsmarm_to_timer(L, idx, &pid, &ref)) {
      put_byte(e, from ? T_FROM : T_TIMER);
      put_bytes(e, &pid, sizeof pid);
      put_bytes(e, &ref, sizeof ref);
      return;
    }
    const char *s;
    size_t n;
    enum lterm_kind kind = sm_lterm_to_blob(L, idx, &s, &n);
    if (kind != LTERM_NONE) {
      put_byte(e, kind == LTERM_ATOM ? T_ATOM : T_OPAQUE);
      put_varint(e, n);
      put_bytes(e, s, n);
      return;
    }
    int nkinds = sm_lhandle_kind_count();
    for (int k = 0; k < nkinds; k++) {
      void *ud;
      lhandle_t h;
      if (!sm_lhandle_kind(k)->test(L, idx, &ud, &h))
        continue;
      codec_moves_t *mv = e->moves;
      for (int i = 0; i < mv->n; i++)
        if (mv->uds[i] == ud)
          fail_at(e, e->nkeys, " holds a socket or file that is already in the message");
      if (mv->n == CODEC_MAX_HANDLES)
        fail_at(e, e->nkeys, " is one handle too many (at most 16 sockets and files in a message)");
      e->handles[mv->n] = h;
      mv->uds[mv->n] = ud;
      mv->kind[mv->n] = k;
      put_byte(e, T_HANDLE);
      put_byte(e, (unsigned char)mv->n++);
      return;
    }
    if (!e->data_only && enc_named(e, idx, 0)) /* io.stdout: the receiver's own */
      return;
    break;
  }
  default:
    break;
  }
  fail(e, idx);
}

smarm_msg_t *sm_codec_number_block(double n, size_t tail)
{
  smarm_msg_t *m = smarm_msg_new(1 + sizeof n + tail);
  if (m) {
    unsigned char *out = smarm_msg_data(m);
    out[0] = T_NUM;
    memcpy(out + 1, &n, sizeof n);
  }
  return m;
}

smarm_msg_t *sm_codec_string_block(const char *s, size_t n, size_t tail)
{
  unsigned char head[11];
  head[0] = T_STR;
  size_t h = 1 + varint(head + 1, n);
  smarm_msg_t *m = smarm_msg_new(h + n + tail);
  if (m) {
    unsigned char *out = smarm_msg_data(m);
    memcpy(out, head, h);
    memcpy(out + h, s, n);
  }
  return m;
}

/* A string message straight into its block: no buffer to grow and copy from. */
static smarm_msg_t *encode_string(lua_State *L, int idx, size_t tail)
{
  size_t n;
  const char *s = lua_tolstring(L, idx, &n);
  smarm_msg_t *m = sm_codec_string_block(s, n, tail);
  if (!m)
    luaL_error(L, "not enough memory");
  return m;
}

/* A call's request: CALL, the caller, the request, and the alias last (written by the caller in
** the block's tail). The receiver makes the table
** { smarm = "CALL", from = <reply handle>, request = <value> } from it. */
static void enc_call(enc_t *e, int idx, smarm_pid_t caller)
{
  put_byte(e, T_CALL);
  put_bytes(e, &caller, sizeof caller);
  enc_value(e, idx, 1);
}

/* A transfer (sm_codec_encode_transfer): VALUES, the count, then each value, as parts of one
** value (tables and upvalue cells met twice are sent once), named `function` and `argument[i]`
** in errors. */
static void enc_values(enc_t *e, int idx, int n)
{
  put_byte(e, T_VALUES);
  put_varint(e, (uint64_t)n);
  e->root = "function";
  for (int i = 0; i < n && !e->restart; i++) {
    e->root_arg = i; /* (not formatted per spawn: 7% of a spawn_on with one argument) */
    enc_value(e, idx + i, 0);
    if (i == 0)
      e->first_end = e->len;
  }
  e->root = "";
  e->root_arg = 0;
}

/* Readies the handles met for travel (lhandle.h: before_move); 1 if one of them changed. */
static int ready_moves(lua_State *L, codec_moves_t *moves)
{
  int changed = 0;
  for (int i = 0; i < moves->n; i++) { /* first every refusal, while nothing has changed */
    const lhandle_kind_t *k = sm_lhandle_kind(moves->kind[i]);
    if (k->before_move)
      k->before_move(L, moves->uds[i], 1);
  }
  for (int i = 0; i < moves->n; i++) {
    const lhandle_kind_t *k = sm_lhandle_kind(moves->kind[i]);
    if (k->before_move && k->before_move(L, moves->uds[i], 0))
      changed = 1;
  }
  return changed;
}

/* A handle that changed while it was readied (ready_moves) makes the encode go again, once. */
static void readied_again(lua_State *L, const char *root, int readied)
{
  if (readied >= 2)
    luaL_error(L, "%s: a socket in it changed again while it was readied to travel (another "
                  "actor uses it)", root && *root ? root : "message");
}

/* Frees msg, an encode's block that is not to be sent, with nh handles listed: they stay the
** sender's (marked taken, so that the drop hook, which releases its binaries, leaves them). */
static void discard(smarm_msg_t *msg, int nh)
{
  if (msg && nh) {
    unsigned char *list = smarm_msg_data(msg);
    for (int i = 0; i < nh; i++)
      list[2 + i * HANDLE_BYTES] |= HANDLE_TAKEN;
  }
  smarm_msg_free(msg);
}

/* A block made by a held encode while its handles are readied (ready_moves may raise, or park
** and be killed there): a userdata whose finalizer discards the block if nobody took it. */
typedef struct held_block {
  smarm_msg_t *m;
  int nh;
} held_block_t;

static int held_block_gc(lua_State *L)
{
  held_block_t *g = lua_touserdata(L, 1);
  smarm_msg_t *m = g->m;
  g->m = NULL;
  discard(m, g->nh);
  return 0;
}

static held_block_t *push_held_block(lua_State *L)
{
  held_block_t *g = lua_newuserdata(L, sizeof *g);
  g->m = NULL;
  g->nh = 0;
  if (luaL_newmetatable(L, "smarm.held_block")) {
    lua_pushcfunction(L, held_block_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  return g;
}

/* An encode done again with the collector held (table_moved): its arguments, and its result. */
typedef struct held_encode {
  int nvalues, data_only, readied;
  int names_at; /* in the held call: the stack slot of the VM's names, looked up before (0: none) */
  const char *root;
  codec_moves_t *moves;
  size_t tail;
  const codec_call_t *call;
  smarm_msg_t *m;
  size_t *first_end; /* a transfer's: where its first value's encoding ends (NULL: not asked) */
} held_encode_t;

static smarm_msg_t *encode_pass(lua_State *L, int idx, const held_encode_t *a, int held);

/* (the value or values, [the VM's names,] the held_encode_t): encode_pass, under
** sm_ljx_call_held */
static int encode_held(lua_State *L)
{
  held_encode_t *a = lua_touserdata(L, lua_gettop(L));
  lua_pop(L, 1);
  int n = a->nvalues ? a->nvalues : 1;
  a->names_at = lua_gettop(L) > n ? n + 1 : 0;
  a->m = encode_pass(L, 1, a, 1);
  return 0;
}

/* Encodes the value at idx (or, with a call, that call's request around it; with nvalues > 0,
** the transfer of the nvalues values from idx on) with `tail` spare bytes at the end. */
static smarm_msg_t *encode(lua_State *L, int idx, int nvalues, const char *root,
                           codec_moves_t *moves, size_t tail, const codec_call_t *call,
                           int data_only, int readied)
{
  held_encode_t a = {nvalues, data_only, readied, 0, root, moves, tail, call, NULL, NULL};
  return encode_pass(L, idx, &a, 0);
}

/* One encode of what `a` says (held: with the collector held, in encode_held): done again held
** when one not held found a table moved under its walk (table_moved). */
static smarm_msg_t *encode_pass(lua_State *L, int idx, const held_encode_t *a, int held)
{
  int nvalues = a->nvalues, data_only = a->data_only, readied = a->readied;
  const char *root = a->root;
  codec_moves_t *moves = a->moves;
  size_t tail = a->tail;
  const codec_call_t *call = a->call;
  enc_t e;
  e.held = held;
  moves->n = 0;
  e.moves = moves;
  idx = abs_index(L, idx);
  if (!call && !nvalues && lua_type(L, idx) == LUA_TSTRING) {
    if (data_only || lua_objlen(L, idx) < CODEC_SHARED_STRING || !sm_lbinary_push_shared(L, idx))
      return encode_string(L, idx, tail);
    lua_pop(L, 1); /* shared: enc_value finds it again (nothing collects before) */
  }
  e.L = L;
  luaL_checkstack(L, 8, "message");
  e.buf = e.local;
  e.cap = sizeof e.local;
  e.len = 0;
  e.ntables = 0;
  e.nkeys = 0;
  e.in_key = 0;
  e.root = root;
  e.root_arg = 0;
  e.buf_idx = e.seen_idx = e.cells_idx = e.names_idx = e.bins_idx = 0;
  e.ncells = 0;
  e.nbins = e.nstrings = 0;
  e.data_only = data_only;
  e.restart = e.walks = 0;
  e.first_end = 0;
  if (a->names_at) { /* (held) */
    ensure_slots(&e);
    lua_pushvalue(L, a->names_at);
    lua_replace(L, e.names_idx);
  }
  if (call)
    enc_call(&e, idx, call->caller);
  else if (nvalues)
    enc_values(&e, idx, nvalues);
  else
    enc_value(&e, idx, 0);
  if (e.restart) { /* stopped short (table_moved): again, with the collector held */
    give_back_buffer(&e); /* (restart comes in a walk: the slots are there) */
    lua_pop(L, ENC_SLOTS);
    /* Nothing that runs Lua code or parks goes into the hold, which is the VM's, not this
    ** actor's (ljx.h): the names are looked up before it (remaking them may call a script's
    ** package.searchpath), the handles readied after it (readying one may wait for the IO
    ** thread), and if one changed, the encode is done again. */
    held_encode_t again = *a;
    int n = nvalues ? nvalues : 1;
    luaL_checkstack(L, n + 20, "message");
    held_block_t *g = push_held_block(L);
    for (int i = 0; i < n; i++)
      lua_pushvalue(L, idx + i);
    if (!data_only)
      sm_lrebind_push_names(L);
    lua_pushlightuserdata(L, &again);
    sm_ljx_call_held(L, encode_held, n + 1 + !data_only, 0);
    g->m = again.m;
    g->nh = moves->n;
    int changed = !data_only && ready_moves(L, moves);
    g->m = NULL;
    lua_pop(L, 1);
    if (!changed)
      return again.m;
    discard(again.m, moves->n);
    readied_again(L, root, readied);
    again = *a;
    again.readied = readied + 1;
    return encode_pass(L, idx, &again, 0);
  }
  if (!held && !data_only && ready_moves(L, moves)) { /* a handle was readied: encode it as it
                                                       ** is now */
    if (e.buf_idx)
      lua_pop(L, ENC_SLOTS);
    readied_again(L, root, readied);
    held_encode_t again = *a;
    again.readied = readied + 1;
    return encode_pass(L, idx, &again, 0);
  }
  int nh = moves->n;
  size_t head = nh ? 2 + (size_t)nh * HANDLE_BYTES : 0;
  unsigned char nbins_bytes[10];
  size_t nbins_len = e.nbins ? varint(nbins_bytes, e.nbins) : 0;
  if (e.nbins)
    head += 1 + nbins_len + (size_t)e.nbins * sizeof(sm_binary_t *);
  smarm_msg_t *m = smarm_msg_new(head + e.len + tail);
  if (!m)
    luaL_error(L, "not enough memory");
  unsigned char *out = smarm_msg_data(m);
  if (nh) {
    *out++ = T_HLIST;
    *out++ = (unsigned char)nh;
    for (int i = 0; i < nh; i++, out += HANDLE_BYTES) {
      out[0] = 0;
      out[1] = (unsigned char)moves->kind[i];
      out[2] = e.handles[i].bits;
      memcpy(out + 3, &e.handles[i].id, 8);
      memcpy(out + 11, &e.handles[i].timeout, 8);
      memcpy(out + 19, &e.handles[i].fd, 4);
    }
    smarm_msg_set_owning(m, 1);
  }
  if (e.nbins) { /* the block holds a reference to each, released by sm_codec_drop */
    *out++ = T_BLIST;
    memcpy(out, nbins_bytes, nbins_len);
    out += nbins_len;
    for (uint32_t i = 0; i < e.nbins; i++, out += sizeof(sm_binary_t *)) {
      lua_rawgeti(L, e.bins_idx, (int)i + 1); /* no allocation: nothing collects meanwhile */
      sm_binary_t *b = sm_lbinary_test(L, -1);
      lua_pop(L, 1);
      sm_binary_retain(b);
      uintptr_t entry = (uintptr_t)b;
      if (e.nstrings) {
        lua_rawgeti(L, e.bins_idx, -(int)i - 1);
        entry |= (uintptr_t)lua_toboolean(L, -1) * LISTED_STRING;
        lua_pop(L, 1);
      }
      memcpy(out, &entry, sizeof entry);
    }
    smarm_msg_set_owning(m, 1);
  }
  memcpy(out, e.buf, e.len);
  if (a->first_end)
    *a->first_end = e.first_end;
  if (e.buf_idx) {
    give_back_buffer(&e);
    lua_pop(L, ENC_SLOTS);
  }
  return m;
}

smarm_msg_t *sm_codec_encode(lua_State *L, int idx, const char *root, codec_moves_t *moves)
{
  return encode(L, idx, 0, root, moves, 0, NULL, 0, 0);
}

smarm_msg_t *sm_codec_encode_data(lua_State *L, int idx, const char *root, codec_moves_t *moves)
{
  return encode(L, idx, 0, root, moves, 0, NULL, 1, 0);
}

smarm_msg_t *sm_codec_encode_tail(lua_State *L, int idx, const char *root, codec_moves_t *moves,
                                  size_t tail)
{
  return encode(L, idx, 0, root, moves, tail, NULL, 0, 0);
}

/* A spawn of one function again and again (a worker spawned in a loop, a supervisor's child)
** encodes the same function bytes each time when it is not known by name and its upvalues hold
** what encodes the same while they hold it: nil, booleans, numbers, and modules (`local smarm =
** require("smarm")`), which go by their names. Its bytecode never changes, and a function or
** module can become known by name, or a module stop being one, only in a later index of names
** (lrebind.h). So the VM keeps the last such function's bytes (lvm_t.spawn_fn) and copies them
** while the index they were made under holds and each upvalue holds what it held, with arguments
** that encode on their own (plain_args: nil, booleans, numbers, pids, short strings) written
** after them: a spawn then reads package.loaded's slots and its upvalues instead of walking the
** function, looking names and its bytecode up and growing a buffer (half of the spawner's busy
** time in `spawn_on.lua there`). The function is kept in a registry slot made when the run
** starts (sm_codec_vm_start), so that keeping another never allocates (nothing raises with the
** block made), and no function made later at its address is taken for it; a module an upvalue
** held stays in package.loaded while its index holds. */
static const char spawn_fn_key;

void sm_codec_vm_start(lvm_t *vm)
{
  lua_pushlightuserdata(vm->L, (void *)&spawn_fn_key);
  lua_pushboolean(vm->L, 0);
  lua_rawset(vm->L, LUA_REGISTRYINDEX);
}

void sm_codec_vm_stop(lvm_t *vm)
{
  if (vm->L && vm->spawn_fn) /* a VM that lives on lets the function go (its slot is there) */
    sm_codec_vm_start(vm);
  free(vm->spawn_bytes);
  vm->spawn_bytes = NULL;
  vm->spawn_fn = NULL;
}

/* Whether the upvalues of the function at fn hold what st says they held, in the same cells. */
static int upvalues_hold(lua_State *L, int fn, const lvm_kept_t *st)
{
  for (int i = 0; i < st->nups; i++) {
    if (lua_upvalueid(L, fn, i + 1) != st->cell[i])
      return 0;
    lua_getupvalue(L, fn, i + 1);
    uint64_t bits = sm_ljx_top_bits(L);
    lua_pop(L, 1);
    if (bits != st->up[i])
      return 0;
  }
  return 1;
}

/* Whether the n values from `from` on are arguments a kept function takes: each encodes as
** enc_value writes it and on its own (nothing in them points at another value, nor back).
** *len: their bytes; with out, they are written there too (numbers, strings and booleans by
** write_scalar, as a table's entries are). */
static int plain_args(lua_State *L, int from, int n, size_t *len, unsigned char *out)
{
  unsigned char tmp[16];
  size_t total = 0;
  for (int i = from; i < from + n; i++) {
    unsigned char *o = out ? out + total : tmp;
    ljx_scalar_t v;
    smarm_pid_t pid;
    switch ((v.type = lua_type(L, i))) {
    case LUA_TNIL:
      o[0] = T_NIL;
      total += 1;
      break;
    case LUA_TUSERDATA:
      if (!sm_lsmarm_to_pid(L, i, &pid))
        return 0;
      o[0] = T_PID;
      memcpy(o + 1, &pid, sizeof pid);
      total += 1 + sizeof pid;
      break;
    case LUA_TSTRING:
      v.s = lua_tolstring(L, i, &v.len);
      if (v.len >= CODEC_SHARED_STRING) /* (may travel as a shared binary) */
        return 0;
      total += out ? write_scalar(o, &v) : 1 + varint(tmp, v.len) + v.len;
      break;
    case LUA_TNUMBER:
    case LUA_TBOOLEAN:
      v.n = v.type == LUA_TNUMBER ? lua_tonumber(L, i) : lua_toboolean(L, i);
      total += write_scalar(o, &v);
      break;
    default:
      return 0;
    }
  }
  *len = total;
  return 1;
}

/* Reads into st what the bytes of the function at fn depend on; 0 when they cannot be kept: the
** index is not current, the function is known by name, or an upvalue holds another value than
** nil, a boolean, a number or a module. Runs no Lua code and allocates nothing. */
static int kept_state(lua_State *L, int fn, lvm_kept_t *st)
{
  for (int i = 1; lua_getupvalue(L, fn, i); i++) { /* types first: a function that cannot be
                                                   ** kept (a string, a pid) looks nothing up */
    int t = lua_type(L, -1);
    lua_pop(L, 1);
    if (i > LVM_SPAWN_UPS || t == LUA_TSTRING || t == LUA_TTHREAD || t == LUA_TLIGHTUSERDATA)
      return 0;
  }
  st->gen = sm_lrebind_index_current(L);
  if (!st->gen || sm_lrebind_names_entry(L, fn) != LUA_TNIL)
    return 0;
  for (st->nups = 0; lua_getupvalue(L, fn, st->nups + 1); st->nups++) {
    int t = lua_type(L, -1);
    int same = st->nups < LVM_SPAWN_UPS &&
               (t == LUA_TNIL || t == LUA_TBOOLEAN || t == LUA_TNUMBER ||
                ((t == LUA_TTABLE || t == LUA_TFUNCTION || t == LUA_TUSERDATA) &&
                 sm_lrebind_names_entry(L, -1) == LUA_TSTRING));
    if (same) {
      st->up[st->nups] = sm_ljx_top_bits(L);
      st->cell[st->nups] = lua_upvalueid(L, fn, st->nups + 1);
    }
    lua_pop(L, 1);
    if (!same)
      return 0;
  }
  return 1;
}

static int kept_state_same(const lvm_kept_t *a, const lvm_kept_t *b)
{
  return a->gen == b->gen && a->nups == b->nups &&
         memcmp(a->up, b->up, (size_t)a->nups * sizeof a->up[0]) == 0 &&
         memcmp(a->cell, b->cell, (size_t)a->nups * sizeof a->cell[0]) == 0;
}

/* The function at fn and nargs plain arguments after it, encoded into m, its own bytes ending at
** fn_end, with `before` what they depended on when the encode began: kept when nothing they
** depend on changed during the encode (a finalizer that an allocation of the encode ran may set
** an upvalue or drop the index) and nothing can change them while the index and upvalues hold
** (the top). */
static void keep_transfer(lua_State *L, lvm_t *vm, int fn, int nargs, smarm_msg_t *m,
                          size_t fn_end, const lvm_kept_t *before)
{
  const unsigned char *data = smarm_msg_data(m);
  size_t args_len;
  lvm_kept_t st;
  if (data[0] != T_VALUES || data[1] != nargs + 1 || fn_end <= 2 ||
      !plain_args(L, fn + 1, nargs, &args_len, NULL) || !kept_state(L, fn, &st) ||
      !kept_state_same(&st, before))
    return; /* (handles or binaries come first) */
  size_t len = fn_end - 2; /* the function's own bytes, after VALUES and the count */
  unsigned char *bytes = realloc(vm->spawn_bytes, len);
  if (!bytes)
    return; /* (the old bytes stay, for the function kept before) */
  memcpy(bytes, data + 2, len);
  vm->spawn_bytes = bytes;
  lua_pushlightuserdata(L, (void *)&spawn_fn_key);
  lua_pushvalue(L, fn);
  lua_rawset(L, LUA_REGISTRYINDEX); /* the slot is there: nothing allocates */
  vm->spawn_fn = lua_topointer(L, fn);
  vm->spawn_len = len;
  vm->spawn_state = st;
}

smarm_msg_t *sm_codec_encode_transfer(lua_State *L, int first, int n, codec_moves_t *moves,
                                      size_t tail)
{
  lvm_t *vm = this_vm();
  first = abs_index(L, first);
  int keepable = vm && n < 128 && lua_type(L, first) == LUA_TFUNCTION &&
                 !lua_iscfunction(L, first); /* (a count of one byte) */
  size_t args_len;
  if (keepable && vm->spawn_fn == lua_topointer(L, first) &&
      plain_args(L, first + 1, n - 1, &args_len, NULL) &&
      sm_lrebind_index_current(L) == vm->spawn_state.gen &&
      upvalues_hold(L, first, &vm->spawn_state)) {
    moves->n = 0;
    smarm_msg_t *m = smarm_msg_new(2 + vm->spawn_len + args_len + tail);
    if (!m)
      luaL_error(L, "not enough memory");
    unsigned char *out = smarm_msg_data(m);
    out[0] = T_VALUES;
    out[1] = (unsigned char)n;
    memcpy(out + 2, vm->spawn_bytes, vm->spawn_len);
    plain_args(L, first + 1, n - 1, &args_len, out + 2 + vm->spawn_len);
    return m;
  }
  /* Kept at its second encode in a row (a closure made anew for each spawn would be kept in
  ** vain), when what the bytes depend on is the same after the encode as before it. */
  lvm_kept_t before;
  const void *f = keepable ? lua_topointer(L, first) : NULL;
  int keep = keepable && vm->spawn_seen == f && kept_state(L, first, &before);
  if (keepable)
    vm->spawn_seen = f;
  size_t fn_end = 0;
  held_encode_t a = {n, 0, 0, 0, "", moves, tail, NULL, NULL, &fn_end};
  smarm_msg_t *m = encode_pass(L, first, &a, 0);
  if (keep && moves->n == 0)
    keep_transfer(L, vm, first, n - 1, m, fn_end, &before);
  return m;
}

smarm_msg_t *sm_codec_encode_call(lua_State *L, int idx, const codec_call_t *call,
                                  codec_moves_t *moves, size_t tail)
{
  return encode(L, idx, 0, "request", moves, tail, call, 0, 0);
}

/* Reads the varint at *p (before end) into *v and advances *p past it: 0, or -1 if it does not
** end in time. The decoder, the block lists and the Erlang walk all read varints through it. */
static int read_varint(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    unsigned char b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80))
      return 0;
  }
  return -1;
}

/* Reads the binaries' list at *p, if any: returns how many (0 with none) with *list at their
** pointers, and advances *p past it; -1 if it is malformed. */
static int64_t read_bins(const unsigned char **p, const unsigned char *end,
                         const unsigned char **list)
{
  if (*p >= end || **p != T_BLIST)
    return 0;
  const unsigned char *q = *p + 1;
  uint64_t n;
  if (read_varint(&q, end, &n) < 0 || n == 0 ||
      n > (uint64_t)(end - q) / sizeof(sm_binary_t *))
    return -1;
  *list = q;
  *p = q + n * sizeof(sm_binary_t *);
  return (int64_t)n;
}

void sm_codec_commit(codec_moves_t *moves)
{
  for (int i = 0; i < moves->n; i++)
    sm_lhandle_kind(moves->kind[i])->handed_over(moves->uds[i]);
  moves->n = 0;
}

void sm_codec_abandon(lua_State *L, smarm_msg_t *msg, codec_moves_t *moves)
{
  discard(msg, moves ? moves->n : 0);
  for (int i = 0; moves && i < moves->n; i++) {
    const lhandle_kind_t *k = sm_lhandle_kind(moves->kind[i]);
    if (k->kept)
      k->kept(L, moves->uds[i]);
  }
  if (moves)
    moves->n = 0;
}

/* A handle of the list as read back: the kind's fields, its kind, and the codec's flags. */
typedef struct listed {
  lhandle_t h;
  const lhandle_kind_t *kind;
  int taken;
} listed_t;

/* Reads the handle list at the start of a block, if any: returns how many (0 with none) and
** advances *p past it; -1 if it is malformed. */
static int read_handles(const unsigned char **p, const unsigned char *end, listed_t *out)
{
  if (*p >= end || **p != T_HLIST)
    return 0;
  if (end - *p < 2)
    return -1;
  int n = (*p)[1];
  if (n < 1 || n > CODEC_MAX_HANDLES || end - *p < 2 + (ptrdiff_t)n * HANDLE_BYTES)
    return -1;
  const unsigned char *q = *p + 2;
  int nkinds = sm_lhandle_kind_count();
  for (int i = 0; i < n; i++, q += HANDLE_BYTES) {
    if (q[1] >= nkinds)
      return -1;
    out[i].taken = q[0] & HANDLE_TAKEN;
    out[i].kind = sm_lhandle_kind(q[1]);
    out[i].h.bits = q[2];
    memcpy(&out[i].h.id, q + 3, 8);
    memcpy(&out[i].h.timeout, q + 11, 8);
    memcpy(&out[i].h.fd, q + 19, 4);
  }
  *p = q;
  return n;
}

void sm_codec_drop(smarm_msg_t *msg)
{
  const unsigned char *p = smarm_msg_data(msg), *end = p + smarm_msg_size(msg);
  listed_t hs[CODEC_MAX_HANDLES];
  int n = read_handles(&p, end, hs);
  for (int i = 0; i < n; i++)
    if (!hs[i].taken) /* else its userdata (a failed decode's) or its sender owns it */
      hs[i].kind->drop(&hs[i].h);
  const unsigned char *list;
  int64_t nbins = n >= 0 ? read_bins(&p, end, &list) : 0;
  for (int64_t i = 0; i < nbins; i++) { /* a zeroed entry: a decode's userdata took it */
    uintptr_t entry;
    memcpy(&entry, list + i * (int64_t)sizeof entry, sizeof entry);
    if (entry)
      sm_binary_release((sm_binary_t *)(entry & ~(uintptr_t)LISTED_STRING));
  }
}

/* ---- Decoding ------------------------------------------------------------------------------ */

typedef struct dec {
  lua_State *L;
  const unsigned char *p, *end;
  const unsigned char *start; /* of the value: REFs count their offsets from here */
  int refs_idx;  /* stack slot of the table: offset -> STABLE table (nil until the first one) */
  int nhandles;
  int handles_idx; /* stack slot of the first handle's userdata (made before anything else) */
  int64_t nbins;
  int bins_idx;    /* stack slot of the first binary's userdata, or (bins_in_table) of the table
                      of them, made before anything else too */
  int bins_in_table;
  smarm_ref_t alias; /* a call's (CALL): the last bytes, taken off `end` */
  int detached;  /* the bytes are the decode's own copy (detach): the caller's may be freed */
} dec_t;

/* Before the decode runs Lua code (require), which may receive and so free the block being
** decoded (push_message's pending block): the rest of the decode reads a copy, anchored in the
** refs table. */
static void detach(dec_t *d)
{
  lua_State *L = d->L;
  if (d->detached)
    return;
  d->detached = 1;
  if (!d->refs_idx)
    return; /* a scalar NAMED: nothing is read after its two strings */
  size_t n = (size_t)(d->end - d->start);
  unsigned char *c = lua_newuserdata(L, n ? n : 1);
  memcpy(c, d->start, n);
  if (lua_isnil(L, d->refs_idx)) {
    lua_newtable(L);
    lua_replace(L, d->refs_idx);
  }
  lua_pushlightuserdata(L, (void *)&detach);
  lua_insert(L, -2);
  lua_rawset(L, d->refs_idx);
  d->p = c + (d->p - d->start);
  d->end = c + n;
  d->start = c;
}

static void malformed(dec_t *d) { luaL_error(d->L, "smarm: malformed message"); }

static unsigned char get_byte(dec_t *d)
{
  if (d->p >= d->end)
    malformed(d);
  return *d->p++;
}

static void get_bytes(dec_t *d, void *out, size_t n)
{
  if ((size_t)(d->end - d->p) < n)
    malformed(d);
  memcpy(out, d->p, n);
  d->p += n;
}

static uint64_t get_varint(dec_t *d)
{
  uint64_t v;
  if (read_varint(&d->p, d->end, &v) < 0)
    malformed(d);
  return v;
}

/* refs[at] = the value on top, making refs at the first one. */
static void dec_register(dec_t *d, size_t at)
{
  lua_State *L = d->L;
  if (lua_isnil(L, d->refs_idx)) {
    lua_newtable(L);
    lua_replace(L, d->refs_idx);
  }
  lua_pushnumber(L, (lua_Number)at);
  lua_pushvalue(L, -2);
  lua_rawset(L, d->refs_idx);
}

/* A string of the block: pushes nothing, points *s at its bytes. */
static size_t get_string(dec_t *d, const char **s)
{
  uint64_t n = get_varint(d);
  if ((uint64_t)(d->end - d->p) < n)
    malformed(d);
  *s = (const char *)d->p;
  d->p += n;
  return (size_t)n;
}

/* NAMED: require(module), or a field of it. This runs the receiver's require, which may load
** the module (and park, on an actor's own stack). */
static int dec_named(dec_t *d)
{
  lua_State *L = d->L;
  const char *mod, *field;
  size_t nmod = get_string(d, &mod);
  size_t nfield = get_string(d, &field);
  luaL_checkstack(L, 6, "message");
  /* the names as strings: the block may be gone once require has run (detach) */
  lua_pushlstring(L, mod, nmod);
  lua_pushlstring(L, field, nfield);
  int names = lua_gettop(L) - 1;
  if (nmod == 0) { /* a standard global: the receiving VM's own */
    if (!sm_lrebind_push_standard(L, lua_tostring(L, names + 1)))
      luaL_error(L, "smarm: the standard global '%s' is not in this scheduler's VM",
                 lua_tostring(L, names + 1));
  } else {
    /* a loaded module as it is (no Lua code runs); else require, which runs the module's top
    ** level: that may receive, and so free the block being decoded */
    lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
    lua_pushvalue(L, names);
    lua_rawget(L, -2);
    lua_remove(L, -2);
    if (!lua_istable(L, -1) && !lua_isfunction(L, -1)) { /* absent, or being loaded */
      lua_pop(L, 1);
      detach(d);
      lua_getglobal(L, "require");
      lua_pushvalue(L, names);
      lua_call(L, 1, 1);
    }
    if (nfield > 0) { /* a field the index found with lua_next: raw, no metamethod runs */
      if (lua_istable(L, -1)) {
        lua_pushvalue(L, names + 1);
        lua_rawget(L, -2);
        lua_remove(L, -2);
      } else {
        lua_pop(L, 1);
        lua_pushnil(L);
      }
      if (lua_isnil(L, -1))
        luaL_error(L, "smarm: %s.%s is not in this scheduler's VM", lua_tostring(L, names),
                   lua_tostring(L, names + 1));
    }
  }
  lua_replace(L, names);
  lua_settop(L, names);
  return 1;
}

static int dec_value(dec_t *d, int depth);

/* Records: a table of SHAPE_MIN..SHAPE_MAX string keys and no array part whose values are all
** numbers, strings or booleans is made from the VM's template of its key set (lshape.h), its
** keys neither interned nor inserted one by one. */
#define SHAPE_MIN 8
#define SHAPE_MAX 256

/* Up to the last 8 bytes of the key at q (len bytes, in a block that ends at end) as one word:
** the value a memcpy of them into a zeroed word gives, read in one load where the block allows.
** That memcpy (a zeroing store, then stores of 4, 2 and 1 bytes, then the word's load) cost a
** failed store-to-load forwarding per key: half of dec_record's samples for a record of 100 keys
** of 6 and 7 bytes (docs/perf.md, "Records' keys read in one load"). */
static inline uint64_t key_tail(const unsigned char *q, size_t len, const unsigned char *end)
{
  uint64_t w = 0;
  if (len >= 8) {
    memcpy(&w, q + len - 8, 8);
  } else if (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && end - q >= 8) {
    memcpy(&w, q, 8); /* the key's bytes and what follows it in the block, masked off */
    w &= (UINT64_C(1) << (8 * len)) - 1;
  } else {
    memcpy(&w, q, len);
  }
  return w;
}

/* After TABLE and its sizes: 1 with the table pushed (registered when stable) and d->p past its
** END; 0 with nothing read or pushed when it is not such a record (or its set cannot take the
** template's way): the caller decodes it as any table. Out of line: its arrays are on the C
** stack only while it runs, never in the frames of a deep decode. */
static __attribute__((noinline)) int dec_record(dec_t *d, uint32_t nhash, int stable, size_t at)
{
  const unsigned char *keys[SHAPE_MAX], *vals[SHAPE_MAX];
  size_t lens[SHAPE_MAX];
  const unsigned char *q = d->p, *end = d->end;
  /* The hash only picks the cache entry (lshape.c compares the keys in full): each key's length
  ** and up to its last 8 bytes, FNV-1a style, a word at a time. */
  uint64_t h = UINT64_C(14695981039346656037);
  for (uint32_t i = 0; i < nhash; i++) {
    uint64_t len;
    if (q >= end || *q++ != T_STR || read_varint(&q, end, &len) != 0 ||
        len > (uint64_t)(end - q))
      return 0;
    keys[i] = q;
    lens[i] = (size_t)len;
    h = (h ^ len) * UINT64_C(1099511628211);
    h = (h ^ key_tail(q, (size_t)len, end)) * UINT64_C(1099511628211);
    q += len;
    if (q >= end)
      return 0;
    vals[i] = q;
    switch (*q++) {
    case T_NUM:
      if (end - q < 8)
        return 0;
      q += 8;
      break;
    case T_TRUE: case T_FALSE:
      break;
    case T_STR:
      if (read_varint(&q, end, &len) != 0 || len > (uint64_t)(end - q))
        return 0;
      q += len;
      break;
    default:
      return 0;
    }
  }
  if (q >= end || *q != T_END)
    return 0;
  lua_State *L = d->L;
  const uint32_t *slots;
  if (!sm_lshape_push(L, h, keys, lens, nhash, &slots))
    return 0;
  int t = lua_gettop(L), kl = t - 1;
  if (stable)
    dec_register(d, at);
  for (uint32_t i = 0; i < nhash; i++) {
    const unsigned char *v = vals[i];
    if (*v == T_NUM) {
      double n;
      memcpy(&n, v + 1, sizeof n);
      sm_ljx_table_set_scalar(L, t, slots[i], LUA_TNUMBER, n);
    } else if (*v != T_STR) {
      sm_ljx_table_set_scalar(L, t, slots[i], LUA_TBOOLEAN, *v == T_TRUE);
    } else { /* a new string may be white where the table is black by now: the API's barrier */
      lua_rawgeti(L, kl, (int)i + 1);
      d->p = v;
      dec_value(d, 1);
      lua_rawset(L, t);
    }
  }
  d->p = q + 1; /* past END */
  lua_remove(L, kl);
  return 1;
}

/* The functions this VM decoded, by their bytecode: registry[&templates_key] = { [bytecode] =
** the function loaded from it once }, with its count at [1]; emptied when it would hold more than
** TEMPLATES distinct functions. Every closure decoded from that bytecode is a copy of its template
** (luaJIT_copyclosure): one prototype, so the JIT's traces for it are shared. Loading each one
** anew made a new prototype per message, and a new trace for every hot one. */
static const char templates_key;
#define TEMPLATES 256

/* Replaces the template on top of the stack with a new closure of its function, upvalues nil,
** in the decoding actor's environment (a template's is that of the actor that loaded it: the
** closure takes the decoding actor's own, as a load per decode gave it). */
static void copy_template(lua_State *L)
{
  luaJIT_copyclosure(L, -1);
  lua_pushvalue(L, LUA_GLOBALSINDEX);
  lua_setfenv(L, -2);
  lua_remove(L, -2);
}

/* Replaces the bytecode (a string) on top of the stack with a new closure of its function,
** upvalues nil. */
static void closure_of_code(lua_State *L)
{
  lvm_push_registry_table(L, &templates_key, NULL);
  lua_insert(L, -2);
  int cache = lua_gettop(L) - 1;
  lua_pushvalue(L, -1);
  lua_rawget(L, cache);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    size_t n;
    const char *code = lua_tolstring(L, -1, &n);
    int rc = luaL_loadbufferx(L, code, n, "=message", "b"); /* bytecode only, never source */
    if (rc == LUA_ERRMEM)
      luaL_error(L, "not enough memory");
    if (rc != 0 || !lua_isfunction(L, -1))
      luaL_error(L, "smarm: malformed message (a function that does not load: %s)",
                 lua_isstring(L, -1) ? lua_tostring(L, -1) : "bad bytecode");
    lua_rawgeti(L, cache, 1);
    lua_Number count = lua_tonumber(L, -1);
    lua_pop(L, 1);
    if (count >= TEMPLATES) { /* start over: a VM's working set of functions is small */
      lvm_t *vm = this_vm();
      if (vm) /* (the template and its key may go now) */
        vm->last_template = 0;
      lua_createtable(L, 1, 8);
      lua_pushlightuserdata(L, (void *)&templates_key);
      lua_pushvalue(L, -2);
      lua_rawset(L, LUA_REGISTRYINDEX);
      lua_replace(L, cache);
      count = 0;
    }
    lua_pushnumber(L, count + 1);
    lua_rawseti(L, cache, 1);
    lua_pushvalue(L, -2);
    lua_pushvalue(L, -2);
    lua_rawset(L, cache);
  }
  lvm_t *vm = this_vm();
  if (vm) {
    vm->last_template = sm_ljx_top_bits(L);
    vm->last_code = lua_tolstring(L, -2, &vm->last_code_len);
  }
  lua_replace(L, cache);
  lua_settop(L, cache);
  copy_template(L);
}

/* Pushes a new closure of the function whose bytecode is [code, code + n), upvalues nil. No Lua
** code runs here (a load, a copy: a debug hook has nowhere to take a message and free the block
** being decoded; message_spec checks it), nor in a finalizer that may (they cannot take one). */
static void new_closure(dec_t *d, const char *code, size_t n)
{
  const lvm_t *vm = this_vm();
  if (vm && vm->last_template && n == vm->last_code_len && memcmp(code, vm->last_code, n) == 0) {
    sm_ljx_push_bits(d->L, vm->last_template);
    copy_template(d->L);
    return;
  }
  lua_pushlstring(d->L, code, n);
  closure_of_code(d->L);
}

/* Whether the names sm_lrebind_find pushed for the value at `value` (k: 1 or 2 strings on top)
** give that very value in this VM as dec_named resolves them (a replaced standard function, or
** a module field reassigned since the index was built, gives another); pops the names. */
static int named_here_is(lua_State *L, int value, enum lrebind_kind k)
{
  int names = lua_gettop(L) - (k == LREBIND_FIELD ? 2 : 1) + 1, same = 0;
  size_t nmod;
  lua_tolstring(L, names, &nmod);
  if (nmod == 0) {
    same = k == LREBIND_FIELD && sm_lrebind_push_standard(L, lua_tostring(L, names + 1)) &&
           lua_rawequal(L, -1, value);
  } else {
    lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
    lua_pushvalue(L, names);
    lua_rawget(L, -2);
    if (k == LREBIND_FIELD && lua_istable(L, -1)) {
      lua_pushvalue(L, names + 1);
      lua_rawget(L, -2);
    }
    same = lua_rawequal(L, -1, value);
  }
  lua_settop(L, names - 1);
  return same;
}

int sm_codec_same_here(lua_State *L, int idx)
{
  int t = lua_type(L, idx);
  smarm_pid_t pid;
  return t == LUA_TNIL || t == LUA_TBOOLEAN || t == LUA_TNUMBER || t == LUA_TSTRING ||
         (t == LUA_TUSERDATA && sm_lsmarm_to_pid(L, idx, &pid));
}

int sm_codec_copy_function_here(lua_State *L, int idx)
{
  if (lua_type(L, idx) != LUA_TFUNCTION || lua_iscfunction(L, idx))
    return 0;
  idx = abs_index(L, idx);
  int base = lua_gettop(L), names = 0, nups = 0;
  luaL_checkstack(L, 8, "spawn");
  lua_getfenv(L, idx); /* a decoded copy takes the decoding actor's globals: the VM's */
  int same_env = lua_rawequal(L, -1, LUA_GLOBALSINDEX);
  lua_pop(L, 1);
  if (!same_env)
    return 0;
  while (lua_getupvalue(L, idx, nups + 1)) { /* as enc_function would encode each */
    nups++;
    int t = lua_type(L, -1);
    if (t == LUA_TTABLE || t == LUA_TFUNCTION) { /* the same value only if named (a module's) */
      if (!names) {
        sm_lrebind_push_names(L);
        lua_insert(L, -2);
        names = lua_gettop(L) - 1;
      }
      int v = lua_gettop(L);
      enum lrebind_kind k = sm_lrebind_find(L, names, v, 1);
      if (k == LREBIND_NONE || !named_here_is(L, v, k)) {
        lua_settop(L, base);
        return 0;
      }
    } else if (!sm_codec_same_here(L, -1)) {
      lua_settop(L, base);
      return 0;
    }
    lua_pop(L, 1);
  }
  lua_settop(L, base);
  luaJIT_copyclosure(L, idx); /* the prototype itself: no dump, no factory (a Lua function) */
  for (int i = 1; i <= nups; i++) {
    lua_getupvalue(L, idx, i);
    lua_setupvalue(L, -2, i);
  }
  return 1;
}

/* FUNC: loads the bytecode (bytecode only: a block never holds source), registers the function
** if a REF or a JOIN names it (SFUNC: inside its own upvalues too), then sets or joins its
** upvalues. */
static int dec_function(dec_t *d, int depth, int shared)
{
  lua_State *L = d->L;
  size_t at = (size_t)(d->p - 1 - d->start);
  if (depth >= CODEC_MAX_DEPTH || !d->refs_idx)
    malformed(d);
  luaL_checkstack(L, 8, "message too deep");
  const char *code;
  size_t n = get_string(d, &code);
  if (n < 4 || memcmp(code, "\033LJ", 3) != 0) /* bytecode only: never source */
    malformed(d);
  new_closure(d, code, n);
  int fn = lua_gettop(L);
  if (shared)
    dec_register(d, at);
  unsigned nups = get_byte(d);
  for (unsigned i = 1; i <= nups; i++) {
    if (d->p < d->end && *d->p == T_JOIN) {
      d->p++;
      uint64_t other_at = get_varint(d);
      int j = get_byte(d);
      if (lua_isnil(L, d->refs_idx))
        malformed(d);
      lua_pushnumber(L, (lua_Number)other_at);
      lua_rawget(L, d->refs_idx);
      /* lua_upvaluejoin checks nothing: both upvalues must exist */
      if (!lua_isfunction(L, -1) || lua_iscfunction(L, -1) || !lua_getupvalue(L, -1, j))
        malformed(d);
      lua_pop(L, 1);
      if (!lua_getupvalue(L, fn, (int)i))
        malformed(d);
      lua_pop(L, 1);
      lua_upvaluejoin(L, fn, (int)i, lua_gettop(L), j);
      lua_pop(L, 1);
      continue;
    }
    dec_value(d, depth + 1);
    if (!lua_setupvalue(L, fn, (int)i))
      malformed(d);
  }
  return 1;
}

static int dec_value(dec_t *d, int depth)
{
  lua_State *L = d->L;
  unsigned char tag = get_byte(d);
  switch (tag) {
  case T_NIL: lua_pushnil(L); return 1;
  case T_FALSE: lua_pushboolean(L, 0); return 1;
  case T_TRUE: lua_pushboolean(L, 1); return 1;
  case T_NUM: {
    lua_Number n;
    get_bytes(d, &n, sizeof n);
    lua_pushnumber(L, n);
    return 1;
  }
  case T_STR: {
    uint64_t n = get_varint(d);
    if ((uint64_t)(d->end - d->p) < n)
      malformed(d);
    lua_pushlstring(L, (const char *)d->p, (size_t)n);
    d->p += n;
    return 1;
  }
  case T_PID: {
    smarm_pid_t pid;
    get_bytes(d, &pid, sizeof pid);
    sm_lsmarm_push_pid(L, pid);
    return 1;
  }
  case T_SREF: {
    smarm_ref_t ref;
    get_bytes(d, &ref, sizeof ref);
    sm_lsmarm_push_ref(L, ref);
    return 1;
  }
  case T_FROM:
  case T_TIMER: {
    smarm_pid_t pid;
    smarm_ref_t ref;
    get_bytes(d, &pid, sizeof pid);
    get_bytes(d, &ref, sizeof ref);
    if (tag == T_FROM)
      sm_lsmarm_push_from(L, pid, ref);
    else
      sm_lsmarm_push_timer(L, pid, ref, 0);
    return 1;
  }
  case T_CALL: { /* made with cached field names: the hot path of every call's server */
    if (depth != 0 || !d->refs_idx)
      malformed(d);
    smarm_pid_t pid;
    get_bytes(d, &pid, sizeof pid);
    const lvm_t *vm = this_vm();
    sm_lshape_push_fixed(L, vm, LVM_FIXED_CALL);
    int t = lua_gettop(L);
    sm_lsmarm_push_from(L, pid, d->alias);
    sm_lshape_fixed_set(L, t, vm, LVM_FIXED_CALL, 0);
    dec_value(d, depth + 1);
    sm_lshape_fixed_set(L, t, vm, LVM_FIXED_CALL, 1);
    return 1;
  }
  case T_HANDLE: {
    unsigned char i = get_byte(d);
    if (i >= d->nhandles)
      malformed(d);
    lua_pushvalue(L, d->handles_idx + i);
    return 1;
  }
  case T_BIN: {
    uint64_t i = get_varint(d);
    if (i >= (uint64_t)d->nbins)
      malformed(d);
    if (d->bins_in_table)
      lua_rawgeti(L, d->bins_idx, (int)i + 1);
    else
      lua_pushvalue(L, d->bins_idx + (int)i);
    return 1;
  }
  case T_BINV: {
    const char *s;
    size_t n = get_string(d, &s);
    sm_lbinary_push_copy(L, s, n);
    return 1;
  }
  case T_REF: {
    uint64_t at = get_varint(d);
    if (!d->refs_idx || lua_isnil(L, d->refs_idx))
      malformed(d);
    lua_pushnumber(L, (lua_Number)at);
    lua_rawget(L, d->refs_idx);
    if (!lua_istable(L, -1) && !lua_isfunction(L, -1))
      malformed(d);
    return 1;
  }
  case T_FUNC: case T_SFUNC:
    return dec_function(d, depth, tag == T_SFUNC);
  case T_NAMED:
    return dec_named(d);
  case T_ATOM: case T_OPAQUE: {
    const char *s;
    size_t n = get_string(d, &s);
    sm_lterm_push_blob(L, tag == T_ATOM ? LTERM_ATOM : LTERM_OPAQUE, s, n);
    return 1;
  }
  case T_TUPLE: case T_MAP:
    if (d->p >= d->end || (*d->p != T_TABLE && *d->p != T_STABLE))
      malformed(d);
    dec_value(d, depth);
    sm_lterm_mark_table(L, -1, tag == T_TUPLE ? LTERM_TUPLE : LTERM_MAP);
    return 1;
  case T_TABLE: case T_STABLE: {
    if (depth >= CODEC_MAX_DEPTH || !d->refs_idx)
      malformed(d);
    luaL_checkstack(L, 6, "message too deep");
    size_t at = (size_t)(d->p - 1 - d->start);
    uint32_t narray, nhash;
    get_bytes(d, &narray, 4);
    get_bytes(d, &nhash, 4);
    if (narray == 0 && nhash >= SHAPE_MIN && nhash <= SHAPE_MAX &&
        dec_record(d, nhash, tag == T_STABLE, at))
      return 1;
    /* sizes are hints; a pair takes at least 2 bytes, so a bad block cannot ask for more */
    size_t most = (size_t)(d->end - d->p) / 2;
    lua_createtable(L, narray <= most ? (int)narray : 0, nhash <= most ? (int)nhash : 0);
    if (tag == T_STABLE)
      dec_register(d, at);
    for (;;) {
      if (d->p < d->end && *d->p == T_END) {
        d->p++;
        return 1;
      }
      dec_value(d, depth + 1);
      dec_value(d, depth + 1);
      if (lua_isnil(L, -2))
        malformed(d);
      lua_rawset(L, -3);
    }
  }
  default:
    malformed(d);
    return 0;
  }
}

/* Decodes the bytes [p, p + n), whose handle list (if any) is at `list` (inside a block whose
** handles may be taken; NULL: none allowed). */
/* Pushes the value of the bytes [p, p + n), or with nvalues, the values of a transfer (their
** count in *nvalues); a transfer where a value is expected, or the other way round, is
** malformed. */
static void decode_range(lua_State *L, unsigned char *p, size_t n, unsigned char *list,
                         smarm_msg_t *msg, int *nvalues)
{
  dec_t d;
  d.detached = 0;
  listed_t handles[CODEC_MAX_HANDLES];
  d.L = L;
  d.p = p;
  d.end = d.p + n;
  d.nhandles = read_handles(&d.p, d.end, handles);
  if (d.nhandles < 0 || (d.nhandles > 0 && !list))
    malformed(&d);
  const unsigned char *bin_list = NULL;
  d.nbins = read_bins(&d.p, d.end, &bin_list);
  if (d.nbins < 0 || (d.nbins > 0 && !list) || d.nbins > INT32_MAX)
    malformed(&d);
  int base = lua_gettop(L);
  luaL_checkstack(L, d.nhandles + 8, "message");
  /* Sockets and files become their userdata first, before anything else of the decode can fail
  ** (out of memory, a malformed block). Each one's entry in the block is marked taken as soon as
  ** its userdata owns it: a block dropped after a failed decode closes only the others
  ** (sm_codec_drop), never one twice. */
  for (int i = 0; i < d.nhandles; i++) {
    handles[i].kind->push(L, &handles[i].h);
    list[2 + i * HANDLE_BYTES] |= HANDLE_TAKEN;
  }
  d.handles_idx = base + 1;
  /* Binaries too: the VM's userdata of each takes the block's reference from its entry (zeroed),
  ** so the block may go while the decode runs Lua code (detach), and the references not taken
  ** when a decode fails here are released with the block (sm_codec_drop). */
  d.bins_in_table = d.nbins > BINS_FAST;
  if (d.bins_in_table)
    lua_createtable(L, (int)d.nbins, 0);
  else
    luaL_checkstack(L, (int)d.nbins + 8, "message");
  d.bins_idx = lua_gettop(L) + !d.bins_in_table;
  for (int64_t i = 0; i < d.nbins; i++) {
    unsigned char *slot = (unsigned char *)bin_list + i * (int64_t)sizeof(sm_binary_t *);
    uintptr_t entry;
    memcpy(&entry, slot, sizeof entry);
    if (!entry) /* taken by an earlier decode of this block */
      malformed(&d);
    if (entry & LISTED_STRING) { /* a long string: its bytes made this VM's string, then the
                                    entry's reference goes (the block keeps it until then) */
      sm_binary_t *b = (sm_binary_t *)(entry & ~(uintptr_t)LISTED_STRING);
      lua_pushlstring(L, b->bytes, b->len);
      memset(slot, 0, sizeof entry);
      sm_binary_release(b);
    } else {
      sm_lbinary_push_taken(L, slot);
    }
    if (d.bins_in_table)
      lua_rawseti(L, -2, (int)i + 1);
  }
  if (msg) /* its handles and binaries are the receiver's now; nothing below touches msg again */
    smarm_msg_set_owning(msg, 0);
  d.start = d.p;
  if (d.p < d.end && *d.p == T_CALL) { /* its alias ends the bytes */
    if ((size_t)(d.end - d.p) < 1 + sizeof(smarm_pid_t) + 1 + sizeof d.alias)
      malformed(&d);
    d.end -= sizeof d.alias;
    memcpy(&d.alias, d.end, sizeof d.alias);
  }
  int values = d.p < d.end && *d.p == T_VALUES;
  if (values != (nvalues != NULL))
    malformed(&d);
  int has_tables = d.p < d.end && (*d.p == T_TABLE || *d.p == T_STABLE || *d.p == T_CALL ||
                                    *d.p == T_FUNC || *d.p == T_SFUNC || *d.p == T_TUPLE ||
                                    *d.p == T_MAP || values);
  if (has_tables) {
    lua_pushnil(L); /* the slot of the refs table, made at the first STABLE */
    d.refs_idx = lua_gettop(L);
  } else {
    d.refs_idx = 0; /* a scalar: no table can follow */
  }
  int count = 1;
  if (values) {
    d.p++;
    uint64_t k = get_varint(&d);
    if (k < 1 || k > INT16_MAX) /* (spawn_on sends fewer) */
      malformed(&d);
    count = (int)k;
    luaL_checkstack(L, count, "message");
    for (int i = 0; i < count; i++)
      dec_value(&d, 0);
    *nvalues = count;
  } else {
    dec_value(&d, 0);
  }
  if (d.p != d.end)
    malformed(&d);
  if (d.nhandles > 0 || d.nbins > 0) { /* keep the values alone: drop the handles, binaries and
                                          refs below them */
    int first = lua_gettop(L) - count + 1;
    for (int i = 0; i < count; i++) {
      lua_pushvalue(L, first + i);
      lua_replace(L, base + 1 + i);
    }
    lua_settop(L, base + count);
  } else if (has_tables) {
    lua_remove(L, d.refs_idx);
  }
}

/* The IO events' functions by source (io.h); set once per module, read by every receive. */
#define EVENT_SOURCES 7
static _Atomic(const codec_event_fns_t *) event_fns[EVENT_SOURCES];

void sm_codec_set_event_fns(int source, const codec_event_fns_t *fns)
{
  if (source > 0 && source < EVENT_SOURCES) /* pairs with the acquires below */
    atomic_store_explicit(&event_fns[source], fns, memory_order_release);
}

/* Is this block an IO event (decoding it pushes an event's table)? */
static int is_event(const smarm_msg_t *msg)
{
  return smarm_msg_size(msg) >= sizeof(io_event_t) &&
         *(const unsigned char *)smarm_msg_data((smarm_msg_t *)msg) == IO_EVENT_TAG;
}

/* Per VM: registry[&targets_key] = { [source * 2^32 + the id's slot] = handle } (weak values;
** exact as numbers) and registry[&held_key] = { [event table] = source } (weak keys). */
static const char targets_key, held_key;

static lua_Number target_key(int source, uint64_t id)
{
  return (lua_Number)source * 4294967296.0 + (lua_Number)(uint32_t)id;
}

void sm_codec_set_event_target(lua_State *L, int idx, int source, uint64_t id)
{
  idx = abs_index(L, idx);
  lvm_push_registry_table(L, &targets_key, "v");
  lua_pushnumber(L, target_key(source, id));
  lua_pushvalue(L, idx);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

int sm_codec_push_event_target(lua_State *L, int source, uint64_t id)
{
  lvm_push_registry(L, &targets_key);
  if (!lua_isnil(L, -1)) {
    lua_pushnumber(L, target_key(source, id));
    lua_rawget(L, -2);
    lua_remove(L, -2);
  }
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  return 1;
}

void sm_codec_hold_event(lua_State *L, int source)
{
  lvm_push_registry_table(L, &held_key, "k");
  lua_pushvalue(L, -2);
  lua_pushinteger(L, source);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

int sm_codec_unhold_event(lua_State *L)
{
  if (!lua_istable(L, -1))
    return 0;
  lvm_push_registry(L, &held_key);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return 0;
  }
  lua_pushvalue(L, -2);
  lua_rawget(L, -2);
  int source = (int)lua_tointeger(L, -1); /* nil: 0 */
  lua_pop(L, 1);
  if (source) {
    lua_pushvalue(L, -2);
    lua_pushnil(L);
    lua_rawset(L, -3);
  }
  lua_pop(L, 1);
  return source;
}

int sm_codec_event_taken(lua_State *L)
{
  int source = sm_codec_unhold_event(L);
  if (source <= 0 || source >= EVENT_SOURCES)
    return 0;
  const codec_event_fns_t *f = atomic_load_explicit(&event_fns[source], memory_order_acquire);
  if (f && f->taken)
    f->taken(L);
  return 1;
}

int sm_codec_decode(lua_State *L, smarm_msg_t *msg)
{
  if (is_event(msg)) {
    const unsigned char *p = smarm_msg_data(msg);
    const codec_event_fns_t *f =
      p[1] < EVENT_SOURCES ? atomic_load_explicit(&event_fns[p[1]], memory_order_acquire) : NULL;
    if (!f)
      luaL_error(L, "malformed message");
    f->decode(L, p, smarm_msg_size(msg));
    return f->taken != NULL; /* a source without flow control holds nothing */
  }
  sm_codec_decode_head(L, msg, 0);
  return 0;
}

int sm_codec_scalar(const smarm_msg_t *msg, size_t tail, codec_scalar_t *out)
{
  size_t n = smarm_msg_size(msg);
  if (n < tail)
    return 0;
  const unsigned char *p = smarm_msg_data((smarm_msg_t *)msg), *end = p + (n - tail);
  if (end - p == 9 && p[0] == T_NUM) {
    memcpy(&out->n, p + 1, sizeof out->n);
    return out->type = LUA_TNUMBER;
  }
  uint64_t len;
  const unsigned char *s = p + 1;
  if (end - p >= 2 && p[0] == T_STR && read_varint(&s, end, &len) == 0 &&
      len == (uint64_t)(end - s)) {
    out->s = (const char *)s;
    out->len = (size_t)len;
    return out->type = LUA_TSTRING;
  }
  return 0;
}

void sm_codec_decode_head(lua_State *L, smarm_msg_t *msg, size_t tail)
{
  size_t n = smarm_msg_size(msg);
  if (n < tail)
    luaL_error(L, "malformed message");
  /* A lone number or string needs none of decode_range's set-up: it is pushed straight from the
  ** block. */
  codec_scalar_t v;
  switch (sm_codec_scalar(msg, tail, &v)) {
  case LUA_TNUMBER:
    lua_pushnumber(L, v.n);
    return;
  case LUA_TSTRING:
    lua_pushlstring(L, v.s, v.len);
    return;
  }
  decode_range(L, smarm_msg_data(msg), n - tail, smarm_msg_data(msg), msg, NULL);
}

int sm_codec_decode_transfer(lua_State *L, smarm_msg_t *msg, size_t tail)
{
  size_t n = smarm_msg_size(msg);
  if (n < tail)
    luaL_error(L, "malformed message");
  int count = 0;
  decode_range(L, smarm_msg_data(msg), n - tail, smarm_msg_data(msg), msg, &count);
  return count;
}

void sm_codec_decode_bytes(lua_State *L, const void *p, size_t n)
{
  decode_range(L, (unsigned char *)p, n, NULL, NULL, NULL);
}

/* ---- Plain data to Erlang terms (sm_codec_data_to_etf) ---------------------------------------
** A walk of the block that writes what lterm.c's encoder writes for the decoded value: a tuple's
** n fields (its n, or its border), a plain table whose keys are 1..count as a list, any other
** as a map. A table's pairs are first skipped (etf_skip) to learn its shape, so each byte is
** read once per table around it. A table met twice (a REF) is refused, as the term encoder
** refuses a table inside itself. */
typedef struct etf_out {
  const unsigned char *start, *end;
  etf_buf_t out;  /* malloc'd (grow_malloc) */
  int failed;
  int in_key; /* > 0 while a table that is a map's key is written (sm_etf_sort_pairs) */
} etf_out_t;

static int grow_malloc(etf_buf_t *b, size_t need)
{
  size_t cap = b->cap ? b->cap : 256;
  while (cap - b->len < need)
    cap *= 2;
  unsigned char *nb = realloc(b->b, cap);
  if (!nb)
    return -1;
  b->b = nb;
  b->cap = cap;
  return 0;
}

/* Reads a varint at *at; 0 and failed past the end. */
static uint64_t etf_varint(etf_out_t *x, const unsigned char **at)
{
  uint64_t v;
  if (read_varint(at, x->end, &v) < 0) {
    x->failed = 1;
    return 0;
  }
  return v;
}

static const unsigned char *etf_value(etf_out_t *x, const unsigned char *p, int depth);

/* The end of the value at p, walked once (no term written): for a table's shape pass, so that
** each byte is read once per table around it, not once per path to it. */
static const unsigned char *etf_skip(etf_out_t *x, const unsigned char *p, int depth)
{
  if (x->failed || !p || p >= x->end || depth >= ETF_MAX_DEPTH) {
    x->failed = 1;
    return NULL;
  }
  unsigned char tag = *p++;
  switch (tag) {
  case T_FALSE: case T_TRUE: return p;
  case T_NUM: case T_PID: case T_SREF:
    if (x->end - p < 8)
      break;
    return p + 8;
  case T_STR: case T_ATOM: case T_OPAQUE: case T_BINV: {
    uint64_t n = etf_varint(x, &p);
    if (x->failed || (uint64_t)(x->end - p) < n)
      break;
    return p + n;
  }
  case T_TUPLE: case T_MAP:
    if (p >= x->end || (*p != T_TABLE && *p != T_STABLE))
      break;
    return etf_skip(x, p, depth);
  case T_TABLE: case T_STABLE:
    if (x->end - p < 8)
      break;
    for (p += 8; p && p < x->end && *p != T_END;) {
      p = etf_skip(x, p, depth + 1);
      p = etf_skip(x, p, depth + 1);
    }
    if (!p || p >= x->end)
      break;
    return p + 1;
  default:
    break;
  }
  x->failed = 1;
  return NULL;
}

/* A table's key is a whole number in 1..limit: that number, else 0. */
static uint64_t etf_index_key(const unsigned char *k, const unsigned char *end, uint64_t limit)
{
  double v;
  if (end - k < 9 || *k != T_NUM)
    return 0;
  memcpy(&v, k + 1, sizeof v);
  return v >= 1 && v <= (double)limit && v == floor(v) ? (uint64_t)v : 0;
}

static const unsigned char *etf_table(etf_out_t *x, const unsigned char *p, int depth, int mark)
{
  if (x->end - p < 9 || (*p != T_TABLE && *p != T_STABLE)) {
    x->failed = 1;
    return NULL;
  }
  p += 9; /* the tag, then the two counts (hints) */
  /* the pairs: where each key and value begin */
  size_t count = 0, cap = 0;
  const unsigned char **pairs = NULL;
  while (!x->failed && p < x->end && *p != T_END) {
    if (count == cap) {
      cap = cap ? cap * 2 : 8;
      const unsigned char **more = realloc(pairs, cap * 2 * sizeof *pairs);
      if (!more) {
        x->failed = 1;
        break;
      }
      pairs = more;
    }
    pairs[2 * count] = p;
    p = etf_skip(x, p, depth + 1);
    pairs[2 * count + 1] = p;
    if (p)
      p = etf_skip(x, p, depth + 1);
    count++;
  }
  if (x->failed || p >= x->end) {
    free(pairs);
    x->failed = 1;
    return NULL;
  }
  /* by index: a list's or a tuple's elements (NULL: nil) */
  size_t n = count;
  if (mark == T_TUPLE) { /* its n when it has one, else its border */
    n = 0;
    for (size_t i = 0; i < count; i++) {
      const unsigned char *k = pairs[2 * i];
      double v;
      if (x->end - k >= 12 && k[0] == T_STR && k[1] == 1 && k[2] == 'n' && k[3] == T_NUM) {
        memcpy(&v, k + 4, sizeof v);
        if (!sm_lterm_tuple_arity_ok(v)) { /* no term, as smarm.term.encode would raise */
          free(pairs);
          x->failed = 1;
          return NULL;
        }
        n = (size_t)v;
        goto sized;
      }
    }
    while (n < count) {
      size_t i = 0;
      while (i < count && etf_index_key(pairs[2 * i], x->end, count) != n + 1)
        i++;
      if (i == count)
        break;
      n++;
    }
  }
sized:;
  const unsigned char **at = calloc(n ? n : 1, sizeof *at);
  int list = mark == 0 && !!at;
  for (size_t i = 0; at && i < count; i++) {
    uint64_t k = etf_index_key(pairs[2 * i], x->end, n);
    if (k)
      at[k - 1] = pairs[2 * i + 1];
    else
      list = 0;
  }
  if (!at) {
    x->failed = 1;
  } else if (mark == T_TUPLE) {
    if (n <= 255) {
      sm_etf_put_u8(&x->out, ETF_SMALL_TUPLE);
      sm_etf_put_u8(&x->out, (unsigned)n);
    } else {
      sm_etf_put_u8(&x->out, ETF_LARGE_TUPLE);
      sm_etf_put_u32(&x->out, (uint32_t)n);
    }
    for (size_t i = 0; i < n && !x->failed; i++) {
      if (at[i])
        etf_value(x, at[i], depth + 1);
      else
        sm_etf_put_atom(&x->out, "nil", 3);
    }
  } else if (list) {
    if (count) {
      sm_etf_put_u8(&x->out, ETF_LIST);
      sm_etf_put_u32(&x->out, (uint32_t)count);
      for (size_t i = 0; i < count && !x->failed; i++)
        etf_value(x, at[i], depth + 1);
    }
    sm_etf_put_u8(&x->out, ETF_NIL);
  } else {
    sm_etf_put_u8(&x->out, ETF_MAP);
    sm_etf_put_u32(&x->out, (uint32_t)count);
    /* keys that may be one term (lterm.c, key_may_repeat): their bytes are compared after */
    int alike = 0;
    for (size_t i = 0; i < count; i++) {
      unsigned char tag = *pairs[2 * i];
      alike |= tag == T_TABLE || tag == T_STABLE || tag == T_TUPLE || tag == T_MAP ||
               tag == T_BINV;
    }
    /* the pairs' places, for the check of a key twice and for the order of a map inside a
    ** key (util/etf.h), both by the keys' bytes */
    int order = x->in_key && count > 1;
    etf_pair_t *pair = alike || order ? malloc(count * sizeof *pair) : NULL;
    if ((alike || order) && !pair)
      x->failed = 1;
    for (size_t i = 0; i < count && !x->failed; i++) {
      size_t pos = x->out.len;
      unsigned char tag = *pairs[2 * i];
      int table_key = tag == T_TABLE || tag == T_STABLE || tag == T_TUPLE || tag == T_MAP;
      x->in_key += table_key;
      etf_value(x, pairs[2 * i], depth + 1);
      x->in_key -= table_key;
      if (pair)
        pair[i] = (etf_pair_t){pos, x->out.len, 0, NULL};
      etf_value(x, pairs[2 * i + 1], depth + 1);
      if (pair)
        pair[i].end = x->out.len;
    }
    if (alike && !x->failed && !x->out.failed && sm_etf_order_pairs(&x->out, pair, count))
      x->failed = 1; /* Erlang refuses a map with a key twice: no term */
    if (order && !x->failed && !x->out.failed && sm_etf_sort_pairs(&x->out, pair, count) < 0)
      x->failed = 1;
    free(pair);
  }
  free(at);
  free(pairs);
  return x->failed ? NULL : p + 1;
}

static const unsigned char *etf_value(etf_out_t *x, const unsigned char *p, int depth)
{
  if (x->failed || !p || p >= x->end || depth >= ETF_MAX_DEPTH) {
    x->failed = 1;
    return NULL;
  }
  unsigned char tag = *p++;
  size_t left = (size_t)(x->end - p);
  switch (tag) {
  case T_FALSE: sm_etf_put_atom(&x->out, "false", 5); return p;
  case T_TRUE: sm_etf_put_atom(&x->out, "true", 4); return p;
  case T_NUM: {
    double v;
    if (left < sizeof v || (memcpy(&v, p, sizeof v), !isfinite(v)))
      break;
    sm_etf_put_number(&x->out, v);
    return p + sizeof v;
  }
  case T_STR: case T_ATOM: case T_OPAQUE: case T_BINV: {
    uint64_t n = etf_varint(x, &p);
    if (x->failed || (uint64_t)(x->end - p) < n || n > UINT32_MAX)
      break;
    if (tag == T_STR || tag == T_BINV) {
      sm_etf_put_u8(&x->out, ETF_BINARY);
      sm_etf_put_u32(&x->out, (uint32_t)n);
      sm_etf_put(&x->out, p, (size_t)n);
    } else if (tag == T_ATOM) {
      sm_etf_put_atom(&x->out, (const char *)p, (size_t)n);
    } else {
      sm_etf_put(&x->out, p, (size_t)n);
    }
    return p + n;
  }
  case T_PID: case T_SREF: {
    uint64_t v;
    const char *node;
    size_t nn;
    uint32_t creation;
    if (left < sizeof v || !sm_dist_identity(&node, &nn, &creation))
      break;
    memcpy(&v, p, sizeof v);
    if (tag == T_PID)
      sm_etf_put_local_pid(&x->out, node, nn, v, creation);
    else
      sm_etf_put_local_ref(&x->out, node, nn, v, creation);
    return p + sizeof v;
  }
  case T_TUPLE: case T_MAP:
    return etf_table(x, p, depth, tag);
  case T_TABLE: case T_STABLE:
    return etf_table(x, p - 1, depth, 0);
  default: /* nil (no table holds one), a REF, handles, functions: no term */
    break;
  }
  x->failed = 1;
  return NULL;
}

unsigned char *sm_codec_data_to_etf(const void *p, size_t n, size_t *len)
{
  etf_out_t x = {p, (const unsigned char *)p + n, {NULL, 0, 0, 0, grow_malloc, NULL}, 0, 0};
  sm_etf_put_u8(&x.out, ETF_VERSION);
  const unsigned char *end = etf_value(&x, p, 0);
  if (x.failed || x.out.failed || end != x.end) {
    free(x.out.b);
    return NULL;
  }
  *len = x.out.len;
  return x.out.b;
}
