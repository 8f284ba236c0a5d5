/*
** Pids and refs in Lua (see lpid.h). The intern table (weak values) maps a key made from the
** value's bits to its userdata; the userdata carries a magic word, so a pid or ref is recognised
** from its bytes alone (no metatable lookup on the hot path of send).
*/
#include "lpid.h"

#include "ljx.h"

#include <lauxlib.h>

#include <assert.h>
#include <stdint.h>
#include <string.h>

/* Registry keys: the addresses of these (lightuserdata keys cost no string hashing). */
static const char pid_mt_key, ref_mt_key, from_mt_key, timer_mt_key, pid_intern_key;

/* A userdata of another type of this size with this first word is not a concern. */
#define LPID_MAGIC UINT64_C(0x736d61726d706964) /* "smarmpid" */
#define LREF_MAGIC UINT64_C(0x736d61726d726566) /* "smarmref" */
#define LFROM_MAGIC UINT64_C(0x736d61726d66726d) /* "smarmfrm" */
#define LTIMER_MAGIC UINT64_C(0x736d61726d746d72) /* "smarmtmr" */

typedef struct lpid {
  uint64_t magic; /* LPID_MAGIC or LREF_MAGIC */
  uint64_t pid;   /* the pid, or the ref */
} lpid_t;

/* The intern table's key for a pid: its 64 bits read as a double, with 1 added to the scheduler
** field (the sign and exponent). Schedulers are fewer than SMARM_SCHED_MAX = 1024, so the
** exponent is 1 to 1024: a normal, finite, positive number, never NaN, zero or denormal, and
** different pids give different numbers. A number key costs no allocation, unlike an 8-byte
** string. The field has 12 bits, and past 1023 the key would break: 2046 and 4094 make NaN (no
** table key), 2047 to 4093 negative numbers (a ref's or timer's key), 4095 (SMARM_PID_SCHED_REMOTE,
** another node's process) a denormal. No Lua value holds such a pid: the runtime makes none
** below SMARM_SCHED_MAX into one (another node's processes are opaque terms, lterm.h), and the
** decoder of terms leaves a pid of this node with such a field opaque (lterm.c, push_own). */
static lua_Number pid_key(smarm_pid_t pid)
{
#ifdef SMARM_DEBUG
  assert(smarm_pid_sched(pid) < SMARM_SCHED_MAX);
#endif
  union {
    uint64_t u;
    double d;
  } k = {pid + ((uint64_t)1 << (SMARM_PID_SLOT_BITS + SMARM_PID_GEN_BITS))};
  return k.d;
}

/* A ref's key: minus its value, exact while refs stay below 2^53 (a process would have to make a
** million refs a second for three centuries), and negative, so never a pid's key. */
static lua_Number ref_key(smarm_ref_t ref) { return -(lua_Number)ref; }

/* A timer's key: minus its ref and a half (its ref is unique in the process, so its target need
** not be in it), exact while refs stay below 2^52, and never a whole number: never a ref's. */
static lua_Number timer_key(smarm_ref_t ref) { return -((lua_Number)ref + 0.5); }

/* Whether the full userdata whose payload is at p is `size` bytes and starts with magic. */
static int payload_is(const void *p, size_t size, uint64_t magic)
{
  uint64_t first;
  if (sm_ljx_udata_size(p) != size)
    return 0;
  memcpy(&first, p, sizeof first);
  return first == magic;
}

static lpid_t *test_ident(lua_State *L, int idx, uint64_t magic)
{
  if (lua_type(L, idx) != LUA_TUSERDATA)
    return NULL;
  lpid_t *p = lua_touserdata(L, idx);
  return payload_is(p, sizeof *p, magic) ? p : NULL;
}

static lpid_t *test_pid(lua_State *L, int idx) { return test_ident(L, idx, LPID_MAGIC); }

int sm_lpid_payload_pid(const void *p, smarm_pid_t *out)
{
  if (!payload_is(p, sizeof(lpid_t), LPID_MAGIC))
    return 0;
  *out = ((const lpid_t *)p)->pid;
  return 1;
}

/* Pushes the interned userdata of (magic, v), made with the metatable whose bits are mt. A
** fresh value (a ref just made) cannot be in the table yet: no lookup. */
static void push_ident(lua_State *L, uint64_t magic, uint64_t v, lua_Number key, uint64_t mt,
                       int fresh)
{
  lvm_t *vm = this_vm();
  sm_ljx_push_bits(L, vm->intern);
  if (!fresh) {
    lua_pushnumber(L, key);
    lua_rawget(L, -2);
    if (!lua_isnil(L, -1)) {
      lua_remove(L, -2);
      return;
    }
    lua_pop(L, 1);
  }
  lpid_t *p = lua_newuserdata(L, sizeof *p);
  p->magic = magic;
  p->pid = v;
  sm_ljx_push_bits(L, mt);
  lua_setmetatable(L, -2);
  lua_pushnumber(L, key);
  lua_pushvalue(L, -2);
  lua_rawset(L, -4);
  lua_remove(L, -2);
}

void sm_lsmarm_push_pid(lua_State *L, smarm_pid_t pid)
{
  push_ident(L, LPID_MAGIC, pid, pid_key(pid), this_vm()->pid_mt, 0);
}

int sm_lsmarm_to_pid(lua_State *L, int idx, smarm_pid_t *out)
{
  lpid_t *p = test_pid(L, idx);
  if (p)
    *out = p->pid;
  return p != NULL;
}

void sm_lsmarm_push_ref(lua_State *L, smarm_ref_t ref)
{
  push_ident(L, LREF_MAGIC, ref, ref_key(ref), this_vm()->ref_mt, 0);
}

void sm_lsmarm_push_new_ref(lua_State *L, smarm_ref_t ref)
{
  push_ident(L, LREF_MAGIC, ref, ref_key(ref), this_vm()->ref_mt, 1);
}

int sm_lsmarm_to_ref(lua_State *L, int idx, smarm_ref_t *out)
{
  lpid_t *p = test_ident(L, idx, LREF_MAGIC);
  if (p)
    *out = p->pid;
  return p != NULL;
}

/* Pairs of a pid and a ref; their size tells them from a pid or ref, their magic which pair they
** are:
**   a call's reply handle (LFROM_MAGIC): the caller and the call's alias, read as .pid and .ref;
**     not interned (nothing needs its identity), so making one costs one userdata;
**   a message timer (LTIMER_MAGIC): its target and its ref (smarm_timer_t); interned as pids and
**     refs are (timer_key), so that one that came back in a message is the same table key, as
**     Erlang's TRef is in a map. */
typedef struct lpair {
  uint64_t magic;
  smarm_pid_t pid;
  smarm_ref_t ref;
} lpair_t;

static lpair_t *test_pair(lua_State *L, int idx, uint64_t magic)
{
  if (lua_type(L, idx) != LUA_TUSERDATA)
    return NULL;
  lpair_t *f = lua_touserdata(L, idx);
  return payload_is(f, sizeof *f, magic) ? f : NULL;
}

static void push_pair(lua_State *L, uint64_t magic, uint64_t mt, smarm_pid_t pid, smarm_ref_t ref)
{
  lpair_t *f = lua_newuserdata(L, sizeof *f);
  f->magic = magic;
  f->pid = pid;
  f->ref = ref;
  sm_ljx_push_bits(L, mt);
  lua_setmetatable(L, -2);
}

static int to_pair(lua_State *L, int idx, uint64_t magic, smarm_pid_t *pid, smarm_ref_t *ref)
{
  lpair_t *f = test_pair(L, idx, magic);
  if (f) {
    *pid = f->pid;
    *ref = f->ref;
  }
  return f != NULL;
}

void sm_lsmarm_push_from(lua_State *L, smarm_pid_t caller, smarm_ref_t alias)
{
  push_pair(L, LFROM_MAGIC, this_vm()->from_mt, caller, alias);
}

int sm_lsmarm_to_from(lua_State *L, int idx, smarm_pid_t *caller, smarm_ref_t *alias)
{
  return to_pair(L, idx, LFROM_MAGIC, caller, alias);
}

int sm_lpid_payload_from(const void *p, smarm_pid_t *caller, smarm_ref_t *alias)
{
  if (!payload_is(p, sizeof(lpair_t), LFROM_MAGIC))
    return 0;
  *caller = ((const lpair_t *)p)->pid;
  *alias = ((const lpair_t *)p)->ref;
  return 1;
}

void sm_lsmarm_push_timer(lua_State *L, smarm_pid_t to, smarm_ref_t ref, int fresh)
{
  lvm_t *vm = this_vm();
  sm_ljx_push_bits(L, vm->intern);
  if (!fresh) {
    lua_pushnumber(L, timer_key(ref));
    lua_rawget(L, -2);
    if (!lua_isnil(L, -1)) {
      lua_remove(L, -2);
      return;
    }
    lua_pop(L, 1);
  }
  push_pair(L, LTIMER_MAGIC, vm->timer_mt, to, ref);
  lua_pushnumber(L, timer_key(ref));
  lua_pushvalue(L, -2);
  lua_rawset(L, -4);
  lua_remove(L, -2);
}

int sm_lsmarm_to_timer(lua_State *L, int idx, smarm_pid_t *to, smarm_ref_t *ref)
{
  return to_pair(L, idx, LTIMER_MAGIC, to, ref);
}

/* from.pid is the caller, from.ref the call's alias (Erlang's From = {Pid, Tag}); inside a
** runtime only (pids and refs are interned by the running scheduler's VM). */
static int from_index(lua_State *L)
{
  lpair_t *f = test_pair(L, 1, LFROM_MAGIC);
  const char *k = lua_tostring(L, 2);
  if (!this_vm())
    return luaL_error(L, "a call's from is read inside a runtime only");
  if (f && k && strcmp(k, "pid") == 0)
    sm_lsmarm_push_pid(L, f->pid);
  else if (f && k && strcmp(k, "ref") == 0)
    sm_lsmarm_push_ref(L, f->ref);
  else
    lua_pushnil(L);
  return 1;
}

static int pair_tostring(lua_State *L, uint64_t magic, const char *what)
{
  lpair_t *f = test_pair(L, 1, magic);
  if (!f)
    return luaL_argerror(L, 1, lua_pushfstring(L, "%s expected", what));
  lua_pushfstring(L, "#%s<%d.%d.%d, #Ref<0.%d.%d>>", magic == LFROM_MAGIC ? "From" : "Timer",
                  (int)smarm_pid_sched(f->pid) + 1, (int)smarm_pid_slot(f->pid),
                  (int)smarm_pid_gen(f->pid), (int)(f->ref >> 32), (int)(uint32_t)f->ref);
  return 1;
}

static int pair_eq(lua_State *L, uint64_t magic)
{
  lpair_t *a = test_pair(L, 1, magic), *b = test_pair(L, 2, magic);
  lua_pushboolean(L, a && b && a->pid == b->pid && a->ref == b->ref);
  return 1;
}

static int from_tostring(lua_State *L) { return pair_tostring(L, LFROM_MAGIC, "a call's from"); }
static int from_eq(lua_State *L) { return pair_eq(L, LFROM_MAGIC); }
static int timer_tostring(lua_State *L) { return pair_tostring(L, LTIMER_MAGIC, "timer"); }
static int timer_eq(lua_State *L) { return pair_eq(L, LTIMER_MAGIC); }

static int ref_tostring(lua_State *L)
{
  lpid_t *p = test_ident(L, 1, LREF_MAGIC);
  if (!p)
    return luaL_argerror(L, 1, "ref expected");
  lua_pushfstring(L, "#Ref<0.%d.%d>", (int)(p->pid >> 32), (int)(uint32_t)p->pid);
  return 1;
}

static int ref_eq(lua_State *L)
{
  lpid_t *a = test_ident(L, 1, LREF_MAGIC), *b = test_ident(L, 2, LREF_MAGIC);
  lua_pushboolean(L, a && b && a->pid == b->pid);
  return 1;
}

static int pid_tostring(lua_State *L)
{
  lpid_t *p = test_pid(L, 1);
  if (!p)
    return luaL_argerror(L, 1, "pid expected");
  lua_pushfstring(L, "<%d.%d.%d>", (int)smarm_pid_sched(p->pid) + 1, (int)smarm_pid_slot(p->pid),
                  (int)smarm_pid_gen(p->pid));
  return 1;
}

static int pid_eq(lua_State *L)
{
  lpid_t *a = test_pid(L, 1), *b = test_pid(L, 2);
  lua_pushboolean(L, a && b && a->pid == b->pid);
  return 1;
}

/* Makes the metatable `name` of one kind of value (index may be NULL), kept at registry[key]. */
static void open_metatable(lua_State *L, const void *key, const char *name, lua_CFunction index,
                           lua_CFunction tostring, lua_CFunction eq)
{
  lua_createtable(L, 0, 4);
  if (index) {
    lua_pushcfunction(L, index);
    lua_setfield(L, -2, "__index");
  }
  lua_pushcfunction(L, tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, eq);
  lua_setfield(L, -2, "__eq");
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__metatable");
  lvm_set_registry_once(L, key);
}

void sm_lpid_push_pid_mt(lua_State *L) { lvm_push_registry(L, &pid_mt_key); }

void sm_lpid_push_from_mt(lua_State *L) { lvm_push_registry(L, &from_mt_key); }

void sm_lpid_open(lua_State *L)
{
  open_metatable(L, &pid_mt_key, "smarm.pid", NULL, pid_tostring, pid_eq);
  open_metatable(L, &ref_mt_key, "smarm.ref", NULL, ref_tostring, ref_eq);
  open_metatable(L, &from_mt_key, "smarm.from", from_index, from_tostring, from_eq);
  open_metatable(L, &timer_mt_key, "smarm.timer", NULL, timer_tostring, timer_eq);
  lua_newtable(L); /* the intern table: pid or ref key -> userdata, weak values */
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "v");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lvm_set_registry_once(L, &pid_intern_key);
}

void sm_lpid_cache_bits(lvm_t *vm)
{
  static const void *const keys[] = {&pid_intern_key, &pid_mt_key, &ref_mt_key, &from_mt_key,
                                     &timer_mt_key};
  uint64_t *const bits[] = {&vm->intern, &vm->pid_mt, &vm->ref_mt, &vm->from_mt, &vm->timer_mt};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
    lvm_push_registry(vm->L, keys[i]);
    *bits[i] = sm_ljx_top_bits(vm->L);
    lua_pop(vm->L, 1);
  }
}
