/*
** Erlang terms in Lua (lterm.c): atoms, tuples and maps as Lua values, Erlang's other terms
** (foreign pids, refs, ports, funs, big integers, bit strings, improper lists) as opaque values
** that go back as the same bytes, and the external term format (term_to_binary's) both ways:
** smarm.atom, smarm.tuple, smarm.map, smarm.term.encode/decode/type.
**
** Atoms and opaque terms are userdata interned per VM (by name, by their bytes), so that == and
** table keys work; tuples and maps are Lua tables marked by a metatable of the VM's. The message
** codec carries all four between actors (codec.c asks here what a value is).
*/
#ifndef SMARM_LUA_LTERM_H
#define SMARM_LUA_LTERM_H

#include <lua.h>

#include <stddef.h>

enum lterm_kind {
  LTERM_NONE,   /* a plain Lua value */
  LTERM_ATOM,   /* userdata: its name */
  LTERM_OPAQUE, /* userdata: the term's bytes in the external format, without the version byte */
  LTERM_TUPLE,  /* a table marked as a tuple */
  LTERM_MAP     /* a table marked as a map */
};

/* What the userdata at idx is: LTERM_ATOM or LTERM_OPAQUE with its bytes in *s, *n (valid while
** the value is), else LTERM_NONE. */
enum lterm_kind sm_lterm_to_blob(lua_State *L, int idx, const char **s, size_t *n);
/* Pushes the interned atom or opaque term of those bytes (kind LTERM_ATOM or LTERM_OPAQUE).
** Raises on an opaque term whose bytes are not one whole term. */
void sm_lterm_push_blob(lua_State *L, enum lterm_kind kind, const char *s, size_t n);

/* What the table at idx is marked as: LTERM_TUPLE, LTERM_MAP or LTERM_NONE. */
enum lterm_kind sm_lterm_table_kind(lua_State *L, int idx);
/* Marks the table at idx as a tuple or a map (kind). */
void sm_lterm_mark_table(lua_State *L, int idx, enum lterm_kind kind);

/* Pushes the external format of the value at idx (version byte first) as a string; raises like
** smarm.term.encode, `root` naming the value ("message"). A pid or ref of this runtime is encoded
** as this node's when it is one (dist.h). */
void sm_lterm_encode(lua_State *L, int idx, const char *root);
/* Pushes the term of those bytes (version byte first), this node's own pids and refs as smarm's;
** raises "<what>: ..." on malformed bytes. */
void sm_lterm_decode(lua_State *L, const void *p, size_t n, const char *what);
/* The same for bytes from another node that arrive in a receive, which must not raise for them:
** a term the decoder refuses (a float Erlang would not write, too little C stack left for its
** nesting, memory) is pushed as { smarm = "bad_term", reason = <why> }. Raises only when there
** is no memory for that table or the protected call. */
void sm_lterm_decode_or_bad(lua_State *L, const void *p, size_t n, const char *what);
/* Whether a tuple's n is an arity Erlang has: a whole number from 0 to 16777215 (encode's rule;
** the codec's reasons follow it too). */
int sm_lterm_tuple_arity_ok(double n);
/* Why s[0..n) cannot be an atom's name ("not UTF-8", "more than 255 characters"), or NULL when
** it can (Erlang's rule: at most 255 characters of UTF-8). */
const char *sm_lterm_atom_fault(const char *s, size_t n);
/* Whether the value at idx is a pid of another node (an opaque term): its node's name then. */
int sm_lterm_pid_node(lua_State *L, int idx, const char **node, size_t *n);

/* Sets module.atom, module.tuple, module.map and module.term (module: the stack index of the
** smarm.core table). */
void sm_lterm_register(lua_State *L, int module);

#endif
