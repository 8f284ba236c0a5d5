/*
** Message blocks: the one structure that travels between actors and schedulers.
**
** A message is one heap block: this header, then the payload. The same block travels the whole
** way: allocated by the sender (smarm_msg_new), linked through `next` into the receiving
** scheduler's inbox (remote) or straight into the receiver's mailbox (local, mailbox.h), and
** handed to the receiver, who frees it. Who owns it at each step:
**   sender (after smarm_msg_new) -> runtime (after a successful smarm_send; the inbox or the
**   mailbox holds it; if the receiver is dead on arrival the receiving scheduler frees it)
**   -> receiver (after smarm_receive returns it) -> freed by the receiver.
** Control items between schedulers (spawn requests and replies, wakes, stop) are messages of
** other kinds, so one inbox carries everything (intersched.c delivers them).
*/
#ifndef SMARM_CORE_MESSAGE_H
#define SMARM_CORE_MESSAGE_H

#include "../smarm.h"

#include <stddef.h>
#include <stdint.h>
enum msg_kind {
  MSG_USER = 0,
  MSG_SPAWN,        /* payload: spawn_request_t; `to` is unused (addressed to the scheduler) */
  MSG_ALIVE,        /* payload: room for the reply; `to` is the pid asked about, `from` the asker */
  MSG_REPLY,        /* payload: int64_t answer (spawn: pid or negative errno; alive: 1 or 0);
                    ** `to` is the asker, parked in ACTOR_WAIT_REPLY */
  MSG_STOP,         /* the runtime is stopping */
  MSG_WAKE,         /* payload: uint64_t await token; `to` is the awaiting actor (smarm_wake) */
};

struct smarm_msg {
  smarm_msg_t *next;
  smarm_pid_t to;
  smarm_pid_t from;
  uint32_t size;
  uint16_t kind;
  uint16_t owning;  /* smarm_msg_set_owning: the drop hook runs when it is freed */
  /* The payload follows at a 16-byte aligned offset (the header is 32 bytes). */
  _Alignas(16) unsigned char data[];
};

smarm_msg_t *msg_new(uint32_t kind, size_t size);

/* Frees a message, running the drop hook first if it is owning (every free goes through here). */
void msg_release(smarm_msg_t *m);

/* Frees a chain of messages linked through next. */
void msg_free_chain(smarm_msg_t *m);

#endif
