/*
** Virtual time (smarm_config_t.clock == SMARM_CLOCK_VIRTUAL): the clock actors see stands still
** while any actor can run, and jumps to the earliest deadline once every scheduler is idle with
** nothing in flight. The protocol between the schedulers is in vclock.c, beside the code.
**
** Which clock each timer runs on: sleeps and receive timeouts (the `vtimers` heap of a virtual
** runtime) and message timers (`msg_timers`) are on the actors' clock; smarm_await's timeouts
** (IO) and the timeouts of requests to another scheduler (`timers`) stay on the real clock, as do
** the time slices, the watchdog and stack trimming. In a runtime on the real clock the actors'
** clock is the real one and `vtimers` stays empty.
*/
#ifndef SMARM_CORE_VCLOCK_H
#define SMARM_CORE_VCLOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct sched;
struct runtime;

typedef struct vclock {
  pthread_mutex_t lock;   /* guards nidle and every scheduler's vc_* record (sched.h) */
  _Atomic int64_t now;    /* the actors' clock in ns: stored under lock by a jump, loaded
                          ** relaxed by the schedulers (vclock.c says why that is enough) */
  unsigned nidle;         /* schedulers registered idle (under lock) */
  int inited;             /* the lock and items exist (smarm_run's thread) */
} vclock_t;

/* Sets up a virtual runtime's clock and each scheduler's wake-up item (after sm_sched_init, before
** any scheduler thread starts): 0 or -ENOMEM. Does nothing on the real clock. */
int sm_vclock_init(struct runtime *rt);
/* After every scheduler thread has ended and the inboxes are drained. */
void sm_vclock_destroy(struct runtime *rt);

/* The actors' clock of s's runtime (owner thread, virtual runtime only). */
static inline int64_t vclock_now(vclock_t *vc)
{
  return atomic_load_explicit(&vc->now, memory_order_relaxed); /* see vclock.c */
}

/* Owner thread, with nothing runnable: registers s idle, publishing `earliest` (its earliest
** deadline on the actors' clock, INT64_MAX for none) and its count of actors waiting outside
** (in smarm_await). When s is the last scheduler to go idle, it checks that nothing is in flight
** and jumps. Returns 1 when s must not park (the jump made its own timers due, or its inbox has
** something): it is then registered no more. Returns 0 when it should wait (spin, then park); it
** calls sm_vclock_idle_leave when that wait ends, before it takes its inbox in. */
int sm_vclock_idle_enter(struct sched *s, int64_t earliest);
void sm_vclock_idle_leave(struct sched *s);

/* Owner thread: s took its wake-up item from its inbox (intersched.c). */
void sm_vclock_poke_taken(struct sched *s);

#endif
