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
** A module's function or userdata is named only if the module held it when require returned
** the module (sm_lrebind_loaded; for the modules loaded before smarm: when smarm.core was
** opened) and the field holds it still at the lookup: the receiver's require(module).field is
** then the same code. A function a script puts into a module's table, whenever it does, and one
** a field no longer holds, travel by value (a C function, or a userdata, cannot: it is named
** while a field holds it, in a module no require returned, else the send fails naming it).
**
** The lookup goes through a per-VM index (value -> module, field), rebuilt when package.loaded
** changes, a module is recorded or a new run starts (sm_lrebind_push_names); each lookup of a
** module's field reads that field once more.
*/
#ifndef SMARM_LUA_LREBIND_H
#define SMARM_LUA_LREBIND_H

#include <lua.h>

#include <stdint.h>

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

/* When require has returned the module at stack slot `mod` for the name at slot `name`: records
** the functions and userdata the module holds now as its own (a table's string keys, read raw),
** the ones a message may name. Replaces the name's record. */
void sm_lrebind_loaded(lua_State *L, int name, int mod);
/* At the end of luaopen of smarm.core: records each module of package.loaded that is not
** recorded as the value it has, as sm_lrebind_loaded does (the modules loaded before smarm). */
void sm_lrebind_loaded_all(lua_State *L);
/* Puts smarm._loaded(name, module) -> module, sm_lrebind_loaded for Lua (the require that
** lua/smarm/init.lua installs calls it), into the module table at idx. */
void sm_lrebind_register(lua_State *L, int module);

/* At a run's start, in each of its VMs: the package.path and cpath every VM of the run started
** with (a module is named only if those find it: a script's own later path is not the others'). */
void sm_lrebind_set_paths(lua_State *L, const char *path, const char *cpath);

/* Pushes the VM's table of names (value -> "module" | { "module", "field" }, module "" for a
** standard global), rebuilt first if package.loaded changed or a run started (checking costs a
** read of package.loaded's slots, not a walk through the API). Push it once for a series of
** lookups (one message). From an actor: it looks with the VM's cached keys (lvm.h). */
void sm_lrebind_push_names(lua_State *L);

/* The same when the index made last still holds (package and package.loaded read raw): runs
** no Lua code and allocates nothing, so an encode may call it inside a table walk. Returns 0,
** pushing nothing, when a rebuild is due. */
int sm_lrebind_push_names_made(lua_State *L);

/* The generation of the VM's index (lvm_t.index_gen: a new one each time an index is made) when
** the index made last still holds, else 0; pushes nothing, runs no Lua code, allocates nothing.
** Whatever was learnt of the index under one generation holds while that generation is current:
** an index never changes once made. */
uint64_t sm_lrebind_index_current(lua_State *L);

/* What the VM's index, which the caller has just seen current (sm_lrebind_index_current), has
** for the value at idx, as a Lua type: LUA_TNIL, not known by name there (and it can become so
** only in a later index); LUA_TSTRING, a module (it goes by its name while that index holds);
** LUA_TTABLE, a field or a standard global (known while the field holds it). */
int sm_lrebind_names_entry(lua_State *L, int idx);

/* How the value at idx is known by name in every VM, with the table of names at stack slot
** `names`; pushes the names (see lrebind_kind). A module's field counts only while the field
** holds the value. Tables are looked up as modules only when `tables` is set (a function's
** upvalue: a data table in a message is data). */
enum lrebind_kind sm_lrebind_find(lua_State *L, int names, int idx, int tables);

#endif
