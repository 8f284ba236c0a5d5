/*
** The decoder's templates of record tables: a key set met again is made into a table by copying
** a template's hash part instead of interning and inserting each key (lshape.c).
*/
#ifndef SMARM_LUA_LSHAPE_H
#define SMARM_LUA_LSHAPE_H

#include "ljx.h"
#include "lvm.h"

#include <lua.h>

#include <stddef.h>
#include <stdint.h>

/* Pushes the array of the n keys (keys[i], lens[i] bytes each) in order, then a new table that
** holds them all, each with the value true, for the caller to set: by key (lua_rawset), or a
** number or boolean straight into key i's node (*slots)[i] (sm_ljx_table_set_scalar). hash:
** the caller's hash of the keys, which picks the cache entry. Returns 1; 0 with nothing pushed
** when the key set cannot take this way (a key twice, its entry taken by another set, no C
** memory): the caller decodes the table as any. May raise "not enough memory" (Lua's). */
int sm_lshape_push(lua_State *L, uint64_t hash, const unsigned char *const *keys,
                   const size_t *lens, uint32_t n, const uint32_t **slots);

/* The fixed shapes (lvm.h): makes the VM's templates (at its start; may raise "not enough
** memory"), lets go of them (a VM that lives on after the run), and pushes a new table of shape
** k, its `smarm` field set and its other keys true, for the caller to set in this order:
**   LVM_FIXED_CALL: from, request        LVM_FIXED_DOWN: ref, pid, reason
**   LVM_FIXED_EXIT: pid, reason
** with sm_lshape_fixed_set (the value on top; a nil leaves the key out, as lua_rawset does). */
void sm_lshape_fixed_init(lvm_t *vm);
void sm_lshape_fixed_release(lvm_t *vm);
void sm_lshape_push_fixed(lua_State *L, const lvm_t *vm, enum lvm_fixed k);

static inline void sm_lshape_fixed_set(lua_State *L, int t_idx, const lvm_t *vm,
                                       enum lvm_fixed k, unsigned i)
{
  sm_ljx_table_set_slot(L, t_idx, vm->fixed_slot[k][i]);
}

/* Frees the VM's entries at the run's end; unref: let go of the templates too (a VM that lives
** on after the run). */
void sm_lshape_release(lvm_t *vm, int unref);

#endif
