/*
** Faults in Lua (lfaults.c): exit reasons as Lua values, links, monitors, exit signals, kill,
** refs and registered names, on the core's C API (smarm.h, "Faults" and "Registered names").
**
** Reasons. "normal", "kill", "killed" and "noproc" are the core's codes; any other sendable
** value travels as its encoding (the codec), so a table stays a table. A value that cannot be
** sent becomes the string tostring(value) .. " (an exit reason that cannot be sent: ...)".
** Notices arrive as tables: { smarm = "EXIT", pid =, reason = } and
** { smarm = "DOWN", ref =, pid =, reason = }.
*/
#ifndef SMARM_LUA_LFAULTS_H
#define SMARM_LUA_LFAULTS_H

#include "smarm.h"

#include <lua.h>

/* Encodes the reason at idx (never raises): returns its code; for SMARM_EXIT_VALUE *block gets
** a block holding its bytes (the caller frees it), else NULL. NULL with SMARM_EXIT_VALUE means
** out of memory (the caller reports SMARM_EXIT_KILLED's kind of failure as it sees fit). */
int sm_lfaults_encode_reason(lua_State *L, int idx, smarm_msg_t **block);

/* Encodes the crash report { pid = self, name = name (if not NULL), reason = <value at idx> }
** (never raises); NULL when out of memory. */
smarm_msg_t *sm_lfaults_encode_report(lua_State *L, int idx, const char *name);

/* Pushes a reason's Lua value (raises only when out of memory). A reason from another node that
** the decoder refuses, or runs out of memory on, is { smarm = "bad_term", reason = <why> }. */
void sm_lfaults_push_reason(lua_State *L, int code, const void *data, size_t size);

/* Pushes the table of a notice (smarm_msg_kind EXIT or DOWN); the message stays the caller's. */
void sm_lfaults_push_notice(lua_State *L, smarm_msg_t *m);

/* Raises "bad argument #<idx> to '<fname>' (<why>)" at the caller's line, as luaL_argerror words
** it, but with the function the user called, fname, however it was called (luaL_argerror names
** it from the call site: '?' in a protected call, a wrapper's name through one). */
int sm_lfaults_argerror(lua_State *L, const char *fname, int idx, const char *why);

/* The pid the argument at idx of fname names: a pid, or a registered name (0 if nobody holds
** it). Raises sm_lfaults_argerror's "bad argument" for anything else. */
smarm_pid_t sm_lfaults_check_target(lua_State *L, int idx, const char *fname);
/* Whether the value at idx is a pid term of this node (this runtime is one) that names nobody:
** a pid of this node's earlier run, or numbers no runtime gives out (a live one decodes as a
** pid, lterm.c). */
int sm_lfaults_own_stale_pid(lua_State *L, int idx);
/* The name at idx of fname: a string of 1 to 255 bytes without NUL, else raises
** sm_lfaults_argerror's "bad argument". */
const char *sm_lfaults_check_name(lua_State *L, int idx, const char *fname);

/* Makes / releases vm's ref to the reason encoder (a run's start and end, like lpid's). */
struct lvm;
void sm_lfaults_cache_refs(struct lvm *vm);
void sm_lfaults_release_refs(struct lvm *vm);

/* Adds the functions to the module table at idx. */
void sm_lfaults_register(lua_State *L, int module_idx);

#endif
