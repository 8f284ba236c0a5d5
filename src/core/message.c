/*
** Message blocks: allocation, the drop hook, freeing (see message.h for ownership).
*/
#include "message.h"

#include "alloc.h"
#include "home.h"

#include <stdatomic.h>
#include <stdlib.h>

smarm_msg_t *sm_msg_new(uint32_t kind, size_t size)
{
  if (size > UINT32_MAX)
    return NULL;
  smarm_msg_t *m = sm_alloc_fails(SM_ALLOC_MSG) ? NULL : sm_home_msg_alloc(sizeof *m + size);
  if (!m)
    return NULL;
  m->next = NULL;
  m->to = 0;
  m->from = 0;
  m->size = (uint32_t)size;
  m->kind = (uint16_t)kind;
  m->owning = 0;
  return m;
}

/* Set once by the embedding layer (the Lua binding), read by any thread that frees a message. */
static _Atomic(smarm_msg_hook) drop_hook;

void smarm_msg_set_drop_hook(smarm_msg_hook hook)
{
  atomic_store_explicit(&drop_hook, hook, memory_order_release);
}

void smarm_msg_set_owning(smarm_msg_t *msg, int owning) { msg->owning = owning != 0; }

void sm_msg_release(smarm_msg_t *m)
{
  if (m && m->owning) {
    smarm_msg_hook hook = atomic_load_explicit(&drop_hook, memory_order_acquire);
    if (hook)
      hook(m);
  }
  if (m)
    sm_home_msg_free(m);
}

smarm_msg_t *smarm_msg_new(size_t size) { return sm_msg_new(MSG_USER, size); }

void smarm_msg_free(smarm_msg_t *msg) { sm_msg_release(msg); }

void *smarm_msg_data(smarm_msg_t *msg) { return msg->data; }

size_t smarm_msg_size(const smarm_msg_t *msg) { return msg->size; }

smarm_pid_t smarm_msg_sender(const smarm_msg_t *msg) { return msg->from; }

void sm_msg_free_chain(smarm_msg_t *m)
{
  while (m) {
    smarm_msg_t *next = m->next;
    sm_msg_release(m);
    m = next;
  }
}
