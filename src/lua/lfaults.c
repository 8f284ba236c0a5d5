/*
** Faults in Lua (see lfaults.h): the smarm functions for links, monitors, exit signals, refs and
** names, and the conversions between Lua values and the core's reasons and notices.
**
** Functions that may end the calling actor at once (an exit signal to itself) or park (a name
** of another scheduler's actor) pass the parking checks first (lpark.h), like every function
** that switches stacks.
*/
#include "lfaults.h"

#include "codec.h"
#include "io/dist.h"
#include "ldist.h"
#include "ljx.h"
#include "lpark.h"
#include "lpid.h"
#include "lshape.h"
#include "lterm.h"
#include "lvm.h"
#include "util/etf.h"

#include <lauxlib.h>

#include <errno.h>
#include <string.h>

/* ---- Reasons ------------------------------------------------------------------------------- */

/* The reasons with a code: lvm_str_text[code] (lvm.h keeps them in the codes' order). */
#define NCODES (SMARM_EXIT_NOPROC + 1)
_Static_assert((int)LVM_STR_NORMAL == (int)SMARM_EXIT_NORMAL &&
                 (int)LVM_STR_KILL == (int)SMARM_EXIT_KILL &&
                 (int)LVM_STR_KILLED == (int)SMARM_EXIT_KILLED &&
                 (int)LVM_STR_NOPROC == (int)SMARM_EXIT_NOPROC,
               "the cached reason strings follow the codes");

/* The reason encoder, called protected (sm_lfaults_encode_reason) with (value, job [, why]):
** encodes the value into job->block; with `why` (the first attempt's error), encodes instead the
** string "tostring(value) (an exit reason that cannot be sent: why)", or for a crash's reason
** ({ error =, traceback = }) the same table with only its error so replaced: the traceback stays. */
typedef struct encode_job {
  smarm_msg_t *block;
  int report;       /* encode { pid = self, name = name, reason = value } instead */
  const char *name; /* the report's name (may be NULL) */
} encode_job_t;

/* Pushes "tostring(value at idx) (an exit reason that cannot be sent: why)"; a __tostring that
** raises gives "(a T value)" instead. */
static void push_unsendable(lua_State *L, int idx, const char *why)
{
  int top = lua_gettop(L);
  lua_getglobal(L, "tostring");
  lua_pushvalue(L, idx);
  const char *what = lua_pcall(L, 1, 1, 0) == 0 ? lua_tostring(L, -1) : NULL;
  if (!what)
    what = lua_pushfstring(L, "(a %s value)", luaL_typename(L, idx));
  lua_pushfstring(L, "%s (an exit reason that cannot be sent: %s)", what, why);
  lua_replace(L, top + 1);
  lua_settop(L, top + 1);
}

static int encode_reason(lua_State *L)
{
  encode_job_t *job = lua_touserdata(L, 2);
  if (lua_gettop(L) >= 3) { /* the second attempt: what cannot be sent is described */
    const char *why = lua_tostring(L, 3) ? lua_tostring(L, 3) : "?";
    int crash = 0;
    if (lua_istable(L, 1)) {
      lua_getfield(L, 1, "traceback");
      crash = lua_type(L, -1) == LUA_TSTRING;
      lua_pop(L, 1);
    }
    if (crash) {
      lua_createtable(L, 0, 2);
      lua_getfield(L, 1, "error");
      push_unsendable(L, lua_gettop(L), why);
      lua_setfield(L, -3, "error");
      lua_pop(L, 1);
      lua_getfield(L, 1, "traceback");
      lua_setfield(L, -2, "traceback");
    } else {
      push_unsendable(L, 1, why);
    }
    lua_replace(L, 1);
  }
  if (job->report) {
    lua_createtable(L, 0, 3);
    sm_lsmarm_push_pid(L, smarm_self());
    lua_setfield(L, -2, "pid");
    if (job->name) {
      lua_pushstring(L, job->name);
      lua_setfield(L, -2, "name");
    }
    lua_pushvalue(L, 1);
    lua_setfield(L, -2, "reason");
    lua_replace(L, 1);
  }
  codec_moves_t moves;
  smarm_msg_t *b = sm_codec_encode_data(L, 1, "reason", &moves);
  if (moves.n) { /* every notice gets a copy of a reason: a socket or file cannot be one */
    sm_codec_abandon(L, b, &moves);
    return luaL_error(L, "reason holds a socket or file");
  }
  job->block = b;
  return 0;
}

/* Runs the encoder protected on the value at idx (twice if it cannot be sent). */
static smarm_msg_t *encode_protected(lua_State *L, int idx, encode_job_t *job)
{
  int top = lua_gettop(L);
  for (int attempt = 0; attempt < 2 && !job->block; attempt++) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, this_vm()->encode_reason_ref);
    lua_pushvalue(L, idx);
    lua_pushlightuserdata(L, job);
    if (attempt)
      lua_pushvalue(L, top + 1); /* why the first attempt failed */
    if (lua_pcall(L, attempt ? 3 : 2, 0, 0) == 0)
      break;
    if (attempt) /* out of memory even for the description */
      break;
  }
  lua_settop(L, top);
  return job->block;
}

smarm_msg_t *sm_lfaults_encode_report(lua_State *L, int idx, const char *name)
{
  if (idx < 0 && idx > LUA_REGISTRYINDEX)
    idx = lua_gettop(L) + idx + 1;
  encode_job_t job = {NULL, 1, name};
  return encode_protected(L, idx, &job);
}

int sm_lfaults_encode_reason(lua_State *L, int idx, smarm_msg_t **block)
{
  *block = NULL;
  if (idx < 0 && idx > LUA_REGISTRYINDEX)
    idx = lua_gettop(L) + idx + 1;
  if (lua_isnoneornil(L, idx))
    return SMARM_EXIT_NORMAL;
  if (lua_type(L, idx) == LUA_TSTRING) {
    const char *s = lua_tostring(L, idx);
    for (int c = 0; c < NCODES; c++)
      if (strcmp(s, lvm_str_text[c]) == 0)
        return c;
    if (strcmp(s, lvm_str_text[LVM_STR_MAILBOX_OVERFLOW]) == 0)
      return SMARM_EXIT_MAILBOX_OVERFLOW;
    if (strcmp(s, lvm_str_text[LVM_STR_NOMEM]) == 0)
      return SMARM_EXIT_NOMEM;
    if (strcmp(s, "noconnection") == 0)
      return SMARM_EXIT_NOCONNECTION;
  }
  /* The encoder is a cached function and the arguments need no allocation: nothing here can
  ** raise outside the protected call (this runs at an actor's end, unprotected). */
  encode_job_t job = {NULL, 0, NULL};
  *block = encode_protected(L, idx, &job);
  return SMARM_EXIT_VALUE;
}

void sm_lfaults_push_reason(lua_State *L, int code, const void *data, size_t size)
{
  if (code >= 0 && code < NCODES)
    lvm_push_str(L, this_vm(), (enum lvm_str)code);
  else if (code == SMARM_EXIT_MAILBOX_OVERFLOW)
    lvm_push_str(L, this_vm(), LVM_STR_MAILBOX_OVERFLOW);
  else if (code == SMARM_EXIT_NOMEM)
    lvm_push_str(L, this_vm(), LVM_STR_NOMEM);
  else if (code == SMARM_EXIT_NOCONNECTION)
    lua_pushliteral(L, "noconnection");
  else if (code == SMARM_EXIT_VALUE && size)
    sm_codec_decode_bytes(L, data, size);
  else if (code == SMARM_EXIT_TERM && size) /* the node's packet check walked its bytes, but the
    ** decoder may still refuse them (its C stack check: a DOWN taken where little of the actor's
    ** stack is left): raised out of a receive, that lost the notice */
    sm_lterm_decode_or_bad(L, data, size, "an exit reason from another node");
  else
    lua_pushnil(L);
}

void sm_lfaults_push_notice(lua_State *L, smarm_msg_t *m)
{
  const lvm_t *vm = this_vm();
  const smarm_notice_t *n = smarm_msg_data(m);
  enum lvm_fixed k = smarm_msg_kind(m) == SMARM_MSG_DOWN ? LVM_FIXED_DOWN : LVM_FIXED_EXIT;
  sm_lshape_push_fixed(L, vm, k);
  int t = lua_gettop(L);
  unsigned i = 0; /* the keys in the shape's order: [ref,] pid, reason */
  if (k == LVM_FIXED_DOWN) {
    sm_lsmarm_push_ref(L, n->ref);
    sm_lshape_fixed_set(L, t, vm, k, i++);
  }
  const char *remote = (const char *)(n + 1) + n->size;
  size_t remote_size = smarm_msg_size(m) - sizeof *n - n->size; /* smarm.h: the sender's pid */
  if (remote_size && (unsigned char)remote[0] == ETF_SMALL_TUPLE) { /* {Name, Node}: by name */
    char term[1 + 2 + 2 * (3 + 255)];
    if (remote_size < sizeof term) {
      term[0] = (char)ETF_VERSION; /* the version byte the decoder wants */
      memcpy(term + 1, remote, remote_size);
      sm_lterm_decode(L, term, 1 + remote_size, "a DOWN's name");
    } else {
      lua_pushnil(L);
    }
  } else if (remote_size) { /* a process of another node: its pid as it came */
    sm_lterm_push_blob(L, LTERM_OPAQUE, remote, remote_size);
  } else
    sm_lsmarm_push_pid(L, n->pid);
  sm_lshape_fixed_set(L, t, vm, k, i++);
  sm_lfaults_push_reason(L, n->reason, n + 1, n->size);
  sm_lshape_fixed_set(L, t, vm, k, i);
}

/* ---- Targets: pids or names ---------------------------------------------------------------- */

/* A pid that names nobody: no runtime has a scheduler of that index (a pid of this node's
** earlier run, which no actor holds now). */
#define NOBODY_PID ((smarm_pid_t)(SMARM_PID_SCHED_REMOTE - 1) << \
                    (SMARM_PID_SLOT_BITS + SMARM_PID_GEN_BITS) | 1)

int sm_lfaults_own_stale_pid(lua_State *L, int idx)
{
  const char *node;
  size_t n;
  return sm_lterm_pid_node(L, idx, &node, &n) && sm_ldist_is_self(node, n);
}

int sm_lfaults_argerror(lua_State *L, const char *fname, int idx, const char *why)
{
  return luaL_error(L, "bad argument #%d to '%s' (%s)", idx, fname, why);
}

/* Why the value at idx is no registered name (1 to 255 bytes, no NUL), or NULL. */
static const char *name_fault(lua_State *L, int idx)
{
  size_t n;
  if (lua_type(L, idx) != LUA_TSTRING) /* not lua_tolstring's number to string: 5 is no name */
    return lua_pushfstring(L, "name expected, got %s", luaL_typename(L, idx));
  const char *name = lua_tolstring(L, idx, &n);
  if (n < 1 || n > SMARM_NAME_MAX || strlen(name) != n)
    return "a name is 1 to 255 bytes, without NUL";
  return NULL;
}

const char *sm_lfaults_check_name(lua_State *L, int idx, const char *fname)
{
  const char *fault = name_fault(L, idx);
  if (fault)
    sm_lfaults_argerror(L, fname, idx, fault);
  return lua_tostring(L, idx);
}

/* Why the value at idx names no actor of this node (it is no pid of this node and no name), or
** NULL. */
static const char *target_fault(lua_State *L, int idx)
{
  smarm_pid_t pid;
  if (sm_lsmarm_to_pid(L, idx, &pid))
    return NULL;
  if (lua_type(L, idx) == LUA_TSTRING)
    return name_fault(L, idx);
  const char *node;
  size_t n;
  if (sm_lterm_pid_node(L, idx, &node, &n))
    return "a pid of another node (not here: send, call, link, monitor, exit and kill take one)";
  return lua_pushfstring(L, "pid or name expected, got %s", luaL_typename(L, idx));
}

smarm_pid_t sm_lfaults_check_target(lua_State *L, int idx, const char *fname)
{
  smarm_pid_t pid;
  if (sm_lsmarm_to_pid(L, idx, &pid))
    return pid;
  if (sm_lfaults_own_stale_pid(L, idx))
    return NOBODY_PID; /* dead: alive says false, a timer for it sends nothing */
  const char *fault = target_fault(L, idx);
  if (fault)
    sm_lfaults_argerror(L, fname, idx, fault);
  return smarm_whereis(lua_tostring(L, idx));
}

/* _target_fault(v) -> why v names no actor of this node | nil: for the Lua modules that take
** a target (smarm.server, smarm.supervisor), which word the errors as their own. */
static int l_target_fault(lua_State *L)
{
  lua_settop(L, 1);
  const char *fault = target_fault(L, 1);
  if (fault)
    lua_pushstring(L, fault);
  else
    lua_pushnil(L);
  return 1;
}

/* A target that must exist: a pid, or a name somebody holds (Erlang's badarg otherwise). */
static smarm_pid_t check_live_target(lua_State *L, int idx, const char *fname)
{
  smarm_pid_t pid = sm_lfaults_check_target(L, idx, fname);
  if (!pid)
    luaL_error(L, "smarm.%s: no actor is registered as '%s'", fname, lua_tostring(L, idx));
  return pid;
}


/* A target of a link, monitor or exit signal: also a pid of another node, as its remote pid,
** pinned (the caller unpins it once the core holds it: sm_dist_alias_unpin, which a pid of ours
** passes through), and with by_name (monitor), { name, node }. */
static smarm_pid_t tie_target(lua_State *L, int idx, const char *fname, int must_live,
                              int by_name_ok)
{
  const char *node, *bytes;
  size_t n;
  smarm_pid_t pinned;
  int by_name = by_name_ok && lua_istable(L, idx) && sm_ldist_is_target(L, idx);
  if (by_name) { /* { name, node }: a monitor by name, Erlang's {Name, Node} */
    if (sm_ldist_check_name_node(L, idx, fname)) { /* this node: the name here */
      lua_rawgeti(L, idx, 1);
      lua_replace(L, idx);
      return sm_lfaults_check_target(L, idx, fname);
    }
    /* another node's: both are atoms */
    lua_rawgeti(L, idx, 1);
    lua_rawgeti(L, idx, 2);
    size_t both = lua_objlen(L, -2) + lua_objlen(L, -1);
    if (both > DIST_MONITOR_NAME_NODE_MAX)
      luaL_error(L, "bad argument #%d to '%s' (the name and node of {name, node} have %d bytes "
                 "together, more than the %d a monitor of another node's name takes)", idx, fname,
                 (int)both, DIST_MONITOR_NAME_NODE_MAX);
    lua_pop(L, 2);
    lua_newtable(L); /* the term {atom name, atom node}, without its version byte */
    lua_rawgeti(L, idx, 1);
    sm_lterm_push_blob(L, LTERM_ATOM, lua_tostring(L, -1), lua_objlen(L, -1));
    lua_rawseti(L, -3, 1);
    lua_pop(L, 1);
    lua_rawgeti(L, idx, 2);
    sm_lterm_push_blob(L, LTERM_ATOM, lua_tostring(L, -1), lua_objlen(L, -1));
    lua_rawseti(L, -3, 2);
    lua_pop(L, 1);
    sm_lterm_mark_table(L, -1, LTERM_TUPLE);
    sm_lterm_encode(L, -1, "target");
    bytes = lua_tolstring(L, -1, &n);
    pinned = sm_dist_alias_pin(bytes + 1, n - 1);
    lua_pop(L, 2);
    if (!pinned)
      luaL_error(L, "smarm.%s: %s", fname,
                 sm_dist_identity(&node, &n, &(uint32_t){0})
                     ? "not enough memory"
                     : "this runtime is not a node (smarm.node.start)");
    return pinned;
  }
  if (sm_lfaults_own_stale_pid(L, idx))
    return by_name_ok ? 0 : NOBODY_PID; /* dead: noproc */
  if (sm_lterm_pid_node(L, idx, &node, &n)) {
    if (!sm_dist_identity(&node, &n, &(uint32_t){0}))
      luaL_error(L, "smarm.%s: this runtime is not a node (smarm.node.start)", fname);
    sm_lterm_to_blob(L, idx, &bytes, &n);
    if (!(pinned = sm_dist_alias_pin(bytes, n)))
      luaL_error(L, "smarm.%s: not enough memory", fname);
    return pinned;
  }
  return must_live ? check_live_target(L, idx, fname) : sm_lfaults_check_target(L, idx, fname);
}

static int raise_errno(lua_State *L, const char *fname, int rc)
{
  return luaL_error(L, "smarm.%s: %s", fname, strerror(-rc));
}

/* ---- Refs ---------------------------------------------------------------------------------- */

static int l_ref(lua_State *L)
{
  sm_lpark_actor(L, "ref");
  sm_lsmarm_push_new_ref(L, smarm_make_ref());
  return 1;
}

static int l_is_ref(lua_State *L)
{
  smarm_ref_t ref;
  lua_pushboolean(L, sm_lsmarm_to_ref(L, 1, &ref));
  return 1;
}

/* ---- Links and exit signals ---------------------------------------------------------------- */

static int l_link(lua_State *L)
{
  sm_lpark_actor(L, "link");
  smarm_pid_t pid = tie_target(L, 1, "link", 0, 0);
  if (!pid) /* a name nobody holds: Erlang's badarg */
    return luaL_error(L, "smarm.link: no actor is registered as '%s'", lua_tostring(L, 1));
  if (pid == smarm_self())
    return 0; /* Erlang: linking to oneself does nothing */
  if (pid == NOBODY_PID) { /* a pid of this node's earlier run: an exit signal noproc at once */
    /* Not smarm_link: its answer would come from NOBODY_PID, a pid no Lua value can show, and
    ** a trapping caller could not receive its EXIT. Sent as from outside, the notice carries
    ** the pid's bytes, so the EXIT names the pid as given. No link is recorded (none exists). */
    const char *bytes;
    size_t n;
    sm_lterm_to_blob(L, 1, &bytes, &n);
    smarm_signal_t sig = {SMARM_SIG_EXIT, NOBODY_PID, smarm_self(), 0, SMARM_EXIT_NOPROC, NULL, 0};
    int rc = smarm_signal_outside(&sig, bytes, n);
    return rc < 0 ? raise_errno(L, "link", rc) : 0;
  }
  int rc = smarm_link(pid);
  sm_dist_alias_unpin(pid);
  if (rc < 0)
    return raise_errno(L, "link", rc);
  return 0;
}

static int l_unlink(lua_State *L)
{
  sm_lpark_actor(L, "unlink");
  smarm_pid_t pid = tie_target(L, 1, "unlink", 1, 0);
  int rc = smarm_unlink(pid);
  sm_dist_alias_unpin(pid);
  if (rc < 0)
    return raise_errno(L, "unlink", rc);
  return 0;
}

static int l_trap_exit(lua_State *L)
{
  luaL_checkany(L, 1);
  sm_lpark_actor(L, "trap_exit");
  lua_pushboolean(L, smarm_trap_exit(lua_toboolean(L, 1)) == 1);
  return 1;
}

/* exit_signal(pid or name, reason): exit/2. A signal to oneself may end the caller at once. */
static int l_exit_signal(lua_State *L)
{
  sm_lpark_actor(L, "exit");
  luaL_checkany(L, 2);
  smarm_pid_t pid = tie_target(L, 1, "exit", 1, 0);
  if (pid == smarm_self())
    sm_lpark_check(L, "exit");
  smarm_msg_t *block;
  int code = sm_lfaults_encode_reason(L, 2, &block);
  if (code == SMARM_EXIT_VALUE && !block) {
    sm_dist_alias_unpin(pid);
    return luaL_error(L, "not enough memory");
  }
  int rc = smarm_exit_signal(pid, code, block ? smarm_msg_data(block) : NULL,
                             block ? smarm_msg_size(block) : 0);
  sm_dist_alias_unpin(pid);
  smarm_msg_free(block);
  if (rc < 0)
    return raise_errno(L, "exit", rc);
  return 0;
}

static int l_kill(lua_State *L)
{
  sm_lpark_actor(L, "kill");
  smarm_pid_t pid = tie_target(L, 1, "kill", 1, 0);
  if (pid == smarm_self())
    sm_lpark_check(L, "kill");
  int rc = smarm_exit_signal(pid, SMARM_EXIT_KILL, NULL, 0);
  sm_dist_alias_unpin(pid);
  if (rc < 0)
    return raise_errno(L, "kill", rc);
  return 0;
}

/* ---- Monitors ------------------------------------------------------------------------------ */

static int l_monitor(lua_State *L)
{
  sm_lpark_actor(L, "monitor");
  smarm_pid_t pid = tie_target(L, 1, "monitor", 0, 1);
  smarm_ref_t ref;
  if (!pid) {
    /* A name nobody holds: DOWN with noproc at once, as a message of our own (no monitor). */
    ref = smarm_make_ref();
    lua_createtable(L, 0, 4);
    lua_pushliteral(L, "DOWN");
    lua_setfield(L, -2, "smarm");
    sm_lsmarm_push_new_ref(L, ref);
    lua_setfield(L, -2, "ref");
    lua_pushvalue(L, 1);
    lua_setfield(L, -2, "pid");
    lua_pushliteral(L, "noproc");
    lua_setfield(L, -2, "reason");
    codec_moves_t moves;
    smarm_msg_t *m = sm_codec_encode(L, -1, "notice", &moves);
    if (smarm_send(smarm_self(), m) < 0)
      smarm_msg_free(m);
    sm_lsmarm_push_ref(L, ref);
    return 1;
  }
  int rc = smarm_monitor(pid, &ref);
  sm_dist_alias_unpin(pid);
  if (rc < 0)
    return raise_errno(L, "monitor", rc);
  sm_lsmarm_push_new_ref(L, ref);
  return 1;
}

static int l_demonitor(lua_State *L)
{
  smarm_ref_t ref;
  if (!sm_lsmarm_to_ref(L, 1, &ref))
    return luaL_argerror(L, 1, lua_pushfstring(L, "ref expected, got %s", luaL_typename(L, 1)));
  int flush = 0;
  if (!lua_isnoneornil(L, 2)) {
    const char *opt = luaL_checkstring(L, 2);
    luaL_argcheck(L, strcmp(opt, "flush") == 0, 2, "\"flush\" expected");
    flush = 1;
  }
  sm_lpark_actor(L, "demonitor");
  int rc = smarm_demonitor(ref, flush);
  if (rc < 0)
    return raise_errno(L, "demonitor", rc);
  lua_pushboolean(L, rc);
  lua_pushboolean(L, flush); /* for the Lua side: whether to flush its saved queue too */
  return 2;
}

/* ---- Registered names ---------------------------------------------------------------------- */

static int l_register(lua_State *L)
{
  const char *name = sm_lfaults_check_name(L, 1, "register");
  smarm_pid_t pid;
  if (!sm_lsmarm_to_pid(L, 2, &pid))
    return sm_lfaults_argerror(L, "register", 2,
                               lua_pushfstring(L, "pid expected, got %s", luaL_typename(L, 2)));
  sm_lpark_actor(L, "register");
  int remote = (int)smarm_pid_sched(pid) != smarm_sched_index();
  if (remote)
    sm_lpark_check(L, "register"); /* another scheduler's actor: it parks for the answer */
  int rc = smarm_register(name, pid);
  if (remote)
    sm_lpark_resumed(L);
  switch (rc) {
  case 0:
    return 0;
  case -EEXIST:
    return luaL_error(L, "smarm.register: the name '%s' is taken", name);
  case -EBUSY:
    return luaL_error(L, "smarm.register: <%d.%d.%d> already has a name",
                      (int)smarm_pid_sched(pid) + 1, (int)smarm_pid_slot(pid),
                      (int)smarm_pid_gen(pid));
  case -ESRCH:
    return luaL_error(L, "smarm.register: <%d.%d.%d> is not alive", (int)smarm_pid_sched(pid) + 1,
                      (int)smarm_pid_slot(pid), (int)smarm_pid_gen(pid));
  case -ETIMEDOUT:
    return sm_lpark_no_answer(L, "register", (int)smarm_pid_sched(pid));
  default:
    return raise_errno(L, "register", rc);
  }
}

static int l_unregister(lua_State *L)
{
  const char *name = sm_lfaults_check_name(L, 1, "unregister");
  sm_lpark_actor(L, "unregister");
  int rc = smarm_unregister(name);
  if (rc == -ENOENT)
    return luaL_error(L, "smarm.unregister: no actor is registered as '%s'", name);
  if (rc < 0)
    return raise_errno(L, "unregister", rc);
  return 0;
}

static int l_whereis(lua_State *L)
{
  const char *name = sm_lfaults_check_name(L, 1, "whereis");
  sm_lpark_actor(L, "whereis");
  smarm_pid_t pid = smarm_whereis(name);
  if (pid)
    sm_lsmarm_push_pid(L, pid);
  else
    lua_pushnil(L);
  return 1;
}

static void add_name(const char *name, smarm_pid_t pid, void *ud)
{
  (void)pid;
  lua_State *L = ud;
  lua_pushstring(L, name);
  lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
}

static int l_registered(lua_State *L)
{
  sm_lpark_actor(L, "registered");
  lua_newtable(L);
  int rc = smarm_registered(add_name, L);
  if (rc < 0)
    return raise_errno(L, "registered", rc);
  return 1;
}

static const luaL_Reg functions[] = {
  {"ref", l_ref},
  {"is_ref", l_is_ref},
  {"link", l_link},
  {"unlink", l_unlink},
  {"trap_exit", l_trap_exit},
  {"_exit_signal", l_exit_signal},
  {"kill", l_kill},
  {"monitor", l_monitor},
  {"_demonitor", l_demonitor},
  {"register", l_register},
  {"unregister", l_unregister},
  {"whereis", l_whereis},
  {"registered", l_registered},
  {"_target_fault", l_target_fault},
  {NULL, NULL},
};

void sm_lfaults_cache_refs(lvm_t *vm)
{
  lua_pushcfunction(vm->L, encode_reason);
  vm->encode_reason_ref = luaL_ref(vm->L, LUA_REGISTRYINDEX);
}

void sm_lfaults_release_refs(lvm_t *vm)
{
  lvm_unref(vm->L, vm->encode_reason_ref);
}

void sm_lfaults_register(lua_State *L, int module_idx)
{
  for (const luaL_Reg *f = functions; f->name; f++) {
    lua_pushcfunction(L, f->func);
    lua_setfield(L, module_idx, f->name);
  }
}
