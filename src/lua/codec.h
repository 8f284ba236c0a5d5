/*
** The message codec: Lua values to bytes and back, so that a message means the same thing to a
** receiver in the sender's VM and in another scheduler's VM.
**
** Sendable: booleans, numbers, strings, pids, and tables of those, nested up to CODEC_MAX_DEPTH
** levels, with shared references and cycles preserved (the receiver gets one table where the
** sender had one table). Metatables are not sent. nil encodes too (send refuses it: nil is not a
** message). Anything else (functions, coroutines, userdata, cdata)
** raises `<path> is a <type>`, where path names the place, e.g. `message.handler` or
** `message.items[3]`.
**
** Format: a tag byte per value; numbers as 8 raw bytes, strings as a varint length and bytes,
** tables as TABLE, two 4-byte counts (array-like keys, other keys: the receiver's size hints),
** key/value pairs, END; a table seen before as REF and its varint index.
*/
#ifndef SMARM_LUA_CODEC_H
#define SMARM_LUA_CODEC_H

#include "smarm.h"

#include <lua.h>

/* Deeper nesting raises: the encoder and decoder recurse on the actor's C stack. */
#define CODEC_MAX_DEPTH 200

/* Encodes the value at idx into a new message block (owned by the caller). Raises a Lua error
** naming the path of a value that cannot be sent (nothing leaks). */
smarm_msg_t *codec_encode(lua_State *L, int idx, const char *root);

/* Pushes the value a message holds. Raises on a block codec_encode did not make. */
void codec_decode(lua_State *L, smarm_msg_t *msg);

#endif
