/*
** smarm.fs (lfs.c): files and the file system for Lua actors, through the IO thread's pool.
*/
#ifndef SMARM_LUA_LFS_H
#define SMARM_LUA_LFS_H

#include <lua.h>

/* Sets module.fs (module: the stack index of the smarm.core table) and registers files as a
** handle kind (lhandle.h). */
void sm_lfs_register(lua_State *L, int module);

/* After a run (the IO thread has stopped): closes the files of the run still open in L's VM, the
** one VM that outlives its runs; their handles are stale from now on. */
void sm_lfs_end_run(lua_State *L);

#endif
