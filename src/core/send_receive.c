/*
** smarm_send and smarm_receive: the actor-facing side of mailboxes.
**
** A local send appends straight to the receiver's mailbox (same thread: no atomics) and makes the
** receiver runnable if it waits. A remote send pushes the message onto the receiving scheduler's
** inbox; that scheduler moves it to the mailbox when it next looks (every yield, park and idle
** turn). Since an actor never changes scheduler, all messages from one sender to one receiver
** take the same path, which keeps them in order.
*/
#include "runtime.h"
#include "sched.h"

#include <errno.h>
#include <stdint.h>

int smarm_send(smarm_pid_t to, smarm_msg_t *msg)
{
  sched_t *s = sched_tls;
  actor_t *self = s ? s->current : NULL;
  if (!self)
    return -EPERM;
  if (!msg || smarm_pid_gen(to) == 0)
    return -EINVAL;
  unsigned k = smarm_pid_sched(to);
  if (k >= s->rt->nsched)
    return -ESRCH; /* an earlier runtime's pid, say: dead here */
  msg->kind = MSG_USER;
  msg->from = self->pid;
  msg->to = to;
  if (k != s->index) {
    sched_push_remote(s, &s->rt->scheds[k], msg);
    return 0;
  }
  actor_t *a = sched_lookup(s, to);
  if (!a)
    return -ESRCH;
  sched_deliver(s, a, msg);
  return 0;
}

int smarm_receive_match(smarm_match_fn match, void *ud, int64_t timeout_ns, smarm_msg_t **out)
{
  sched_t *s = sched_tls;
  actor_t *self = s ? s->current : NULL;
  if (!self)
    return -EPERM;
  if (!out)
    return -EINVAL;
  if (inbox_maybe_nonempty(&s->inbox))
    sched_take_inbox(s);
  if (SMARM_UNLIKELY(self->exit_pending) && timeout_ns != 0) /* a call that may park may die */
    sched_die_pending(s, self);
  /* cursor: the link to the first message not yet looked at. Only this actor removes messages
  ** from its mailbox, so the cursor stays valid while we park; arrivals append behind it. */
  smarm_msg_t **cursor = &self->mailbox.head;
  int64_t deadline = -1;
  int deadline_set = 0, expired = 0;
  for (;;) {
    for (; *cursor; cursor = &(*cursor)->next) {
      if (!match || match(*cursor, ud)) {
        *out = mailbox_take_at(&self->mailbox, cursor);
        return 0;
      }
    }
    if (timeout_ns == 0 || expired)
      return -ETIMEDOUT;
    if (!deadline_set) { /* one deadline for the whole call, however often a message wakes it */
      deadline = sched_deadline(timeout_ns);
      deadline_set = 1;
    }
    int rc = sched_park_until(s, self, ACTOR_WAIT_MSG, deadline);
    if (rc < 0)
      return rc;
    expired = rc;
  }
}

int smarm_receive(int64_t timeout_ns, smarm_msg_t **out)
{
  return smarm_receive_match(NULL, NULL, timeout_ns, out);
}

size_t smarm_mailbox_size(void)
{
  sched_t *s = sched_tls;
  actor_t *self = s ? s->current : NULL;
  if (!self)
    return 0;
  if (inbox_maybe_nonempty(&s->inbox))
    sched_take_inbox(s);
  return self->mailbox.count;
}
