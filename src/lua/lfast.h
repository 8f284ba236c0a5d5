/*
** smarm.send and smarm.reply of a number or a string, and smarm.receive of one already queued,
** through the FFI, so that compiled code stays compiled across them (lfast.c); everything else
** goes to the classic functions.
*/
#ifndef SMARM_LUA_LFAST_H
#define SMARM_LUA_LFAST_H

#include "codec.h"
#include "lvm.h"

#include <lua.h>

/* Replaces module.send, module.reply and module.receive (the classic functions) by Lua functions
** that try the FFI path first. is_scalar is the receive's match for smarm_receive_first, which
** the binding's top provides (it knows the actor's state): whether the first message is a lone
** number or string a plain receive() would return at once, described into the codec_scalar_t
** it is given. */
void sm_lfast_register(lua_State *L, int module, smarm_match_fn is_scalar);

/* Caches in vm what its scheduler's receives need of the FFI receive in vm->L (NULLs before the
** module is registered there): the hint that the classic receive sets to whether messages are
** left in the mailbox when it returns one, and the Lua function in which the preemption never
** switches (between its take and its read of the VM's one slot). */
void sm_lfast_cache_refs(lvm_t *vm);

#endif
