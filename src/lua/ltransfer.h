/*
** Moving a function to another VM (ltransfer.c), for spawn_on. A function cannot leave its VM,
** so it travels as a transfer table that the codec copies: its bytecode (string.dump, with
** debug info so tracebacks keep names and lines), and for each upvalue either its value (copied
** like a message) or how to find it again by name in the target VM (a loaded module, a function
** of one, a global); or the name of a function, "module.function". The arguments go with it.
**
** The transfer table: {code = bytecode | name = "mod.fn",
** up = {[i] = {v = value} | {module = name [, field = name]} | {global = name}},
**                      args = {n = count, ...}}
*/
#ifndef SMARM_LUA_LTRANSFER_H
#define SMARM_LUA_LTRANSFER_H

#include <lua.h>

/* Pushes the transfer table for the function (or "mod.fn" string) at fn_idx and the nargs
** arguments from first on. Raises naming what cannot move (a C function, an upvalue that cannot
** be copied). */
void sm_ltransfer_build(lua_State *L, int fn_idx, int first, int nargs);

/* In the target VM, in the new actor (it may park: require may): rebuilds the function from the
** transfer table at tr and calls it with the arguments. Returns how many results it left on the
** stack above the table's values (as a lua_CFunction would). */
int sm_ltransfer_call(lua_State *L, int tr);

/* The last dot of "module.function" (both parts non-empty), or NULL if name has not that form. */
const char *sm_ltransfer_name_dot(const char *name);

#endif
