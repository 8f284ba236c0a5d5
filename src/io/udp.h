/*
** UDP on the IO thread: sockets live there (libuv handles), named by ids (ids.h); actors act on
** them with requests (io.h). Receiving: a socket reads datagrams into a queue while a receive
** waits, or until 64 datagrams wait unclaimed (then it stops reading, and the kernel's buffer,
** then the network, drops what comes); a receive takes the oldest. Sending is done from the
** actor's thread (a non-blocking sendto on the socket's descriptor, src/lua/ludp.c); only a
** datagram the kernel could not take at once goes through the IO thread.
**
** Owner: everything here but the request structs belongs to the IO thread.
*/
#ifndef SMARM_IO_UDP_H
#define SMARM_IO_UDP_H

#include "io.h"

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum udp_op {
  IOUDP_BIND,    /* addr -> new_id, new_fd */
  IOUDP_RECEIVE, /* id -> data, len, addr: the oldest datagram and its sender */
  IOUDP_SEND,    /* id, addr, data, len */
  IOUDP_CLOSE,   /* id (posted: nobody waits) */
  IOUDP_NAME,    /* id -> addr */
  IOUDP_OPTION,  /* id, option, flag / group, iface */
  IOUDP_SETACTIVE, /* id, flag (IOUDP_PASSIVE, _ONCE or _ON), owner */
  IOUDP_ACK,       /* id, len: the owner took len datagram messages (posted) */
  IOUDP_UNREAD,    /* id, data, len: datagrams to put back in front, packed as udp_packed_t
                      headers each followed by its bytes (posted: taken back from messages) */
};

/* Active modes, as tcp.h's: an active socket sends each datagram to its owner as an event
** message (io.h: IO_EV_DATA, the payload a sockaddr_storage, the sender, then the datagram's
** bytes; IO_EV_ERROR for a receiving error, after which it stays active): _ONCE one message, then
** passive; _ON each one, until IOUDP_ACTIVE_HIGH wait unacknowledged (IOUDP_ACK), then it stops
** sending them and, once 64 more wait, stops reading (the kernel drops the rest). */
enum { IOUDP_PASSIVE = 0, IOUDP_ACTIVE_ONCE = 1, IOUDP_ACTIVE_ON = 2 };
#define IOUDP_ACTIVE_HIGH 64

/* A datagram given back by IOUDP_UNREAD: its sender and length; its bytes follow. */
typedef struct udp_packed {
  struct sockaddr_storage from;
  size_t len;
} udp_packed_t;

enum udp_option {
  UDP_BROADCAST,       /* flag */
  UDP_TTL,             /* flag: 1..255 */
  UDP_MULTICAST_LOOP,  /* flag */
  UDP_MULTICAST_TTL,   /* flag: 0..255 */
  UDP_MULTICAST_JOIN,  /* group, iface (NULL: the kernel's choice) */
  UDP_MULTICAST_LEAVE, /* group, iface */
};

/* A receive on a closed socket ends with err = IOUDP_CLOSED. */
#define IOUDP_CLOSED (-4095) /* libuv's UV_EOF */

typedef struct udp_req {
  io_req_t base;
  enum udp_op op;
  uint64_t id;
  struct sockaddr_storage addr; /* bind: where; send: to whom; receive, name: the result */
  char *data;                   /* send: the bytes (owned); receive: the datagram (owned) */
  size_t len;
  enum udp_option option;
  int flag;
  char *group, *iface;          /* multicast membership (owned) */
  uint64_t new_id;
  int new_fd;
  int new_taken;                /* as tcp.h's: the caller took new_id */
  smarm_pid_t owner;            /* setactive: who gets the messages */
} udp_req_t;

/* A request for op (zeroed), or NULL. */
udp_req_t *sm_udp_req_new(enum udp_op op);

#endif
