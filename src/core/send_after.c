/*
** Message timers: smarm_send_after and smarm_cancel_timer (Erlang's send_after/cancel_timer).
**
** A timer lives on its target's scheduler, so that it goes with its target: an actor's end frees
** the timers aimed at it (their messages are never sent, and they cost nothing more), and firing
** is a local delivery. Each scheduler keeps its timers in a heap of deadlines of their own
** (msg_timers: the scheduler's loop and idle wait look at both heaps), in a table by ref for
** cancel, and in their target's list for its end.
**
** Another scheduler's target is asked (sm_sched_ask, one round trip): MSG_TIMER_SET carries the
** deadline, ref and message, MSG_TIMER_CANCEL the ref. So a timer exists on its scheduler before
** smarm_send_after returns, and any cancel that follows (from any actor: it learned the timer
** afterwards) is answered after it: a cancelled timer's message is never delivered, and a cancel
** that finds nothing means the message was sent (or its target is gone).
*/
#include "faults.h"
#include "runtime.h"
#include "sched.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct msg_timer {
  deadline_t at;        /* in s->msg_timers */
  reftab_node_t node;   /* key: the timer's ref, in s->msg_timer_refs */
  actor_t *target;
  smarm_msg_t *msg;
  msg_timer_t *prev, *next; /* the target's list */
};

/* The payload of MSG_TIMER_SET and MSG_TIMER_CANCEL: the answer first, as every request's. */
typedef struct timer_request {
  int64_t answer;
  int64_t deadline;
  smarm_ref_t ref;
  smarm_msg_t *msg; /* SET: the message (NULL once a timer holds it) */
} timer_request_t;

static msg_timer_t *of_deadline(deadline_t *d) { return (msg_timer_t *)((char *)d - offsetof(msg_timer_t, at)); }

static msg_timer_t *find(sched_t *s, smarm_ref_t ref)
{
  reftab_node_t *n = reftab_find(&s->msg_timer_refs, ref);
  return n ? (msg_timer_t *)((char *)n - offsetof(msg_timer_t, node)) : NULL;
}

/* Takes t out of everything; returns its message (the caller sends or releases it). */
static smarm_msg_t *unlink_timer(sched_t *s, msg_timer_t *t)
{
  if (t->at.index >= 0)
    sm_timer_remove(&s->msg_timers, &t->at);
  reftab_remove(&s->msg_timer_refs, &t->node);
  if (t->prev)
    t->prev->next = t->next;
  else
    t->target->msg_timers = t->next;
  if (t->next)
    t->next->prev = t->prev;
  smarm_msg_t *m = t->msg;
  free(t);
  return m;
}

/* A timer for `to` (of this scheduler) holding msg: 0, or -ENOMEM (msg stays the caller's). A
** dead `to` takes msg and frees it: nothing will be sent. */
static int set_here(sched_t *s, smarm_pid_t to, smarm_msg_t *msg, int64_t deadline,
                    smarm_ref_t ref)
{
  actor_t *a = sm_sched_lookup(s, to);
  if (!a) {
    sm_msg_release(msg);
    return 0;
  }
  msg_timer_t *t = malloc(sizeof *t);
  if (!t)
    return -ENOMEM;
  t->at.deadline = deadline;
  t->at.index = -1;
  t->node.key = ref;
  t->target = a;
  t->msg = msg;
  /* a deadline past the end of time never fires: kept for cancel and its target's end only */
  if (deadline != INT64_MAX && sm_timer_add(&s->msg_timers, &t->at) < 0) {
    free(t);
    return -ENOMEM;
  }
  if (reftab_insert(&s->msg_timer_refs, &t->node) < 0) {
    if (t->at.index >= 0)
      sm_timer_remove(&s->msg_timers, &t->at);
    free(t);
    return -ENOMEM;
  }
  t->prev = NULL;
  t->next = a->msg_timers;
  if (a->msg_timers)
    a->msg_timers->prev = t;
  a->msg_timers = t;
  msg->kind = MSG_USER;
  msg->to = to;
  return 0;
}

/* Cancels the timer `ref` aimed at `to` (of this scheduler): the time it had left, or -ENOENT. */
static int64_t cancel_here(sched_t *s, smarm_pid_t to, smarm_ref_t ref)
{
  msg_timer_t *t = find(s, ref);
  if (!t || t->target->pid != to)
    return -ENOENT;
  int64_t left = t->at.deadline == INT64_MAX ? INT64_MAX : t->at.deadline - smarm_clock_ns();
  sm_msg_release(unlink_timer(s, t));
  return left > 0 ? left : 0;
}

int smarm_send_after(int64_t ns, smarm_pid_t to, smarm_msg_t *msg, smarm_timer_t *out)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  if (!msg || !out || ns < 0 || smarm_pid_gen(to) == 0)
    return -EINVAL;
  int64_t deadline = sm_sched_actor_deadline(s, ns); /* the actors' clock (vclock.h) */
  if (deadline < 0)
    deadline = INT64_MAX; /* past the end of time: never */
  smarm_ref_t ref = smarm_make_ref();
  msg->from = self->pid;
  unsigned k = smarm_pid_sched(to);
  int rc = 0;
  if (k == s->index) {
    if ((rc = set_here(s, to, msg, deadline, ref)) < 0)
      sm_msg_release(msg);
  } else if (k >= s->rt->nsched) {
    sm_msg_release(msg); /* nobody: as for a dead target */
  } else {
    if (SMARM_UNLIKELY(self->exit_pending)) {
      sm_msg_release(msg);
      sm_sched_die_before_asking(s, self);
    }
    smarm_msg_t *req = sm_msg_new(MSG_TIMER_SET, sizeof(timer_request_t));
    if (!req) {
      sm_msg_release(msg);
      return -ENOMEM;
    }
    timer_request_t *r = (timer_request_t *)req->data;
    r->deadline = deadline;
    r->ref = ref;
    r->msg = msg;
    req->to = to;
    rc = (int)sm_sched_ask(s, self, k, req); /* -ENOMEM there: msg was released there */
  }
  if (rc == 0) {
    out->to = to;
    out->ref = ref;
  }
  return rc;
}

int64_t smarm_cancel_timer(smarm_timer_t timer)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  unsigned k = smarm_pid_sched(timer.to);
  if (k == s->index)
    return cancel_here(s, timer.to, timer.ref);
  if (k >= s->rt->nsched || !timer.ref)
    return -ENOENT;
  sm_sched_die_before_asking(s, self);
  smarm_msg_t *req = sm_msg_new(MSG_TIMER_CANCEL, sizeof(timer_request_t));
  if (!req)
    return -ENOMEM;
  timer_request_t *r = (timer_request_t *)req->data;
  r->ref = timer.ref;
  r->msg = NULL;
  req->to = timer.to;
  return sm_sched_ask(s, self, k, req);
}

int64_t sm_msg_timer_request(sched_t *s, smarm_msg_t *req)
{
  timer_request_t *r = (timer_request_t *)req->data;
  if (req->kind == MSG_TIMER_CANCEL)
    return cancel_here(s, req->to, r->ref);
  smarm_msg_t *msg = r->msg;
  r->msg = NULL; /* a timer holds it now, or it is released below */
  int rc = set_here(s, req->to, msg, r->deadline, r->ref);
  if (rc < 0)
    sm_msg_release(msg);
  return rc;
}

void sm_msg_timer_request_free(smarm_msg_t *req)
{
  timer_request_t *r = (timer_request_t *)req->data;
  if (req->kind == MSG_TIMER_SET && r->msg) /* never reached its scheduler (the runtime ended) */
    sm_msg_release(r->msg);
}

void sm_msg_timers_fire(sched_t *s, int64_t now)
{
  deadline_t *d;
  while ((d = timer_first(&s->msg_timers)) && d->deadline <= now) {
    msg_timer_t *t = of_deadline(d);
    actor_t *a = t->target;
    sm_sched_deliver(s, a, unlink_timer(s, t));
  }
}

void sm_msg_timers_on_death(sched_t *s, actor_t *a)
{
  while (a->msg_timers)
    sm_msg_release(unlink_timer(s, a->msg_timers));
}
