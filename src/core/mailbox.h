/*
** A mailbox: the messages delivered to one actor, oldest first.
**
** A singly linked FIFO through the messages' `next` fields, owned by the receiving actor's
** scheduler thread; no atomics. `tailp` points at the last `next` field so that appends and
** removals at a scan position are O(1); selective receive keeps a cursor of the same type.
*/
#ifndef SMARM_CORE_MAILBOX_H
#define SMARM_CORE_MAILBOX_H

#include "message.h"

#include <stddef.h>

typedef struct mailbox {
  smarm_msg_t *head;
  smarm_msg_t **tailp;  /* &head when empty, else &last->next */
  size_t count;
} mailbox_t;

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
static inline void mailbox_clear(mailbox_t *mb)
{
  sm_msg_free_chain(mb->head);
  mailbox_init(mb);
}

#endif
