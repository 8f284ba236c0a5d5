/*
** Stream sockets on the IO thread, TCP and Unix domain (the same requests and buffers; only making
** one differs): listening and connected sockets live there (libuv handles), named by ids;
** actors act on them with requests (io.h). Reading: each connection reads into its own buffer
** while a receive waits, or until 256 KiB wait unclaimed (then it stops reading, so a slow actor
** pushes back on its peer through the kernel's window); a receive takes its bytes from there.
** Writing: a send completes when libuv has handed all its bytes to the kernel, so a writer whose
** peer does not read parks (back-pressure). Accepting: a connection is accepted only when an
** accept waits; until then the kernel's backlog holds it.
**
** The patterns (lines, exact counts, everything) are matched on the actor's side (ltcp.c), which
** reads ahead: a receive here hands over whatever has arrived.
**
** Owner: everything here but the request structs belongs to the IO thread.
*/
#ifndef SMARM_IO_TCP_H
#define SMARM_IO_TCP_H

#include "io.h"

#include <stddef.h>
#include <stdint.h>

enum tcp_op {
  IOTCP_LISTEN,   /* host, port, backlog -> new_id */
  IOTCP_CONNECT,  /* host, port -> new_id */
  IOTCP_ACCEPT,   /* id -> new_id */
  IOTCP_RECEIVE,  /* id, want -> data, len: 1 to `want` bytes, whatever is there */
  IOTCP_UNREAD,   /* id, data, len: bytes to put back in front (posted: a socket handed over) */
  IOTCP_SEND,     /* id, data, len */
  IOTCP_CLOSE,    /* id (posted: nobody waits) */
  IOTCP_NAME,     /* id, peer -> addr, port */
  IOTCP_NODELAY,  /* id, flag */
  IOTCP_LISTEN_UNIX,  /* host (a path, or "@name": Linux's abstract names), backlog, mode -> new_id */
  IOTCP_CONNECT_UNIX, /* host -> new_id */
  IOTCP_SETACTIVE, /* id, flag (IOTCP_PASSIVE, _ONCE or _ON), owner */
  IOTCP_ACK,       /* id, len: the owner took len bytes of data messages (posted) */
};

/* Active modes (Erlang's {active, false | once | true}). An active connection sends what it reads
** to its owner as event messages (io.h: IO_EV_DATA with the bytes, then IO_EV_CLOSED or
** IO_EV_ERROR at the end, after which it is passive again): _ONCE one message, then passive;
** _ON every chunk as it comes, until IOTCP_ACTIVE_HIGH bytes of data messages wait unacknowledged
** (the owner acknowledges what it has taken with IOTCP_ACK), then it stops sending and, once its
** buffer holds 256 KiB, stops reading: the same back-pressure on the peer as a passive socket's.
** Only one actor, the owner, gets a socket's messages. Events and completions reach a scheduler in
** the order the IO thread made them (both through its inbox), so when a SETACTIVE to passive has
** completed, every message sent before it is in the owner's mailbox. */
enum { IOTCP_PASSIVE = 0, IOTCP_ACTIVE_ONCE = 1, IOTCP_ACTIVE_ON = 2 };
#define IOTCP_ACTIVE_HIGH (256 * 1024)

/* A receive after the peer closed (nothing left) ends with err = IOTCP_CLOSED. */
#define IOTCP_CLOSED (-4095) /* libuv's UV_EOF */

typedef struct tcp_req {
  io_req_t base;
  enum tcp_op op;
  uint64_t id;
  char *host;                 /* listen, connect (owned) */
  int port, backlog;
  size_t want;
  char *data;                 /* send: the bytes (owned); receive: the result (owned) */
  size_t len;
  uint64_t new_id;
  int new_taken;              /* the caller took new_id (ltcp.c); written by the caller after the
                                 completion, read when the last reference goes (sm_io_req_release
                                 orders the two): a socket nobody took is closed then */
  int new_fd;                 /* connect, accept: the connection's descriptor (see ltcp.c) */
  int peer, flag;
  smarm_pid_t owner;          /* setactive: who gets the messages */
  int mode;                   /* listen_unix: the path's permission bits, or -1 (the umask's) */
  char addr[112];             /* name: the address as text (a Unix socket's path), and port (-1
                                 for a Unix socket) */
  int addr_port;
} tcp_req_t;

/* A request for op (a zeroed tcp_req_t that runs on the IO thread), or NULL. */
tcp_req_t *sm_tcp_req_new(enum tcp_op op);

/* On the IO thread: fd, a connected Unix stream socket made elsewhere (a child process's end of
** a socketpair: proc.c), becomes a connection named by an id, reading like any other; 0 when it
** cannot (then fd is closed). */
uint64_t sm_tcp_adopt_unix(void *loop, int fd);

/* From any thread: closes the socket id (a posted request; nothing when out of memory: it stays
** open until the IO thread stops). */
void sm_tcp_post_close(uint64_t id);

#endif
