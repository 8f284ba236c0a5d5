/*
** smarm.process: programs for Lua actors, started by the IO thread (src/io/proc.c); only the
** caller parks. run collects a program's output whole and completes when it has exited and
** closed its pipes. spawn starts a live one: a handle with its OS pid and its pipes, which are
** Unix stream sockets (ltcp.c: receive, send, close, setactive; they travel in messages like
** any socket), and kill and wait; its exit can come as a message too (IO_EV_PROCESS events,
** decoded here). Arguments, environment and input are copied into the request.
**
** A process handle is a userdata whose environment table holds its fields (pid, stdin, stdout,
** stderr) and falls through to the methods; it belongs to its run (lhandle.h: a handle of an
** earlier run names nothing) and cannot travel in messages (its pipes can). Its __gc lets the
** IO thread forget the program, which runs on.
*/
#define _GNU_SOURCE
#include "lproc.h"

#include "codec.h"
#include "io/proc.h"
#include "lhandle.h"
#include "lbinary.h"
#include "lio.h"
#include "ljx.h"
#include "lpark.h"
#include "lsignal.h"
#include "ltcp.h"
#include "lvm.h"

#include <lauxlib.h>

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* A NULL-terminated malloc'd copy of the strings of the array at idx; raises on a non-string
** or a NUL byte, as bad argument arg (the caller's argument that holds the array). */
static char **string_list(lua_State *L, int idx, int arg, const char *what)
{
  size_t n = lua_objlen(L, idx);
  char **v = calloc(n + 1, sizeof *v);
  if (!v)
    luaL_error(L, "not enough memory");
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, idx, (int)i + 1);
    size_t len;
    const char *s = lua_tolstring(L, -1, &len);
    int nul = s && memchr(s, 0, len) != NULL; /* a C string: a NUL would cut it, silently */
    char *c = s && !nul ? strdup(s) : NULL;
    const char *type = luaL_typename(L, -1); /* a static string */
    lua_pop(L, 1);
    if (!c) {
      for (size_t j = 0; j < i; j++)
        free(v[j]);
      free(v);
      if (s && !nul)
        luaL_error(L, "not enough memory");
      luaL_argerror(L, arg,
                    nul ? lua_pushfstring(L, "%s[%d] holds a NUL byte", what, (int)i + 1)
                        : lua_pushfstring(L, "%s[%d] must be a string, got %s", what, (int)i + 1,
                                          type));
    }
    v[i] = c;
  }
  return v;
}

/* Pushes { stdout =, stderr = } with what r collected. */
static void push_output(lua_State *L, const proc_req_t *r, int extra)
{
  lua_createtable(L, 0, 2 + extra);
  lua_pushlstring(L, r->out ? r->out : "", r->out_len);
  lua_setfield(L, -2, "stdout");
  lua_pushlstring(L, r->err ? r->err : "", r->err_len);
  lua_setfield(L, -2, "stderr");
}

/* The arguments of run and spawn: argv (a table with the program at least), opts (a table or
** nil); leaves the two. */
static void check_program_args(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_argcheck(L, lua_objlen(L, 1) >= 1, 1, "argv with at least the program expected");
  if (!lua_isnoneornil(L, 2))
    luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
}

/* Raises "bad argument #2 to '<fn>' (opts.<name> must be <what>, got <type>)" for the value on
** top: the option is a field of argument 2, not an argument of its own. */
static void opt_error(lua_State *L, const char *name, const char *what)
{
  luaL_argerror(L, 2, lua_pushfstring(L, "opts.%s must be %s, got %s", name, what,
                                      luaL_typename(L, -1)));
}

/* (env, fname) -> opts.env's pairs as NAME=value strings, in a list; raises naming fname for a
** pair that is not a name and a string. Under sm_ljx_call_held: each string made may run a GC
** step, and a finalizer that took the name the lua_next walk stood on and grew env made the next
** lua_next raise "invalid key to 'next'" out of smarm.process.run. */
static int env_strings(lua_State *L)
{
  const char *fname = lua_touserdata(L, 2);
  lua_newtable(L);
  int list = lua_gettop(L), n = 0;
  lua_pushnil(L);
  while (lua_next(L, 1) != 0) {
    size_t nlen, vlen;
    const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &nlen) : NULL;
    const char *value = lua_isstring(L, -1) ? lua_tolstring(L, -1, &vlen) : NULL;
    if (!name || !value)
      luaL_error(L, "smarm.process.%s: opts.env must map names to strings", fname);
    if (memchr(name, 0, nlen) || memchr(name, '=', nlen) || memchr(value, 0, vlen))
      luaL_error(L, "smarm.process.%s: opts.env's names and values hold no NUL byte, and its "
                    "names no '='",
                 fname);
    lua_pushfstring(L, "%s=%s", lua_tostring(L, -2), lua_tostring(L, -1));
    lua_rawseti(L, list, ++n);
    lua_pop(L, 1);
  }
  return 1;
}

/* Fills r's argv from the array at 1 and cwd and env from the options at 2 (raises on bad
** types, naming fname). */
static void read_program(lua_State *L, proc_req_t *r, const char *fname)
{
  int top = lua_gettop(L);
  r->argv = string_list(L, 1, 1, "argv");
  if (!lua_istable(L, 2))
    return;
  lua_getfield(L, 2, "cwd");
  if (!lua_isnil(L, -1)) {
    size_t len;
    const char *cwd = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
    if (!cwd)
      opt_error(L, "cwd", "a string");
    luaL_argcheck(L, !memchr(cwd, 0, len), 2, "opts.cwd: string without NUL bytes expected");
    r->cwd = sm_lio_copy_arg(L, lua_gettop(L), NULL);
  }
  lua_getfield(L, 2, "env");
  if (!lua_isnil(L, -1)) {
    if (!lua_istable(L, -1))
      opt_error(L, "env", "a table");
    lua_pushlightuserdata(L, (void *)fname);
    sm_ljx_call_held(L, env_strings, 2, 1);
    r->env = string_list(L, lua_gettop(L), 2, "opts.env"); /* no NUL bytes (env_strings) */
  }
  lua_settop(L, top);
}

/* Pushes the failure of a program that did not start: its cwd named when that is what failed,
** else the program. */
static int push_start_failure(lua_State *L, const proc_req_t *r, int err)
{
  if (!r->cwd_failed)
    return sm_lio_push_failure(L, err, r->argv[0]);
  lua_pushfstring(L, "cwd %s", r->cwd);
  int n = sm_lio_push_failure(L, err, lua_tostring(L, -1));
  lua_remove(L, -n - 1);
  return n;
}

/* Sets status, or signal for a program a signal ended (no `status == 0` check may take that
** for success), in the table on top. */
static void set_exit(lua_State *L, long long status, int term_signal)
{
  if (term_signal) {
    lua_pushinteger(L, term_signal);
    lua_setfield(L, -2, "signal");
  } else {
    lua_pushnumber(L, (lua_Number)status);
    lua_setfield(L, -2, "status");
  }
}

/* run(argv [, opts]) -> { status =, signal =, stdout =, stderr = } | nil, err, code | nil,
** "timeout", { stdout =, stderr = } */
static int l_run(lua_State *L)
{
  check_program_args(L);
  proc_req_t *r = sm_proc_run_new();
  int box = sm_lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  read_program(L, r, "run");
  int64_t timeout_ns = SMARM_FOREVER;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "stdin");
    if (!lua_isnil(L, -1)) {
      int t = lua_type(L, -1);
      if (t != LUA_TSTRING && t != LUA_TNUMBER && !sm_lbinary_test(L, -1))
        opt_error(L, "stdin", "a string or a binary");
      r->input = sm_lio_copy_bytes(L, lua_gettop(L), &r->input_len);
    }
    lua_getfield(L, 2, "timeout");
    if (!lua_isnil(L, -1)) {
      lua_Number t = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : -1;
      luaL_argcheck(L, t >= 0, 2, "opts.timeout must be a non-negative number of seconds");
      timeout_ns = sm_lsmarm_timeout_ns(t);
    }
    lua_settop(L, box);
  }
  int err = sm_lsmarm_io_call(L, &r->base, timeout_ns, "process.run");
  int n = 1;
  if (err == -ETIMEDOUT) { /* killed: what it wrote so far comes with the error */
    n = sm_lio_push_failure(L, err, NULL);
    push_output(L, r, 0);
    n++;
  } else if (err) {
    n = push_start_failure(L, r, err);
  } else {
    push_output(L, r, 2);
    set_exit(L, r->status, r->term_signal);
  }
  sm_lio_unbox(L, box);
  return n;
}

/* ---- Live programs: smarm.process.spawn and the handle --------------------------------------- */

#define PROC_MT "smarm.process"

typedef struct lproc {
  uint64_t id;  /* the IO side's (proc.c) */
  int os_pid;
  uint32_t run; /* the run that made it (sm_lhandle_run_generation) */
} lproc_t;

static const char fields_mt_key = 0; /* registry: the fields tables' metatable (the methods) */

static lproc_t *check_proc(lua_State *L, const char *fname)
{
  lproc_t *p = luaL_checkudata(L, 1, PROC_MT);
  if (p->run != sm_lhandle_run_generation())
    luaL_error(L, "smarm.process.%s: the process belongs to an earlier run", fname);
  return p;
}

/* The standard stream named by opts[key]: "pipe", "inherit" or "null" ("stdout" too for
** stderr), default dflt. */
static int stdio_arg(lua_State *L, const char *key, int dflt)
{
  lua_getfield(L, 2, key);
  int mode = dflt;
  if (!lua_isnil(L, -1)) {
    const char *v = lua_tostring(L, -1);
    if (lua_type(L, -1) != LUA_TSTRING)
      v = "";
    if (strcmp(v, "pipe") == 0)
      mode = IOPROC_PIPE;
    else if (strcmp(v, "inherit") == 0)
      mode = IOPROC_INHERIT;
    else if (strcmp(v, "null") == 0)
      mode = IOPROC_NULL;
    else if (strcmp(v, "stdout") == 0 && strcmp(key, "stderr") == 0)
      mode = IOPROC_TO_STDOUT;
    else
      luaL_error(L, "smarm.process.spawn: opts.%s must be \"pipe\", \"inherit\" or \"null\"%s",
                 key, strcmp(key, "stderr") == 0 ? " or \"stdout\"" : "");
  }
  lua_pop(L, 1);
  return mode;
}

/* opts[name] of the table at 2: nil is false; anything but a boolean raises (a string "no" was
** taken for true). */
static int opt_boolean(lua_State *L, const char *name)
{
  lua_getfield(L, 2, name);
  int t = lua_type(L, -1);
  if (t != LUA_TNIL && t != LUA_TBOOLEAN)
    luaL_argerror(L, 2, lua_pushfstring(L, "opts.%s must be a boolean, got %s", name,
                                        lua_typename(L, t)));
  int on = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return on;
}

/* spawn(argv [, opts]) -> process | nil, err, code. opts: cwd, env, stdin, stdout, stderr,
** group, exit_message. */
static int l_spawn(lua_State *L)
{
  check_program_args(L);
  proc_req_t *r = sm_proc_req_new(IOPROC_SPAWN);
  int box = sm_lio_box(L, (io_req_t *)r); /* raises when r is NULL */
  read_program(L, r, "spawn");
  r->stdio[0] = IOPROC_PIPE;
  r->stdio[1] = IOPROC_PIPE;
  r->stdio[2] = IOPROC_INHERIT;
  int exit_message = 0;
  if (lua_istable(L, 2)) {
    r->stdio[0] = stdio_arg(L, "stdin", IOPROC_PIPE);
    r->stdio[1] = stdio_arg(L, "stdout", IOPROC_PIPE);
    r->stdio[2] = stdio_arg(L, "stderr", IOPROC_INHERIT);
    r->group = opt_boolean(L, "group");
    exit_message = opt_boolean(L, "exit_message");
    lua_settop(L, box);
  }
  if (exit_message)
    r->notify = smarm_self();
  int err = sm_lsmarm_io_call(L, &r->base, SMARM_FOREVER, "process.spawn");
  if (err) {
    int n = push_start_failure(L, r, err);
    sm_lio_unbox(L, box);
    return n;
  }
  /* From here on nothing may raise before the handle owns what the spawn made (new_taken), so
  ** that a failure below still lets the request's end release it: the stack and memory first. */
  luaL_checkstack(L, 8, "process.spawn");
  lproc_t *p = lua_newuserdata(L, sizeof *p);
  p->id = r->new_id;
  p->os_pid = r->os_pid;
  p->run = sm_lhandle_run_generation();
  int ud = lua_gettop(L);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, r->os_pid);
  lua_setfield(L, -2, "pid");
  static const char *const names[3] = {"stdin", "stdout", "stderr"};
  for (int i = 0; i < 3; i++) {
    if (!r->stdio_id[i])
      continue;
    sm_ltcp_push_unix_conn(L, r->stdio_id[i], r->stdio_fd[i]);
    r->stdio_id[i] = 0; /* the socket's userdata closes it now */
    lua_setfield(L, -2, names[i]);
  }
  lvm_push_registry(L, &fields_mt_key);
  lua_setmetatable(L, -2);
  lua_setfenv(L, ud);
  luaL_getmetatable(L, PROC_MT);
  lua_setmetatable(L, ud);
  r->new_taken = 1;
  if (exit_message)
    sm_codec_set_event_target(L, ud, IO_EV_PROCESS, p->id);
  sm_lio_unbox(L, box);
  lua_settop(L, ud);
  return 1;
}

/* process:wait([timeout]) -> { status = } | { signal = } | nil, "timeout" */
static int m_wait(lua_State *L)
{
  lproc_t *p = check_proc(L, "wait");
  int64_t timeout_ns = sm_lpark_opt_seconds(L, 2);
  lua_settop(L, 2);
  proc_req_t *r = sm_proc_req_new(IOPROC_WAIT);
  int box = sm_lio_box(L, (io_req_t *)r);
  r->id = p->id;
  int err = sm_lsmarm_io_call(L, &r->base, timeout_ns, "process.wait");
  int n = 1;
  if (err) {
    n = sm_lio_push_failure(L, err, NULL);
  } else {
    lua_createtable(L, 0, 1);
    set_exit(L, r->status, r->term_signal);
  }
  sm_lio_unbox(L, box);
  return n;
}

/* process:kill([signal]) -> true | nil, "no such process", "ESRCH" (it has exited) */
static int m_kill(lua_State *L)
{
  lproc_t *p = check_proc(L, "kill");
  int signum = SIGTERM;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    signum = (int)lua_tointeger(L, 2);
    luaL_argcheck(L, signum >= 0 && signum < 65 && lua_tonumber(L, 2) == signum, 2,
                  "a signal number expected");
  } else if (!lua_isnoneornil(L, 2)) {
    signum = sm_lsignal_number(luaL_checkstring(L, 2), 1);
    if (!signum)
      return luaL_argerror(L, 2, "a signal number or a name (\"SIGTERM\", \"SIGKILL\", "
                                 "\"SIGINT\", ...) expected");
  }
  lua_settop(L, 1);
  proc_req_t *r = sm_proc_req_new(IOPROC_KILL);
  int box = sm_lio_box(L, (io_req_t *)r);
  r->id = p->id;
  r->signum = signum;
  int err = sm_lsmarm_io_call(L, &r->base, SMARM_FOREVER, "process.kill");
  int n = sm_lio_push_done(L, err);
  sm_lio_unbox(L, box);
  return n;
}

static int m_gc(lua_State *L)
{
  lproc_t *p = lua_touserdata(L, 1);
  if (!p->id || p->run != sm_lhandle_run_generation())
    return 0; /* an earlier run's end forgot it */
  proc_req_t *r = sm_proc_req_new(IOPROC_RELEASE);
  if (r) { /* out of memory: known until the IO thread stops */
    r->id = p->id;
    sm_io_post(&r->base);
  }
  p->id = 0;
  return 0;
}

/* Fields (the environment table) and methods (its metatable's __index). */
static int m_index(lua_State *L)
{
  lua_getfenv(L, 1);
  lua_pushvalue(L, 2);
  lua_gettable(L, -2);
  return 1;
}

static int m_newindex(lua_State *L)
{
  return luaL_error(L, "smarm.process: a process handle's fields cannot be set");
}

static int m_tostring(lua_State *L)
{
  lproc_t *p = luaL_checkudata(L, 1, PROC_MT);
  lua_pushfstring(L, "smarm.process (pid %d%s)", p->os_pid,
                  p->run != sm_lhandle_run_generation() ? ", of an earlier run" : "");
  return 1;
}

/* The exit message (IO_EV_PROCESS events): { smarm = "process_exit", process =, pid =,
** status = | signal = }; process is nil once the handle was collected. */
static void decode_event(lua_State *L, const unsigned char *p, size_t n)
{
  io_event_t ev;
  proc_exit_payload_t pl;
  if (n != sizeof ev + sizeof pl)
    luaL_error(L, "malformed message");
  memcpy(&ev, p, sizeof ev);
  memcpy(&pl, p + sizeof ev, sizeof pl);
  if (ev.kind != IO_EV_EXIT)
    luaL_error(L, "malformed message");
  luaL_checkstack(L, 4, "message");
  lua_createtable(L, 0, 4);
  lua_pushliteral(L, "process_exit");
  lua_setfield(L, -2, "smarm");
  if (sm_codec_push_event_target(L, IO_EV_PROCESS, ev.id)) {
    lproc_t *h = luaL_testudata(L, -1, PROC_MT);
    if (h && h->id == ev.id && h->run == sm_lhandle_run_generation())
      lua_setfield(L, -2, "process");
    else
      lua_pop(L, 1);
  }
  lua_pushinteger(L, pl.os_pid);
  lua_setfield(L, -2, "pid");
  set_exit(L, pl.status, pl.term_signal);
  sm_codec_hold_event(L, IO_EV_PROCESS);
}

static void event_taken(lua_State *L) { (void)L; } /* no flow control: nothing to count */

static const codec_event_fns_t event_fns = {decode_event, event_taken};

static const luaL_Reg methods[] = {{"wait", m_wait}, {"kill", m_kill}, {NULL, NULL}};

static const luaL_Reg functions[] = {{"run", l_run}, {"spawn", l_spawn}, {NULL, NULL}};

void sm_lproc_register(lua_State *L, int module)
{
  sm_lio_add_table(L, module, "process", functions);
  if (luaL_newmetatable(L, PROC_MT)) {
    lua_pushcfunction(L, m_index);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, m_newindex);
    lua_setfield(L, -2, "__newindex");
    lua_pushcfunction(L, m_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, m_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, PROC_MT);
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
  lua_pushlightuserdata(L, (void *)&fields_mt_key);
  lua_createtable(L, 0, 1);
  lua_newtable(L);
  luaL_register(L, NULL, methods);
  lua_setfield(L, -2, "__index");
  lua_rawset(L, LUA_REGISTRYINDEX);
  sm_codec_set_event_fns(IO_EV_PROCESS, &event_fns);
}
