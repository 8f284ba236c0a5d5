/*
** Message timers in Lua (see ltimer.h and smarm.h, "Message timers"). A timer is a userdata of
** its target and ref (lpid.h), which travels in messages, so any actor may cancel it. Setting or
** cancelling a timer of another scheduler's actor parks the caller for one round trip: both pass
** the parking checks first. A timer aimed at a name lives on the caller's scheduler (its target
** a pid of that scheduler with slot and generation 0) and looks the name up as it fires.
*/
#include "ltimer.h"

#include "codec.h"
#include "lfaults.h"
#include "lpark.h"
#include "lpid.h"

#include <lauxlib.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static int remote(smarm_pid_t pid) { return (int)smarm_pid_sched(pid) != smarm_sched_index(); }

/* send_after(seconds, name, msg): a timer of this scheduler that looks the name up as it fires
** (smarm_send_after_name), so no round trip and no parking. */
static int send_after_name(lua_State *L, int64_t ns)
{
  const char *name = sm_lfaults_check_name(L, 2, "send_after");
  sm_lpark_actor(L, "send_after");
  codec_moves_t moves;
  smarm_msg_t *m = sm_codec_encode(L, 3, "message", &moves);
  smarm_timer_t t;
  int rc = smarm_send_after_name(ns < 0 ? INT64_MAX : ns, name, m, &t);
  if (rc == -EINVAL || rc == -EPERM) { /* not taken: the sockets and files stay the caller's */
    sm_codec_abandon(L, m, &moves);
    return luaL_error(L, "smarm.send_after: %s", strerror(-rc));
  }
  sm_codec_commit(&moves); /* taken: a timer's message owns its sockets and files */
  if (rc < 0)
    return luaL_error(L, "smarm.send_after: %s", strerror(-rc));
  sm_lsmarm_push_timer(L, t.to, t.ref, 1); /* a new timer: not in the intern table yet */
  return 1;
}

/* send_after(seconds, to, msg) -> timer */
static int l_send_after(lua_State *L)
{
  int64_t ns = sm_lpark_check_seconds(L, 1); /* SMARM_FOREVER past 31 years: never fires */
  if (lua_isnoneornil(L, 3))
    return luaL_argerror(L, 3, "message expected, got nil");
  if (lua_type(L, 2) == LUA_TSTRING)
    return send_after_name(L, ns);
  smarm_pid_t to = sm_lfaults_check_target(L, 2, "send_after");
  sm_lpark_actor(L, "send_after");
  int far = remote(to);
  if (far) {
    sm_lpark_check(L, "send_after"); /* before the block exists: a refusal leaks nothing */
    if (smarm_exit_pending()) /* it would die asking (smarm.h): here, before its message owns */
      smarm_yield();          /* the sockets and files in it, which its death then closes */
  }
  codec_moves_t moves;
  smarm_msg_t *m = sm_codec_encode(L, 3, "message", &moves);
  smarm_timer_t t;
  int rc = smarm_send_after(ns < 0 ? INT64_MAX : ns, to, m, &t);
  if (far)
    sm_lpark_resumed(L);
  if (rc == -EINVAL || rc == -EPERM) { /* not taken: the sockets and files stay the caller's */
    sm_codec_abandon(L, m, &moves);
    return luaL_error(L, "smarm.send_after: %s", strerror(-rc));
  }
  sm_codec_commit(&moves); /* taken: a timer's message owns its sockets and files */
  if (rc == -ETIMEDOUT)
    return sm_lpark_no_answer(L, "send_after", (int)smarm_pid_sched(to));
  if (rc < 0)
    return luaL_error(L, "smarm.send_after: %s", strerror(-rc));
  sm_lsmarm_push_timer(L, t.to, t.ref, 1); /* a new timer: not in the intern table yet */
  return 1;
}

/* cancel_timer(timer) -> seconds it had left | false */
static int l_cancel_timer(lua_State *L)
{
  smarm_timer_t t;
  if (!sm_lsmarm_to_timer(L, 1, &t.to, &t.ref))
    return luaL_argerror(L, 1, lua_pushfstring(L, "timer expected, got %s", luaL_typename(L, 1)));
  sm_lpark_actor(L, "cancel_timer");
  int far = remote(t.to);
  if (far)
    sm_lpark_check(L, "cancel_timer");
  int64_t left = smarm_cancel_timer(t);
  if (far)
    sm_lpark_resumed(L);
  if (left == -ENOENT) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (left == -ETIMEDOUT)
    return sm_lpark_no_answer(L, "cancel_timer", (int)smarm_pid_sched(t.to));
  if (left < 0)
    return luaL_error(L, "smarm.cancel_timer: %s", strerror((int)-left));
  /* a deadline past 31 years never fires: none left to count (smarm_cancel_timer's INT64_MAX) */
  lua_pushnumber(L, left == INT64_MAX ? HUGE_VAL : (lua_Number)left / 1e9);
  return 1;
}

void sm_ltimer_register(lua_State *L, int module)
{
  lua_pushcfunction(L, l_send_after);
  lua_setfield(L, module, "send_after");
  lua_pushcfunction(L, l_cancel_timer);
  lua_setfield(L, module, "cancel_timer");
}
