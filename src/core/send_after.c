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
**
** A timer aimed at a name (smarm_send_after_name, Erlang's send_after to an atom) is tied to no
** actor: it lives on its setter's scheduler, in the same heap and table and in that scheduler's
** name_timers list, until it fires, is cancelled or the runtime ends. It looks the name up as it
** fires (the scheduler's cache of the names, names.h) and sends to whoever holds it then, as a
** send would: a local delivery, or a push to the holder's scheduler; nobody: nothing is sent. Its
** smarm_timer_t names the setter's scheduler by a pid of slot 0 and generation 0 (name_timer_to),
** which no actor has, so a cancel goes there and finds it by its ref.
*/
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "faults.h"
#include "runtime.h"
#include "sched.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct msg_timer {
  deadline_t at;        /* in s->msg_timers */
  reftab_node_t node;   /* key: the timer's ref, in s->msg_timer_refs */
  actor_t *target;      /* NULL for a timer aimed at a name */
  char *name;           /* that name (owned), else NULL */
  smarm_msg_t *msg;
  msg_timer_t *prev, *next; /* the target's list, or the scheduler's name_timers */
};

/* The `to` of the timers aimed at names on s: a pid of s with slot 0 and generation 0, which no
** actor has (generations start at 1). */
static smarm_pid_t name_timer_to(const sched_t *s)
{
  return (smarm_pid_t)s->index << (SMARM_PID_SLOT_BITS + SMARM_PID_GEN_BITS);
}

static msg_timer_t **list_of(sched_t *s, msg_timer_t *t)
{
  return t->target ? &t->target->msg_timers : &s->name_timers;
}

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
    *list_of(s, t) = t->next;
  if (t->next)
    t->next->prev = t->prev;
  smarm_msg_t *m = t->msg;
  free(t->name);
  free(t);
  return m;
}

/* Puts t (deadline, ref, target or name, message set) in s's heap and table and at the head of
** its list: 0, or -ENOMEM (t is in none of them: the caller frees it). A deadline past the end
** of time never fires: such a timer is kept for cancel and its target's end only. */
static int add_timer(sched_t *s, msg_timer_t *t)
{
  t->at.index = -1;
  if (t->at.deadline != INT64_MAX && sm_timer_add(&s->msg_timers, &t->at) < 0)
    return -ENOMEM;
  if (reftab_insert(&s->msg_timer_refs, &t->node) < 0) {
    if (t->at.index >= 0)
      sm_timer_remove(&s->msg_timers, &t->at);
    return -ENOMEM;
  }
  msg_timer_t **list = list_of(s, t);
  t->prev = NULL;
  t->next = *list;
  if (*list)
    (*list)->prev = t;
  *list = t;
  return 0;
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
  t->node.key = ref;
  t->target = a;
  t->name = NULL;
  t->msg = msg;
  if (add_timer(s, t) < 0) {
    free(t);
    return -ENOMEM;
  }
  msg->kind = MSG_USER;
  msg->to = to;
  return 0;
}

/* Cancels the timer `ref` aimed at `to` (of this scheduler): the time it had left, or -ENOENT. */
static int64_t cancel_here(sched_t *s, smarm_pid_t to, smarm_ref_t ref)
{
  msg_timer_t *t = find(s, ref);
  if (!t || (t->target ? t->target->pid : name_timer_to(s)) != to)
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

int smarm_send_after_name(int64_t ns, const char *name, smarm_msg_t *msg, smarm_timer_t *out)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  if (!msg || !out || ns < 0 || !sm_names_valid(name))
    return -EINVAL;
  int64_t deadline = sm_sched_actor_deadline(s, ns); /* the actors' clock (vclock.h) */
  msg_timer_t *t = malloc(sizeof *t);
  char *copy = strdup(name);
  if (!t || !copy) {
    free(t);
    free(copy);
    sm_msg_release(msg);
    return -ENOMEM;
  }
  t->at.deadline = deadline < 0 ? INT64_MAX : deadline; /* past the end of time: never */
  t->node.key = smarm_make_ref();
  t->target = NULL;
  t->name = copy;
  t->msg = msg;
  if (add_timer(s, t) < 0) {
    free(copy);
    free(t);
    sm_msg_release(msg);
    return -ENOMEM;
  }
  msg->kind = MSG_USER;
  msg->from = self->pid;
  out->to = name_timer_to(s);
  out->ref = t->node.key;
  return 0;
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

/* A due timer aimed at a name: sent to whoever holds the name now, as smarm_send would (its
** holder's scheduler, if another, takes it from its inbox); nobody holds it: nothing is sent. */
static void fire_at_name(sched_t *s, msg_timer_t *t)
{
  smarm_pid_t to = sm_names_lookup(s, t->name);
  smarm_msg_t *m = unlink_timer(s, t);
  m->to = to; /* (not counted as sent, as a timer aimed at a pid is not: its actor sent it) */
  if (!to || smarm_pid_sched(to) >= s->rt->nsched || sm_sched_route(s, m) < 0)
    sm_msg_release(m);
}

void sm_msg_timers_fire(sched_t *s, int64_t now)
{
  deadline_t *d;
  while ((d = timer_first(&s->msg_timers)) && d->deadline <= now) {
    msg_timer_t *t = of_deadline(d);
    actor_t *a = t->target; /* read before unlink_timer frees t */
    if (a)
      sm_sched_deliver(s, a, unlink_timer(s, t));
    else
      fire_at_name(s, t);
  }
}

void sm_msg_timers_destroy(sched_t *s)
{
  while (s->name_timers)
    sm_msg_release(unlink_timer(s, s->name_timers));
}

void sm_msg_timers_on_death(sched_t *s, actor_t *a)
{
  while (a->msg_timers)
    sm_msg_release(unlink_timer(s, a->msg_timers));
}
