/*
** Active mode on the binding's side (lactive.c), the part that TCP and Unix connections (ltcp.c)
** and UDP sockets (ludp.c) share: each socket userdata keeps a mirror of its IO side's mode
** (tcp.h, udp.h) and the rules around it. The mirror counts "once" as armed until its message has
** been taken by a receive, so that a receive never overtakes a message on its way; the IO side's
** events go to the actor that armed the socket (events_to), which alone may change the mode or
** hand the socket over while that actor lives; moving from one mode to another goes through
** passive, which takes back what the socket sent and was not received (the module's sync).
**
** Owner: the thread of the VM that holds the userdata (one scheduler).
*/
#ifndef SMARM_LUA_LACTIVE_H
#define SMARM_LUA_LACTIVE_H

#include "smarm.h"

#include <lua.h>

#include <stddef.h>
#include <stdint.h>

/* The modes, as the IO side numbers them (IOTCP_*, IOUDP_*). */
enum { LACTIVE_PASSIVE = 0, LACTIVE_ONCE = 1, LACTIVE_ON = 2 };

typedef struct lactive {
  int mode;              /* as far as this side knows: armed, or its message not taken yet */
  smarm_pid_t events_to; /* the actor its messages go to (the one that armed it) */
  size_t taken;          /* LACTIVE_ON: what was taken since the last acknowledgement */
  int rearm;             /* the mode to arm again after a hand-over (by the receiver), or after
                            one that did not happen (by the sender); 0: none */
} lactive_t;

/* What the module does for a socket (its userdata `ud`). */
typedef struct lactive_ops {
  /* Posts the IO side's arming of ud in mode for the calling actor (anything kept on this side
  ** first goes back to the IO side): 0, or -ENOMEM with nothing changed. Never raises. */
  int (*post_arm)(void *ud, int mode);
  /* Parks for the IO side's waited switch to passive, then takes back every message of ud's in
  ** the caller's saved queue and mailbox. May raise. */
  void (*sync)(lua_State *L, void *ud, const char *fname);
} lactive_ops_t;

/* setactive's argument at idx: false, "once" or true; raises on anything else. */
int sm_lactive_mode_arg(lua_State *L, int idx);

/* Are the messages another live actor's (it armed the socket)? An actor that ended leaves the
** socket to whoever holds the handle. The arming actor is of this VM: no parking. */
int sm_lactive_elsewhere(const lactive_t *a);

/* Arms the passive socket ud (its userdata at idx; source and id name it in events) in mode for
** the caller; raises when out of memory. */
void sm_lactive_arm(lua_State *L, lactive_t *a, void *ud, int idx, int source, uint64_t id,
                    int mode, const lactive_ops_t *ops);

/* Makes it passive on both sides, taking back what it sent (ops->sync). */
void sm_lactive_sync(lua_State *L, lactive_t *a, void *ud, const char *fname,
                     const lactive_ops_t *ops);

/* setactive's rules, once the module has checked the handle: raises when another actor waits on
** it (busy) or its messages are another live actor's ("smarm.<module>.setactive: ..."); moves to
** mode through passive. Returns 0, or -1 when the socket was closed or handed away meanwhile
** (gone(ud) says so after a sync): the caller returns nil, "closed". */
int sm_lactive_set(lua_State *L, lactive_t *a, void *ud, int idx, int source, uint64_t id,
                   int mode, int busy, const char *module, const lactive_ops_t *ops,
                   int (*gone)(void *ud));

/* The lhandle before_move of an active socket (lhandle.h): raises where it cannot travel, and
** unless dry makes it passive (parks) with its mode kept for the receiver; 1 when it did. */
int sm_lactive_before_move(lua_State *L, lactive_t *a, void *ud, int dry,
                           const lactive_ops_t *ops);

/* The lhandle kept: armed again for the sender when usable (open, and nobody waits on it: the IO
** side would refuse the arming, unseen), else it stays passive. */
void sm_lactive_kept(lactive_t *a, void *ud, int usable, const lactive_ops_t *ops);

/* The handle was sent away: nothing of its mode stays here. */
void sm_lactive_handed_over(lactive_t *a);

/* A receive hands the caller one of the socket's messages: `units` of data (bytes, datagrams),
** or its end (end set). Returns what to acknowledge now (LACTIVE_ON, in batches of `every`), or
** 0. Does nothing for a message of a socket armed by another actor. */
size_t sm_lactive_taken(lactive_t *a, int end, size_t units, size_t every);

#endif
