/*
** smarm.send and smarm.reply of a number or a string, and smarm.receive of one already queued,
** through the FFI, so that compiled code stays compiled across them (lfast.c); everything else
** goes to the classic functions.
*/
#ifndef SMARM_LUA_LFAST_H
#define SMARM_LUA_LFAST_H

#include "codec.h"

#include <lua.h>

/* Replaces module.send, module.reply and module.receive (the classic functions) by Lua functions
** that try the FFI path first. take_scalar is the receive's taker, which the binding's top
** provides (it knows the actor's state): it takes a lone number or string first in the caller's
** mailbox, describing it into *out, and returns its block, or returns NULL for the classic
** receive. */
void sm_lfast_register(lua_State *L, int module, smarm_msg_t *(*take_scalar)(codec_scalar_t *out));

/* The FFI receive's hint in L's VM (NULL before the module is registered there): the classic
** receive sets it to whether messages are left in the mailbox when it returns one. */
int *sm_lfast_receive_more(lua_State *L);
/* Its Lua function in L's VM (NULL before), as lua_topointer gives it: the preemption never
** switches inside it (between its take and its read of the VM's one slot). */
const void *sm_lfast_receive_fn(lua_State *L);

#endif
