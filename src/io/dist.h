/*
** The runtime as an Erlang node (smarm.node) on the IO thread: Erlang's own distribution, with
** erl_interface (`ei`, Debian's erlang-dev) for what is hard to get right alone (epmd, the
** handshake and its cookie digest) and the rest written here: after a handshake, a connection is
** a libuv TCP handle of the IO thread that reads and writes the distribution's packets (a 4-byte
** length, 112 'pass through', the control term, the message term), so no `ei` call ever blocks
** the loop. Handshakes (accepting and connecting) and the publishing to epmd run on libuv's pool,
** one at a time.
**
** Incoming messages to a pid of this node or a registered name go to the actor as IO events
** (io.h: source IO_EV_DIST, IO_EV_DATA, the message's external format as the payload, version
** byte included); a connection's end goes to the actors that monitor its node (IO_EV_CLOSED,
** the node's name as the payload), once per monitor, which then ends (Erlang's monitor_node);
** to anything else they are dropped, as Erlang drops them. Outgoing packets are
** made whole by the caller (the Lua binding encodes them) and posted; a packet to a node not
** connected yet starts the connection and waits for it, and is dropped if it fails.
**
** Pids of this node: an actor's smarm pid is its Erlang pid's ID (the low 32 bits) and serial
** (the high 32 bits), with this node's name and creation, so no table maps them (Erlang keeps
** the 64 bits of NEW_PID_EXT since OTP 24). A ref of this node has three numbers: the smarm ref's
** low and high 32 bits, and 0.
**
** Owner: the node and its connections belong to the IO thread; the identity (sm_dist_identity) is
** written by the IO thread before the start's caller returns and read by any actor after.
*/
#ifndef SMARM_IO_DIST_H
#define SMARM_IO_DIST_H

#include "io.h"

#include <stddef.h>
#include <stdint.h>

#define DIST_NAME_MAX 255 /* a node name, alive@host, in bytes */
/* The most bytes a registered name monitored on another node and that node's name may have
** together: {Name, Node} is then a remote pid's bytes (sm_dist_alias_pin), kept in a slot of
** fixed size. Any name of up to 255 bytes fits beside any node name; Erlang's longest atoms
** (255 characters, up to 1020 bytes) would need every slot twice as big. */
#define DIST_MONITOR_NAME_NODE_MAX (2 * DIST_NAME_MAX)

/* A packet after its length: this tag, the control term, the message (erts' dist.h); the
** control messages' first elements (DOP_*) this node reads and writes. */
#define DIST_PASS_THROUGH 112
enum {
  DIST_OP_LINK = 1, DIST_OP_SEND = 2, DIST_OP_EXIT = 3, DIST_OP_UNLINK = 4, DIST_OP_REG_SEND = 6,
  DIST_OP_EXIT2 = 8, DIST_OP_SEND_TT = 12, DIST_OP_EXIT_TT = 13, DIST_OP_REG_SEND_TT = 16,
  DIST_OP_EXIT2_TT = 18, DIST_OP_MONITOR_P = 19, DIST_OP_DEMONITOR_P = 20,
  DIST_OP_MONITOR_P_EXIT = 21, DIST_OP_SEND_SENDER = 22, DIST_OP_SEND_SENDER_TT = 23,
  DIST_OP_UNLINK_ID = 35, DIST_OP_UNLINK_ID_ACK = 36
};

enum dist_op {
  DIST_START,   /* name, cookie, listen_ip -> err, error text */
  DIST_CONNECT, /* node -> err, error text */
  DIST_SEND,    /* node, packet (posted: nobody waits) */
  DIST_NODES,   /* -> names: the connected nodes, NUL-separated */
  DIST_MONITOR, /* node, watcher, on: one more (or one fewer) nodedown for watcher */
  DIST_SIGNAL,  /* sig, packet (the reason's term): a signal to a process of another node, or
                   the end of an actor watched from one (posted: sm_dist_signal) */
};

typedef struct dist_req {
  io_req_t base;
  enum dist_op op;
  char node[DIST_NAME_MAX + 1]; /* start: this node's name; connect, send: the peer's */
  char cookie[256];             /* start */
  char listen_ip[64];           /* start: where to listen ("127.0.0.1") */
  char *packet;                 /* send: a whole packet, its length first (owned) */
  size_t packet_len;
  char *names;                  /* nodes' result (owned) */
  smarm_pid_t watcher;          /* monitor: who gets { smarm = "nodedown", node = } */
  int on;                       /* monitor: 1 adds a monitor, 0 removes one */
  smarm_signal_t sig;           /* signal: what the remote hook was given (data: see packet) */
  size_t names_len;
  char error[DIST_NAME_MAX + 160];              /* start, connect: what went wrong, for people */
} dist_req_t;

/* A request for op (zeroed, run on the IO thread), or NULL. */
dist_req_t *sm_dist_req_new(enum dist_op op);

/* Whether this process is a node now, and if so its name and creation (valid while it is). */
int sm_dist_identity(const char **name, size_t *len, uint32_t *creation);

/* Processes of other nodes as remote pids (smarm.h). The table of them belongs to no thread (a
** mutex): an entry lives while a link or monitor between one of our actors and that process
** stands (the IO thread counts them) or somebody pins it, and its pid is never reused (a slot's
** generation changes), so a record that outlived its entry names nobody.
** sm_dist_alias_pin: the remote pid of the pid whose bytes (the external format, without the
** version byte) are pid[0..n), found or made, pinned until sm_dist_alias_unpin (which the caller
** calls once the core holds it: after smarm_link, smarm_monitor...; a pid that is not remote
** passes through it untouched). 0 when this runtime is no node, the bytes are no pid of another
** node, or memory ran out. */
smarm_pid_t sm_dist_alias_pin(const char *pid, size_t n);
void sm_dist_alias_unpin(smarm_pid_t alias);

/* The remote hook's work, from the scheduler thread it runs on: posts sig to the IO thread with
** its reason as a term (reason[0..len), version byte first, copied; NULL for a reason with a
** code only), which speaks the distribution's control messages. */
void sm_dist_signal(const smarm_signal_t *sig, const char *reason, size_t len);

/* Whether this build has the distribution (erl_interface was found at build time). */
int sm_dist_available(void);

#endif
