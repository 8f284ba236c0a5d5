/*
** The runtime: the schedulers of one smarm_run() and what they share.
**
** Written once by the thread in smarm_run() before any scheduler thread starts (thread creation
** publishes it), then read-only except for the atomics below. Only one runtime runs per process
** at a time (overflow handling and smarm_stop() from foreign threads need to find it).
*/
#ifndef SMARM_CORE_RUNTIME_H
#define SMARM_CORE_RUNTIME_H

#include "sched.h"
#include "vclock.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct runtime {
  unsigned nsched;
  sched_t *scheds;            /* nsched of them, each 128-byte aligned */
  smarm_config_t cfg;
  smarm_pid_t main_pid;       /* written by scheduler 0 before it runs any actor */
  int main_unstarted;         /* scheduler 0's: its main actor ended before it ran, no stack to be
                              ** had (sched.c end_unstarted): smarm_run returns -ENOMEM */
  _Atomic int stop_requested; /* first smarm_stop() wins and sends the stop items */
  _Atomic int dump_asked;     /* smarm_dump (any thread, a signal handler): the ticker sends it on */
  smarm_msg_t **stop_items;   /* one MSG_STOP per scheduler, made at start so that stopping
                              ** never allocates; the winner above takes them (NULL: sent) */
  _Atomic uint32_t spawn_rr;  /* round-robin tie breaker for SMARM_SCHED_ANY */
  uint32_t gen_base;          /* first generation of this runtime's pids (sm_sched_gen_base) */
  long online_cpus;           /* at its start, for cfg.pin_threads (sm_runtime_pin_cpu); 0:
                              ** unknown */
  int64_t coarse_slack_ns;    /* at its start: what a long call's deadline adds to the coarse
                              ** clock (sm_sched_call_deadline); negative: not used */
  name_registry_t names;      /* registered names (names.h): any scheduler, under its lock */
  vclock_t vclock;            /* the actors' clock of a virtual runtime (vclock.h) */
  /* The ticker (preempt.c): its fields are its own, or under ticker_lock. */
  pthread_t ticker;
  pthread_mutex_t ticker_lock;
  pthread_cond_t ticker_cond;
  struct watch *ticker_watch; /* one per scheduler; NULL: no ticker */
  struct slice_timer *slice_timers; /* one per scheduler, each its thread's; NULL: none */
  int ticker_running, ticker_stop, urg_installed, dump_installed;
} runtime_t;

/* any_thread.c. For threads that may not be scheduler threads: the running runtime (NULL if
** none), kept alive until sm_runtime_leave(), which must follow every non-NULL result. */
runtime_t *sm_runtime_enter(void);
void sm_runtime_leave(void);
/* smarm_run's thread: makes rt the running runtime / unmakes it and waits until no thread is
** between sm_runtime_enter and sm_runtime_leave any more. */
void sm_runtime_publish(runtime_t *rt);
void sm_runtime_unpublish(void);

/* From any thread: pushes m (its kind, to and from set) onto the inbox of m->to's scheduler in
** the running runtime, as one item. 0, or -ESRCH (no runtime runs, or none of its schedulers
** is m->to's): the caller keeps m. */
int sm_runtime_push_outside(smarm_msg_t *m);

/* Sends every scheduler a stop item (once per runtime; any thread). */
void sm_runtime_request_stop(runtime_t *rt);

/* The CPU that cfg.pin_threads pins scheduler `index` of rt to, or -1 when the count of CPUs
** was unknown (then nothing is pinned). */
int sm_runtime_pin_cpu(const runtime_t *rt, unsigned index);

/* Per-thread setup and teardown of the overflow reporter (overflow.c): 0 or a negative errno. */
int sm_overflow_install(void);
void sm_overflow_uninstall(void);
int sm_overflow_thread_enter(void **altstack_out);
void sm_overflow_thread_leave(void *altstack);

#endif
