/*
** Binaries (see lbinary.h): the shared block, its Lua userdata and methods, smarm.binary and
** smarm.is_binary. A binary reads like a string: #b, b:sub, b:byte, tostring(b) and .. give its
** bytes; == compares them.
*/
#include "lbinary.h"

#include "ljx.h"
#include "lvm.h"

#include <lauxlib.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Registry keys: the addresses of these (the VM's metatable of binaries, and its intern table:
** a block's address as a number -> the VM's userdata of it, weak values). */
static const char binary_mt_key, binary_intern_key;
/* And the VM's binaries of long strings sent again (sm_lbinary_push_shared): string -> userdata,
** weak values. */
static const char string_blocks_key;

#define LBINARY_MAGIC UINT64_C(0x736d61726d62696e) /* "smarmbin" */

/* The userdata: a magic word (so a binary is told from its bytes, as pids are) and the block.
** A VM has one userdata per block (interned), which holds every reference the VM took: those of
** the messages that brought the block, counted here without touching the block's shared line,
** and released together by its __gc. */
typedef struct lbinary {
  uint64_t magic;
  sm_binary_t *b; /* NULL until it holds its references, and after its __gc */
  size_t held;    /* references held */
} lbinary_t;

/* Process-wide, for smarm.stats: relaxed counters (numbers for people, nothing is ordered by
** them). */
static _Atomic size_t live_count, live_bytes;

void sm_binary_counts(size_t *count, size_t *bytes)
{
  *count = atomic_load_explicit(&live_count, memory_order_relaxed);
  *bytes = atomic_load_explicit(&live_bytes, memory_order_relaxed);
}

void sm_binary_retain(sm_binary_t *b)
{
  /* relaxed: the caller holds a reference, so the block cannot be freed meanwhile */
  atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

void sm_binary_release(sm_binary_t *b) { sm_binary_release_n(b, 1); }

void sm_binary_release_n(sm_binary_t *b, size_t n)
{
  /* acq_rel: its release half orders this holder's reads of the bytes before the free; the
  ** acquire half, in the last releaser, pairs with every other holder's release (a fence would
  ** do it only in the last, but TSan does not model fences) */
  if (n == 0 || atomic_fetch_sub_explicit(&b->refs, n, memory_order_acq_rel) != n)
    return;
  atomic_fetch_sub_explicit(&live_count, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&live_bytes, b->len, memory_order_relaxed);
  free(b);
}

sm_binary_t *sm_lbinary_test(lua_State *L, int idx)
{
  if (lua_type(L, idx) != LUA_TUSERDATA || lua_objlen(L, idx) != sizeof(lbinary_t))
    return NULL;
  lbinary_t *u = lua_touserdata(L, idx);
  return u->magic == LBINARY_MAGIC ? u->b : NULL;
}

/* Pushes a userdata of no block yet, with its metatable: whatever raises before it holds a
** block finds a userdata whose __gc has nothing to release. */
static lbinary_t *push_empty(lua_State *L)
{
  lbinary_t *u = lua_newuserdata(L, sizeof *u);
  u->magic = LBINARY_MAGIC;
  u->b = NULL;
  u->held = 0;
  lvm_push_registry(L, &binary_mt_key);
  lua_setmetatable(L, -2);
  return u;
}

/* Pushes the intern table and the key of b in it. */
static void push_intern_key(lua_State *L, const sm_binary_t *b)
{
  lvm_push_registry_table(L, &binary_intern_key, "v");
  lua_pushnumber(L, (lua_Number)(uintptr_t)b); /* an address: exact in a double */
}

/* Counts the block of the userdata on top, which holds its references, toward the VM's memory
** (its __gc takes it off again), then enters it in the intern table. Both may collect (u is on
** the stack); the entry may raise for memory, leaving the userdata counted and holding what it
** holds, as its __gc expects. */
static void charge_and_intern(lua_State *L, lbinary_t *u)
{
  sm_ljx_gc_charge(L, u->b->len);
  push_intern_key(L, u->b);
  lua_pushvalue(L, -3);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

void sm_lbinary_push_taken(lua_State *L, unsigned char *slot)
{
  sm_binary_t *b;
  memcpy(&b, slot, sizeof b);
  push_intern_key(L, b);
  lua_rawget(L, -2);
  lua_remove(L, -2);
  lbinary_t *u = lua_touserdata(L, -1);
  if (u && u->b == b) { /* the VM's userdata of b (the collector drops an entry from the table
                           before its __gc runs) */
    u->held++; /* it holds the slot's reference from here: nothing raises in between */
    memset(slot, 0, sizeof b);
    return;
  }
  lua_pop(L, 1);
  u = push_empty(L);
  u->b = b;
  u->held = 1;
  memset(slot, 0, sizeof b);
  charge_and_intern(L, u);
}

void sm_lbinary_push_copy(lua_State *L, const char *s, size_t n)
{
  lbinary_t *u = push_empty(L);
  sm_binary_t *b = n < SIZE_MAX - sizeof *b - 1 ? malloc(sizeof *b + n + 1) : NULL;
  if (!b)
    luaL_error(L, "not enough memory");
  atomic_init(&b->refs, 1); /* the userdata's */
  b->len = n;
  memcpy(b->bytes, s, n);
  b->bytes[n] = '\0';
  atomic_fetch_add_explicit(&live_count, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&live_bytes, n, memory_order_relaxed);
  u->b = b;
  u->held = 1;
  charge_and_intern(L, u);
}

/* Whether the string whose bytes are at s is one that sm_lbinary_push_shared remembers; if not,
** it is remembered from now on. */
static int sent_again(const char *s)
{
  lvm_t *vm = this_vm();
  uint32_t id = sm_ljx_string_id(s);
  for (unsigned i = 0; i < LVM_SENT; i++)
    if (vm->sent[i] == s && vm->sent_id[i] == id)
      return 1;
  unsigned k = vm->sent_next++ % LVM_SENT;
  vm->sent[k] = s;
  vm->sent_id[k] = id;
  return 0;
}

int sm_lbinary_push_shared(lua_State *L, int idx)
{
  size_t n;
  const char *s = lua_tolstring(L, idx, &n); /* the string at idx keeps its bytes */
  lvm_push_registry_table(L, &string_blocks_key, "v");
  lua_pushvalue(L, idx);
  lua_rawget(L, -2);
  if (sm_lbinary_test(L, -1)) {
    lua_remove(L, -2);
    return 1;
  }
  lua_pop(L, 1);
  if (!sent_again(s)) {
    lua_pop(L, 1);
    return 0;
  }
  sm_lbinary_push_copy(L, s, n);
  lua_pushvalue(L, idx);
  lua_pushvalue(L, -2);
  lua_rawset(L, -4);
  lua_remove(L, -2);
  return 1;
}

const char *sm_lbinary_checkbytes(lua_State *L, int idx, size_t *len)
{
  sm_binary_t *b = sm_lbinary_test(L, idx);
  if (b) {
    *len = b->len;
    return b->bytes;
  }
  if (lua_type(L, idx) != LUA_TSTRING && lua_type(L, idx) != LUA_TNUMBER)
    luaL_typerror(L, idx, "string or binary");
  return lua_tolstring(L, idx, len);
}

static sm_binary_t *check_binary(lua_State *L, int idx)
{
  sm_binary_t *b = sm_lbinary_test(L, idx);
  if (!b)
    luaL_typerror(L, idx, "smarm.binary");
  return b;
}

/* smarm.binary(s) -> binary: a new block with the bytes of the string s (a binary is returned as
** it is). */
static int l_binary(lua_State *L)
{
  if (sm_lbinary_test(L, 1)) {
    lua_settop(L, 1);
    return 1;
  }
  if (lua_type(L, 1) != LUA_TSTRING)
    return luaL_argerror(L, 1, lua_pushfstring(L, "string expected, got %s",
                                               luaL_typename(L, 1)));
  size_t n;
  const char *s = lua_tolstring(L, 1, &n);
  sm_lbinary_push_copy(L, s, n);
  return 1;
}

static int l_is_binary(lua_State *L)
{
  lua_pushboolean(L, sm_lbinary_test(L, 1) != NULL);
  return 1;
}

static int m_gc(lua_State *L)
{
  lbinary_t *u = lua_touserdata(L, 1);
  if (u && u->b) {
    sm_binary_t *b = u->b;
    u->b = NULL;
    sm_ljx_gc_discharge(L, b->len);
    sm_binary_release_n(b, u->held);
  }
  return 0;
}

static int m_len(lua_State *L)
{
  lua_pushnumber(L, (lua_Number)check_binary(L, 1)->len);
  return 1;
}

static int m_tostring(lua_State *L)
{
  sm_binary_t *b = check_binary(L, 1);
  lua_pushlstring(L, b->bytes, b->len);
  return 1;
}

/* string.sub's and string.byte's positions: negative counts from the end. */
static ptrdiff_t position(ptrdiff_t pos, size_t len)
{
  return pos >= 0 ? pos : (ptrdiff_t)len + pos + 1;
}

static int m_sub(lua_State *L)
{
  sm_binary_t *b = check_binary(L, 1);
  ptrdiff_t i = position(luaL_optinteger(L, 2, 1), b->len);
  ptrdiff_t j = position(luaL_optinteger(L, 3, -1), b->len);
  if (i < 1)
    i = 1;
  if (j > (ptrdiff_t)b->len)
    j = (ptrdiff_t)b->len;
  if (i > j)
    lua_pushliteral(L, "");
  else
    lua_pushlstring(L, b->bytes + i - 1, (size_t)(j - i + 1));
  return 1;
}

static int m_byte(lua_State *L)
{
  sm_binary_t *b = check_binary(L, 1);
  ptrdiff_t i = position(luaL_optinteger(L, 2, 1), b->len);
  ptrdiff_t j = position(luaL_optinteger(L, 3, i), b->len);
  if (i < 1)
    i = 1;
  if (j > (ptrdiff_t)b->len)
    j = (ptrdiff_t)b->len;
  if (i > j)
    return 0;
  if (j - i >= INT32_MAX || !lua_checkstack(L, (int)(j - i + 1)))
    return luaL_error(L, "string slice too long");
  for (ptrdiff_t k = i; k <= j; k++)
    lua_pushinteger(L, (unsigned char)b->bytes[k - 1]);
  return (int)(j - i + 1);
}

/* == between two binaries (Lua asks only then): the same bytes. */
static int m_eq(lua_State *L)
{
  sm_binary_t *a = sm_lbinary_test(L, 1), *b = sm_lbinary_test(L, 2);
  lua_pushboolean(L, a && b && (a == b || (a->len == b->len && !memcmp(a->bytes, b->bytes,
                                                                       a->len))));
  return 1;
}

/* a .. b where either is a binary: a string, as if the binary were one. */
static int m_concat(lua_State *L)
{
  for (int i = 1; i <= 2; i++) {
    sm_binary_t *b = sm_lbinary_test(L, i);
    if (b) {
      lua_pushlstring(L, b->bytes, b->len);
      lua_replace(L, i);
    } else if (!lua_isstring(L, i)) {
      return luaL_error(L, "attempt to concatenate a %s value", luaL_typename(L, i));
    }
  }
  lua_concat(L, 2);
  return 1;
}

void sm_lbinary_register(lua_State *L, int module)
{
  static const luaL_Reg methods[] = {
    {"tostring", m_tostring}, {"sub", m_sub}, {"byte", m_byte}, {"len", m_len}, {NULL, NULL},
  };
  lua_createtable(L, 0, 8);
  lua_pushliteral(L, "smarm.binary");
  lua_setfield(L, -2, "__name");
  lua_pushliteral(L, "smarm.binary"); /* getmetatable says what it is; setmetatable cannot */
  lua_setfield(L, -2, "__metatable");
  lua_newtable(L);
  luaL_register(L, NULL, methods);
  lua_setfield(L, -2, "__index");
  static const luaL_Reg meta[] = {
    {"__gc", m_gc}, {"__len", m_len}, {"__tostring", m_tostring}, {"__eq", m_eq},
    {"__concat", m_concat}, {NULL, NULL},
  };
  luaL_register(L, NULL, meta);
  lvm_set_registry_once(L, &binary_mt_key);
  lua_pushcfunction(L, l_binary);
  lua_setfield(L, module, "binary");
  lua_pushcfunction(L, l_is_binary);
  lua_setfield(L, module, "is_binary");
}
