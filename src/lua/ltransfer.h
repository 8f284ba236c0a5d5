/*
** Moving a function to another VM (ltransfer.c), for spawn_on. A function cannot leave its VM,
** so it travels as a value of a message (codec.h: its bytecode, and its upvalues re-bound by name
** or copied, lrebind.h), or as the name of a function, "module.function". The arguments go with
** it, in the same message: a transfer (sm_codec_encode_transfer) of the function or its name,
** then the arguments, decoded straight onto the new actor's stack (no table holds them).
*/
#ifndef SMARM_LUA_LTRANSFER_H
#define SMARM_LUA_LTRANSFER_H

#include <lua.h>

/* In the target VM, in the new actor (it may park: require may): calls the function of a decoded
** transfer, whose values are on the stack from `first` to the top (the function or its name,
** then the arguments). Returns how many results it left from first on (as a lua_CFunction
** would). */
int sm_ltransfer_call(lua_State *L, int first);

/* The last dot of "module.function" (both parts non-empty), or NULL if name has not that form. */
const char *sm_ltransfer_name_dot(const char *name);

#endif
