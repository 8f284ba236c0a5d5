/*
** Active mode's shared rules on the binding's side (see lactive.h).
*/
#include "lactive.h"

#include "codec.h"
#include "ljx.h"

#include <lauxlib.h>

#include <string.h>

int sm_lactive_mode_arg(lua_State *L, int idx)
{
  if (lua_type(L, idx) == LUA_TBOOLEAN)
    return lua_toboolean(L, idx) ? LACTIVE_ON : LACTIVE_PASSIVE;
  if (lua_type(L, idx) == LUA_TSTRING && strcmp(lua_tostring(L, idx), "once") == 0)
    return LACTIVE_ONCE;
  return luaL_argerror(L, idx, "true, false or \"once\" expected");
}

int sm_lactive_elsewhere(const lactive_t *a)
{
  return a->mode != LACTIVE_PASSIVE && a->events_to != smarm_self() &&
         smarm_alive(a->events_to) > 0;
}

void sm_lactive_arm(lua_State *L, lactive_t *a, void *ud, int idx, int source, uint64_t id,
                    int mode, const lactive_ops_t *ops)
{
  sm_codec_set_event_target(L, idx, source, id);
  if (ops->post_arm(ud, mode) < 0)
    luaL_error(L, "not enough memory");
  a->mode = mode;
  a->events_to = smarm_self();
  a->taken = 0;
  a->rearm = 0;
}

void sm_lactive_sync(lua_State *L, lactive_t *a, void *ud, const char *fname,
                     const lactive_ops_t *ops)
{
  ops->sync(L, ud, fname);
  a->mode = LACTIVE_PASSIVE;
  a->taken = 0;
}

int sm_lactive_set(lua_State *L, lactive_t *a, void *ud, int idx, int source, uint64_t id,
                   int mode, int busy, const char *module, const lactive_ops_t *ops,
                   int (*gone)(void *ud))
{
  if (busy)
    luaL_error(L, "smarm.%s.setactive: another actor is waiting on this socket", module);
  if (sm_lactive_elsewhere(a))
    luaL_error(L, "smarm.%s.setactive: the socket is active for another actor", module);
  a->rearm = 0; /* a hand-over that raised after readying it left its mode here: forgotten */
  /* (the same mode as an actor that ended armed it for itself is a change: its messages would
  ** still go to the dead actor) */
  if (mode == a->mode && (mode == LACTIVE_PASSIVE || a->events_to == smarm_self()))
    return 0;
  if (a->mode != LACTIVE_PASSIVE) {
    sm_lactive_sync(L, a, ud, "setactive", ops);
    if (gone(ud))
      return -1;
  }
  if (mode != LACTIVE_PASSIVE)
    sm_lactive_arm(L, a, ud, idx, source, id, mode, ops);
  return 0;
}

int sm_lactive_before_move(lua_State *L, lactive_t *a, void *ud, int dry,
                           const lactive_ops_t *ops)
{
  if (a->mode == LACTIVE_PASSIVE)
    return 0;
  if (sm_lactive_elsewhere(a))
    luaL_error(L, "smarm.send: the socket is active for another actor, which alone can hand it "
                  "over");
  const char *why = sm_ljx_cannot_park(L);
  if (why)
    luaL_error(L, "smarm.send: an active socket cannot be handed over %s", why);
  if (dry)
    return 0;
  int mode = a->mode;
  sm_lactive_sync(L, a, ud, "send", ops);
  a->rearm = mode;
  return 1;
}

void sm_lactive_kept(lactive_t *a, void *ud, int usable, const lactive_ops_t *ops)
{
  if (a->rearm && usable && ops->post_arm(ud, a->rearm) == 0) {
    a->mode = a->rearm;
    a->events_to = smarm_self();
  }
  a->rearm = 0;
}

void sm_lactive_handed_over(lactive_t *a)
{
  a->mode = LACTIVE_PASSIVE;
  a->rearm = 0;
}

size_t sm_lactive_taken(lactive_t *a, int end, size_t units, size_t every)
{
  if (a->events_to != smarm_self())
    return 0;
  if (end || a->mode == LACTIVE_ONCE) {
    a->mode = LACTIVE_PASSIVE;
  } else if (a->mode == LACTIVE_ON && (a->taken += units) >= every) {
    size_t ack = a->taken;
    a->taken = 0;
    return ack;
  }
  return 0;
}
