/*
** smarm.lineedit (llineedit.c): the prompts' line editor (libedit, src/io/lineedit.c) for Lua.
*/
#ifndef SMARM_LUA_LLINEEDIT_H
#define SMARM_LUA_LLINEEDIT_H

#include <lua.h>

/* Sets module.lineedit (module: the stack index of the smarm.core table). */
void sm_llineedit_register(lua_State *L, int module);

#endif
