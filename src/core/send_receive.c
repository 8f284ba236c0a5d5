/*
** smarm_send and smarm_receive: the actor-facing side of mailboxes.
**
** A local send appends straight to the receiver's mailbox (same thread: no atomics) and makes the
** receiver runnable if it waits. A remote send pushes the message onto the receiving scheduler's
** inbox; that scheduler moves it to the mailbox when it next looks (every yield, park and idle
** turn). Since an actor never changes scheduler, all messages from one sender to one receiver
** take the same path, which keeps them in order.
*/
#include "faults.h"
#include "runtime.h"
#include "sched.h"

#include <errno.h>
#include <stdint.h>

/* sm_sched_route (sched.h), inlined into the sends: as a call it cost `pingpong.lua local` and
** `ring.lua local` 7-9% (123.6 against 113.9 ns, 92.4 against 86.3). `sent`: the counter that
** counts m (NULL: none), added to before m is pushed: the push publishes it with m, so that
** whoever m reaches, and whoever that one answers, reads m counted (a count after the push was
** missed when the sender's thread lost its CPU in between: spec/c/test_actor.c). */
static inline int route(sched_t *s, smarm_msg_t *m, _Atomic uint64_t *sent)
{
  unsigned k = smarm_pid_sched(m->to);
  if (k != s->index) {
    if (sent)
      stat_add(sent, 1);
    sm_sched_push_remote(s, &s->rt->scheds[k], m);
    return 0;
  }
  actor_t *a = sm_sched_lookup(s, m->to);
  if (!a)
    return -ESRCH;
  if (sent)
    stat_add(sent, 1);
  if (m->kind == MSG_USER)
    sm_sched_deliver(s, a, m);
  else
    sm_faults_deliver(s, m); /* a reply: delivered only to a live alias */
  return 0;
}

/* Sends msg as `kind` (MSG_USER, or SIG_REPLY which the receiver's scheduler may drop). */
static int send_as(smarm_pid_t to, smarm_msg_t *msg, uint16_t kind)
{
  sched_t *s = sm_sched_tls;
  actor_t *self = s ? s->current : NULL;
  if (!self)
    return -EPERM;
  if (!msg || smarm_pid_gen(to) == 0)
    return -EINVAL;
  unsigned k = smarm_pid_sched(to);
  if (k >= s->rt->nsched)
    return -ESRCH; /* an earlier runtime's pid, say: dead here */
  msg->kind = kind;
  msg->from = self->pid;
  msg->to = to;
  return route(s, msg, &s->stats.sent);
}

int sm_sched_route(sched_t *s, smarm_msg_t *m) { return route(s, m, NULL); }

int smarm_send(smarm_pid_t to, smarm_msg_t *msg) { return send_as(to, msg, MSG_USER); }

int smarm_send_reply(smarm_pid_t to, smarm_msg_t *msg)
{
  if (msg && msg->size < sizeof(smarm_ref_t))
    return -EINVAL;
  return send_as(to, msg, SIG_REPLY);
}

/* Selective receive from the link `cursor` of self's mailbox on (see smarm_receive_match). */
static int receive_from(sched_t *s, actor_t *self, smarm_msg_t **cursor, smarm_match_fn match,
                        void *ud, int64_t timeout_ns, int call, smarm_msg_t **out)
{
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
      deadline = call ? sm_sched_call_deadline(s, timeout_ns)
                      : sm_sched_actor_deadline(s, timeout_ns);
      deadline_set = 1;
    }
    int rc = sm_sched_park_until(s, self, ACTOR_WAIT_MSG, deadline);
    if (rc < 0)
      return rc;
    expired = rc;
  }
}

/* The calling actor with its inbox taken in, or NULL (-EPERM). A call that may park may die
** (an exit signal just taken in). */
static actor_t *receiver(sched_t **s_out, int64_t timeout_ns)
{
  actor_t *self = sched_self(s_out);
  if (!self)
    return NULL;
  sched_t *s = *s_out;
  if (inbox_maybe_nonempty(&s->inbox))
    sm_sched_take_inbox(s);
  if (SMARM_UNLIKELY(self->exit_pending) && timeout_ns != 0)
    sm_sched_die_pending(s, self);
  return self;
}

int smarm_receive_match(smarm_match_fn match, void *ud, int64_t timeout_ns, smarm_msg_t **out)
{
  sched_t *s;
  actor_t *self = receiver(&s, timeout_ns);
  if (!self)
    return -EPERM;
  if (!out)
    return -EINVAL;
  /* The cursor is the link to the first message not yet looked at. Only this actor removes
  ** messages from its mailbox, so it stays valid while we park; arrivals append behind it. */
  return receive_from(s, self, &self->mailbox.head, match, ud, timeout_ns, 0, out);
}

smarm_mark_t smarm_mailbox_mark(void)
{
  sched_t *s;
  actor_t *self = receiver(&s, 0);
  smarm_mark_t mark = {self ? (void *)self->mailbox.tailp : NULL};
  return mark;
}

int smarm_receive_after(smarm_mark_t mark, smarm_match_fn match, void *ud, int64_t timeout_ns,
                        smarm_msg_t **out)
{
  sched_t *s;
  actor_t *self = receiver(&s, timeout_ns);
  if (!self)
    return -EPERM;
  if (!out || !mark.at)
    return -EINVAL;
  return receive_from(s, self, (smarm_msg_t **)mark.at, match, ud, timeout_ns, 1, out);
}

int smarm_receive_first(smarm_match_fn match, void *ud, smarm_msg_t **out)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  if (!match || !out)
    return -EINVAL;
  smarm_msg_t **head = &self->mailbox.head;
  /* An empty mailbox first: the common answer, without a look at the inbox's shared line. Then
  ** what a receive does first and this may not: take in the inbox (which runs the signals in
  ** it, and may bring a kill), or end the actor for an exit signal taken in earlier. */
  if (!*head || inbox_maybe_nonempty(&s->inbox) || SMARM_UNLIKELY(self->exit_pending) ||
      !match(*head, ud))
    return -EAGAIN;
  *out = mailbox_take_at(&self->mailbox, head);
  return 0;
}

int smarm_receive(int64_t timeout_ns, smarm_msg_t **out)
{
  return smarm_receive_match(NULL, NULL, timeout_ns, out);
}

void smarm_mailbox_set_held(size_t n)
{
  sched_t *s = sm_sched_tls;
  if (s && s->current)
    s->current->held = n < UINT32_MAX ? (uint32_t)n : UINT32_MAX; /* (more: no memory holds) */
}

size_t smarm_mailbox_size(void)
{
  sched_t *s = sm_sched_tls;
  actor_t *self = s ? s->current : NULL;
  if (!self)
    return 0;
  if (inbox_maybe_nonempty(&s->inbox))
    sm_sched_take_inbox(s);
  return self->mailbox.count;
}
