/*
** Time slices: the ticker thread that asks actors which overstay their slice to give way, and
** looks at the clock for schedulers too busy to (preempt.c; docs/design.md, "Preemption").
*/
#ifndef SMARM_CORE_PREEMPT_H
#define SMARM_CORE_PREEMPT_H

#include <signal.h>
#include <stdint.h>

struct runtime;
struct sched;

/* Before any scheduler thread starts: the ticker's notes and lock, the SIGURG handler. */
int sm_preempt_init(struct runtime *rt);
/* Starts the ticker, once every scheduler's thread is known (sched.thread). Returns 0 or a
** negative errno; without a ticker nothing is preempted and busy schedulers look at timers
** every 64 decisions only. */
int sm_preempt_start(struct runtime *rt);
/* On each scheduler thread at its start: its slice timer (without one, the ticker alone asks). */
void sm_preempt_sched_enter(struct sched *s);
/* Owner thread: the running actor goes on after a preemption, in a new slice of slice_ns; the
** slice timer asks it to give way at that slice's end (preempt.c). */
void sm_preempt_time_slice(struct sched *s, int64_t slice_ns);
/* Owner thread: the timed slice ended otherwise than by its timer (sched_switch): disarms it,
** so that it never interrupts another actor's system call. */
void sm_preempt_untime(struct sched *s);
/* Called by each scheduler thread once it has run its last actor: the ticker signals it no more
** (its thread may end and be joined after this), and SIGURG is blocked on the thread, its old mask
** in *old_mask (the caller restores it after sm_preempt_stop, or ends the thread). */
void sm_preempt_sched_done(struct runtime *rt, unsigned index, sigset_t *old_mask);
/* Stops and joins the ticker, restores the old SIGURG action. After every sm_preempt_sched_done. */
void sm_preempt_stop(struct runtime *rt);

#endif
