/*
** Values every VM of the process can find again by name (lrebind.c), so that a function moving
** to another VM (codec.h) takes the target's own module instead of a copy of the sender's: a
** loaded module (`local json = require "json"` -> require("json") there), a function or userdata
** held by one (`local insert = table.insert`, `local out = io.stdout`), or a standard global
** (`local p = print`: a field of module "_G" that a fresh VM has).
**
** Only names the target can resolve count: a module is one if the target can require it (a
** fresh VM has it, package.preload holds it, or package.path / cpath finds it); of module "_G"
** only the names a fresh VM has (a script's own global function is not, and travels by value).
**
** The lookup goes through a per-VM index (value -> module, field), rebuilt when package.loaded,
** package.path, package.cpath or package.preload change (sm_lrebind_push_names). A field put into a
** module after the index was built is found once package.loaded changes again; until then such
** a function travels by value, which works for functions and fails, naming it, for the rest.
*/
#ifndef SMARM_LUA_LREBIND_H
#define SMARM_LUA_LREBIND_H

#include <lua.h>

enum lrebind_kind {
  LREBIND_NONE,   /* not known by name: pushes nothing */
  LREBIND_MODULE, /* pushes the module's name */
  LREBIND_FIELD,  /* pushes the module's name and the field's */
};

/* Pushes the VM's table of names (value -> "module" | { "module", "field" }), rebuilt first if
** package.loaded, package.preload, package.path or package.cpath changed (checking costs a look
** at those four, not a walk through the API). Push it once for a series of lookups (one message). */
void sm_lrebind_push_names(lua_State *L);

/* How the value at idx is known by name in every VM, with the table of names at stack slot
** `names`; pushes the names (see lrebind_kind). Tables are looked up as modules only when
** `tables` is set (a function's upvalue: a data table in a message is data). */
enum lrebind_kind sm_lrebind_find(lua_State *L, int names, int idx, int tables);

#endif
