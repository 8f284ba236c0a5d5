/*
** The Lua binding, module `smarm.core` (wrapped by lua/smarm/init.lua as `smarm`).
**
** One LuaJIT VM per scheduler: scheduler 0 runs in the VM that called smarm.run (the caller's
** own lua_State stays suspended inside run for the whole run); schedulers 1..N-1 each create a VM
** on their own thread (on_sched_start), with the caller's package.path/cpath, and close it when
** they stop. Each Lua actor is a coroutine (lua_newthread) of its scheduler's VM, anchored in the
** registry and run by a protected call on the actor's own C stack; it parks by calling into the
** C core from a classic lua_CFunction, so it can park from anywhere a C stack exists (sort
** comparators, metamethods, pcall, nested coroutines, require).
**
** Ownership: an lactor_t (malloc'd) belongs to its actor; it is freed when the actor's body
** returns, or by on_actor_stopped when shutdown stops the actor where it stands.
**
** Messages are copied with the codec (codec.h) into byte blocks of the core. Selective receive:
** messages taken from the core mailbox that a match function refused wait, decoded, in the
** actor's saved queue (a Lua table), ahead of everything still in the core mailbox, so order is
** kept; every receive looks at the saved queue first.
**
** spawn_on transfers the function: its bytecode (string.dump), each upvalue either copied with
** the codec or, when it is a loaded module, a function of one (local insert = table.insert) or a
** global, re-bound by name (require, or the target's global of that name) in the target VM; or
** names a function as "module.function". Arguments are copied like messages. All of it travels
** as one codec-encoded block that the new actor decodes on its own stack (it may require
** modules, which may park) and frees.
*/
#define _GNU_SOURCE
#include "codec.h"
#include "io/io.h"
#include "lbench.h"
#include "lio.h"
#include "ltcp.h"
#include "ljx.h"
#include "lsmarm.h"
#include "smarm.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Registry keys: the addresses of these (lightuserdata keys cost no string hashing). */
static const char pid_mt_key, pid_intern_key, traceback_key, after_run_key;

/* ---- Pids: full userdata, interned per VM so that == and table keys work ------------------- */

/* The magic makes a pid recognisable from its bytes alone (no metatable lookup on the hot path
** of send); a userdata of another type of this size with this first word is not a concern. */
#define LPID_MAGIC UINT64_C(0x736d61726d706964) /* "smarmpid" */

typedef struct lpid {
  uint64_t magic;
  smarm_pid_t pid;
} lpid_t;

/* The intern table's key for a pid: its 64 bits read as a double, with 1 added to the scheduler
** field (the exponent). Schedulers are fewer than SMARM_SCHED_MAX = 1024, so the exponent is 1 to
** 1024: a normal, finite, positive number, never NaN, zero or denormal, and different pids give
** different numbers. A number key costs no allocation, unlike an 8-byte string. */
static lua_Number pid_key(smarm_pid_t pid)
{
  union {
    uint64_t u;
    double d;
  } k = {pid + ((uint64_t)1 << (SMARM_PID_SLOT_BITS + SMARM_PID_GEN_BITS))};
  return k.d;
}

static void push_registry(lua_State *L, const void *key)
{
  lua_pushlightuserdata(L, (void *)key);
  lua_rawget(L, LUA_REGISTRYINDEX);
}

/* ---- Per-scheduler VMs ---------------------------------------------------------------------- */

/* Coroutines of actors that ended cleanly, kept for new actors of the same VM: a spawn then costs
** no lua_newthread, no registry slot and no garbage. */
#define LVM_SPARE_COS 256

typedef struct lvm {
  lua_State *L; /* a state of this scheduler's VM not used by any actor (the main thread) */
  int owned;    /* created by us (schedulers >= 1): closed when the scheduler stops */
  int spare_count;
  lua_State *spare_co[LVM_SPARE_COS]; /* each with an empty stack, anchored by spare_ref */
  int spare_ref[LVM_SPARE_COS];
  int intern_ref, pid_mt_ref, traceback_ref; /* integer registry refs (vm_cache_refs) */
} lvm_t;

/* The calling scheduler's VM. Every caller below runs in an actor (its scheduler started and
** made the VM's refs first), so it always has one. */
static lvm_t *this_vm(void) { return smarm_sched_data(); }

/* ---- Pids ----------------------------------------------------------------------------------- */

static lpid_t *test_pid(lua_State *L, int idx)
{
  if (lua_type(L, idx) != LUA_TUSERDATA || lua_objlen(L, idx) != sizeof(lpid_t))
    return NULL;
  lpid_t *p = lua_touserdata(L, idx);
  return p->magic == LPID_MAGIC ? p : NULL;
}

void lsmarm_push_pid(lua_State *L, smarm_pid_t pid)
{
  lvm_t *vm = this_vm();
  lua_rawgeti(L, LUA_REGISTRYINDEX, vm->intern_ref);
  lua_pushnumber(L, pid_key(pid));
  lua_rawget(L, -2);
  if (!lua_isnil(L, -1)) {
    lua_remove(L, -2);
    return;
  }
  lua_pop(L, 1);
  lpid_t *p = lua_newuserdata(L, sizeof *p);
  p->magic = LPID_MAGIC;
  p->pid = pid;
  lua_rawgeti(L, LUA_REGISTRYINDEX, vm->pid_mt_ref);
  lua_setmetatable(L, -2);
  lua_pushnumber(L, pid_key(pid));
  lua_pushvalue(L, -2);
  lua_rawset(L, -4);
  lua_remove(L, -2);
}

int lsmarm_to_pid(lua_State *L, int idx, smarm_pid_t *out)
{
  lpid_t *p = test_pid(L, idx);
  if (p)
    *out = p->pid;
  return p != NULL;
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

/* ---- Per-scheduler VMs and per-actor state -------------------------------------------------- */


typedef struct lactor {
  lua_State *co; /* the actor's coroutine */
  int coref;     /* its anchor in the registry */
  int savedref;  /* registry ref of the saved queue (messages refused by a match), or LUA_NOREF */
  int saved_first, saved_last; /* its messages are q[first..last]; empty when last < first */
  smarm_msg_t *pending; /* a block being decoded: freed here if decoding raised */
  int nargs;     /* values waiting on co's stack above the function */
  int is_main;
} lactor_t;

/* What smarm.run shares with the schedulers and the main actor. */
typedef struct lrun {
  lua_State *caller;
  const char *path, *cpath; /* the caller's package.path / cpath, for the other VMs */
  lvm_t *vms;               /* one per scheduler */
  int main_status;          /* 0, or the error status of the main actor */
  int main_done;
} lrun_t;

static lrun_t *current_run; /* set while smarm.run runs (one runtime per process) */

/* Bumped by smarm.run's caller before the schedulers start and after they have been joined, so
** scheduler threads read it without a race (thread creation and join order the accesses). */
static uint32_t run_generation;

uint32_t lsmarm_run_generation(void) { return run_generation; }

/* Makes the integer refs the hot paths read, in vm's own registry (the lightuserdata keys are
** only for finding the values once, per VM). */
static void vm_cache_refs(lvm_t *vm)
{
  push_registry(vm->L, &pid_intern_key);
  vm->intern_ref = luaL_ref(vm->L, LUA_REGISTRYINDEX);
  push_registry(vm->L, &pid_mt_key);
  vm->pid_mt_ref = luaL_ref(vm->L, LUA_REGISTRYINDEX);
  push_registry(vm->L, &traceback_key);
  vm->traceback_ref = luaL_ref(vm->L, LUA_REGISTRYINDEX);
}

/* Message handler for an actor's protected call: the error plus a traceback. */
static int add_traceback(lua_State *L)
{
  const char *msg = lua_tostring(L, 1);
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* What becomes of an actor's coroutine when its state is freed. */
enum co_fate {
  CO_KEEP,    /* stays anchored: the main actor's results are on it */
  CO_RECYCLE, /* it returned from its function: spare for a new actor, or released */
  CO_RELEASE, /* it may hold frames (stopped or exited while running): released to the GC */
};

static void lactor_free(lactor_t *la, enum co_fate fate)
{
  smarm_msg_free(la->pending);
  lvm_t *vm = this_vm();
  if (vm) {
    if (fate == CO_RECYCLE && vm->spare_count < LVM_SPARE_COS && lua_status(la->co) == 0 &&
        lua_gettop(la->co) == 0) {
      vm->spare_co[vm->spare_count] = la->co;
      vm->spare_ref[vm->spare_count++] = la->coref;
    } else if (fate != CO_KEEP) {
      luaL_unref(vm->L, LUA_REGISTRYINDEX, la->coref);
    }
    luaL_unref(vm->L, LUA_REGISTRYINDEX, la->savedref);
  }
  free(la);
}

/* The C body of every Lua actor: runs on the actor's stack. */
static void lactor_main(void *arg)
{
  lactor_t *la = arg;
  lua_State *co = la->co;
  smarm_actor_set_data(la);
  ljx_after_switch(co);
  lua_rawgeti(co, LUA_REGISTRYINDEX, this_vm()->traceback_ref);
  lua_insert(co, 1);
  int status = lua_pcall(co, la->nargs, LUA_MULTRET, 1);
  lua_remove(co, 1); /* the message handler; results or the error remain */
  smarm_actor_set_data(NULL);
  if (la->is_main) {
    /* Results or the error stay on co's stack for smarm.run to take; co stays anchored. */
    current_run->main_status = status;
    current_run->main_done = 1;
    lactor_free(la, CO_KEEP);
    return;
  }
  if (status != 0) {
    char name[64];
    smarm_pid_t self = smarm_self();
    snprintf(name, sizeof name, "<%u.%u.%u>", smarm_pid_sched(self) + 1, smarm_pid_slot(self),
             smarm_pid_gen(self));
    fprintf(stderr, "smarm: actor %s died: %s\n", name, lua_tostring(co, -1));
    fflush(stderr);
  }
  lua_settop(co, 0);
  lactor_free(la, CO_RECYCLE);
}

static void on_actor_stopped(void *data, void *ud)
{
  (void)ud;
  lactor_t *la = data;
  lactor_free(la, la->is_main ? CO_KEEP : CO_RELEASE);
}

/* Makes require("smarm.core") find this very code in L's VM, whether it came as a loadable
** module or is linked into the smarm executable. */
void lsmarm_preload(lua_State *L)
{
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_smarm_core);
  lua_setfield(L, -2, "smarm.core");
  lua_pop(L, 2);
}

static void open_vm_libs(lua_State *L, const char *path, const char *cpath)
{
  luaL_openlibs(L);
  lua_getglobal(L, "package");
  lua_pushstring(L, path);
  lua_setfield(L, -2, "path");
  lua_pushstring(L, cpath);
  lua_setfield(L, -2, "cpath");
  lua_pop(L, 1);
  lsmarm_preload(L);
}

static void on_sched_start(unsigned k, void *ud)
{
  lrun_t *run = ud;
  lvm_t *vm = &run->vms[k];
  if (k == 0) {
    vm->L = run->caller;
    vm->owned = 0;
  } else {
    vm->L = luaL_newstate();
    vm->owned = 1;
    if (vm->L) {
      open_vm_libs(vm->L, run->path, run->cpath);
      /* The module in this VM too, so actors here find `smarm` (and its pid metatable). */
      lua_getglobal(vm->L, "require");
      lua_pushliteral(vm->L, "smarm");
      if (lua_pcall(vm->L, 1, 0, 0) != 0) {
        fprintf(stderr, "smarm: scheduler %u: %s\n", k + 1, lua_tostring(vm->L, -1));
        lua_pop(vm->L, 1);
      }
    }
  }
  if (vm->L)
    vm_cache_refs(vm);
  smarm_sched_set_data(vm);
}

static void on_sched_stop(unsigned k, void *ud)
{
  lrun_t *run = ud;
  lvm_t *vm = &run->vms[k];
  if (vm->owned && vm->L)
    lua_close(vm->L);
  else if (vm->L) { /* the caller's VM lives on: let go of what this run anchored in it */
    while (vm->spare_count > 0)
      luaL_unref(vm->L, LUA_REGISTRYINDEX, vm->spare_ref[--vm->spare_count]);
    luaL_unref(vm->L, LUA_REGISTRYINDEX, vm->intern_ref);
    luaL_unref(vm->L, LUA_REGISTRYINDEX, vm->pid_mt_ref);
    luaL_unref(vm->L, LUA_REGISTRYINDEX, vm->traceback_ref);
  }
  vm->L = NULL;
}

/* ---- Parking safely ------------------------------------------------------------------------ */

/* The calling actor's state, or a raised error naming the function. */
static lactor_t *self_or_raise(lua_State *L, const char *fname)
{
  lactor_t *la = smarm_actor_data();
  if (!la)
    luaL_error(L, "smarm.%s: not inside an actor (call it from smarm.run)", fname);
  return la;
}

/* Every function that can switch stacks goes through here right before it (design rules 1-4);
** ljx_after_switch right after. */
static void park_check(lua_State *L, const char *fname)
{
  const char *why = ljx_cannot_park(L);
  if (why)
    luaL_error(L, "smarm.%s: cannot park %s", fname, why);
  ljx_before_switch(L);
}

int lsmarm_io_call(lua_State *L, io_req_t *req, int64_t timeout_ns, const char *fname)
{
  self_or_raise(L, fname);
  park_check(L, fname);
  int rc = io_call_timeout(req, timeout_ns);
  ljx_after_switch(L);
  return rc < 0 ? rc : req->err;
}

int64_t lsmarm_timeout_ns(lua_Number seconds)
{
  if (!(seconds >= 0) || seconds >= 1e9) /* NaN, negative, or beyond 31 years: no limit */
    return SMARM_FOREVER;
  return (int64_t)(seconds * 1e9);
}

static int l_yield(lua_State *L)
{
  self_or_raise(L, "yield");
  park_check(L, "yield");
  smarm_yield();
  ljx_after_switch(L);
  return 0;
}

static int l_sleep(lua_State *L)
{
  lua_Number s = luaL_checknumber(L, 1);
  luaL_argcheck(L, s >= 0 && s == s, 1, "non-negative number expected");
  self_or_raise(L, "sleep");
  park_check(L, "sleep");
  int64_t ns = lsmarm_timeout_ns(s);
  int rc = smarm_sleep(ns == SMARM_FOREVER ? INT64_MAX : ns);
  ljx_after_switch(L);
  if (rc < 0)
    return luaL_error(L, "smarm.sleep: %s", strerror(-rc));
  return 0;
}

static int l_now(lua_State *L)
{
  lua_pushnumber(L, (lua_Number)smarm_now_ns() / 1e9);
  return 1;
}

static int l_self(lua_State *L)
{
  smarm_pid_t pid = smarm_self();
  if (!pid || !smarm_actor_data())
    return luaL_error(L, "smarm.self: not inside an actor");
  lsmarm_push_pid(L, pid);
  return 1;
}

static int l_exit(lua_State *L)
{
  lactor_t *la = smarm_actor_data();
  if (!la)
    return luaL_error(L, "smarm.exit: not inside an actor");
  /* Ending discards the C frames: never under a finalizer, a hook or compiled code, whose
  ** set-up LuaJIT would then never undo (the VM's GC and hooks would stay off for everyone). */
  park_check(L, "exit");
  if (la->is_main) {
    /* The main actor exiting is like its function returning nothing: run returns. */
    current_run->main_status = 0;
    current_run->main_done = 1;
    lua_settop(la->co, 0);
    smarm_actor_set_data(NULL);
    lactor_free(la, CO_KEEP);
  } else {
    smarm_actor_set_data(NULL);
    lactor_free(la, CO_RELEASE);
  }
  smarm_exit();
  return 0; /* not reached */
}

static int l_scheduler(lua_State *L)
{
  int k = smarm_sched_index();
  if (k < 0)
    return luaL_error(L, "smarm.scheduler: not inside the runtime");
  lua_pushinteger(L, k + 1);
  return 1;
}

static int l_schedulers(lua_State *L)
{
  lua_pushinteger(L, (lua_Integer)smarm_sched_count());
  return 1;
}

/* alive(pid): a pid of the caller's scheduler is answered from its table at once; another
** scheduler's is asked of that scheduler, which parks the caller for one round trip. */
static int l_alive(lua_State *L)
{
  smarm_pid_t pid;
  if (!lsmarm_to_pid(L, 1, &pid))
    return luaL_argerror(L, 1, lua_pushfstring(L, "pid expected, got %s", luaL_typename(L, 1)));
  self_or_raise(L, "alive");
  unsigned k = smarm_pid_sched(pid);
  int remote = (int)k != smarm_sched_index() && k < smarm_sched_count(); /* asked: it parks */
  if (remote)
    park_check(L, "alive");
  int rc = smarm_alive(pid);
  if (remote)
    ljx_after_switch(L);
  if (rc < 0)
    return luaL_error(L, "smarm.alive: %s", strerror(-rc));
  lua_pushboolean(L, rc);
  return 1;
}

static int l_is_pid(lua_State *L)
{
  lua_pushboolean(L, test_pid(L, 1) != NULL);
  return 1;
}

/* ---- Messages ------------------------------------------------------------------------------ */

static int l_send(lua_State *L)
{
  smarm_pid_t to;
  if (!lsmarm_to_pid(L, 1, &to))
    return luaL_argerror(L, 1, lua_pushfstring(L, "pid expected, got %s", luaL_typename(L, 1)));
  if (lua_isnoneornil(L, 2))
    return luaL_argerror(L, 2, "message expected, got nil");
  self_or_raise(L, "send");
  codec_moves_t moves;
  smarm_msg_t *m = codec_encode(L, 2, "message", &moves);
  int rc = smarm_send(to, m);
  if (rc < 0) {
    codec_abandon(m); /* any sockets in it stay the sender's */
    if (rc != -ESRCH) /* a dead receiver just drops the message */
      return luaL_error(L, "smarm.send: %s", strerror(-rc));
    return 0;
  }
  codec_commit(&moves);
  return 0;
}

/* Pushes the value of msg and frees it. While it decodes, the block is the actor's pending
** block, so if decoding raises (out of memory) it is freed by the actor's next receive or its
** end: no protected call on the receive path. */
static void push_message(lua_State *L, lactor_t *la, smarm_msg_t *msg)
{
  smarm_msg_free(la->pending);
  la->pending = msg;
  codec_decode(L, msg);
  la->pending = NULL;
  smarm_msg_free(msg);
}

/* The next message of the mailbox, waiting up to timeout_ns (0 polls): pushes it and returns 1,
** or pushes nil, "timeout" and returns 2. */
static int mailbox_next(lua_State *L, lactor_t *la, int64_t timeout_ns)
{
  if (timeout_ns != 0)
    park_check(L, "receive");
  smarm_msg_t *m;
  int rc = smarm_receive(timeout_ns, &m);
  if (timeout_ns != 0)
    ljx_after_switch(L);
  if (rc == -ETIMEDOUT) {
    lua_pushnil(L);
    lua_pushliteral(L, "timeout");
    return 2;
  }
  if (rc < 0)
    return luaL_error(L, "smarm.receive: %s", strerror(-rc));
  push_message(L, la, m);
  return 1;
}

/* The saved queue: messages a match refused, q[saved_first..saved_last], oldest first. Pushes
** it and returns its index. */
static int push_saved(lua_State *L, lactor_t *la)
{
  if (la->savedref == LUA_NOREF) {
    lua_newtable(L);
    lua_pushvalue(L, -1);
    la->savedref = luaL_ref(L, LUA_REGISTRYINDEX);
  } else {
    lua_rawgeti(L, LUA_REGISTRYINDEX, la->savedref);
  }
  return lua_gettop(L);
}

/* Appends (a copy of) the value on top to the saved queue at q; the value stays on top. */
static void saved_append(lua_State *L, lactor_t *la, int q)
{
  lua_pushvalue(L, -1);
  lua_rawseti(L, q, ++la->saved_last);
}

/* Removes q[i] (saved_first <= i <= saved_last), keeping the others in order; pushes it. */
static void saved_take(lua_State *L, lactor_t *la, int q, int i)
{
  lua_rawgeti(L, q, i);
  if (i == la->saved_first) {
    lua_pushnil(L);
    lua_rawseti(L, q, la->saved_first++);
  } else {
    for (int k = i; k < la->saved_last; k++) {
      lua_rawgeti(L, q, k + 1);
      lua_rawseti(L, q, k);
    }
    lua_pushnil(L);
    lua_rawseti(L, q, la->saved_last--);
  }
  if (la->saved_last < la->saved_first) { /* empty: start again at 1 (the array part) */
    la->saved_first = 1;
    la->saved_last = 0;
  }
}

/* Calls the match function at match_idx on the value on top (left in place); returns truth. */
static int call_match(lua_State *L, int match_idx)
{
  lua_pushvalue(L, match_idx);
  lua_pushvalue(L, -2);
  lua_call(L, 1, 1);
  int yes = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return yes;
}

static int l_receive(lua_State *L)
{
  int match_idx = 0, timeout_idx = 1;
  if (lua_isfunction(L, 1)) {
    match_idx = 1;
    timeout_idx = 2;
  }
  int64_t timeout = SMARM_FOREVER;
  if (!lua_isnoneornil(L, timeout_idx)) {
    lua_Number s = luaL_checknumber(L, timeout_idx);
    luaL_argcheck(L, s >= 0 && s == s, timeout_idx, "non-negative timeout expected");
    timeout = lsmarm_timeout_ns(s);
  }
  lactor_t *la = self_or_raise(L, "receive");
  lua_settop(L, 2);
  if (!match_idx && la->saved_last < la->saved_first)
    return mailbox_next(L, la, timeout); /* the common case: straight from the mailbox */
  int q = push_saved(L, la);
  /* Older messages first: those already refused once (the match may differ now). The bounds
  ** are re-read each time round: a match may itself receive. */
  for (int i = la->saved_first; i <= la->saved_last; i++) {
    if (!match_idx) {
      saved_take(L, la, q, i);
      return 1;
    }
    lua_rawgeti(L, q, i);
    int yes = call_match(L, match_idx);
    lua_pop(L, 1);
    if (yes) {
      saved_take(L, la, q, i);
      return 1;
    }
  }
  int64_t deadline = timeout > 0 ? smarm_now_ns() + timeout : timeout;
  for (;;) {
    int64_t left = timeout;
    if (timeout > 0) {
      left = deadline - smarm_now_ns();
      if (left < 0)
        left = 0;
    }
    if (mailbox_next(L, la, left) == 2)
      return 2;
    /* Into the saved queue before the match runs, so an error there loses nothing. */
    saved_append(L, la, q);
    if (call_match(L, match_idx)) {
      lua_pop(L, 1);
      saved_take(L, la, q, la->saved_last);
      return 1;
    }
    lua_pop(L, 1);
  }
}

/* ---- spawn_on: moving a function to another VM ------------------------------------------- */

/* Builds the transfer table for the function (or "mod.fn" string) at fn_idx and the arguments
** from first on: {code = bytecode | name = "mod.fn", up = {[i] = {v = value} | {module = name}},
** args = {n = count, ...}}; leaves it on the stack. Raises naming what cannot move. */
static void build_transfer(lua_State *L, int fn_idx, int first, int nargs)
{
  lua_createtable(L, 0, 3);
  int tr = lua_gettop(L);
  if (lua_type(L, fn_idx) == LUA_TSTRING) {
    lua_pushvalue(L, fn_idx);
    lua_setfield(L, tr, "name");
  } else {
    if (lua_iscfunction(L, fn_idx))
      luaL_argerror(L, 2, "a C function cannot move to another scheduler");
    /* bytecode, with debug info so tracebacks keep names and lines */
    lua_getglobal(L, "string");
    lua_getfield(L, -1, "dump");
    lua_remove(L, -2);
    lua_pushvalue(L, fn_idx);
    lua_call(L, 1, 1);
    lua_setfield(L, tr, "code");
    /* upvalues: modules by name, data by value */
    lua_newtable(L);
    int ups = lua_gettop(L);
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaded");
    lua_remove(L, -2);
    int loaded = lua_gettop(L);
    lua_pushvalue(L, LUA_GLOBALSINDEX);
    int globals = lua_gettop(L);
    const char *name;
    for (int i = 1; (name = lua_getupvalue(L, fn_idx, i)) != NULL; i++) {
      int v = lua_gettop(L);
      lua_createtable(L, 0, 1);
      int entry = v + 1;
      int found = 0;
      int t = lua_type(L, v);
      if (t == LUA_TTABLE || t == LUA_TFUNCTION || t == LUA_TUSERDATA) {
        /* A loaded module (by its package.loaded name) or a global (by its name): re-bound
        ** in the target VM rather than copied. */
        static const char *const how[2] = {"module", "global"};
        int where[2] = {loaded, globals};
        for (int w = 0; w < 2 && !found; w++) {
          lua_pushnil(L);
          while (lua_next(L, where[w]) != 0) {
            if (lua_type(L, -2) == LUA_TSTRING && lua_rawequal(L, -1, v)) {
              lua_pop(L, 1);
              lua_setfield(L, entry, how[w]); /* pops the key */
              found = 1;
              break;
            }
            lua_pop(L, 1);
          }
        }
      }
      if (!found && t == LUA_TFUNCTION) {
        /* A function of a loaded module (local insert = table.insert): module + field. */
        lua_pushnil(L);
        while (!found && lua_next(L, loaded) != 0) {
          if (lua_type(L, -2) == LUA_TSTRING && lua_istable(L, -1)) {
            int mod = lua_gettop(L);
            lua_pushnil(L);
            while (lua_next(L, mod) != 0) {
              if (lua_type(L, -2) == LUA_TSTRING && lua_rawequal(L, -1, v)) {
                lua_pop(L, 1);
                lua_setfield(L, entry, "field"); /* pops the field name */
                lua_pushvalue(L, mod - 1);
                lua_setfield(L, entry, "module");
                found = 1;
                break;
              }
              lua_pop(L, 1);
            }
          }
          lua_settop(L, entry + (found ? 0 : 1)); /* keep the outer key while iterating */
        }
        lua_settop(L, entry);
      }
      if (!found) {
        /* Data: check now that it can travel, naming the upvalue if not. */
        char root[96];
        snprintf(root, sizeof root, "upvalue '%s'", name[0] ? name : "?");
        codec_moves_t moves;
        codec_abandon(codec_encode(L, v, root, &moves));
        lua_pushvalue(L, v);
        lua_setfield(L, entry, "v");
      }
      lua_pushvalue(L, entry);
      lua_rawseti(L, ups, i);
      lua_settop(L, globals);
    }
    lua_pop(L, 1); /* globals */
    lua_pop(L, 1); /* loaded */
    lua_setfield(L, tr, "up");
  }
  lua_createtable(L, nargs, 1);
  for (int i = 0; i < nargs; i++) {
    lua_pushvalue(L, first + i);
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushinteger(L, nargs);
  lua_setfield(L, -2, "n");
  lua_setfield(L, tr, "args");
}

/* Runs in the new actor's coroutine: rebuilds the function from the transfer block and calls
** it. Upvalue 1: the block (light userdata), already owned by this call. */
/* The last dot of "module.function" (both parts non-empty), or NULL if name has not that form. */
static const char *module_function_dot(const char *name)
{
  const char *dot = strrchr(name, '.');
  return dot && dot != name && dot[1] != '\0' ? dot : NULL;
}

static int remote_entry(lua_State *L)
{
  smarm_msg_t *block = lua_touserdata(L, lua_upvalueindex(1));
  push_message(L, smarm_actor_data(), block); /* frees the block */
  int tr = lua_gettop(L);
  lua_getfield(L, tr, "name");
  if (lua_isstring(L, -1)) {
    size_t n;
    const char *full = lua_tolstring(L, -1, &n);
    const char *dot = module_function_dot(full);
    if (!dot) /* spawn_on checked it: only a malformed block gets here */
      return luaL_error(L, "smarm.spawn_on: '%s' is not of the form module.function", full);
    lua_getglobal(L, "require");
    lua_pushlstring(L, full, (size_t)(dot - full));
    lua_call(L, 1, 1);
    if (!lua_istable(L, -1))
      return luaL_error(L, "smarm.spawn_on: the module of '%s' is not a table", full);
    lua_getfield(L, -1, dot + 1);
    if (!lua_isfunction(L, -1))
      return luaL_error(L, "smarm.spawn_on: %s is not a function", full);
  } else {
    lua_pop(L, 1);
    lua_getfield(L, tr, "code");
    size_t n;
    const char *code = lua_tolstring(L, -1, &n);
    if (!code || luaL_loadbuffer(L, code, n, "=spawn_on") != 0)
      return luaL_error(L, "smarm.spawn_on: cannot load the function: %s",
                        code ? lua_tostring(L, -1) : "no code");
    int fn = lua_gettop(L);
    lua_getfield(L, tr, "up");
    int ups = lua_gettop(L);
    for (int i = 1;; i++) {
      lua_rawgeti(L, ups, i);
      if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        break;
      }
      lua_getfield(L, -1, "module");
      if (lua_isstring(L, -1)) {
        lua_getglobal(L, "require");
        lua_insert(L, -2);
        lua_call(L, 1, 1);
        lua_getfield(L, -2, "field");
        if (lua_isstring(L, -1)) {
          lua_gettable(L, -2);
          lua_remove(L, -2);
        } else {
          lua_pop(L, 1);
        }
      } else {
        lua_pop(L, 1);
        lua_getfield(L, -1, "global");
        if (lua_isstring(L, -1)) {
          lua_rawget(L, LUA_GLOBALSINDEX);
        } else {
          lua_pop(L, 1);
          lua_getfield(L, -1, "v");
        }
      }
      lua_setupvalue(L, fn, i);
      lua_pop(L, 1);
    }
    lua_settop(L, fn);
  }
  int fn = lua_gettop(L);
  lua_getfield(L, tr, "args");
  int args = lua_gettop(L);
  lua_getfield(L, args, "n");
  int nargs = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  luaL_checkstack(L, nargs + 2, "too many arguments");
  lua_pushvalue(L, fn);
  for (int i = 1; i <= nargs; i++)
    lua_rawgeti(L, args, i);
  lua_call(L, nargs, LUA_MULTRET);
  return lua_gettop(L) - args;
}

/* A fresh actor state with a coroutine of owner's VM anchored in the registry: a spare one, with
** owner's globals as a new one would have, or a new one. */
static void lactor_init(lactor_t *la, lua_State *owner)
{
  lvm_t *vm = this_vm();
  if (vm && vm->spare_count > 0) {
    vm->spare_count--;
    la->co = vm->spare_co[vm->spare_count];
    la->coref = vm->spare_ref[vm->spare_count];
    lua_pushvalue(owner, LUA_GLOBALSINDEX);
    lua_xmove(owner, la->co, 1);
    lua_replace(la->co, LUA_GLOBALSINDEX);
  } else {
    la->co = lua_newthread(owner);
    la->coref = luaL_ref(owner, LUA_REGISTRYINDEX);
  }
  la->nargs = 0;
  la->is_main = 0;
  la->savedref = LUA_NOREF;
  la->saved_first = 1;
  la->saved_last = 0;
  la->pending = NULL;
}

/* The C body of an actor started by spawn_on: its coroutine is made here, in its own VM. */
static void remote_actor_main(void *arg)
{
  lvm_t *vm = this_vm();
  lactor_t *la = smarm_actor_data(); /* the spawner's shell, holding the block as pending */
  if (!vm || !vm->L) {
    smarm_actor_set_data(NULL);
    lactor_free(la, CO_RELEASE); /* frees the block */
    fprintf(stderr, "smarm: spawn_on: no VM for a new actor\n");
    return;
  }
  lactor_init(la, vm->L);
  lua_pushlightuserdata(la->co, arg);
  lua_pushcclosure(la->co, remote_entry, 1);
  lactor_main(la);
}

static int l_spawn_on(lua_State *L)
{
  int where;
  int nsched = (int)smarm_sched_count();
  if (lua_type(L, 1) == LUA_TSTRING && strcmp(lua_tostring(L, 1), "any") == 0) {
    where = SMARM_SCHED_ANY;
  } else {
    lua_Number k = luaL_checknumber(L, 1);
    luaL_argcheck(L, k >= 1 && k <= nsched && k == (lua_Number)(int)k, 1,
                  "scheduler index or \"any\" expected");
    where = (int)k - 1;
  }
  int t2 = lua_type(L, 2);
  if (t2 != LUA_TFUNCTION && t2 != LUA_TSTRING)
    return luaL_argerror(L, 2, lua_pushfstring(L, "function or \"module.function\" expected, got %s",
                                               luaL_typename(L, 2)));
  if (t2 == LUA_TSTRING && !module_function_dot(lua_tostring(L, 2)))
    return luaL_argerror(L, 2, lua_pushfstring(L, "'%s' is not of the form module.function",
                                               lua_tostring(L, 2)));
  self_or_raise(L, "spawn_on");
  int nargs = lua_gettop(L) - 2;
  build_transfer(L, 2, 3, nargs);
  codec_moves_t moves;
  smarm_msg_t *block = codec_encode(L, -1, "argument", &moves);
  lua_pop(L, 1);
  park_check(L, "spawn_on"); /* a spawn on another scheduler waits for its answer */
  /* The actor's state travels with the spawn as a shell holding the block, so that an actor
  ** stopped before it ever runs frees the block (on_actor_stopped); remote_actor_main fills in
  ** its coroutine. */
  lactor_t *shell = calloc(1, sizeof *shell);
  if (!shell) {
    codec_abandon(block);
    return luaL_error(L, "not enough memory");
  }
  shell->coref = shell->savedref = LUA_NOREF;
  shell->pending = block;
  smarm_spawn_opts_t opts = {.data = shell};
  smarm_pid_t pid;
  int rc = smarm_spawn_on(where, remote_actor_main, block, &opts, &pid);
  ljx_after_switch(L);
  if (rc < 0) {
    free(shell);
    codec_abandon(block); /* any sockets in the arguments stay the caller's */
    return luaL_error(L, "smarm.spawn_on: %s", strerror(-rc));
  }
  codec_commit(&moves);
  lsmarm_push_pid(L, pid);
  return 1;
}

/* New coroutine of L's VM holding the function at fn_idx and nargs arguments from first on. */
static lactor_t *new_lactor(lua_State *L, int fn_idx, int first, int nargs)
{
  lactor_t *la = malloc(sizeof *la);
  if (!la) {
    luaL_error(L, "not enough memory");
    return NULL;
  }
  lactor_init(la, L);
  lua_pushvalue(L, fn_idx);
  for (int i = 0; i < nargs; i++)
    lua_pushvalue(L, first + i);
  la->nargs = nargs;
  lua_xmove(L, la->co, nargs + 1);
  return la;
}

static int l_spawn(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TFUNCTION);
  self_or_raise(L, "spawn");
  lactor_t *la = new_lactor(L, 1, 2, lua_gettop(L) - 1);
  smarm_spawn_opts_t opts = {.data = la}; /* stopped before it runs: on_actor_stopped frees it */
  smarm_pid_t pid;
  int rc = smarm_spawn(lactor_main, la, &opts, &pid);
  if (rc < 0) {
    lactor_free(la, CO_RELEASE);
    return luaL_error(L, "smarm.spawn: %s", strerror(-rc));
  }
  lsmarm_push_pid(L, pid);
  return 1;
}

/* ---- smarm.run ------------------------------------------------------------------------------ */

/* _after_run(fn): fn is called in the caller's VM each time a run has ended (every actor gone);
** init.lua uses it to forget module loaders the end of a run stopped. One per VM. */
static int l_after_run(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_pushlightuserdata(L, (void *)&after_run_key);
  lua_pushvalue(L, 1);
  lua_rawset(L, LUA_REGISTRYINDEX);
  return 0;
}

static void call_after_run(lua_State *L)
{
  push_registry(L, &after_run_key);
  if (!lua_isfunction(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  if (lua_pcall(L, 0, 0, 0) != 0) {
    fprintf(stderr, "smarm: after the run: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
  }
}

static int l_run(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TFUNCTION);
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "schedulers");
    if (!lua_isnil(L, -1)) {
      lua_Number n = luaL_checknumber(L, -1);
      luaL_argcheck(L, n >= 1 && n <= SMARM_SCHED_MAX && n == (lua_Number)(unsigned)n, 2,
                    "opts.schedulers must be an integer from 1");
      cfg.schedulers = (unsigned)n;
    }
    lua_getfield(L, 2, "stack_size");
    if (!lua_isnil(L, -1)) {
      lua_Number n = luaL_checknumber(L, -1);
      luaL_argcheck(L, n >= 16384 && n <= (1 << 30), 2,
                    "opts.stack_size must be from 16384 to 1073741824");
      cfg.stack_size = (size_t)n;
    }
    lua_pop(L, 2);
  }
  if (smarm_sched_index() >= 0)
    return luaL_error(L, "smarm.run: already inside a runtime");
  lua_settop(L, 1);

  lrun_t run;
  memset(&run, 0, sizeof run);
  run.caller = L;
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_getfield(L, -2, "cpath");
  run.path = lua_tostring(L, -2); /* anchored on L's stack until run returns */
  run.cpath = lua_tostring(L, -1);
  unsigned n = cfg.schedulers;
  if (n == 0) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    n = online > 0 ? (unsigned)online : 1;
    if (n > SMARM_SCHED_MAX)
      n = SMARM_SCHED_MAX;
    cfg.schedulers = n;
  }
  run.vms = calloc(n, sizeof *run.vms);
  if (!run.vms)
    return luaL_error(L, "not enough memory");
  lactor_t *main = new_lactor(L, 1, 2, 0);
  main->is_main = 1;
  int main_ref = main->coref;
  lua_State *co = main->co;

  cfg.on_sched_start = on_sched_start;
  cfg.on_sched_stop = on_sched_stop;
  cfg.on_actor_stopped = on_actor_stopped;
  cfg.userdata = &run;
  current_run = &run;
  run_generation++; /* handles made from here on belong to this run */
  int rc = smarm_run(&cfg, lactor_main, main);
  io_shutdown(); /* every actor is gone: let the IO thread finish its work in flight and end */
  lio_end_run(L); /* the run's files still open in this VM (the others are closed) */
  run_generation++; /* every handle of the run is stale now: its sockets and files are closed */
  current_run = NULL;
  ljx_after_switch(L);
  free(run.vms);
  call_after_run(L);
  if (rc < 0) {
    luaL_unref(L, LUA_REGISTRYINDEX, main_ref);
    return luaL_error(L, "smarm.run: %s", rc == -EBUSY ? "a runtime is already running"
                                                       : strerror(-rc));
  }
  if (!run.main_done) { /* stopped by smarm.stop or the like before it returned */
    luaL_unref(L, LUA_REGISTRYINDEX, main_ref);
    return 0;
  }
  if (run.main_status != 0) {
    lua_xmove(co, L, 1);
    luaL_unref(L, LUA_REGISTRYINDEX, main_ref);
    return lua_error(L);
  }
  int nres = lua_gettop(co);
  lua_settop(L, 0);
  lua_xmove(co, L, nres);
  luaL_unref(L, LUA_REGISTRYINDEX, main_ref);
  return nres;
}

static const luaL_Reg functions[] = {
  {"run", l_run},         {"spawn", l_spawn},   {"self", l_self},
  {"yield", l_yield},     {"sleep", l_sleep},   {"now", l_now},
  {"exit", l_exit},       {"scheduler", l_scheduler}, {"schedulers", l_schedulers},
  {"is_pid", l_is_pid},   {"send", l_send},     {"receive", l_receive},
  {"spawn_on", l_spawn_on}, {"alive", l_alive}, {"_after_run", l_after_run},
  {NULL, NULL},
};

/* registry[key] = the value on top, unless it is set already; pops it. */
static void set_registry_once(lua_State *L, const void *key)
{
  push_registry(L, key);
  int set = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (set) {
    lua_pop(L, 1);
    return;
  }
  lua_pushlightuserdata(L, (void *)key);
  lua_insert(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
}

int luaopen_smarm_core(lua_State *L)
{
  smarm_msg_set_drop_hook(codec_drop); /* undelivered messages close their sockets */
  lua_createtable(L, 0, 3); /* the pids' metatable */
  lua_pushcfunction(L, pid_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, pid_eq);
  lua_setfield(L, -2, "__eq");
  lua_pushliteral(L, "smarm.pid");
  lua_setfield(L, -2, "__metatable");
  set_registry_once(L, &pid_mt_key);
  lua_newtable(L); /* the intern table: pid key -> pid userdata, weak values */
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "v");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  set_registry_once(L, &pid_intern_key);
  lua_pushcfunction(L, add_traceback); /* one handler for every actor's protected call */
  set_registry_once(L, &traceback_key);
  lua_newtable(L);
  luaL_register(L, NULL, functions);
  lbench_register(L, lua_gettop(L));
  lio_register(L, lua_gettop(L));
  ltcp_register(L, lua_gettop(L));
  lua_pushliteral(L, SMARM_VERSION);
  lua_setfield(L, -2, "version");
  return 1;
}
