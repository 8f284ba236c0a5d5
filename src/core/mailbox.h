/*
** Messages and mailboxes.
**
** A message is one heap block: this header, then the payload. The same block travels the whole
** way: allocated by the sender (smarm_msg_new), linked through `next` into the receiving
** scheduler's inbox (remote) or straight into the receiver's mailbox (local), and handed to the
** receiver, who frees it. Who owns it at each step:
**   sender (after smarm_msg_new) -> runtime (after a successful smarm_send; the inbox or the
**   mailbox holds it; if the receiver is dead on arrival the receiving scheduler frees it)
**   -> receiver (after smarm_receive returns it) -> freed by the receiver.
** Control items between schedulers (spawn requests and replies, stop) are messages of other
** kinds, so one inbox carries everything.
**
** A mailbox is a singly linked FIFO owned by the receiving actor's scheduler thread; no atomics.
** `tailp` points at the last `next` field so that appends and removals at a scan position are
** O(1); selective receive keeps a cursor of the same type.
*/
#ifndef SMARM_CORE_MAILBOX_H
#define SMARM_CORE_MAILBOX_H

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

typedef struct mailbox {
  smarm_msg_t *head;
  smarm_msg_t **tailp;  /* &head when empty, else &last->next */
  size_t count;
} mailbox_t;

smarm_msg_t *msg_new(uint32_t kind, size_t size);

/* Frees a message, running the drop hook first if it is owning (every free goes through here). */
void msg_release(smarm_msg_t *m);

static inline void mailbox_init(mailbox_t *mb)
{
  mb->head = NULL;
  mb->tailp = &mb->head;
  mb->count = 0;
}

static inline void mailbox_append(mailbox_t *mb, smarm_msg_t *m)
{
  m->next = NULL;
  *mb->tailp = m;
  mb->tailp = &m->next;
  mb->count++;
}

/* Removes and returns the message *at (a cursor: &head or &prev->next). */
static inline smarm_msg_t *mailbox_take_at(mailbox_t *mb, smarm_msg_t **at)
{
  smarm_msg_t *m = *at;
  *at = m->next;
  if (mb->tailp == &m->next)
    mb->tailp = at;
  m->next = NULL;
  mb->count--;
  return m;
}

/* Frees every queued message. */
void mailbox_clear(mailbox_t *mb);

/* Frees a chain of messages linked through next. */
void msg_free_chain(smarm_msg_t *m);

#endif
