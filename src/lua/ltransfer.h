/*
** Moving a function to another VM (ltransfer.c), for spawn_on. A function cannot leave its VM,
** so it travels as a value of a message (codec.h: its bytecode, and its upvalues re-bound by name
** or copied, lrebind.h), or as the name of a function, "module.function". The arguments go with
** it, in the same message.
**
** The transfer table: { function = fn | name = "mod.fn", argument = { n = count, ... } }, as the
** new actor decodes it; the spawner encodes it straight from its stack (sm_codec_encode_transfer),
** with the empty root, so that errors read `function[upvalue 'x'] ...`, `argument[1] ...`.
*/
#ifndef SMARM_LUA_LTRANSFER_H
#define SMARM_LUA_LTRANSFER_H

#include <lua.h>

/* In the target VM, in the new actor (it may park: require may): finds the function of the
** decoded transfer table at tr and calls it with the arguments. Returns how many results it left on the
** stack above the table's values (as a lua_CFunction would). */
int sm_ltransfer_call(lua_State *L, int tr);

/* The last dot of "module.function" (both parts non-empty), or NULL if name has not that form. */
const char *sm_ltransfer_name_dot(const char *name);

#endif
