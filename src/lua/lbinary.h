/*
** Binaries (lbinary.c): immutable byte strings shared between actors and schedulers instead of
** copied, Erlang's refcounted binaries. `smarm.binary(s)` copies s once into a block of its own
** (sm_binary_t) outside every VM; a Lua value of it is a small userdata holding one reference.
** A message carries a binary as a pointer and one reference (codec.c), so sending 64 KiB costs
** what sending 8 bytes does.
**
** Invariants:
** - A block's bytes never change after it is made; it is freed when its last reference goes.
**   References are held by userdata (released by their __gc) and by message blocks (released
**   when the block is freed: the codec's drop hook).
** - The count is atomic: any thread takes and releases references. A reference is always taken
**   by a holder of another one (the sender's userdata lives while it encodes; a block's
**   reference lives while it is decoded), so the count never rises from 0.
** - A VM has at most one userdata per block (an intern table with weak values), which holds all
**   the references the VM took, so a message that brings a block the VM has costs no atomic
**   operation at the receiver: the block's reference moves to the userdata's count.
** - The VM's collector does not see the block's bytes: each userdata counts its block's length
**   as the VM's memory (sm_ljx_gc_charge) until its __gc, so that dropping binaries frees their
**   memory at the pace dropping strings would.
*/
#ifndef SMARM_LUA_LBINARY_H
#define SMARM_LUA_LBINARY_H

#include <lua.h>

#include <stdatomic.h>
#include <stddef.h>

typedef struct sm_binary {
  _Atomic size_t refs;
  size_t len;
  char bytes[]; /* len bytes, then a NUL (a C caller may read them as a string) */
} sm_binary_t;

/* The binary at idx, or NULL if the value is not one. Valid while the value is. */
sm_binary_t *sm_lbinary_test(lua_State *L, int idx);

/* Takes one more reference to b, whose caller holds one. */
void sm_binary_retain(sm_binary_t *b);
/* Releases one reference (n references); the last frees b. Any thread; never raises. */
void sm_binary_release(sm_binary_t *b);
void sm_binary_release_n(sm_binary_t *b, size_t n);

/* Pushes the VM's userdata of the block whose pointer is at slot (a message block's list entry,
** unaligned), which takes over the reference the entry holds and zeroes the entry (zeroed: the
** block no longer holds it). Raises for memory with the entry left as it was, or after it was
** zeroed (the reference is the userdata's then). */
void sm_lbinary_push_taken(lua_State *L, unsigned char *slot);

/* Pushes a new binary of the n bytes at s (a block of its own). Raises for memory. */
void sm_lbinary_push_copy(lua_State *L, const char *s, size_t n);

/* For the codec's long strings (codec.c, "Long strings"), from an actor; idx is absolute (the
** codec's are). When the VM has a binary of the bytes of the string at idx, or the string is one
** of the last LVM_SENT long strings that this was asked of in the VM and found no binary for (by
** address and string id: a hint), pushes that binary (made now if need be, and kept for the
** string until the VM's collector finds its userdata used by nothing else, at the end of the
** cycle under way: a table with weak values) and returns 1; else remembers the string, pushes
** nothing and returns 0. So a string sent once is copied as before, and one sent again is shared
** from then on (with a block made again after each collection cycle while the string is
** remembered). Raises for memory. */
int sm_lbinary_push_shared(lua_State *L, int idx);

/* The bytes of the string (or number, as luaL_checklstring takes one) or binary at idx, and
** their length: for the IO calls that write data (valid while the value is on the stack).
** Raises "bad argument #idx to 'f' (string or binary expected, got <type>)" for anything else. */
const char *sm_lbinary_checkbytes(lua_State *L, int idx, size_t *len);

/* Registers smarm.binary and smarm.is_binary in the module at index `module`, and the VM's
** metatable of binaries. */
void sm_lbinary_register(lua_State *L, int module);

/* Binaries alive in the process and their bytes (smarm.stats). */
void sm_binary_counts(size_t *count, size_t *bytes);

#endif
