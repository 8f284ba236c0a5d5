/*
** Moving a function to another VM (ltransfer.c), for spawn_on. A function cannot leave its VM,
** so it travels as a value of a message (codec.h: its bytecode, and its upvalues re-bound by name
** or copied, lrebind.h), or as the name of a function, "module.function". The arguments go with
** it, in the same message.
**
** The transfer table: { function = fn | name = "mod.fn", argument = { n = count, ... } }
*/
#ifndef SMARM_LUA_LTRANSFER_H
#define SMARM_LUA_LTRANSFER_H

#include <lua.h>

/* Pushes the transfer table for the function (or "mod.fn" string) at fn_idx and the nargs
** arguments from first on, for the codec to encode with the empty root (so that its errors read
** `function[upvalue 'x'] ...`, `argument[1] ...`). */
void sm_ltransfer_build(lua_State *L, int fn_idx, int first, int nargs);

/* In the target VM, in the new actor (it may park: require may): finds the function of the
** decoded transfer table at tr and calls it with the arguments. Returns how many results it left on the
** stack above the table's values (as a lua_CFunction would). */
int sm_ltransfer_call(lua_State *L, int tr);

/* The last dot of "module.function" (both parts non-empty), or NULL if name has not that form. */
const char *sm_ltransfer_name_dot(const char *name);

#endif
