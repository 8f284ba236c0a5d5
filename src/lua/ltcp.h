/*
** smarm.tcp (ltcp.c): TCP sockets for Lua actors through the IO thread.
*/
#ifndef SMARM_LUA_LTCP_H
#define SMARM_LUA_LTCP_H

#include <lua.h>

#include <stdint.h>

/* A socket as it travels inside a message (codec.c): the receiver gets a new userdata for it and
** the sender's is marked as handed over. */
typedef struct ltcp_handle {
  uint64_t id;
  double timeout;
  int listener;
  int fd;     /* a connection's descriptor, for writes straight from the actor's thread */
  int queued; /* writes through the IO thread may still be in flight: the next go that way too */
  int file;   /* not a socket: a file of smarm.fs.open (lio.c), only fd matters */
  int taken;  /* in a block: a decoder made its userdata (codec.c); the block no longer owns it */
} ltcp_handle_t;

/* 1 with *sock and *h set if the value at idx is a socket userdata, else 0; raises if it is
** closed or already handed over. */
int ltcp_handle_of(lua_State *L, int idx, void **sock, ltcp_handle_t *h);
void ltcp_handed_over(void *sock);               /* the sender's side, after a successful send */
void ltcp_push_handle(lua_State *L, const ltcp_handle_t *h); /* the receiver's new userdata */
void ltcp_drop_handle(const ltcp_handle_t *h);   /* nobody received it: close it (any thread) */

/* Sets module.tcp (module: the stack index of the smarm.core table). */
void ltcp_register(lua_State *L, int module);

#endif
