/*
** Values every VM of the process can find again by name (lrebind.c), so that a function moving
** to another VM (codec.h) takes the target's own module instead of a copy of the sender's: a
** loaded module (`local json = require "json"` -> require("json") there), a function or userdata
** held by one (`local insert = table.insert`, `local out = io.stdout`), or a standard global
** C function (`local p = print`), found by identity among those the VM started with.
**
** Only names every VM can resolve count: a module is one if every VM can require it (a fresh
** VM has or preloads it, or the paths the run's VMs started with find it: not the sender's own
** later package.path or package.preload); of the globals only the standard C functions (a
** script's own global function, or its replacement of a standard one, travels by value).
**
** The lookup goes through a per-VM index (value -> module, field), rebuilt when package.loaded
** changes or a new run starts (sm_lrebind_push_names). A field put into a
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

/* At a VM's start (luaopen of smarm.core): remembers its standard global C functions, which a
** message names as { "", name } and the receiver takes from its own list. */
void sm_lrebind_learn_standard(lua_State *L);
/* Pushes this VM's standard global `name` and returns 1, or pushes nothing and returns 0. */
int sm_lrebind_push_standard(lua_State *L, const char *name);

/* At a VM's start, when smarm replaces a standard library function by a checked version
** (lreentry.c): the original, on top of the stack (popped), stays known as module.field, so that
** a closure that captured it before the replacement (`local format = string.format` at the top
** of a module required before smarm) still travels by name; the receiver takes its own
** (checked) module.field. */
void sm_lrebind_replaced(lua_State *L, const char *module, const char *field);

/* At the end of luaopen of smarm.core, module at idx: each of its tables (smarm.tcp, smarm.fs,
** ...) becomes the module "smarm.<name>" in package.loaded, so that a function holding one, or
** one of its functions (`local tcp = smarm.tcp`), travels by name like any module's: every VM
** opens smarm.core, so every VM's require finds them. */
void sm_lrebind_submodules(lua_State *L, int module);

/* At a run's start, in each of its VMs: the package.path and cpath every VM of the run started
** with (a module is named only if those find it: a script's own later path is not the others'). */
void sm_lrebind_set_paths(lua_State *L, const char *path, const char *cpath);

/* Pushes the VM's table of names (value -> "module" | { "module", "field" }, module "" for a
** standard global), rebuilt first if package.loaded changed or a run started (checking costs a
** read of package.loaded's slots, not a walk through the API). Push it once for a series of
** lookups (one message). */
void sm_lrebind_push_names(lua_State *L);

/* How the value at idx is known by name in every VM, with the table of names at stack slot
** `names`; pushes the names (see lrebind_kind). Tables are looked up as modules only when
** `tables` is set (a function's upvalue: a data table in a message is data). */
enum lrebind_kind sm_lrebind_find(lua_State *L, int names, int idx, int tables);

#endif
