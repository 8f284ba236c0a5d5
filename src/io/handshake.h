/*
** The Erlang distribution's handshake (erl_dist_protocol, "Distribution Handshake"), both sides,
** written here rather than taken from erl_interface so that this node says what it can do: ei
** does not advertise DFLAG_DIST_MONITOR_NAME, and without it an Erlang node neither sends a
** monitor of one of our actors nor answers a monitor of one of its processes with its DOWN.
** Blocking, with a deadline: for libuv's pool (dist.c). No libuv, no Lua.
*/
#ifndef SMARM_IO_HANDSHAKE_H
#define SMARM_IO_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#define HS_NAME_MAX 255

/* This node, as the handshake shows it. */
typedef struct hs_self {
  char name[HS_NAME_MAX + 1]; /* alive@host */
  char cookie[256];
  uint32_t creation;          /* epmd's, from the publish */
} hs_self_t;

/* The flags this node advertises (what it reads and writes: dist.c). */
uint64_t sm_hs_flags(void);

/* Accepts the handshake of a node that connected on fd: its name in peer. Returns 0, or -1
** with error set (the caller closes fd). */
int sm_hs_accept(int fd, const hs_self_t *self, int timeout_ms, char peer[HS_NAME_MAX + 1],
                 char *error, size_t error_len);

/* Connects to the node peer (alive@host: its port from epmd on host) and shakes hands: the
** connection's descriptor (close-on-exec), or -1 with error set; *simultaneous is set when the
** peer refused because it is connecting to us at the same time (its connection is the one that
** will stand: the protocol's "nok"). */
int sm_hs_connect(const char *peer, const hs_self_t *self, int timeout_ms, char *error,
                  size_t error_len, int *simultaneous);

#endif
