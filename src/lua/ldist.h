/*
** smarm.node (ldist.c): the runtime as an Erlang node (src/io/dist.h), and sending to other
** nodes: to a pid of another node, or to { "name", "node@host" }.
*/
#ifndef SMARM_LUA_LDIST_H
#define SMARM_LUA_LDIST_H

#include <lua.h>

/* Whether the n bytes at node are this runtime's node name (false while it is no node). */
int sm_ldist_is_self(const char *node, size_t n);

/* Whether the value at idx names a process of a node: a pid of another node, or a table
** { name, node } of two strings. */
int sm_ldist_is_target(lua_State *L, int idx);

/* Checks the table { name, node } at idx (sm_ldist_is_target), the argument idx of the user's
** function fname: returns 1 when its node is this node's own name (its name is then a name of
** this node, which the caller checks as such); else raises "bad argument #<idx> to '<fname>'
** (...)" unless its name is an atom (1 to 255 characters of UTF-8) and its node a node name
** (alive@host, an atom of at most DIST_NAME_MAX bytes), and returns 0. */
int sm_ldist_check_name_node(lua_State *L, int idx, const char *fname);

/* smarm.send(target, msg) for such a target (at 1, the message at 2): returns 1 when the message
** went (or was dropped: a pid of another node while this runtime is no node), 0 when the target
** is a name of this very node, which then replaces the target at 1 for a local send. Raises on a
** malformed target, a message with no Erlang term, or { name, node } while this runtime is no
** node. */
int sm_ldist_send(lua_State *L);

/* Sets module.node (module: the stack index of the smarm.core table). */
void sm_ldist_register(lua_State *L, int module);

#endif
