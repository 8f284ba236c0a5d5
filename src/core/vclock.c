/*
** Virtual time: when the clock jumps, and how the schedulers agree that it may (see vclock.h).
**
** The quiescence record. Under vc->lock: vc->nidle, and each scheduler's vc_idle, vc_earliest (its
** earliest deadline on the actors' clock, INT64_MAX: none) and vc_outside (how many of its actors
** wait in smarm_await, i.e. on IO or another thread). Each scheduler writes its own record, on its
** own thread: sm_vclock_idle_enter when it has nothing to run, sm_vclock_idle_leave as soon as its
** wait (its spin on the inbox, then its park) ends. The last one to register (nidle == nsched)
** checks, still under the lock:
**   J1  no scheduler has an actor waiting outside (all vc_outside are 0);
**   J2  every inbox is empty;
** and then stores the earliest published deadline into vc->now and wakes the schedulers that own
** it (or keeps running itself, if it is one of them). With no deadline at all the run is
** deadlocked, as it would be in real time: nothing changes, and only the main actor's end or
** smarm_stop (a push onto every inbox) ends it.
**
** Why J1 and J2 under the lock mean that no actor can run before the jump's timers fire:
**  - A registered scheduler took its inbox in before it registered (sm_sched_loop: take, fire,
**    nothing runnable, idle) and takes it in again only after it deregistered (its loop runs after
**    sched_idle returns, and sched_idle calls sm_vclock_idle_leave first; while registered it
**    only looks at its inbox, spinning, and parks). So everything pushed to it since its last
**    look is still in its inbox while it is registered.
**  - A scheduler pushes (messages, requests, replies, signals, the deferred items it flushes
**    quietly before it registers) only while it is not registered (the checker's wake-up items,
**    below, are the exception: they only wake); it registers later, under the
**    lock, so its push happens before the checker's lock and the checker's load of that inbox's
**    head sees the item, or a later value: the only write that empties the head is the owner's
**    take, which comes after its deregistration. A relaxed load is enough; the mutex orders it.
**  - Other threads push too. The IO thread (and any thread of a C program) pushes wakes for
**    actors in smarm_await, which J1 counts: an actor's count is lowered only when it runs again
**    (sm_sched_park_until), so after its wake was taken in. A wake for an await that already
**    timed out changes nothing. smarm_stop's stop items end the run.
** The race where B sends to A and then goes idle while A is registered but has not run yet: A
** cannot have taken the message in (that needs A to deregister, under the lock B holds), so B's
** check sees A's inbox non-empty and does not jump. A, woken by B's push, deregisters, runs the
** message's receiver, and goes idle again, and the last of them checks again.
**
** A non-empty inbox (J2 fails) does not always mean its owner is awake: a quiet push (deferred
** items, sm_inbox_push_quiet) wakes nobody. So the checker pokes every such scheduler but itself
** (it returns 1 and does not park instead): it pushes that scheduler's wake-up item, a message of
** kind MSG_VCLOCK made at the start, which the owner takes in like any other and which does
** nothing else. The item is in at most one inbox at a time: whoever pushes it first turns
** vc_poke_out from 0 to 1 (acq_rel exchange); the owner stores 0 (release) once its take has read
** the item's link (sm_vclock_poke_taken), and the acquire of the next exchange pairs with that
** store, so the next push's write of the link comes after that read. The same item wakes the
** owners of the deadline a jump moved to.
**
** Reading the clock: vc->now changes only in a jump, under the lock, while every scheduler is
** registered. A scheduler reads it only while it is not registered: its actors (smarm_clock_ns,
** timers' deadlines), its polls, and sched_idle before it registers. Each such read is ordered
** with each jump by the lock: either the read comes after the scheduler's deregistration, which
** follows the jump's unlock, or before its registration, which the jump's lock follows. So
** relaxed loads see the latest jump; the field is atomic only so that no reader can tear it.
**
** Cost: none on the real clock (no record, no lock; the paths that differ test one per-scheduler
** flag). On the virtual clock each idle period of a scheduler takes the lock twice, and a jump
** costs one push per scheduler woken.
*/
#include "vclock.h"

#include "runtime.h"

#include <errno.h>
#include <stdlib.h>

int sm_vclock_init(runtime_t *rt)
{
  if (rt->cfg.clock != SMARM_CLOCK_VIRTUAL)
    return 0;
  vclock_t *vc = &rt->vclock;
  if (pthread_mutex_init(&vc->lock, NULL) != 0)
    return -ENOMEM;
  vc->inited = 1;
  atomic_init(&vc->now, 0);
  vc->nidle = 0;
  for (unsigned k = 0; k < rt->nsched; k++) {
    sched_t *s = &rt->scheds[k];
    s->virtual_time = 1;
    s->vc_idle = 0;
    s->vc_earliest = INT64_MAX;
    s->vc_outside = 0;
    atomic_init(&s->vc_poke_out, 0);
    if (!(s->vc_poke = sm_msg_new(MSG_VCLOCK, 0)))
      return -ENOMEM; /* sm_vclock_destroy frees those made */
  }
  return 0;
}

void sm_vclock_destroy(runtime_t *rt)
{
  vclock_t *vc = &rt->vclock;
  if (!vc->inited)
    return;
  for (unsigned k = 0; k < rt->nsched; k++) {
    sm_msg_release(rt->scheds[k].vc_poke); /* never with an inbox (sm_sched_drain_and_free) */
    rt->scheds[k].vc_poke = NULL;
  }
  pthread_mutex_destroy(&vc->lock);
  vc->inited = 0;
}

/* Wakes o (registered idle) with its wake-up item, unless it is on its way already. Under the
** lock, from another scheduler. */
static void poke(sched_t *o)
{
  /* acq_rel: the acquire pairs with the owner's release store in sm_vclock_poke_taken. */
  if (atomic_exchange_explicit(&o->vc_poke_out, 1, memory_order_acq_rel) == 0)
    sm_inbox_push(&o->inbox, o->vc_poke);
}

/* The check of the last scheduler to go idle (self), under the lock: 1 when self must run on. */
static int try_jump(runtime_t *rt, sched_t *self)
{
  for (unsigned k = 0; k < rt->nsched; k++)
    if (rt->scheds[k].vc_outside) /* J1: IO in flight; its wake will come in real time */
      return 0;
  int busy = 0, self_busy = 0;
  for (unsigned k = 0; k < rt->nsched; k++) { /* J2 */
    sched_t *o = &rt->scheds[k];
    if (!inbox_maybe_nonempty(&o->inbox)) /* relaxed: ordered by the lock (the top) */
      continue;
    busy = 1;
    if (o == self)
      self_busy = 1;
    else
      poke(o);
  }
  if (busy)
    return self_busy;
  int64_t next = INT64_MAX;
  for (unsigned k = 0; k < rt->nsched; k++)
    if (rt->scheds[k].vc_earliest < next)
      next = rt->scheds[k].vc_earliest;
  if (next == INT64_MAX)
    return 0; /* deadlocked, as in real time */
  /* Every published deadline is past the clock: each checked it before registering. */
  SMARM_ASSERT(next > vclock_now(&rt->vclock));
  atomic_store_explicit(&rt->vclock.now, next, memory_order_relaxed); /* under the lock */
  int self_due = 0;
  for (unsigned k = 0; k < rt->nsched; k++) {
    sched_t *o = &rt->scheds[k];
    if (o->vc_earliest != next)
      continue;
    if (o == self)
      self_due = 1;
    else
      poke(o);
  }
  return self_due;
}

int sm_vclock_idle_enter(sched_t *s, int64_t earliest)
{
  runtime_t *rt = s->rt;
  vclock_t *vc = &rt->vclock;
  pthread_mutex_lock(&vc->lock);
  SMARM_ASSERT(!s->vc_idle);
  s->vc_idle = 1;
  s->vc_earliest = earliest;
  s->vc_outside = s->outside_waits;
  int run_on = ++vc->nidle == rt->nsched && try_jump(rt, s);
  if (run_on) {
    s->vc_idle = 0;
    vc->nidle--;
  }
  pthread_mutex_unlock(&vc->lock);
  return run_on;
}

void sm_vclock_idle_leave(sched_t *s)
{
  vclock_t *vc = &s->rt->vclock;
  pthread_mutex_lock(&vc->lock);
  SMARM_ASSERT(s->vc_idle);
  s->vc_idle = 0;
  vc->nidle--;
  pthread_mutex_unlock(&vc->lock);
}

void sm_vclock_poke_taken(sched_t *s)
{
  /* Release: pairs with poke's exchange; the take already read the item's link. */
  atomic_store_explicit(&s->vc_poke_out, 0, memory_order_release);
}
