/*
** The decoder's templates of record tables (see lshape.h).
**
** A message that carries the same kind of record again and again (a table of string keys,
** field1..field100, with plain values) makes the decoder intern every key and insert it into a
** new table: a hash of its bytes, a walk of the string table, a compare, a hash-part insert,
** per field and per message. Here each key set met is made once into a template table (keys,
** each with the value true) and an array of the same keys in the message's order; a message of
** that key set becomes a copy of the template's hash part (sm_ljx_table_copy_hash: the nodes
** copied whole, nothing hashed or inserted; the new table is white and nothing allocates while
** it is written, so no barrier is due), whose values the decoder then sets: a number or boolean
** straight into its key's node (the entry's slots; no GC object, no barrier), a string by key
** (lua_rawset of a key the table holds: one hash chain walked by pointer, the API's barrier).
**
** The cache: LSHAPE_SLOTS entries per VM, chosen by the key set's hash, each for a set of at
** most LSHAPE_BYTES of keys (so a VM keeps at most about 64 x 4 KiB of keys and their tables).
** An entry, once made, stays until the run's end (no eviction, to keep it simple); a key set
** whose entry is taken by another takes the decoder's general path, after a compare. Each
** entry keeps the key bytes it was made from, compared in full before it is used, so a hash
** collision costs a compare and never a wrong table. The templates live in one table of the
** VM's registry (vm->shapes_ref), the entries' bytes in C memory (vm->shapes), both released
** with the run (sm_lshape_release). Owner: the VM's scheduler.
*/
#include "lshape.h"

#include "lvm.h"

#include <lauxlib.h>

#include <stdlib.h>
#include <string.h>

#define LSHAPE_SLOTS 64
#define LSHAPE_BYTES 4096 /* the most key bytes of a set kept: a VM keeps at most 64 such sets */

typedef struct shape {
  uint64_t hash;
  uint32_t n;           /* keys; 0: the entry is free */
  size_t len;           /* bytes of blob */
  unsigned char *blob;  /* each key as its length (size_t) then its bytes, in order; then the
                        ** node of each key in the template (uint32_t), at slots */
  uint32_t *slots;
} shape_t;

struct lshape_cache {
  shape_t e[LSHAPE_SLOTS];
};

/* Whether a and b hold the same n bytes: inline for the short keys of records (a call of
** memcmp per key was 5% of a receiver of 100-field records), a few overlapping word compares. */
static inline int same_bytes(const unsigned char *a, const unsigned char *b, size_t n)
{
  if (n > 16)
    return memcmp(a, b, n) == 0;
  if (n >= 8) {
    uint64_t a0, b0, a1, b1;
    memcpy(&a0, a, 8), memcpy(&b0, b, 8), memcpy(&a1, a + n - 8, 8), memcpy(&b1, b + n - 8, 8);
    return ((a0 ^ b0) | (a1 ^ b1)) == 0;
  }
  if (n >= 4) {
    uint32_t a0, b0, a1, b1;
    memcpy(&a0, a, 4), memcpy(&b0, b, 4), memcpy(&a1, a + n - 4, 4), memcpy(&b1, b + n - 4, 4);
    return ((a0 ^ b0) | (a1 ^ b1)) == 0;
  }
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i])
      return 0;
  return 1;
}

static int blob_matches(const shape_t *e, const unsigned char *const *keys, const size_t *lens,
                        uint32_t n)
{
  const unsigned char *b = e->blob, *end = e->blob + e->len;
  for (uint32_t i = 0; i < n; i++) {
    size_t len;
    if ((size_t)(end - b) < sizeof len)
      return 0;
    memcpy(&len, b, sizeof len);
    b += sizeof len;
    if (len != lens[i] || (size_t)(end - b) < len || !same_bytes(b, keys[i], len))
      return 0;
    b += len;
  }
  return b == end;
}

/* Makes entry e (slot k) of the key set: its template and key list at templates[2k+1] and
** [2k+2] (templates at t). 0, or -1 (a key twice, or no C memory: nothing cached). */
static int make_entry(lua_State *L, int t, shape_t *e, unsigned k, uint64_t hash,
                      const unsigned char *const *keys, const size_t *lens, uint32_t n)
{
  size_t len = 0;
  for (uint32_t i = 0; i < n; i++)
    len += sizeof(size_t) + lens[i];
  lua_createtable(L, 0, (int)n); /* the template */
  lua_createtable(L, (int)n, 0); /* the keys in order */
  for (uint32_t i = 0; i < n; i++) {
    lua_pushlstring(L, (const char *)keys[i], lens[i]);
    lua_pushvalue(L, -1);
    lua_rawget(L, -4);
    int twice = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (twice) {
      lua_pop(L, 3);
      return -1;
    }
    lua_pushvalue(L, -1);
    lua_rawseti(L, -3, (int)i + 1);
    lua_pushboolean(L, 1);
    lua_rawset(L, -4);
  }
  size_t slots_at = (len + sizeof(uint32_t) - 1) / sizeof(uint32_t) * sizeof(uint32_t);
  unsigned char *blob = malloc(slots_at + n * sizeof(uint32_t));
  if (!blob) {
    lua_pop(L, 2);
    return -1;
  }
  unsigned char *b = blob;
  for (uint32_t i = 0; i < n; i++) {
    memcpy(b, &lens[i], sizeof lens[i]);
    memcpy(b + sizeof lens[i], keys[i], lens[i]);
    b += sizeof lens[i] + lens[i];
  }
  uint32_t *slots = (uint32_t *)(void *)(blob + slots_at);
  for (uint32_t i = 0; i < n; i++) {
    lua_rawgeti(L, -1, (int)i + 1);
    int slot = sm_ljx_table_key_slot(L, -3, -1);
    lua_pop(L, 1);
    if (slot < 0) { /* (cannot be: the template holds every key) */
      free(blob);
      lua_pop(L, 2);
      return -1;
    }
    slots[i] = (uint32_t)slot;
  }
  lua_rawseti(L, t, (int)(2 * k + 2));
  lua_rawseti(L, t, (int)(2 * k + 1));
  e->hash = hash;
  e->n = n;
  e->len = len;
  e->blob = blob;
  e->slots = slots;
  return 0;
}

int sm_lshape_push(lua_State *L, uint64_t hash, const unsigned char *const *keys,
                   const size_t *lens, uint32_t n, const uint32_t **slots)
{
  lvm_t *vm = this_vm();
  if (!vm || n == 0 || n > INT32_MAX / 2)
    return 0;
  if (!vm->shapes && !(vm->shapes = calloc(1, sizeof *vm->shapes)))
    return 0;
  /* the top bits of a multiplied hash: all of its bits move them (its low bits alone came from
  ** the low bits of each byte, and similar key sets crowded a few entries) */
  unsigned k = (unsigned)((hash * UINT64_C(0x9E3779B97F4A7C15)) >> 58); /* LSHAPE_SLOTS = 64 */
  shape_t *e = &vm->shapes->e[k];
  if (e->n && (e->hash != hash || e->n != n || !blob_matches(e, keys, lens, n)))
    return 0; /* another key set's: the general path */
  if (!e->n) { /* only small key sets are kept: at most LSHAPE_BYTES of keys each */
    size_t bytes = 0;
    for (uint32_t i = 0; i < n; i++)
      bytes += lens[i];
    if (bytes > LSHAPE_BYTES)
      return 0;
  }
  luaL_checkstack(L, 8, "message");
  if (!vm->shapes_ref) {
    lua_createtable(L, 2 * LSHAPE_SLOTS, 0);
    vm->shapes_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, vm->shapes_ref);
  int t = lua_gettop(L);
  if (!e->n && make_entry(L, t, e, k, hash, keys, lens, n) != 0) {
    lua_settop(L, t - 1);
    return 0;
  }
  lua_rawgeti(L, t, (int)(2 * k + 2)); /* the keys */
  lua_rawgeti(L, t, (int)(2 * k + 1)); /* the template */
  lua_createtable(L, 0, (int)n);
  if (sm_ljx_table_copy_hash(L, -1, -2) != 0) {
    lua_settop(L, t - 1);
    return 0;
  }
  lua_remove(L, -2); /* the template */
  lua_remove(L, t);  /* the templates */
  *slots = e->slots;
  return 1;
}

/* ---- Fixed shapes ---- */

static const struct {
  enum lvm_str kind; /* the value of its `smarm` field */
  unsigned n;
  enum lvm_str keys[LVM_FIXED_KEYS];
} fixed_shapes[LVM_FIXEDS] = {
  [LVM_FIXED_CALL] = {LVM_STR_CALL, 2, {LVM_STR_FROM, LVM_STR_REQUEST}},
  [LVM_FIXED_DOWN] = {LVM_STR_DOWN, 3, {LVM_STR_REF, LVM_STR_PID, LVM_STR_REASON}},
  [LVM_FIXED_EXIT] = {LVM_STR_EXIT, 2, {LVM_STR_PID, LVM_STR_REASON}},
};

void sm_lshape_fixed_init(lvm_t *vm)
{
  lua_State *L = vm->L;
  for (unsigned k = 0; k < LVM_FIXEDS; k++) {
    unsigned n = fixed_shapes[k].n;
    lua_createtable(L, 0, (int)n + 1); /* as sm_lshape_push_fixed makes each copy */
    lvm_push_str(L, vm, LVM_STR_SMARM);
    lvm_push_str(L, vm, fixed_shapes[k].kind);
    lua_rawset(L, -3);
    for (unsigned i = 0; i < n; i++) {
      lvm_push_str(L, vm, fixed_shapes[k].keys[i]);
      lua_pushboolean(L, 1);
      lua_rawset(L, -3);
    }
    for (unsigned i = 0; i < n; i++) {
      lvm_push_str(L, vm, fixed_shapes[k].keys[i]);
      vm->fixed_slot[k][i] = (uint32_t)sm_ljx_table_key_slot(L, -2, -1); /* it holds them */
      lua_pop(L, 1);
    }
    vm->fixed_bits[k] = sm_ljx_top_bits(L);
    vm->fixed_ref[k] = luaL_ref(L, LUA_REGISTRYINDEX);
  }
}

void sm_lshape_fixed_release(lvm_t *vm)
{
  for (unsigned k = 0; k < LVM_FIXEDS; k++)
    lvm_unref(vm->L, vm->fixed_ref[k]);
}

void sm_lshape_push_fixed(lua_State *L, const lvm_t *vm, enum lvm_fixed k)
{
  sm_ljx_push_bits(L, vm->fixed_bits[k]);
  lua_createtable(L, 0, (int)fixed_shapes[k].n + 1);
  if (sm_ljx_table_copy_hash(L, -1, -2) != 0) /* the same shape: cannot be */
    luaL_error(L, "smarm: a fixed shape's template does not fit its copy");
  lua_remove(L, -2);
}

void sm_lshape_release(lvm_t *vm, int unref)
{
  if (vm->shapes) {
    for (unsigned k = 0; k < LSHAPE_SLOTS; k++)
      free(vm->shapes->e[k].blob);
    free(vm->shapes);
    vm->shapes = NULL;
  }
  if (unref && vm->L && vm->shapes_ref)
    luaL_unref(vm->L, LUA_REGISTRYINDEX, vm->shapes_ref);
  vm->shapes_ref = 0;
}
