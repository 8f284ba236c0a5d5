/*
** Message blocks and mailbox cleanup (see mailbox.h for ownership).
*/
#include "mailbox.h"

#include <stdlib.h>

smarm_msg_t *msg_new(uint32_t kind, size_t size)
{
  if (size > UINT32_MAX)
    return NULL;
  smarm_msg_t *m = malloc(sizeof *m + size);
  if (!m)
    return NULL;
  m->next = NULL;
  m->to = 0;
  m->from = 0;
  m->size = (uint32_t)size;
  m->kind = kind;
  return m;
}

smarm_msg_t *smarm_msg_new(size_t size) { return msg_new(MSG_USER, size); }

void smarm_msg_free(smarm_msg_t *msg) { free(msg); }

void *smarm_msg_data(smarm_msg_t *msg) { return msg->data; }

size_t smarm_msg_size(const smarm_msg_t *msg) { return msg->size; }

smarm_pid_t smarm_msg_sender(const smarm_msg_t *msg) { return msg->from; }

void msg_free_chain(smarm_msg_t *m)
{
  while (m) {
    smarm_msg_t *next = m->next;
    free(m);
    m = next;
  }
}

void mailbox_clear(mailbox_t *mb)
{
  msg_free_chain(mb->head);
  mailbox_init(mb);
}
