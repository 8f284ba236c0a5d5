/*
** Paths of values in error messages (lpath.c): where in a message or term the value that cannot
** go is, as Lua would write it: `message.items[3]`, `message["a b"]`, `message.f[upvalue 'co']`.
** Built only when something fails, from the keys leading to the value.
*/
#ifndef SMARM_LUA_LPATH_H
#define SMARM_LUA_LPATH_H

#include <lua.h>

#include <stddef.h>

typedef struct lpath {
  char s[200];
  size_t len;
} lpath_t; /* start from { "", 0 } */

/* Appends the key at idx: .name, ["str"], [3], [true], [table]; an upvalue's name as
** [upvalue 'name']; a path too long ends in "...". */
void sm_lpath_key(lpath_t *p, lua_State *L, int idx, int is_upvalue);

#endif
