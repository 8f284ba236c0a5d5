/*
** The Lua binding, module `smarm.core` (wrapped by lua/smarm/init.lua as `smarm`): VMs, actors,
** messages and runs. The top of the binding: it registers the other files' functions.
**
** One LuaJIT VM per scheduler (lvm.h): scheduler 0 runs in the VM that called smarm.run (the
** caller's own lua_State stays suspended inside run for the whole run); schedulers 1..N-1 each
** create a VM on their own thread (on_sched_start), with the caller's package.path/cpath, and
** close it when they stop. Each Lua actor is a coroutine (lua_newthread) of its scheduler's VM,
** anchored in the registry and run by a protected call on the actor's own C stack; it parks by
** calling into the C core from a classic lua_CFunction (lpark.h), so it can park from anywhere a
** C stack exists (sort comparators, metamethods, pcall, nested coroutines, require).
**
** Ownership: an lactor_t (lactor_alloc: its scheduler's store) belongs to its actor; it is freed
** when the actor's body returns, by smarm.exit before it ends the actor, or by on_actor_stopped
** when the actor is killed or shutdown stops it where it stands (its coroutine is then released
** to the GC).
**
** Messages are copied with the codec (codec.h) into byte blocks of the core. Selective receive:
** messages taken from the core mailbox that a match function refused wait, decoded, in the
** actor's saved queue (a Lua table), ahead of everything still in the core mailbox, so order is
** kept; every receive looks at the saved queue first.
**
** spawn_on moves the function and its arguments as a transfer (ltransfer.h): one block, which
** the new actor decodes straight onto its own stack (it may require modules, which may park)
** and frees.
**
** A run's end makes every handle of it stale (lhandle.h): the run generation moves on once the
** IO thread has stopped and the caller's VM has closed the run's files.
**
** The binding's files, each including only headers of the files below it:
**   lsmarm.c   this module                       main.c   the executable
**   ltcp.c ludp.c lfs.c lwatch.c ldns.c lproc.c lsignal.c llineedit.c   the IO modules
**   lio.c      their shared helpers               ltransfer.c   functions between VMs
**   lfaults.c  links, monitors, names             ltimer.c      message timers
**   codec.c    messages                           lbench.c      clock and histograms
**   ldist.c    smarm.node: the Erlang node          lterm.c  Erlang terms   lpath.c  error paths
**   lhandle.c  the neutral handle interface       lpid.c   pids     lpark.c   parking rules
**   lbinary.c  shared immutable byte strings
**   lrebind.c  values every VM finds by name       lreentry.c  gsub and sort checked for C stack
**   lvm.h      a scheduler's VM                   ljx.c    LuaJIT internals
*/
#define _GNU_SOURCE
#include "lsmarm.h"

#include "codec.h"
#include "lbinary.h"
#include "io/io.h"
#include "lbench.h"
#include "ldist.h"
#include "ldns.h"
#include "llineedit.h"
#include "lfast.h"
#include "lfaults.h"
#include "linfo.h"
#include "lfs.h"
#include "lhandle.h"
#include "lio.h"
#include "ljx.h"
#include "lpark.h"
#include "lpid.h"
#include "lpreempt.h"
#include "lproc.h"
#include "lrebind.h"
#include "lshape.h"
#include "lreentry.h"
#include "ltimer.h"
#include "lsignal.h"
#include "lterm.h"
#include "ltcp.h"
#include "ludp.h"
#include "ltransfer.h"
#include "lvm.h"
#include "lwatch.h"
#include "smarm.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

/* Registry keys: the addresses of these (lightuserdata keys cost no string hashing). */
static const char traceback_key, remote_entry_key, after_run_key, last_traceback_key;

/* ---- Per-actor state ------------------------------------------------------------------------ */

typedef struct lactor {
  lvm_actor_head_t head; /* first: its coroutine (head.co) and own debug hook (lpreempt.c) */
  int coref;     /* its anchor in the registry */
  int savedref;  /* registry ref of the saved queue (messages refused by a match), or LUA_NOREF */
  int saved_first, saved_last; /* its messages are in q[first..last], with holes; empty when
                                  saved_count is 0 */
  int saved_count;
  unsigned saved_epoch; /* bumped whenever the messages are renumbered (a receive under way
                           then looks for its message again) */
  smarm_msg_t *pending; /* a block being decoded: freed here if decoding raised */
  int io_held;   /* IO events (codec.h) decoded and not yet handed to the actor by a receive */
  int16_t nargs; /* values waiting on co's stack above the function (a call's arguments: fewer
                    than LUAI_MAXCSTACK) */
  uint8_t is_main : 1; /* also: from malloc, not from its scheduler's store (lactor_alloc) */
} lactor_t;
_Static_assert(sizeof(lactor_t) <= 72, "one per Lua actor, an 80-byte block: its size shows");

/* What smarm.run shares with the schedulers and the main actor. */
typedef struct lrun {
  lua_State *caller;
  const char *path, *cpath; /* the caller's package.path / cpath, for the other VMs */
  lvm_t *vms;               /* one per scheduler */
  int main_status;          /* 0, or the error status of the main actor */
  int main_crash_ref;       /* a registry ref: the error table of a crash that reached the main
                               actor along a link (crash_spread), which run raises; else 0 */
  int64_t request_timeout_ns; /* the run's opts.request_timeout, as smarm_config_t has it */
  int main_done;
  int vm0_failed; /* scheduler 1's refs could not be made (on_sched_start): nothing ran */
} lrun_t;

static lrun_t *current_run; /* set while smarm.run runs (one runtime per process) */

/* The actor that runs a run's on_crash (init.lua starts it); 0: crash reports go to stderr.
** Written by the main actor on scheduler 1 (and cleared by run's end), read by any scheduler
** when an actor crashes: relaxed is enough, the report is only sent to it. */
static _Atomic smarm_pid_t crash_reporter;

const char *const lvm_str_text[LVM_STRS] = {
  [LVM_STR_NORMAL] = "normal", [LVM_STR_KILL] = "kill", [LVM_STR_KILLED] = "killed",
  [LVM_STR_NOPROC] = "noproc", [LVM_STR_MAILBOX_OVERFLOW] = "mailbox_overflow",
  [LVM_STR_NOMEM] = "not enough memory", /* as LuaJIT words it */
  [LVM_STR_SMARM] = "smarm", [LVM_STR_CALL] = "CALL",
  [LVM_STR_DOWN] = "DOWN", [LVM_STR_EXIT] = "EXIT", [LVM_STR_FROM] = "from",
  [LVM_STR_REQUEST] = "request", [LVM_STR_PID] = "pid", [LVM_STR_REF] = "ref",
  [LVM_STR_REASON] = "reason", [LVM_STR_PACKAGE] = "package", [LVM_STR_LOADED] = "loaded",
};

static int remote_entry(lua_State *L);

/* Reads the bits the hot paths push (lvm.h) and makes the integer refs of what no lightuserdata
** key anchors for the VM's life (the cached strings, made here). */
static void vm_cache_refs(lvm_t *vm)
{
  for (int k = 0; k < LVM_STRS; k++) {
    lua_pushstring(vm->L, lvm_str_text[k]);
    vm->str_bits[k] = sm_ljx_top_bits(vm->L);
    vm->str_ref[k] = luaL_ref(vm->L, LUA_REGISTRYINDEX);
  }
  sm_lpid_cache_bits(vm);
  sm_lfaults_cache_refs(vm);
  lvm_push_registry(vm->L, &traceback_key);
  vm->traceback = sm_ljx_top_bits(vm->L);
  lvm_push_registry(vm->L, &remote_entry_key);
  vm->remote_entry = sm_ljx_top_bits(vm->L);
  lua_pop(vm->L, 2);
  sm_lfast_cache_refs(vm);
  sm_lshape_fixed_init(vm); /* after the strings, which it takes */
  sm_codec_vm_start(vm);
}

/* Message handler for an actor's protected call: the error becomes the table of its exit reason,
** { error = <the value>, traceback = "stack traceback: ..." }, with the text a report prints as
** `message` (set_error_reason and smarm.run take it out). The text is the value itself for a
** string or a number, its __tostring when it has one (called in a protected call of its own: an
** error there would make LuaJIT replace the whole reason by "error in error handling"), else its
** type. */
static int add_traceback(lua_State *L)
{
  int t = lua_type(L, 1);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) {
    lua_pushvalue(L, 1); /* a copy: tostring must not change the error value itself */
    lua_tostring(L, -1);
  } else if (luaL_getmetafield(L, 1, "__tostring")) {
    lua_pushvalue(L, 1);
    int failed = lua_pcall(L, 1, 1, 0) != 0;
    if (failed || lua_type(L, -1) != LUA_TSTRING) {
      const char *why = failed && lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                                  : "it did not give a string";
      lua_pushfstring(L, "(error object is a %s value: its __tostring failed: %s)",
                      luaL_typename(L, 1), why);
    }
  } else {
    lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  int msg_idx = lua_gettop(L);
  if (sm_ljx_in_finalizer(L)) { /* a __gc's error, which LuaJIT prints with lua_tostring (a
                                ** table printed "?"): the text and where it came from */
    luaL_traceback(L, L, lua_tostring(L, msg_idx), 1);
    return 1;
  }
  lua_createtable(L, 0, 3);
  lua_pushvalue(L, 1);
  lua_setfield(L, -2, "error");
  luaL_traceback(L, L, NULL, 1);
  lua_setfield(L, -2, "traceback");
  lua_pushvalue(L, msg_idx);
  lua_setfield(L, -2, "message");
  return 1;
}

/* What becomes of an actor's coroutine when its state is freed. */
enum co_fate {
  CO_KEEP,    /* stays anchored: the main actor's results are on it */
  CO_RECYCLE, /* it returned from its function: spare for a new actor, or released */
  CO_RELEASE, /* it may hold frames (stopped or exited while running): released to the GC */
};

/* An actor's state, from its own scheduler's store; the main actor's from malloc, since
** smarm.run makes it before the schedulers exist. NULL when memory is out. */
static lactor_t *lactor_alloc(int is_main)
{
  lactor_t *la = is_main ? malloc(sizeof *la) : smarm_local_alloc(sizeof *la);
  if (la)
    la->is_main = is_main != 0;
  return la;
}

static void lactor_release(lactor_t *la) /* its memory, lactor_alloc's */
{
  if (la->is_main)
    free(la);
  else
    smarm_local_free(la, sizeof *la);
}

static void lactor_free(lactor_t *la, enum co_fate fate)
{
  smarm_msg_free(la->pending);
  lvm_t *vm = this_vm();
  if (vm) {
    sm_lpreempt_drop_hook(vm, &la->head);
    if (fate == CO_RECYCLE && vm->spare_count < LVM_SPARE_COS && lua_status(la->head.co) == 0 &&
        lua_gettop(la->head.co) == 0) {
      vm->spare_co[vm->spare_count] = la->head.co;
      vm->spare_ref[vm->spare_count++] = la->coref;
    } else if (fate != CO_KEEP) {
      luaL_unref(vm->L, LUA_REGISTRYINDEX, la->coref);
    }
    luaL_unref(vm->L, LUA_REGISTRYINDEX, la->savedref);
  }
  lactor_release(la);
}

/* A crash report on stderr: "smarm: actor <pid> died<how>: <msg>", then the traceback. */
static void print_crash(const char *how, const char *msg, const char *trace)
{
  smarm_pid_t self = smarm_self();
  fprintf(stderr, "smarm: actor <%u.%u.%u> died%s: %s\n%s\n", smarm_pid_sched(self) + 1,
          smarm_pid_slot(self), smarm_pid_gen(self), how, msg ? msg : "(no message)",
          trace ? trace : "");
  fflush(stderr);
}

/* An actor's body raised (the error value on co's top): it ends with the reason
** { error = <the value>, traceback = "<text>" }, and its report goes to stderr unless something
** hears of its end (a link or a monitor: smarm_is_watched). Never inlined: its buffer would
** sit in lactor_main's frame, under every actor's C stack, which a parked actor keeps saved. */
static __attribute__((noinline, cold)) void set_error_reason(lua_State *co)
{
  /* The handler's table; a bare string when even the handler failed (out of memory). */
  const char *msg = lua_tostring(co, -1), *trace = "";
  if (lua_istable(co, -1)) {
    lua_getfield(co, -1, "message");
    lua_getfield(co, -2, "traceback");
    msg = lua_tostring(co, -2);
    trace = lua_tostring(co, -1);
    lua_pop(co, 2); /* both strings stay alive in the table until the report is printed */
  }
  smarm_pid_t reporter = atomic_load_explicit(&crash_reporter, memory_order_relaxed);
  if (!smarm_is_watched() && reporter) {
    if (lua_istable(co, -1)) { /* the report carries the reason, without the text */
      lua_pushnil(co);
      lua_setfield(co, -2, "message");
    }
    smarm_msg_t *report = sm_lfaults_encode_report(co, -1, smarm_own_name());
    if (report && smarm_send(reporter, report) < 0)
      smarm_msg_free(report);
  } else if (!smarm_is_watched()) {
    print_crash("", msg, trace);
  }
  if (lua_istable(co, -1)) { /* the text was for the report, not the reason */
    lua_pushnil(co);
    lua_setfield(co, -2, "message");
  }
  smarm_msg_t *block;
  int code = sm_lfaults_encode_reason(co, -1, &block);
  if (code == SMARM_EXIT_VALUE && !block) /* out of memory: the reason's code says little, but */
    code = SMARM_EXIT_KILLED;             /* never "normal" for a crash */
  smarm_set_exit_reason(code, block ? smarm_msg_data(block) : NULL,
                        block ? smarm_msg_size(block) : 0);
  smarm_msg_free(block);
}

/* The C body of every Lua actor: runs on the actor's stack. */
static void lactor_main(void *arg)
{
  lactor_t *la = arg;
  lua_State *co = la->head.co;
  if (la->is_main && current_run->vm0_failed) { /* the run ends at once */
    lactor_free(la, CO_KEEP);
    return;
  }
  smarm_actor_set_data(la);
  sm_lpark_resumed(co);
  sm_ljx_push_bits(co, this_vm()->traceback);
  lua_insert(co, 1);
  int status = lua_pcall(co, la->nargs, LUA_MULTRET, 1);
  /* The actor's end is a switch too (design rule 2): an error that unwound it without another
  ** dispatch (out of memory: no message handler runs) may have left a trace marked aborted. */
  sm_ljx_before_switch(co);
  lua_remove(co, 1); /* the message handler; results or the error remain */
  if (status == 0 && smarm_exit_pending())
    smarm_yield(); /* an exit signal taken in while it waited for another scheduler's answer
                   ** (which leaves the death to the next park) and then returned: it dies here,
                   ** through on_actor_stopped, which reports a crash that reached it
                   ** (crash_spread); ended by the core after the body, it was lost */
  smarm_actor_set_data(NULL);
  if (la->is_main) {
    /* Results or the error stay on co's stack for smarm.run to take; co stays anchored. The
    ** run's end closes what it owned. */
    current_run->main_status = status;
    current_run->main_done = 1;
    sm_lhandle_end_owner(co, la, 0);
    lactor_free(la, CO_KEEP);
    return;
  }
  if (status != 0)
    set_error_reason(co);
  lua_settop(co, 0);
  /* a crash, or a kill that came at a poll and ends it now, closes the handles it owns */
  sm_lhandle_end_owner(co, la, status != 0 || smarm_exit_pending());
  lactor_free(la, CO_RECYCLE);
}

typedef struct crash_spread_job {
  const void *data; /* the reason's bytes (SMARM_EXIT_VALUE) */
  size_t size;
  int is_main;
} crash_spread_job_t;

/* In a protected call (crash_spread): the reason, if it is a crash's ({ error =, traceback = }),
** is reported in turn, or for the main actor kept for smarm.run to raise. */
static int crash_spread_protected(lua_State *L)
{
  crash_spread_job_t *job = lua_touserdata(L, 1);
  sm_lfaults_push_reason(L, SMARM_EXIT_VALUE, job->data, job->size);
  int r = lua_gettop(L);
  if (!lua_istable(L, r))
    return 0;
  lua_getfield(L, r, "traceback");
  lua_getfield(L, r, "error");
  if (lua_type(L, r + 1) != LUA_TSTRING)
    return 0; /* not a crash: an exit signal's own reason, reported by nobody */
  int t = lua_type(L, r + 2);
  if (t == LUA_TSTRING || t == LUA_TNUMBER) {
    lua_pushvalue(L, r + 2);
    lua_tostring(L, -1);
  } else {
    lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, r + 2));
  }
  if (job->is_main) { /* as the handler's table of its own crash: smarm.run raises its error */
    lua_createtable(L, 0, 3);
    lua_pushvalue(L, r + 2);
    lua_setfield(L, -2, "error");
    lua_pushvalue(L, r + 1);
    lua_setfield(L, -2, "traceback");
    lua_pushvalue(L, r + 3);
    lua_setfield(L, -2, "message");
    current_run->main_crash_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    current_run->main_status = LUA_ERRRUN;
    current_run->main_done = 1;
    return 0;
  }
  smarm_pid_t reporter = atomic_load_explicit(&crash_reporter, memory_order_relaxed);
  if (reporter) {
    smarm_msg_t *report = sm_lfaults_encode_report(L, r, smarm_own_name());
    if (report && smarm_send(reporter, report) < 0)
      smarm_msg_free(report);
  } else {
    print_crash(" of an exit signal", lua_tostring(L, r + 3), lua_tostring(L, r + 1));
  }
  return 0;
}

/* An actor ends of an exit signal (smarm_dying_reason). If its reason is a crash (an actor it was
** linked to raised) and nothing hears of its end, it reports the crash in turn, as it would have
** had it raised itself: a crash is reported once, by the last actor of the chain that nobody
** watches. The main actor makes smarm.run raise the crash's error instead. Protected: the
** decode may run out of memory (the report is then lost, as any report is then). */
static void crash_spread(lua_State *L, int is_main)
{
  crash_spread_job_t job = {NULL, 0, is_main};
  if (smarm_dying_reason(&job.data, &job.size) != SMARM_EXIT_VALUE ||
      (!is_main && smarm_is_watched()) || (is_main && current_run->main_done))
    return;
  int top = lua_gettop(L);
  lua_cpcall(L, crash_spread_protected, &job);
  lua_settop(L, top);
}

/* Killed (or stopped by the run's end, which closes everything anyway): what it owns closes. */
static void on_actor_stopped(void *data, void *ud)
{
  (void)ud;
  lvm_t *vm = this_vm();
  smarm_msg_t *block = lvm_block_of_data(data);
  if (block) { /* spawn_on's, stopped before it started: the block is all there is of it */
    if (vm && vm->L)
      crash_spread(vm->L, 0);
    smarm_msg_free(block); /* (the sockets and files in its arguments close) */
    return;
  }
  lactor_t *la = data;
  if (vm && vm->L)
    crash_spread(vm->L, la->is_main);
  if (vm && vm->L)
    sm_lhandle_end_owner(vm->L, la, !la->is_main);
  lactor_free(la, la->is_main ? CO_KEEP : CO_RELEASE);
}

/* Makes require("smarm.core") find this very code in L's VM, whether it came as a loadable
** module or is linked into the smarm executable. */
void sm_lsmarm_preload(lua_State *L)
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
  sm_lsmarm_preload(L);
}

/* cfg.on_sched_tick: the VM's memory for smarm.stats on other schedulers (lvm_t.memory). */
static void on_sched_tick(unsigned k, void *ud)
{
  lrun_t *run = ud;
  lvm_t *vm = &run->vms[k];
  if (vm->L)
    lvm_publish_memory(vm, vm->L);
}

/* What a scheduler's VM needs from this run: its refs and the run's package paths. */
static void vm_prepare(lvm_t *vm, const lrun_t *run)
{
  vm_cache_refs(vm);
  sm_lrebind_set_paths(vm->L, run->path, run->cpath);
}

typedef struct vm_setup {
  lvm_t *vm;
  const lrun_t *run;
  unsigned k;
} vm_setup_t;

/* A new VM's libraries and the module (so that actors here find `smarm`), under lua_cpcall. A
** module that fails to load (not found from the caller's paths alone, say) is reported, and its
** C part, always there (preloaded), is loaded instead: it makes what every actor of the VM
** needs (the pid metatables, the message handler), and a function spawned here that needs the
** rest raises the load's error itself. */
static int vm_load(lua_State *L)
{
  vm_setup_t *v = lua_touserdata(L, 1);
  open_vm_libs(L, v->run->path, v->run->cpath);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "smarm");
  int rc = lua_pcall(L, 1, 0, 0);
  if (rc == LUA_ERRMEM)
    return lua_error(L);
  if (rc != 0) {
    const char *e = lua_tostring(L, -1);
    fprintf(stderr, "smarm: scheduler %u: %s\n", v->k + 1, e ? e : "(error object is not a string)");
    lua_pop(L, 1);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "smarm.core");
    lua_call(L, 1, 0);
  }
  return 0;
}

static int vm_prepare_protected(lua_State *L)
{
  vm_setup_t *v = lua_touserdata(L, 1);
  vm_prepare(v->vm, v->run);
  return 0;
}

/* Makes scheduler k's own VM (k > 0). Out of memory (or a C part that cannot load) leaves the
** scheduler without a VM: an actor spawned on it ends at its start with reason "not enough
** memory" (remote_actor_main). Nothing raises where nothing would catch it. */
static void vm_make(lvm_t *vm, const lrun_t *run, unsigned k)
{
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "smarm: scheduler %u: not enough memory\n", k + 1);
    return;
  }
  vm_setup_t v = {vm, run, k};
  vm->L = L;
  if (lua_cpcall(L, vm_load, &v) != 0 || lua_cpcall(L, vm_prepare_protected, &v) != 0) {
    const char *e = lua_tostring(L, -1);
    fprintf(stderr, "smarm: scheduler %u: %s\n", k + 1, e ? e : "not enough memory");
    vm->L = NULL; /* first: the signal handlers (on_preempt, on_watchdog) read it */
    lua_close(L);
  }
}

static void on_sched_start(unsigned k, void *ud)
{
  lrun_t *run = ud;
  lvm_t *vm = &run->vms[k];
  sm_io_sched_thread_enter(k, NULL);
  if (k == 0) {
    /* The caller's VM. Out of memory here must not raise through the runtime's start: the run
    ** then ends before the main actor's body runs, and smarm.run raises it (l_run). */
    vm->L = run->caller;
    vm->owned = 0;
    vm_setup_t v = {vm, run, k};
    if (lua_cpcall(vm->L, vm_prepare_protected, &v) != 0) {
      lua_pop(vm->L, 1);
      run->vm0_failed = 1;
    }
  } else {
    vm->owned = 1;
    vm_make(vm, run, k);
  }
  sm_ljx_signal_traceback_init(); /* before the watchdog's first report can come */
  snprintf(vm->watchdog_head, sizeof vm->watchdog_head,
           "smarm: watchdog: scheduler %u, stack traceback:\n", k + 1);
  if (vm->L)
    lvm_publish_memory(vm, vm->L);
  smarm_sched_set_data(vm);
}

/* Async-signal context, on scheduler k's thread (smarm_config_t.on_watchdog), right after the
** watchdog's report of the actor stuck there: its traceback on stderr, in one write. Reading the
** VM's frames here is safe only while a C function runs (ljx.c checks): an actor stuck for a
** second is in a blocking call, not halfway through the VM's own bookkeeping. */
static void on_watchdog(unsigned k, void *ud)
{
  lrun_t *run = ud;
  lvm_t *vm = &run->vms[k];
  if (!vm->L)
    return;
  char buf[2048];
  size_t n = strlen(vm->watchdog_head); /* made at the scheduler's start: no formatting here */
  memcpy(buf, vm->watchdog_head, n);
  n += sm_ljx_signal_traceback(vm->L, buf + n, sizeof buf - n, 20);
  ssize_t w = write(STDERR_FILENO, buf, n);
  (void)w;
}

/* Async-signal context, on scheduler k's thread (smarm_config_t.on_preempt). */
static void on_preempt(unsigned k, void *ud)
{
  lrun_t *run = ud;
  sm_lpreempt_arm(&run->vms[k]);
}

static void on_sched_stop(unsigned k, void *ud)
{
  lrun_t *run = ud;
  lvm_t *vm = &run->vms[k];
  sm_lshape_release(vm, vm->L && !vm->owned);
  if (vm->owned && vm->L) {
    lua_close(vm->L);
    vm->L = NULL;
  }
  sm_codec_vm_stop(vm);
  if (vm->L) {
    /* the caller's VM lives on: let go of what this run anchored in it */
    while (vm->spare_count > 0)
      luaL_unref(vm->L, LUA_REGISTRYINDEX, vm->spare_ref[--vm->spare_count]);
    sm_lfaults_release_refs(vm); /* (each ref as far as vm_prepare got: lvm_unref) */
    for (int i = 0; i < LVM_STRS; i++)
      lvm_unref(vm->L, vm->str_ref[i]);
    sm_lshape_fixed_release(vm);
  }
  vm->L = NULL;
  sm_io_sched_thread_leave(k, NULL);
}

/* ---- Parking safely (lpark.h) ------------------------------------------------------------- */

/* The calling actor's state, or a raised error naming the function. */
static lactor_t *self_or_raise(lua_State *L, const char *fname) { return sm_lpark_actor(L, fname); }

/* registry[key] = the function at 1 (init.lua's hooks: _after_run, _set_remote_call). */
static int set_registry_function(lua_State *L, const void *key)
{
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_pushlightuserdata(L, (void *)key);
  lua_pushvalue(L, 1);
  lua_rawset(L, LUA_REGISTRYINDEX);
  return 0;
}

static int l_yield(lua_State *L)
{
  self_or_raise(L, "yield");
  sm_lpark_check(L, "yield");
  smarm_yield();
  sm_lpark_resumed(L);
  return 0;
}

static int l_sleep(lua_State *L)
{
  int64_t ns = sm_lpark_check_seconds(L, 1);
  self_or_raise(L, "sleep");
  sm_lpark_check(L, "sleep");
  int rc = smarm_sleep(ns == SMARM_FOREVER ? INT64_MAX : ns);
  sm_lpark_resumed(L);
  if (rc < 0)
    return luaL_error(L, "smarm.sleep: %s", strerror(-rc));
  return 0;
}

static int l_now(lua_State *L)
{
  lua_pushnumber(L, (lua_Number)smarm_clock_ns() / 1e9); /* the actors' clock (opts.clock) */
  return 1;
}

static int l_self(lua_State *L)
{
  smarm_pid_t pid = smarm_self();
  if (!pid || !smarm_actor_data())
    return luaL_error(L, "smarm.self: not inside an actor");
  sm_lsmarm_push_pid(L, pid);
  return 1;
}

static int l_exit(lua_State *L)
{
  lactor_t *la = smarm_actor_data();
  if (!la)
    return luaL_error(L, "smarm.exit: not inside an actor");
  /* Ending discards the C frames: never under a finalizer, a hook or compiled code, whose
  ** set-up LuaJIT would then never undo (the VM's GC and hooks would stay off for everyone). */
  sm_lpark_check(L, "exit");
  smarm_msg_t *block;
  int code = sm_lfaults_encode_reason(L, 1, &block);
  if (code == SMARM_EXIT_VALUE && !block)
    return luaL_error(L, "not enough memory");
  int rc = smarm_set_exit_reason(code, block ? smarm_msg_data(block) : NULL,
                                 block ? smarm_msg_size(block) : 0);
  smarm_msg_free(block);
  if (rc < 0)
    return luaL_error(L, "smarm.exit: %s", strerror(-rc));
  if (la->is_main) {
    /* The main actor exiting is like its function returning nothing: run returns. */
    current_run->main_status = 0;
    current_run->main_done = 1;
    lua_settop(la->head.co, 0);
    smarm_actor_set_data(NULL);
    sm_lhandle_end_owner(L, la, 0);
    lactor_free(la, CO_KEEP);
  } else {
    smarm_actor_set_data(NULL);
    sm_lhandle_end_owner(L, la, code != SMARM_EXIT_NORMAL || smarm_exit_pending());
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

/* Sets the fields of st in the table on top. */
static void set_stats(lua_State *L, const smarm_stats_t *st)
{
#define FIELD(f)                                                                                \
  lua_pushnumber(L, (lua_Number)st->f);                                                        \
  lua_setfield(L, -2, #f)
  FIELD(switches);
  FIELD(parks);
  FIELD(wakes);
  FIELD(remote_sent);
  FIELD(stack_saves);
  FIELD(preempts);
  FIELD(preempt_wait_ns);
  FIELD(preempts_timed);
  FIELD(spawned);
  FIELD(live);
  FIELD(stacks);
  FIELD(saved_stacks);
  FIELD(spin_pauses);
  FIELD(sent);
  FIELD(received);
  FIELD(runq);
  FIELD(timers);
  FIELD(busy_ns);
  FIELD(wall_ns);
#undef FIELD
  lua_pushnumber(L, st->wall_ns ? (lua_Number)st->busy_ns / (lua_Number)st->wall_ns : 0);
  lua_setfield(L, -2, "busy");
}

/* stats() -> { total = {...}, [k] = {...} per scheduler, memory = bytes of this VM,
** io_in_flight = n }: the core's counters (smarm_stats_read) and each VM's memory as of its last
** switch (lvm_t.memory; the caller's own now), read without stopping anyone. */
static int l_stats(lua_State *L)
{
  smarm_stats_t st;
  if (smarm_stats_read(-1, &st) < 0 || !current_run)
    return luaL_error(L, "smarm.stats: no runtime is running");
  unsigned n = smarm_sched_count();
  lvm_t *mine = this_vm();
  if (mine)
    lvm_publish_memory(mine, L);
  lua_createtable(L, (int)n, 3);
  smarm_stats_t each;
  size_t memory = 0; /* each VM's figure read once: the total is their sum, even while a
                        scheduler tells a new one */
  for (unsigned k = 0; k < n; k++) {
    if (smarm_stats_read((int)k, &each) < 0)
      break;
    size_t vm_memory = atomic_load_explicit(&current_run->vms[k].memory, memory_order_relaxed);
    memory += vm_memory;
    lua_newtable(L);
    set_stats(L, &each);
    lua_pushnumber(L, (lua_Number)vm_memory);
    lua_setfield(L, -2, "memory");
    lua_rawseti(L, -2, (int)k + 1);
  }
  lua_newtable(L);
  set_stats(L, &st);
  lua_pushnumber(L, (lua_Number)memory);
  lua_setfield(L, -2, "memory");
  lua_setfield(L, -2, "total");
  lua_pushnumber(L, (lua_Number)lua_gc(L, LUA_GCCOUNT, 0) * 1024 + lua_gc(L, LUA_GCCOUNTB, 0));
  lua_setfield(L, -2, "memory");
  lua_pushnumber(L, (lua_Number)sm_io_in_flight());
  lua_setfield(L, -2, "io_in_flight");
  size_t nbinaries, binary_bytes;
  sm_binary_counts(&nbinaries, &binary_bytes);
  lua_pushnumber(L, (lua_Number)nbinaries);
  lua_setfield(L, -2, "binaries");
  lua_pushnumber(L, (lua_Number)binary_bytes);
  lua_setfield(L, -2, "binary_bytes");
  return 1;
}

/* alive(pid or name): a pid of the caller's scheduler is answered from its table at once;
** another scheduler's is asked of that scheduler, which parks the caller for one round trip. A
** name is its holder's pid, and false when nobody holds it; so is a pid term of this node that
** names nobody (an earlier run's). Another node's pid raises, as Erlang's is_process_alive. */
static int l_alive(lua_State *L)
{
  smarm_pid_t pid;
  if (!sm_lsmarm_to_pid(L, 1, &pid))
    pid = sm_lfaults_check_target(L, 1, "alive");
  self_or_raise(L, "alive");
  if (!pid) {
    lua_pushboolean(L, 0);
    return 1;
  }
  unsigned k = smarm_pid_sched(pid);
  int remote = (int)k != smarm_sched_index() && k < smarm_sched_count(); /* asked: it parks */
  if (remote)
    sm_lpark_check(L, "alive");
  int rc = smarm_alive(pid);
  if (remote)
    sm_lpark_resumed(L);
  if (rc == -ETIMEDOUT)
    return sm_lpark_no_answer(L, "alive", (int)k);
  if (rc < 0)
    return luaL_error(L, "smarm.alive: %s", strerror(-rc));
  lua_pushboolean(L, rc);
  return 1;
}

static int l_is_pid(lua_State *L)
{
  smarm_pid_t pid;
  const char *node;
  size_t n;
  lua_pushboolean(L, sm_lsmarm_to_pid(L, 1, &pid) || sm_lterm_pid_node(L, 1, &node, &n));
  return 1;
}

/* ---- Messages ------------------------------------------------------------------------------ */

static int l_send(lua_State *L)
{
  smarm_pid_t to;
  if (!sm_lsmarm_to_pid(L, 1, &to)) { /* a pid is tested once: the hot path */
    if (lua_type(L, 1) != LUA_TSTRING && sm_ldist_is_target(L, 1)) { /* another node's process */
      if (lua_isnoneornil(L, 2))
        return luaL_argerror(L, 2, "message expected, got nil");
      self_or_raise(L, "send");
      if (sm_ldist_send(L))
        return 0; /* else a name of this node, now at 1 */
    }
    if (!(to = sm_lfaults_check_target(L, 1, "send")))
      return luaL_error(L, "smarm.send: no actor is registered as '%s'", lua_tostring(L, 1));
  }
  if (lua_isnoneornil(L, 2))
    return luaL_argerror(L, 2, "message expected, got nil");
  self_or_raise(L, "send");
  codec_moves_t moves;
  smarm_msg_t *m = sm_codec_encode(L, 2, "message", &moves);
  int rc = smarm_send(to, m);
  if (rc < 0) {
    sm_codec_abandon(L, m, &moves); /* any sockets in it stay the sender's */
    if (rc != -ESRCH) /* a dead receiver just drops the message */
      return luaL_error(L, "smarm.send: %s", strerror(-rc));
    return 0;
  }
  sm_codec_commit(&moves);
  return 0;
}

/* Pushes the value of msg and frees it. While it decodes, the block is the actor's pending
** block, so if decoding raises (out of memory) it is freed by the actor's next receive or its
** end: no protected call on the receive path. A receive while it decodes comes only from the
** decode's own require, which detaches from the block first (codec.c); never from a __gc
** finalizer that an allocation of the decode ran (sm_lpark_check_taking refuses it). */
static void push_message(lua_State *L, lactor_t *la, smarm_msg_t *msg)
{
  smarm_msg_free(la->pending);
  la->pending = msg;
  int kind = smarm_msg_kind(msg);
  if (kind == SMARM_MSG_USER) {
    /* a socket's message is held: delivered() counts it when the actor gets it */
    la->io_held += sm_codec_decode(L, msg);
  } else if (kind == SMARM_MSG_REPLY) { /* a call's answer: the value, then the alias */
    sm_codec_decode_head(L, msg, sizeof(smarm_ref_t));
  } else {
    sm_lfaults_push_notice(L, msg); /* EXIT or DOWN */
  }
  if (la->pending == msg) { /* else a receive while decoding (a module's top level) freed it */
    la->pending = NULL;
    smarm_msg_free(msg);
  }
}

/* A receive hands the value on top to the actor: a socket's message is taken (codec.h), which
** lets its socket send more. */
static void delivered(lua_State *L, lactor_t *la)
{
  if (la->io_held > 0 && sm_codec_event_taken(L))
    la->io_held--;
}

/* The FFI receive's match (lfast.h): m, first in the calling actor's mailbox, is a lone number
** or string that a plain receive() would return at once (described into *scalar); not when
** messages are set aside by a selective receive, where sm_ljx_may_receive_unparked refuses, or
** once the actor's end let go of its state. */
static int is_scalar(const smarm_msg_t *m, void *scalar)
{
  const lactor_t *la = smarm_actor_data();
  return la && la->saved_count == 0 && sm_ljx_may_receive_unparked(la->head.co) &&
         smarm_msg_kind(m) == SMARM_MSG_USER && sm_codec_scalar(m, 0, scalar) != 0;
}

/* The next message of the mailbox, waiting up to timeout_ns (0 polls): pushes it and returns 1,
** or pushes nil, "timeout" and returns 2. */
static int mailbox_next(lua_State *L, lactor_t *la, int64_t timeout_ns)
{
  if (timeout_ns != 0)
    sm_lpark_check(L, "receive");
  else
    sm_lpark_check_taking(L, "receive");
  smarm_msg_t *m;
  int rc = smarm_receive(timeout_ns, &m);
  if (timeout_ns != 0)
    sm_lpark_resumed(L);
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

/* The saved queue: messages a match refused, oldest first, in q[saved_first..saved_last]. Taking
** one from the middle leaves a hole (q[i] = nil) rather than shifting the rest, so a selective
** receive from a long backlog costs O(1) per message taken. When holes outnumber the messages,
** or the queue empties, it is renumbered from 1 (amortised O(1)) and saved_epoch moves on: a
** receive whose match function itself received then looks for its message again.
** Pushes it and returns its index. */
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
  if (la->saved_count == 0)
    la->saved_first = la->saved_last + 1;
  lua_pushvalue(L, -1);
  lua_rawseti(L, q, ++la->saved_last);
  smarm_mailbox_set_held((size_t)++la->saved_count); /* they count toward max_mailbox */
}

/* Renumbers the messages to q[1..count], in order (no receive may be under way). */
static void saved_compact(lua_State *L, lactor_t *la, int q)
{
  int to = 1;
  for (int i = la->saved_first; i <= la->saved_last; i++) {
    lua_rawgeti(L, q, i);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      continue;
    }
    lua_pushnil(L);
    lua_rawseti(L, q, i);
    lua_rawseti(L, q, to++);
  }
  la->saved_first = 1;
  la->saved_last = to - 1;
  la->saved_epoch++;
}

/* Removes q[i] (present) and pushes it. */
static void saved_take(lua_State *L, lactor_t *la, int q, int i)
{
  lua_rawgeti(L, q, i);
  lua_pushnil(L);
  lua_rawseti(L, q, i);
  smarm_mailbox_set_held((size_t)--la->saved_count);
  if (la->saved_count == 0) { /* empty: start again at 1 (the array part) */
    la->saved_first = 1;
    la->saved_last = 0;
    la->saved_epoch++;
    return;
  }
  if (i == la->saved_first) { /* skip the holes at the front: a message follows */
    for (int hole = 1; hole;) {
      lua_rawgeti(L, q, ++la->saved_first);
      hole = lua_isnil(L, -1);
      lua_pop(L, 1);
    }
  }
  /* Renumber when holes outnumber messages, or when takes from the front have carried the
  ** numbers far from 1 (a steady backlog would otherwise count up to INT_MAX). */
  if (la->saved_last - la->saved_first + 1 > 2 * la->saved_count + 16 ||
      la->saved_first > la->saved_count + 4096)
    saved_compact(L, la, q); /* leaves the taken value on top */
}

void sm_lsmarm_saved_claim(lua_State *L, int (*claim)(lua_State *L, void *ud), void *ud)
{
  lactor_t *la = smarm_actor_data();
  if (!la || la->saved_count == 0)
    return;
  int top = lua_gettop(L);
  int q = push_saved(L, la), taken = 0;
  for (int i = la->saved_first; la->saved_count > 0 && i <= la->saved_last; i++) {
    lua_rawgeti(L, q, i);
    int mine = !lua_isnil(L, -1) && claim(L, ud);
    lua_pop(L, 1);
    if (mine) {
      if (la->io_held > 0)
        la->io_held--; /* claims take back IO events */
      unsigned epoch = la->saved_epoch;
      saved_take(L, la, q, i);
      lua_pop(L, 1);
      taken = 1;
      if (la->saved_epoch != epoch) /* renumbered: what is left starts at saved_first again */
        i = la->saved_first - 1;
    }
  }
  if (taken)
    la->saved_epoch++; /* a receive under way (a match function that called us) looks again */
  lua_settop(L, top);
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

/* ---- call and reply ------------------------------------------------------------------------ */

/* The answer to the call of monitor `ud`: its reply (the alias is the payload's last bytes) or
** the DOWN of that monitor. */
static int is_call_answer(const smarm_msg_t *m, void *ud)
{
  smarm_ref_t ref = *(smarm_ref_t *)ud, alias;
  const unsigned char *d = smarm_msg_data((smarm_msg_t *)m);
  switch (smarm_msg_kind(m)) {
  case SMARM_MSG_REPLY:
    memcpy(&alias, d + smarm_msg_size(m) - sizeof alias, sizeof alias);
    return alias == ref;
  case SMARM_MSG_DOWN:
    return ((const smarm_notice_t *)d)->ref == ref;
  default:
    return 0;
  }
}

/* A call that ends without its answer leaves nothing: no monitor, no DOWN, and no reply that
** slipped in after the mark while the monitor still held. */
static void call_give_up(smarm_mark_t mark, smarm_ref_t ref)
{
  smarm_msg_t *m;
  smarm_demonitor(ref, 0);
  while (smarm_receive_after(mark, is_call_answer, &ref, 0, &m) == 0)
    smarm_msg_free(m);
}

/* call(to, request [, timeout]) -> reply | nil, reason. Marks the mailbox, monitors the server
** (the monitor's ref is the alias the reply comes through), sends it
** { smarm = "CALL", from = <reply handle>, request = } (codec.h), and waits for the reply or
** the DOWN after the mark only. Whatever the outcome, the monitor is gone and no reply or DOWN
** of it is left in the mailbox; a reply that comes later is dropped before it reaches it.
** (Placing the monitor inside the request's own signal was measured: 10% slower across
** schedulers, as the server's scheduler then records it on the request's critical path.) */
/* registry[&remote_call_key]: init.lua's call to a process of another node (_set_remote_call) */
static const char remote_call_key;

static int l_set_remote_call(lua_State *L) { return set_registry_function(L, &remote_call_key); }

static int l_call(lua_State *L)
{
  lactor_t *la = self_or_raise(L, "call");
  luaL_checkany(L, 2);
  smarm_pid_t to;
  if (!sm_lsmarm_to_pid(L, 1, &to)) { /* a pid is tested once: the hot path */
    if (lua_type(L, 1) == LUA_TTABLE && sm_ldist_is_target(L, 1) &&
        sm_ldist_check_name_node(L, 1, "call")) {
      lua_rawgeti(L, 1, 1); /* { name, this node }: a call by name here */
      lua_replace(L, 1);
    } else if (lua_type(L, 1) != LUA_TSTRING && sm_ldist_is_target(L, 1)) {
      /* another node's process: gen_server's protocol, in Lua; refused where it could not
      ** take its answer, before it monitors or sends anything. A table's name and node are
      ** checked above, in call's words. */
      sm_lpark_check_taking(L, "call");
      if (!(lua_type(L, 3) == LUA_TNUMBER && lua_tonumber(L, 3) == 0))
        sm_lpark_check(L, "call");
      lvm_push_registry(L, &remote_call_key);
      if (!lua_isfunction(L, -1))
        return luaL_error(L, "smarm.call: calls to other nodes need require(\"smarm\")");
      lua_insert(L, 1);
      lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
      return lua_gettop(L);
    }
    to = sm_lfaults_check_target(L, 1, "call");
  }
  int64_t timeout = 5000000000LL; /* Erlang's default, 5 s */
  if (!lua_isnoneornil(L, 3)) {
    timeout = sm_lpark_check_seconds(L, 3);
  }
  if (!to) {
    lua_pushnil(L);
    lua_pushliteral(L, "noproc");
    return 2;
  }
  if (to == smarm_self())
    return luaL_error(L, "smarm.call: an actor cannot call itself");
  if (timeout != 0) /* where parking is refused, refuse before anything is sent */
    sm_lpark_check(L, "call");
  else
    sm_lpark_check_taking(L, "call");
  /* The request is encoded (and may raise: it may not be sendable) before the monitor exists;
  ** its tables are written as bytes, never made here. The ref (the alias) ends the block. */
  smarm_ref_t ref = smarm_make_ref();
  codec_call_t req = {smarm_self()};
  codec_moves_t moves;
  smarm_msg_t *m = sm_codec_encode_call(L, 2, &req, &moves, sizeof ref);
  memcpy((char *)smarm_msg_data(m) + smarm_msg_size(m) - sizeof ref, &ref, sizeof ref);
  smarm_mark_t mark = smarm_mailbox_mark(); /* before the monitor: a dead server's DOWN may
                                             ** come at once */
  int rc = smarm_monitor_ref(to, ref);
  if (rc < 0) {
    sm_codec_abandon(L, m, &moves);
    return luaL_error(L, "smarm.call: %s", strerror(-rc));
  }
  rc = smarm_send(to, m);
  if (rc < 0) {
    sm_codec_abandon(L, m, &moves); /* any sockets in it stay the caller's */
    call_give_up(mark, ref);
    if (rc != -ESRCH)
      return luaL_error(L, "smarm.call: %s", strerror(-rc));
    lua_pushnil(L);
    lua_pushliteral(L, "noproc");
    return 2;
  }
  sm_codec_commit(&moves);
  la->head.waiting_for = "call";
  rc = smarm_receive_after(mark, is_call_answer, &ref, timeout, &m);
  la->head.waiting_for = NULL;
  if (timeout != 0)
    sm_lpark_resumed(L);
  if (rc < 0) {
    call_give_up(mark, ref);
    if (rc != -ETIMEDOUT)
      return luaL_error(L, "smarm.call: %s", strerror(-rc));
    lua_pushnil(L);
    lua_pushliteral(L, "timeout");
    return 2;
  }
  if (smarm_msg_kind(m) == SMARM_MSG_DOWN) { /* the server ended: its reason */
    const smarm_notice_t *n = smarm_msg_data(m);
    lua_pushnil(L);
    smarm_msg_t *keep = m; /* freed if decoding the reason raises: it is pending */
    smarm_msg_free(la->pending);
    la->pending = keep;
    sm_lfaults_push_reason(L, n->reason, n + 1, n->size);
    if (la->pending == keep) { /* else freed by a receive while decoding */
      la->pending = NULL;
      smarm_msg_free(keep);
    }
    return 2;
  }
  /* Whatever came through the monitor after the mark goes too: its DOWN, or a second reply (a
  ** server that handed the request on and answered as well). Only what came during the call is
  ** looked at. */
  call_give_up(mark, ref);
  push_message(L, la, m);
  return 1;
}

/* reply(from, value): answers a call; from is the request's `from`. A caller that gave up (or
** ended) never sees it. */
static int l_reply(lua_State *L)
{
  smarm_pid_t pid;
  smarm_ref_t ref;
  if (!sm_lsmarm_to_from(L, 1, &pid, &ref)) {
    if (!lua_istable(L, 1) || sm_lterm_table_kind(L, 1) != LTERM_TUPLE)
      return sm_lfaults_argerror(L, "reply", 1, "a call's `from` expected");
    lua_rawgeti(L, 1, 1); /* {Pid, Tag}: a pid, else send would name itself for a bad target */
    const char *node;
    size_t n;
    int is_pid = sm_lsmarm_to_pid(L, -1, &pid) || sm_lterm_pid_node(L, -1, &node, &n);
    lua_pop(L, 1);
    if (!is_pid)
      return sm_lfaults_argerror(L, "reply", 1, "a call's `from` expected");
    /* a call from another node: from is gen_server's {Pid, Tag}, answered {Tag, Value} */
    luaL_checkany(L, 2);
    lua_settop(L, 2);
    lua_createtable(L, 2, 1);
    lua_rawgeti(L, 1, 2);
    lua_rawseti(L, 3, 1);
    lua_pushvalue(L, 2);
    lua_rawseti(L, 3, 2);
    lua_pushnumber(L, 2); /* the value may be nil: the arity says 2 */
    lua_setfield(L, 3, "n");
    sm_lterm_mark_table(L, 3, LTERM_TUPLE);
    lua_rawgeti(L, 1, 1);
    lua_replace(L, 1);
    lua_replace(L, 2);
    return l_send(L);
  }
  luaL_checkany(L, 2);
  self_or_raise(L, "reply");
  codec_moves_t moves;
  smarm_msg_t *m = sm_codec_encode_tail(L, 2, "reply", &moves, sizeof ref);
  memcpy((char *)smarm_msg_data(m) + smarm_msg_size(m) - sizeof ref, &ref, sizeof ref);
  int rc = smarm_send_reply(pid, m);
  if (rc < 0) {
    sm_codec_abandon(L, m, &moves);
    if (rc != -ESRCH) /* a caller that ended: nobody to answer */
      return luaL_error(L, "smarm.reply: %s", strerror(-rc));
    return 0;
  }
  sm_codec_commit(&moves);
  return 0;
}

/* _flush_down(ref): removes a DOWN notice of ref from the saved queue (demonitor's flush; the
** core flushes its mailbox). */
static int l_flush_down(lua_State *L)
{
  lactor_t *la = self_or_raise(L, "demonitor");
  if (la->saved_count == 0)
    return 0;
  int q = push_saved(L, la);
  for (int i = la->saved_first; i <= la->saved_last; i++) {
    lua_rawgeti(L, q, i);
    int hit = 0;
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "smarm");
      lua_getfield(L, -2, "ref");
      hit = lua_isstring(L, -2) && strcmp(lua_tostring(L, -2), "DOWN") == 0 &&
            lua_equal(L, -1, 1);
      lua_pop(L, 2);
    }
    lua_pop(L, 1);
    if (hit) {
      saved_take(L, la, q, i);
      return 0;
    }
  }
  return 0;
}

/* The index of a message rawequal to the value on top, or 0. Decoded tables are fresh objects,
** so a table is found only as itself; equal scalars cannot be told apart, and taking the oldest
** of them is the same as taking this one. */
static int saved_find(lua_State *L, lactor_t *la, int q)
{
  for (int i = la->saved_first; la->saved_count && i <= la->saved_last; i++) {
    lua_rawgeti(L, q, i);
    int same = lua_rawequal(L, -1, -2);
    lua_pop(L, 1);
    if (same)
      return i;
  }
  return 0;
}

/* The receive proper: one pass over the saved queue, then over new messages appended to it as
** they come. Every message is looked at in order, including those a receive inside the match
** set aside (they join the end), and one that such a receive took meanwhile (its slot is empty
** when the match returns) is skipped. */
static int receive_in(lua_State *L, lactor_t *la, int match_idx, int64_t timeout)
{
  int q = push_saved(L, la);
  int64_t deadline = timeout > 0 ? smarm_clock_ns() + timeout : timeout; /* the actors' clock */
  /* Once no time is left (a timeout of 0, or the deadline passed), only the messages queued at
  ** that moment are still looked at, then the receive times out: a sender that keeps sending
  ** messages the match refuses must not hold it past its timeout for good. -1: time is left. */
  int64_t last_looks = -1;
  for (int i = la->saved_count ? la->saved_first : la->saved_last + 1;; i++) {
    if (i > la->saved_last) { /* all seen: the next message from the mailbox joins the queue */
      int64_t left = timeout;
      if (timeout > 0) {
        left = deadline - smarm_clock_ns();
        if (left < 0)
          left = 0;
      }
      if (left == 0 && last_looks < 0)
        last_looks = (int64_t)smarm_mailbox_size();
      if (last_looks == 0) {
        sm_lpark_check_taking(L, "receive"); /* refused where a poll is (a __gc finalizer) */
        lua_pushnil(L);
        lua_pushliteral(L, "timeout");
        return 2;
      }
      if (mailbox_next(L, la, left) == 2)
        return 2;
      if (last_looks > 0)
        last_looks--;
      /* Into the saved queue before the match runs, so an error there loses nothing. */
      saved_append(L, la, q);
      lua_pop(L, 1);
      i = la->saved_last;
    }
    lua_rawgeti(L, q, i);
    if (lua_isnil(L, -1)) { /* a hole */
      lua_pop(L, 1);
      continue;
    }
    if (!match_idx) {
      lua_pop(L, 1);
      saved_take(L, la, q, i);
      delivered(L, la);
      return 1;
    }
    unsigned epoch = la->saved_epoch;
    int yes = call_match(L, match_idx); /* may receive: take, set aside, renumber */
    if (epoch != la->saved_epoch) {
      int at = yes ? saved_find(L, la, q) : 0;
      lua_pop(L, 1);
      if (at) {
        saved_take(L, la, q, at);
        delivered(L, la);
        return 1;
      }
      i = la->saved_first - 1; /* numbers changed: look again from the oldest */
      continue;
    }
    lua_pop(L, 1);
    lua_rawgeti(L, q, i);
    int still_there = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (yes && still_there) {
      saved_take(L, la, q, i);
      delivered(L, la);
      return 1;
    }
  }
}

static int l_receive(lua_State *L)
{
  /* receive(), receive(timeout), receive(match [, timeout]), receive(nil, timeout). The FFI
  ** receive passes two nils whenever it falls back here (every receive that parks): nil
  ** arguments alone are receive(), told by one scan instead of four lua_type calls. */
  int match_idx = 0;
  int64_t timeout = SMARM_FOREVER;
  if (!sm_ljx_args_nil(L)) {
    int timeout_idx = 1;
    if (lua_isfunction(L, 1) || (lua_isnil(L, 1) && lua_gettop(L) >= 2)) {
      match_idx = lua_isfunction(L, 1) ? 1 : 0;
      timeout_idx = 2;
    } else if (!lua_isnoneornil(L, 1) && lua_type(L, 1) != LUA_TNUMBER) {
      luaL_argerror(L, 1, lua_pushfstring(L, "match function or number of seconds expected, "
                                             "got %s", luaL_typename(L, 1)));
    }
    if (!lua_isnoneornil(L, timeout_idx)) {
      timeout = sm_lpark_check_seconds(L, timeout_idx);
    }
  }
  lactor_t *la = self_or_raise(L, "receive");
  if (!match_idx && la->saved_count == 0) { /* the common case: straight from the mailbox */
    int n = mailbox_next(L, la, timeout);
    if (n == 1) {
      delivered(L, la);
      lvm_t *vm = this_vm();
      if (vm->receive_more) /* the FFI receive looks first next time if more are queued */
        *vm->receive_more = smarm_mailbox_size() > 0;
    }
    return n;
  }
  lua_settop(L, 2);
  return receive_in(L, la, match_idx, timeout);
}

/* ---- spawn_on: moving a function to another VM (ltransfer.h) ----------------------------- */

/* A spawn_on's block: the transfer, then the core's room, where the spawn request travels
** (smarm_spawn_on_block). Until the actor starts, the block stands for it (its data:
** lvm_data_of_block), so nothing else is allocated for it on the spawner's side. */
#define SPAWN_TAIL SMARM_SPAWN_ROOM

/* Runs in the new actor's coroutine, right as it starts (nothing parks before): decodes the
** transfer block, the actor's pending block (start_remote put it there: freed with the actor
** if decoding raises, as push_message's), and calls the function it holds. */
static int remote_entry(lua_State *L)
{
  lactor_t *la = smarm_actor_data();
  smarm_msg_t *block = la->pending;
  sm_codec_decode_transfer(L, block, SPAWN_TAIL);
  if (la->pending == block) { /* else a receive while decoding (a module's top level) freed it */
    la->pending = NULL;
    smarm_msg_free(block);
  }
  return sm_ltransfer_call(L, 1);
}

/* A fresh actor state with a coroutine of owner's VM anchored in the registry: a spare one, with
** owner's globals as a new one would have, or a new one. */
static void lactor_init(lactor_t *la, lua_State *owner)
{
  lvm_t *vm = this_vm();
  if (vm && vm->spare_count > 0) {
    vm->spare_count--;
    la->head.co = vm->spare_co[vm->spare_count];
    la->coref = vm->spare_ref[vm->spare_count];
    lua_pushvalue(owner, LUA_GLOBALSINDEX);
    lua_xmove(owner, la->head.co, 1);
    lua_replace(la->head.co, LUA_GLOBALSINDEX);
  } else {
    la->head.co = lua_newthread(owner);
    la->coref = luaL_ref(owner, LUA_REGISTRYINDEX);
  }
  la->head.hook_ref = la->head.hook_mask = la->head.hook_count = la->head.hook_left = 0;
  la->head.waiting_for = NULL;
  la->nargs = 0;
  la->savedref = LUA_NOREF;
  la->saved_first = 1;
  la->saved_last = 0;
  la->saved_count = 0;
  la->saved_epoch = 0;
  la->pending = NULL;
  la->io_held = 0;
}

/* remote_actor_main's start in the VM's main state, under lua_cpcall when a coroutine must be
** made: the coroutine, and its entry function (one per VM) moved over, the block left as its
** pending block (an error raised in the coroutine itself, which has no protected frame yet,
** would end the process). */
typedef struct remote_start {
  lactor_t *la;
  smarm_msg_t *block;
} remote_start_t;

/* Nothing here allocates with a spare coroutine (no light userdata either: LuaJIT interns
** those, which may allocate), so remote_actor_main then needs no protected call. */
static void start_remote(lua_State *L, remote_start_t *r)
{
  lactor_init(r->la, L);
  sm_ljx_push_bits(L, this_vm()->remote_entry);
  lua_xmove(L, r->la->head.co, 1);
  r->la->pending = r->block; /* remote_entry takes it from there */
}

static int remote_start(lua_State *L)
{
  start_remote(L, lua_touserdata(L, 1));
  return 0;
}

/* The C body of an actor started by spawn_on: its coroutine is made here, in its own VM. Out of
** memory for it, the actor cannot start and nobody waits for an error: it ends with reason
** "not enough memory" (SMARM_EXIT_NOMEM), which its links and monitors hear. */
static void remote_actor_main(void *arg)
{
  lvm_t *vm = this_vm();
  if (!vm || !vm->L) { /* its making ran out of memory (on_sched_start) */
    smarm_actor_set_data(NULL);
    smarm_msg_free(arg); /* its block: the sockets in its arguments close */
    smarm_exit_reason(SMARM_EXIT_NOMEM, NULL, 0);
    return;
  }
  lactor_t *la = lactor_alloc(0);
  if (!la) {
    smarm_actor_set_data(NULL);
    smarm_msg_free(arg);
    smarm_exit_reason(SMARM_EXIT_NOMEM, NULL, 0);
    return;
  }
  *la = (lactor_t){.coref = LUA_NOREF, .savedref = LUA_NOREF, .pending = arg};
  smarm_actor_set_data(la); /* in place of the block, which remote_entry frees */
  remote_start_t r = {la, arg};
  if (vm->spare_count > 0) { /* nothing raises there (start_remote): no protected call, which
                              ** allocates a C function of its own in LuaJIT */
    start_remote(vm->L, &r);
  } else if (lua_cpcall(vm->L, remote_start, &r) != 0) {
    lua_pop(vm->L, 1); /* "not enough memory" (or LuaJIT's light userdata of &r): either way
                       ** the actor cannot start */
    if (la->coref == LUA_NOREF)
      la->head.co = NULL; /* made but never anchored: the GC's */
    la->pending = arg; /* lactor_init let go of it before start_remote put it back */
    smarm_actor_set_data(NULL);
    lactor_free(la, CO_RELEASE); /* frees the block (its sockets close) */
    smarm_exit_reason(SMARM_EXIT_NOMEM, NULL, 0);
    return;
  }
  lactor_main(la);
}

static int lactor_init_protected(lua_State *L)
{
  lactor_init(lua_touserdata(L, 1), L);
  return 0;
}

/* New coroutine of L's VM holding the function at fn_idx and nargs arguments from first on, for
** the run's main actor or another (lactor_alloc). Raises "not enough memory" (and frees what it
** made) when there is none for it. */
static lactor_t *new_lactor(lua_State *L, int fn_idx, int first, int nargs, int is_main)
{
  if (nargs > INT16_MAX) { /* (a Lua call passes fewer than LUAI_MAXCSTACK) */
    luaL_error(L, "smarm.spawn: too many arguments");
    return NULL;
  }
  lactor_t *la = lactor_alloc(is_main);
  if (!la) {
    luaL_error(L, "not enough memory");
    return NULL;
  }
  lvm_t *vm = this_vm();
  if (vm && vm->spare_count > 0) { /* lactor_init allocates nothing with a spare coroutine: no
                                     ** protected call, which allocates a C function in LuaJIT */
    lactor_init(la, L);
  } else if (lua_cpcall(L, lactor_init_protected, la) != 0) { /* nothing anchored: the GC's */
    lactor_release(la);
    lua_error(L); /* the error lua_cpcall left: "not enough memory" */
    return NULL;
  }
  lua_pushvalue(L, fn_idx);
  for (int i = 0; i < nargs; i++)
    lua_pushvalue(L, first + i);
  la->nargs = (int16_t)nargs;
  lua_xmove(L, la->head.co, nargs + 1);
  return la;
}

/* What spawn_opt's options ask for (spawn, spawn_on and spawn_opt all come here). */
typedef struct spawn_req {
  int where;          /* a scheduler (0-based), SMARM_SCHED_ANY, or SPAWN_HERE */
  int link, monitor;
  const char *name;   /* NULL: none */
  int64_t slice_ns;   /* 0: the run's; negative: never preempted */
  size_t max_mailbox; /* 0: the run's */
} spawn_req_t;

#define SPAWN_HERE (-2) /* this scheduler, sharing the function's upvalues (no copy) */

/* Pushes pid (and the monitor's ref when asked); raises "smarm.<fname>: ..." on failure. */
static int spawn_done(lua_State *L, const char *fname, const spawn_req_t *r, int rc,
                      smarm_pid_t pid, smarm_ref_t ref)
{
  if (rc == -EEXIST)
    return luaL_error(L, "smarm.%s: the name '%s' is taken", fname, r->name);
  if (rc == -ENOMEM) /* worded as LuaJIT's own and the codec's */
    return luaL_error(L, "not enough memory");
  if (rc < 0)
    return luaL_error(L, "smarm.%s: %s", fname, strerror(-rc));
  if (sm_ljx_results_wanted(L) == 0)
    return 0; /* a spawn made as a statement: its pid (a userdata) and ref are not made */
  sm_lsmarm_push_pid(L, pid);
  if (!r->monitor)
    return 1;
  sm_lsmarm_push_new_ref(L, ref);
  return 2;
}

/* Whether a spawn_on to the caller's own scheduler may skip the message: the arguments would
** decode to the same values (nil, booleans, numbers, strings, pids), and the function has a copy
** here (sm_codec_copy_function_here), which replaces it at fn_idx. */
static int copied_here(lua_State *L, int fn_idx, int nargs)
{
  for (int i = 1; i <= nargs; i++)
    if (!sm_codec_same_here(L, fn_idx + i))
      return 0;
  if (!sm_codec_copy_function_here(L, fn_idx))
    return 0;
  lua_replace(L, fn_idx);
  return 1;
}

/* Spawns the function (or "module.function") at fn_idx with the arguments from fn_idx + 1 on. */
static int spawn_lua(lua_State *L, const char *fname, const spawn_req_t *r, int fn_idx)
{
  int nargs = lua_gettop(L) - fn_idx;
  int own = r->where == SPAWN_HERE ? -1 : smarm_sched_index(); /* "any" picking it: the same */
  int to_own = own >= 0 && (r->where == own ||
                            (r->where == SMARM_SCHED_ANY && smarm_sched_pick_any(0) == own));
  if (to_own && copied_here(L, fn_idx, nargs)) {
    if (r->where == SMARM_SCHED_ANY)
      smarm_sched_pick_any(1); /* the pick it took: ties take turns as with every spawn */
    spawn_req_t here = *r;
    here.where = SPAWN_HERE;
    return spawn_lua(L, fname, &here, fn_idx);
  }
  smarm_ref_t ref = 0;
  smarm_spawn_opts_t opts = {.link = r->link, .monitor = r->monitor ? &ref : NULL,
                             .name = r->name, .slice_ns = r->slice_ns,
                             .max_mailbox = r->max_mailbox};
  smarm_pid_t pid = 0;
  int rc;
  if (r->where == SPAWN_HERE) {
    luaL_checktype(L, fn_idx, LUA_TFUNCTION);
    self_or_raise(L, fname);
    lactor_t *la = new_lactor(L, fn_idx, fn_idx + 1, nargs, 0);
    opts.data = la; /* stopped before it runs: on_actor_stopped frees it */
    rc = smarm_spawn(lactor_main, la, &opts, &pid);
    if (rc < 0)
      lactor_free(la, CO_RELEASE);
    return spawn_done(L, fname, r, rc, pid, ref);
  }
  int t = lua_type(L, fn_idx);
  if (t != LUA_TFUNCTION && t != LUA_TSTRING)
    return luaL_argerror(L, fn_idx,
                         lua_pushfstring(L, "function or \"module.function\" expected, got %s",
                                         luaL_typename(L, fn_idx)));
  if (t == LUA_TSTRING && !sm_ltransfer_name_dot(lua_tostring(L, fn_idx)))
    return luaL_argerror(L, fn_idx, lua_pushfstring(L, "'%s' is not of the form module.function",
                                                    lua_tostring(L, fn_idx)));
  self_or_raise(L, fname);
  sm_lpark_check(L, fname); /* a spawn on another scheduler waits for its answer; checked before
                            ** the block exists, so that a refusal leaks nothing */
  if (smarm_exit_pending()) /* it may die asking (smarm.h): here, before its block owns the */
    smarm_yield();          /* sockets and files in the arguments, which its death closes */
  codec_moves_t moves;
  smarm_msg_t *block = sm_codec_encode_transfer(L, fn_idx, nargs + 1, &moves, SPAWN_TAIL);
  /* The block stands for the actor until it starts, so that one stopped before it ever runs
  ** frees it (on_actor_stopped); remote_actor_main gives the actor its state. */
  opts.data = lvm_data_of_block(block);
  rc = smarm_spawn_on_block(r->where, remote_actor_main, block, &opts, &pid);
  sm_lpark_resumed(L);
  if (rc == -ETIMEDOUT) { /* the spawn may still happen: the block is the core's,
                          ** and the block carries the sockets in the arguments (smarm.h) */
    sm_codec_commit(&moves);
    return sm_lpark_no_answer(L, fname, r->where);
  }
  if (rc < 0) {
    sm_codec_abandon(L, block, &moves); /* any sockets in the arguments stay the caller's */
  } else {
    sm_codec_commit(&moves);
  }
  return spawn_done(L, fname, r, rc, pid, ref);
}

/* A scheduler, 1..N (returned as its index) or "any" (SMARM_SCHED_ANY), at idx; *ok says
** whether it is one. */
static int where_at(lua_State *L, int idx, int *ok)
{
  *ok = 1;
  if (lua_type(L, idx) == LUA_TSTRING && strcmp(lua_tostring(L, idx), "any") == 0)
    return SMARM_SCHED_ANY;
  lua_Number k = lua_type(L, idx) == LUA_TNUMBER ? lua_tonumber(L, idx) : 0;
  *ok = k >= 1 && k <= (int)smarm_sched_count() && k == (lua_Number)(int)k;
  return *ok ? (int)k - 1 : 0; /* (int) of NaN or 1e30 is undefined */
}

/* A scheduler argument: 1..N or "any". */
static int check_where(lua_State *L, int idx)
{
  int ok, k = where_at(L, idx, &ok);
  if (!ok && lua_type(L, idx) != LUA_TNUMBER)
    luaL_typerror(L, idx, "scheduler index or \"any\"");
  luaL_argcheck(L, ok, idx, "scheduler index or \"any\" expected");
  return k;
}

static int l_spawn(lua_State *L)
{
  spawn_req_t r = {SPAWN_HERE, 0, 0, NULL, 0, 0};
  return spawn_lua(L, "spawn", &r, 1);
}

static int l_spawn_on(lua_State *L)
{
  spawn_req_t r = {check_where(L, 1), 0, 0, NULL, 0, 0};
  return spawn_lua(L, "spawn_on", &r, 2);
}

static int l_spawn_link(lua_State *L)
{
  spawn_req_t r = {SPAWN_HERE, 1, 0, NULL, 0, 0};
  return spawn_lua(L, "spawn_link", &r, 1);
}

static int l_spawn_monitor(lua_State *L)
{
  spawn_req_t r = {SPAWN_HERE, 0, 1, NULL, 0, 0};
  return spawn_lua(L, "spawn_monitor", &r, 1);
}

/* A time slice or watchdog option at the top of the stack, in seconds (math.huge: never, off),
** as smarm_config_t/smarm_spawn_opts_t want it; nil gives 0 (the default). */
static int64_t check_slice(lua_State *L, int arg, const char *field, const char *huge_means)
{
  if (lua_isnil(L, -1))
    return 0;
  lua_Number t = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
  if (t == HUGE_VAL)
    return -1;
  if (!(t >= 1e-5 && t <= 3600))
    luaL_argerror(L, arg, lua_pushfstring(L, "%s must be a number of seconds from 1e-5 to 3600, "
                                             "or math.huge (%s)", field, huge_means));
  return (int64_t)(t * 1e9);
}

/* opts.clock at the top of the stack: "real" (or nil) or "virtual". */
static int check_clock(lua_State *L, int arg)
{
  const char *clock = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  if (lua_isnil(L, -1) || (clock && strcmp(clock, "real") == 0))
    return SMARM_CLOCK_REAL;
  if (clock && strcmp(clock, "virtual") == 0)
    return SMARM_CLOCK_VIRTUAL;
  return luaL_argerror(L, arg, "opts.clock must be \"real\" or \"virtual\"");
}

/* Pushes opts.<names[i]> for each of the n names, in their order (nil where it is not set), of
** the options table at arg, and raises for a key that is no option (Erlang's spawn_opt refuses
** an unknown option with badarg): a misspelt option would else be ignored without a word. A
** table without a metatable is walked once with lua_next, which finds the options and the
** strangers together (a lua_getfield per option hashes its name: six of them, and a walk for
** the strangers, were a fifth of a spawn_opt); one with a metatable is asked for each name, as
** its __index may give options, and then walked for strangers. */
static void push_options(lua_State *L, int arg, const char *const names[], int n,
                         const char *list)
{
  luaL_checkstack(L, n + 3, "options");
  int base = lua_gettop(L);
  int ask = lua_getmetatable(L, arg);
  if (ask)
    lua_pop(L, 1);
  for (int i = 0; i < n; i++) {
    if (ask)
      lua_getfield(L, arg, names[i]);
    else
      lua_pushnil(L);
  }
  lua_pushnil(L);
  while (lua_next(L, arg)) {
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_argerror(L, arg, lua_pushfstring(L, "opts has a key that is a %s (options: %s)",
                                            luaL_typename(L, -2), list));
    size_t len;
    const char *key = lua_tolstring(L, -2, &len);
    int i = n - 1; /* (by length too: "link\0x" is no option) */
    while (i >= 0 && !(strlen(names[i]) == len && memcmp(key, names[i], len) == 0))
      i--;
    if (i < 0) { /* the key as written in Lua: a zero byte as \0 (the message is a C string) */
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      for (size_t k = 0; k < len; k++) {
        if (key[k])
          luaL_addchar(&b, key[k]);
        else
          luaL_addlstring(&b, "\\0", 2);
      }
      luaL_pushresult(&b);
      luaL_argerror(L, arg, lua_pushfstring(L, "opts.%s is not an option (options: %s)",
                                            lua_tostring(L, -1), list));
    }
    if (ask)
      lua_pop(L, 1);
    else
      lua_replace(L, base + 1 + i); /* the value, in its name's place */
  }
}

/* opts.max_mailbox at the top of the stack: an integer from 1 (nil: 0, the default). */
static size_t check_max_mailbox(lua_State *L, int arg)
{
  if (lua_isnil(L, -1))
    return 0;
  lua_Number n = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : 0;
  if (!(n >= 1 && n <= 1e15 && n == (lua_Number)(int64_t)n))
    luaL_argerror(L, arg, "opts.max_mailbox must be an integer from 1");
  return (size_t)n;
}

/* spawn_opt(opts, fn, ...): opts.on (scheduler or "any"; absent: here), link, monitor, name,
** slice, max_mailbox. */
static int l_spawn_opt(lua_State *L)
{
  enum { SLICE, MAX_MAILBOX, ON, LINK, MONITOR, NAME, COUNT };
  static const char *const names[COUNT] = {"slice", "max_mailbox", "on", "link", "monitor",
                                           "name"};
  luaL_checktype(L, 1, LUA_TTABLE);
  int top = lua_gettop(L);
  push_options(L, 1, names, COUNT, "on, link, monitor, name, slice, max_mailbox");
  int o = top + 1; /* opts.<names[k]> at o + k */
  spawn_req_t r = {SPAWN_HERE, 0, 0, NULL, 0, 0};
  lua_pushvalue(L, o + SLICE);
  r.slice_ns = check_slice(L, 1, "opts.slice", "never preempted");
  lua_pushvalue(L, o + MAX_MAILBOX);
  r.max_mailbox = check_max_mailbox(L, 1);
  if (!lua_isnil(L, o + ON)) {
    int ok;
    r.where = where_at(L, o + ON, &ok);
    luaL_argcheck(L, ok, 1, "opts.on must be a scheduler index from 1 to smarm.schedulers() or "
                            "\"any\"");
  }
  r.link = lua_toboolean(L, o + LINK);
  r.monitor = lua_toboolean(L, o + MONITOR);
  char name[SMARM_NAME_MAX + 1]; /* a copy: the string need not outlive the pops below */
  if (!lua_isnil(L, o + NAME)) {
    size_t n;
    const char *given = lua_type(L, o + NAME) == LUA_TSTRING ? lua_tolstring(L, o + NAME, &n)
                                                              : NULL;
    luaL_argcheck(L, given && n >= 1 && n <= SMARM_NAME_MAX && strlen(given) == n, 1,
                  "opts.name must be a string of 1 to 255 bytes");
    memcpy(name, given, n + 1);
    r.name = name;
  }
  lua_settop(L, top);
  return spawn_lua(L, "spawn_opt", &r, 2);
}

/* ---- smarm.run ------------------------------------------------------------------------------ */

/* _request_timeout() -> seconds | nil: the running runtime's opts.request_timeout (nil: no limit),
** for the questions init.lua asks other schedulers through actors (smarm.info). */
static int l_request_timeout(lua_State *L)
{
  sm_lpark_actor(L, "info");
  int64_t ns = current_run->request_timeout_ns;
  if (ns < 0)
    return 0;
  lua_pushnumber(L, (lua_Number)(ns ? ns : SMARM_REQUEST_TIMEOUT_DEFAULT_NS) / 1e9);
  return 1;
}

/* _set_crash_reporter(pid): the run's on_crash actor (init.lua). */
static int l_set_crash_reporter(lua_State *L)
{
  smarm_pid_t pid;
  if (!sm_lsmarm_to_pid(L, 1, &pid))
    return luaL_argerror(L, 1, "pid expected");
  atomic_store_explicit(&crash_reporter, pid, memory_order_relaxed);
  return 0;
}

/* last_traceback(): the text and traceback of the error that ended the last smarm.run of this VM
** (the value itself is what run raised), or nil when it did not end with an error. */
static int l_last_traceback(lua_State *L)
{
  lvm_push_registry(L, &last_traceback_key);
  return 1;
}

/* _after_run(fn): fn is called in the caller's VM each time a run has ended (every actor gone);
** init.lua uses it to forget module loaders the end of a run stopped. One per VM. */
static int l_after_run(lua_State *L) { return set_registry_function(L, &after_run_key); }

static void call_after_run(lua_State *L)
{
  lvm_push_registry(L, &after_run_key);
  if (!lua_isfunction(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  if (lua_pcall(L, 0, 0, 0) != 0) {
    fprintf(stderr, "smarm: after the run: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
  }
}

#define SCHED_MAX_TEXT "1024" /* SMARM_SCHED_MAX, in the words of opts.schedulers' error */
_Static_assert(SMARM_SCHED_MAX == 1024, "SCHED_MAX_TEXT says SMARM_SCHED_MAX");

/* The option on top, opts.<name>, as a number: a number itself, not a string that reads as one.
** Raises "bad argument #2 to 'run' (opts.<name> must be <what>, got <type>)". */
static lua_Number run_opt_number(lua_State *L, const char *name, const char *what)
{
  if (lua_type(L, -1) != LUA_TNUMBER)
    luaL_argerror(L, 2, lua_pushfstring(L, "opts.%s must be %s, got %s", name, what,
                                        luaL_typename(L, -1)));
  return lua_tonumber(L, -1);
}

static int l_run(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TFUNCTION);
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  if (!lua_isnoneornil(L, 2)) {
    static const char *const names[] = {
      "schedulers", "stack_size", "slice", "watchdog", "max_mailbox", "request_timeout", "clock",
      "dump_signal", "keep_freed", "seed", "on_crash"};
    luaL_checktype(L, 2, LUA_TTABLE);
    int top = lua_gettop(L);
    push_options(L, 2, names, (int)(sizeof names / sizeof *names), "schedulers, stack_size, "
                 "slice, watchdog, max_mailbox, request_timeout, clock, dump_signal, "
                 "keep_freed, seed, on_crash");
    lua_settop(L, top); /* (read again below, one by one with their checks) */
    lua_getfield(L, 2, "schedulers");
    if (!lua_isnil(L, -1)) {
      lua_Number n = run_opt_number(L, "schedulers", "an integer from 1 to " SCHED_MAX_TEXT);
      luaL_argcheck(L, n >= 1 && n <= SMARM_SCHED_MAX && n == (lua_Number)(unsigned)n, 2,
                    "opts.schedulers must be an integer from 1 to " SCHED_MAX_TEXT);
      cfg.schedulers = (unsigned)n;
    }
    lua_getfield(L, 2, "stack_size");
    if (!lua_isnil(L, -1)) {
      lua_Number n = run_opt_number(L, "stack_size", "a number of bytes");
      /* at least twice the reserve of the checked gsub and sort (lreentry.h): on less, every
      ** call of them would raise */
      luaL_argcheck(L, n >= 2 * LREENTRY_RESERVE && n <= (1 << 30), 2,
                    "opts.stack_size must be from 131072 to 1073741824");
      cfg.stack_size = (size_t)n;
    }
    lua_getfield(L, 2, "slice");
    cfg.slice_ns = check_slice(L, 2, "opts.slice", "never preempted");
    lua_getfield(L, 2, "watchdog");
    cfg.watchdog_ns = check_slice(L, 2, "opts.watchdog", "off");
    lua_getfield(L, 2, "max_mailbox");
    cfg.max_mailbox = check_max_mailbox(L, 2);
    lua_getfield(L, 2, "request_timeout");
    cfg.request_timeout_ns = check_slice(L, 2, "opts.request_timeout", "no limit");
    lua_getfield(L, 2, "clock");
    cfg.clock = check_clock(L, 2);
    lua_getfield(L, 2, "dump_signal");
    if (!lua_isnil(L, -1)) {
      const char *sig = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL;
      cfg.dump_signal = lua_toboolean(L, -1) == 0                ? -1
                        : sig && strcmp(sig, "SIGQUIT") == 0 ? SIGQUIT
                        : sig && strcmp(sig, "SIGUSR1") == 0 ? SIGUSR1
                        : sig && strcmp(sig, "SIGUSR2") == 0 ? SIGUSR2
                                                             : 0;
      luaL_argcheck(L, cfg.dump_signal != 0, 2,
                    "opts.dump_signal must be false, \"SIGQUIT\", \"SIGUSR1\" or \"SIGUSR2\"");
    }
    lua_getfield(L, 2, "keep_freed");
    if (!lua_isnil(L, -1)) { /* bytes, or false: glibc's settings left alone (mallopt: int) */
      int is_false = lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1);
      lua_Number n = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : 0;
      luaL_argcheck(L, is_false || (n >= 1 && n <= INT_MAX && n == (int64_t)n), 2,
                    "opts.keep_freed must be false or a number of bytes from 1 to 2^31 - 1");
      cfg.keep_freed_bytes = is_false ? -1 : (int64_t)n;
    }
    lua_getfield(L, 2, "seed");
    if (!lua_isnil(L, -1)) {
      lua_Number n = run_opt_number(L, "seed", "an integer from 1 to 2^53");
      luaL_argcheck(L, n >= 1 && n <= 9007199254740992.0 && n == (lua_Number)(uint64_t)n, 2,
                    "opts.seed must be an integer from 1 to 2^53");
      luaL_argcheck(L, cfg.schedulers <= 1, 2, "opts.seed needs opts.schedulers = 1");
      cfg.seed = (uint64_t)n;
      cfg.schedulers = 1;
      lua_getfield(L, 2, "clock");
      if (lua_isnil(L, -1)) /* a seed replays a schedule: its timers too, on a virtual clock */
        cfg.clock = SMARM_CLOCK_VIRTUAL;
      lua_pop(L, 1);
    }
    lua_pop(L, 10);
  }
  if (cfg.slice_ns == 0) { /* SMARM_SLICE: the default slice, for testing code under preemption */
    const char *env = getenv("SMARM_SLICE");
    double t = env ? strtod(env, NULL) : 0;
    if (t >= 1e-5 && t <= 3600)
      cfg.slice_ns = (int64_t)(t * 1e9);
  }
  if (smarm_sched_index() >= 0)
    return luaL_error(L, "smarm.run: already inside a runtime (a script that calls smarm.run "
                         "itself runs with smarm -n script.lua)");
  lua_settop(L, 1);

  lrun_t run;
  memset(&run, 0, sizeof run);
  run.caller = L;
  run.request_timeout_ns = cfg.request_timeout_ns;
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
  lactor_t *main = new_lactor(L, 1, 2, 0, 1); /* first: it raises when out of memory */
  int main_ref = main->coref;
  run.vms = calloc(n, sizeof *run.vms);
  if (!run.vms) {
    luaL_unref(L, LUA_REGISTRYINDEX, main_ref);
    lactor_release(main);
    return luaL_error(L, "not enough memory");
  }
  lua_State *co = main->head.co;

  lua_pushlightuserdata(L, (void *)&last_traceback_key); /* this run's error has none yet */
  lua_pushnil(L);
  lua_rawset(L, LUA_REGISTRYINDEX);
  cfg.on_sched_start = on_sched_start;
  cfg.on_sched_tick = on_sched_tick;
  cfg.on_sched_stop = on_sched_stop;
  cfg.on_actor_stopped = on_actor_stopped;
  cfg.on_preempt = on_preempt;
  cfg.on_watchdog = on_watchdog;
  cfg.on_dump = sm_linfo_on_dump;
  cfg.userdata = &run;
  current_run = &run;
  sm_lhandle_next_run(); /* handles made from here on belong to this run */
  int rc = smarm_run(&cfg, lactor_main, main);
  sm_lpreempt_disarm(L); /* the ticker is gone: nothing arms it again */
  sm_io_shutdown(); /* every actor is gone: let the IO thread finish its work in flight and end */
  sm_lfs_end_run(L); /* the run's files still open in this VM (the other VMs are closed) */
  sm_lhandle_next_run(); /* the run's handles are stale now: their sockets and files are closed */
  current_run = NULL;
  atomic_store_explicit(&crash_reporter, 0, memory_order_relaxed);
  sm_lpark_resumed(L);
  free(run.vms);
  call_after_run(L);
  if (rc < 0) { /* the main actor was never made: its state is ours to free */
    luaL_unref(L, LUA_REGISTRYINDEX, main_ref);
    lactor_release(main);
    return luaL_error(L, "smarm.run: %s", rc == -EBUSY ? "a runtime is already running"
                                                       : strerror(-rc));
  }
  if (run.vm0_failed) {
    luaL_unref(L, LUA_REGISTRYINDEX, main_ref);
    return luaL_error(L, "not enough memory");
  }
  if (!run.main_done) { /* the main actor was killed, or smarm_stop() (from C) ended the run */
    luaL_unref(L, LUA_REGISTRYINDEX, main_ref);
    return 0;
  }
  if (run.main_status != 0) {
    /* The handler's table: raise the value the main actor raised, keep the text and traceback
    ** for smarm.last_traceback(). A bare value when even the handler failed (out of memory).
    ** Or the same table for a crash that reached it along a link (crash_spread). */
    if (run.main_crash_ref) {
      lua_rawgeti(L, LUA_REGISTRYINDEX, run.main_crash_ref);
      luaL_unref(L, LUA_REGISTRYINDEX, run.main_crash_ref);
    } else {
      lua_xmove(co, L, 1);
    }
    luaL_unref(L, LUA_REGISTRYINDEX, main_ref);
    if (lua_istable(L, -1)) {
      int t = lua_gettop(L);
      lua_pushlightuserdata(L, (void *)&last_traceback_key);
      lua_getfield(L, t, "message");
      lua_pushliteral(L, "\n");
      lua_getfield(L, t, "traceback");
      lua_concat(L, 3);
      lua_rawset(L, LUA_REGISTRYINDEX);
      lua_getfield(L, t, "error");
    }
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
  {"stats", l_stats},
  {"is_pid", l_is_pid},   {"send", l_send},     {"receive", l_receive},
  {"spawn_on", l_spawn_on}, {"alive", l_alive}, {"_after_run", l_after_run},
  {"spawn_opt", l_spawn_opt}, {"_flush_down", l_flush_down},
  {"spawn_link", l_spawn_link}, {"spawn_monitor", l_spawn_monitor},
  {"call", l_call},       {"reply", l_reply},     {"last_traceback", l_last_traceback},
  {"_set_crash_reporter", l_set_crash_reporter}, {"_request_timeout", l_request_timeout},
  {"_set_remote_call", l_set_remote_call},
  {NULL, NULL},
};

int luaopen_smarm_core(lua_State *L)
{
  smarm_msg_set_drop_hook(sm_codec_drop); /* undelivered messages close their sockets and files */
  sm_lpid_open(L);
  lua_pushcfunction(L, add_traceback); /* one handler for every actor's protected call */
  lvm_set_registry_once(L, &traceback_key);
  lua_pushcfunction(L, remote_entry);
  lvm_set_registry_once(L, &remote_entry_key);
  lua_newtable(L);
  luaL_register(L, NULL, functions);
  int module = lua_gettop(L);
  sm_lbench_register(L, module);
  sm_lfs_register(L, module);
  sm_lwatch_register(L, module);
  sm_ldns_register(L, module);
  sm_llineedit_register(L, module);
  sm_lproc_register(L, module);
  sm_lsignal_register(L, module);
  sm_lfaults_register(L, module);
  sm_lterm_register(L, module);
  sm_lbinary_register(L, module);
  sm_ldist_register(L, module);
  sm_linfo_register(L, module);
  sm_ltimer_register(L, module);
  sm_ltcp_register(L, module);
  sm_ludp_register(L, module);
  /* after every registration that may read the classic send or receive */
  sm_lfast_register(L, module, is_scalar);
  sm_lpreempt_wrap_sethook(L);
  sm_lrebind_learn_standard(L);
  sm_lreentry_wrap(L);
  lua_pushliteral(L, SMARM_VERSION);
  lua_setfield(L, -2, "version");
  sm_lrebind_register(L, module);
  sm_lrebind_submodules(L, module);
  sm_lrebind_loaded_all(L); /* the modules loaded before smarm, as they are now */
  return 1;
}
