/*
** Schedulers and the actors they own.
**
** One scheduler per thread. A scheduler owns, and alone touches: its run queue, its timers, its
** stack pool, its actor table and every actor in it. Actors never migrate. Other threads reach a
** scheduler only through its inbox (inbox.h) and read its statistics (relaxed atomics).
**
** Control flow. The thread's own stack runs sm_sched_loop(): it takes in the inbox, fires timers,
** and switches to the first runnable actor; when none is runnable it spins, then parks. Actors
** switch to each other directly (one switch per yield), and back to the scheduler's own stack
** only when nothing is runnable, when the next actor's stack must first be copied into its slot
** (which cannot be done while running on another actor's stack that may be that slot), or when
** the runtime stops.
**
** The layout of sched_t follows who writes what: the inbox block is written by any thread; the
** statistics block is written by the owner and read by anyone; everything else is the owner's.
*/
#ifndef SMARM_CORE_SCHED_H
#define SMARM_CORE_SCHED_H

#include "../arch/context.h"
#include "../smarm.h"
#include "check.h"
#include "annotate.h"
#include "inbox.h"
#include "mailbox.h"
#include "names.h"
#include "reftab.h"
#include "stack.h"
#include "timer.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

enum actor_state {
  ACTOR_NEW,         /* being built by spawn, not queued yet */
  ACTOR_RUNNING,
  ACTOR_RUNNABLE,    /* in the run queue */
  ACTOR_WAIT_MSG,    /* parked in receive (maybe with a timer) */
  ACTOR_SLEEPING,    /* parked in sleep (with a timer) */
  ACTOR_WAIT_REPLY,  /* parked until another scheduler answers a request (spawn, alive) */
  ACTOR_WAIT_WAKE,   /* parked in smarm_await (maybe with a timer) */
  ACTOR_DEAD,
};

typedef struct msg_timer msg_timer_t; /* send_after.c */

/* One monitor, as recorded by one side: the watcher's scheduler keeps it in its `watching`
** table and the watcher's list, the target's scheduler in `watchers` and the target's list (two
** records when they are on different schedulers, or the same scheduler). */
typedef struct monitor {
  reftab_node_t node;         /* key: the monitor's ref */
  smarm_pid_t other;          /* watching: the target; watchers: the watcher */
  struct actor *owner;        /* the actor whose list holds it */
  struct monitor *prev, *next;
} monitor_t;

/* What an actor has to do with faults; allocated on first need, freed when it dies. */
typedef struct actor_faults {
  smarm_pid_t *links;         /* linked pids, in no order */
  uint32_t nlinks, links_cap;
  monitor_t *watching;        /* monitors this actor holds */
  monitor_t *watchers;        /* monitors held on this actor */
  char *name;                 /* the name this scheduler registered for it (names.c) */
  int reason_set;             /* exit_* hold smarm_set_exit_reason's reason */
  int watched_remotely;       /* another node watches it: its death goes to the remote hook */
  int exit_code;              /* the reason of a pending death (actor.exit_pending), or the
                                 one set (reason_set) */
  uint32_t exit_size;
  void *exit_data;
  struct actor_faults *next_spare; /* in sched.spare_faults */
} actor_faults_t;

typedef struct actor {
  ctx_t ctx;                  /* saved stack pointer while not running */
  struct actor *run_next;     /* run queue link (sched.c) */
  struct actor *run_prev;     /* run queue link back */
  struct sched *sched;
  smarm_pid_t pid;
  uint8_t state;              /* enum actor_state */
  uint8_t timed_out;          /* the timer fired while waiting */
  uint8_t trap_exit;          /* smarm_trap_exit */
  uint8_t exit_pending;       /* dies when next resumed (faults.c); the reason is in faults
                              ** (none: SMARM_EXIT_NOMEM, no record could be made) */
  uint8_t dying;              /* in on_actor_stopped, dying of a signal (smarm_dying_reason) */
  uint32_t idle_mark;         /* `scheduled` (its low bits) at the last idle pass over parked
                                 actors (sched.c trim_parked_stacks) */
  uint32_t queued_seq;        /* its scheduler's queued_seq when it was last queued */
  deadline_t timer;
  mailbox_t mailbox;
  stack_slot_t *slot;         /* where this actor's stack lives from its first run on; NULL
                                 until bound (sched.c bind_first_slot): it never ran */
  void *saved;                /* the stack's used bytes while evicted from the slot, else NULL */
  union {
    uint32_t saved_len;       /* their length (a stack is at most STACK_MAX_BYTES) */
    uint32_t stack_size;      /* before the first run (slot NULL): the size to bind, rounded */
  };
  uint32_t held;              /* messages its binding keeps aside (smarm_mailbox_set_held) */
  smarm_actor_fn fn;
  void *arg;
  void *data;                 /* smarm_actor_data() */
  actor_faults_t *faults;     /* NULL until the actor links, monitors or is monitored */
  smarm_cleanup_t *cleanups;  /* smarm_cleanup_push, newest first */
  int64_t reply;              /* answer to a request to another scheduler (MSG_REPLY) */
  uint64_t ask_token;         /* the request it waits for an answer to (sm_sched_ask) */
  uint64_t await_token;       /* the token smarm_await waits for (smarm_await_token) */
  uint64_t await_woken;       /* the last token a wake arrived for */
  msg_timer_t *msg_timers;    /* send_after.c: the message timers aimed at it */
  int64_t slice_ns;           /* its time slice (preempt.h); INT64_MAX: never asked to give way */
  size_t max_mailbox;         /* more messages than this and it dies; SIZE_MAX: no limit */
  uint64_t scheduled;         /* times it was switched in (smarm_actor_info) */
  uint64_t cpu_ns;            /* time on CPU, sampled by the ticker (preempt.c) */
  smarm_pid_t spawner;        /* who spawned it, and when (coarse clock): smarm_actor_info */
  int64_t spawned_ns;
  fiber_t fiber;
} actor_t;

/* Actor table: slot index -> actor, with a generation per slot so stale pids miss. */
typedef struct actor_entry {
  actor_t *actor;             /* NULL when free */
  uint32_t gen;
  uint32_t next_free;         /* free list link (index + 1; 0 ends it) */
} actor_entry_t;

typedef struct actor_table {
  actor_entry_t *entries;
  uint32_t cap, used;         /* entries allocated / ever handed out */
  uint32_t free_head, free_tail; /* FIFO of free entries (index + 1; 0 = none): reuse the
                                    oldest, so a slot's generation advances as slowly as possible */
  uint32_t gen_base;          /* the first generation of every new entry (sm_sched_gen_base) */
} actor_table_t;

/* The counters behind smarm_stats_read (smarm.h says what each means). The owner writes them all,
** relaxed (stat_add: a load and a store, no read-modify-write), and any thread reads them, relaxed:
** each value is whole, but nothing orders one against another. The one pair read together is the
** idle time: the owner ends an idle wait by clearing idle_since and then adding the wait to
** idle_ns; a reader loads idle_ns and then idle_since, adding now - idle_since when it is set. A
** reader between the two stores misses that wait for the moment, never counts it twice: the add
** is a release store, which the reader's acquire load of idle_ns pairs with. */
typedef struct sched_stats {
  _Atomic uint64_t switches, parks, wakes, remote_sent, stack_saves, spawned, live, stacks;
  _Atomic uint64_t preempts;  /* actors that gave way because their slice was over */
  _Atomic uint64_t preempt_wait_ns; /* summed over those: from the request to the switch */
  _Atomic uint64_t preempts_timed;  /* of those, asked by the slice timer (preempt.c) */
  _Atomic uint64_t sent, received, runq, timers, saved_stacks;
  _Atomic uint64_t spin_pauses; /* times it paused the idle spin (sched.c, spin_lost_cpu) */
  _Atomic uint64_t idle_ns;    /* summed over the idle waits that ended */
  _Atomic int64_t idle_since;  /* when the idle wait under way began; 0: none */
  _Atomic int64_t started_ns;  /* when the scheduler's loop began; 0: not yet */
} sched_stats_t;

struct runtime;

typedef struct sched {
  /* -- Written by any thread. */
  inbox_t inbox;

  /* -- Written by the ticker thread (preempt.c), read by the owner; the protocol is there. */
  _Alignas(SMARM_CACHE_PAD) _Atomic uint32_t look_at_clock; /* the next decision point fires the
                                                               due timers */
  _Atomic uint64_t preempt_asked; /* progress + 1 when the running actor was asked to give way */
  _Atomic int64_t preempt_asked_ns; /* and when (smarm_now_ns) */
  _Atomic uint32_t dump_asked;     /* 1: the watchdog reported the running actor (on_watchdog) */

  /* -- Owner thread only. */
  _Alignas(SMARM_CACHE_PAD) unsigned index;
  struct runtime *rt;
  actor_t *current;           /* running actor; NULL on the scheduler's own stack */
  actor_t *run_head, *run_tail;
  uint32_t ahead;             /* of them, the first `ahead` went to the front: new actors,
                                 parents woken behind their children there and timer wake-ups
                                 (runq_push_ahead, sm_sched_wake, fire_actor_timers) */
  actor_t *ahead_last;        /* the last of those (NULL when ahead is 0) */
  actor_t *spawn_after;       /* the new actor the next one of this decision goes after (NULL:
                                 the front); reset at every pop */
  uint32_t front_streak;      /* turns in a row taken by actors put to the front */
  uint32_t queued_seq;        /* actors queued so far (wrapping): actor.queued_seq */
  actor_t *zombie;            /* exited actor whose stack is released after the next switch */
  actor_t *handoff;           /* actor the scheduler stack must make resident and run next */
  uint32_t ticks;             /* yields since timers were last checked */
  uint32_t exit_looks;        /* actor ends while a backlog waited (sched.c, actor_exit) */
  int slice_timed;            /* the slice timer is armed for the running slice (preempt.c) */
  uint32_t outside_waits;     /* actors parked in smarm_await, not yet run again (vclock.c) */
  int64_t last_head_ns;       /* when a timer wake-up last went to the head (fire_timers) */
  uint64_t rng;               /* a seeded schedule's generator state (cfg.seed); 0: none */
  int stopping;
  int virtual_time;           /* the runtime's clock is SMARM_CLOCK_VIRTUAL (beside stopping, which
                                 the loop reads anyway; both fill what was padding) */
  int64_t spin_ns;
  int64_t last_trim_ns;       /* when idle last gave stack memory back (sm_stack_pool_trim) */
  int trim_pending;           /* that pass left slots a later one may give back */
  uint32_t trim_cursor;       /* where the idle pass over parked actors goes on (table index) */
  uint32_t spin_history;      /* bit k: the idle wait k waits ago lost its CPU (spin_lost_cpu) */
  uint64_t trim_switches;     /* stats.switches at the last pass: actors ran since when it moved */
  size_t default_stack;
  timer_heap_t timers;        /* actors' timers on the real clock: all of them, or on the
                                 virtual clock only smarm_await's and sm_sched_ask's (vclock.h) */
  actor_table_t table;
  stack_pool_t stacks;
  sm_store_t store;           /* actors' records and saved stacks (store.h) */
  reftab_t watching, watchers; /* monitors by ref (monitor_t) */
  timer_heap_t msg_timers;     /* send_after.c: message timers by deadline */
  reftab_t msg_timer_refs;     /* and by ref */
  msg_timer_t *name_timers;    /* send_after.c: those aimed at a name (tied to no actor) */
  /* Records kept for reuse (faults.c), up to SM_SPARE_RECORDS each: a spawn_monitor or a call
  ** then costs no malloc. Monitors are linked through `next`. */
  smarm_msg_t *deferred, *deferred_tail; /* intersched.c: items waiting for a push, oldest
                                           first, linked through next */
  uint32_t ndeferred;
  struct spawn_reserve **reserves; /* intersched.c: pids other schedulers set aside for our
                                      spawns on them, by scheduler index; NULL until needed */
  smarm_msg_t *reserves_held;      /* intersched.c: other schedulers' MSG_RESERVE asks, held
                                      while our run queue is long; linked through next */
  monitor_t *spare_monitors;
  actor_faults_t *spare_faults;
  uint32_t nspare_monitors, nspare_faults;
  uint64_t ref_next, ref_end;  /* the block of refs this scheduler hands out (faults.c) */
  name_cache_t names;          /* names.c */
  ctx_t main_ctx;
  fiber_t main_fiber;
  void *data;                 /* smarm_sched_data() */
  pthread_t thread;           /* written before the ticker starts (runtime.c) */
  /* The slice timer (preempt.c, where the protocol is; the timer itself is rt->slice_timers'):
  ** the owner and its SIGURG handler. */
  _Atomic uint64_t timed_progress; /* the slice it times (its progress); 0: none */
  _Atomic int64_t timed_end_ns;    /* that slice's end (smarm_now_ns) */
  _Atomic int64_t timed_cpu_end_ns; /* and in the thread's CPU time; 0: not read */
  _Atomic int64_t timed_slice_ns;    /* the slice's length */
  _Atomic uint64_t timer_asked;    /* the preempt_asked its handler stored */
  int ticker_done;            /* the thread is past its last actor: under rt->ticker_lock */
  timer_heap_t vtimers;       /* virtual clock: sleeps' and receives' timers (on its time); last,
                                 so that the fields before keep their places */

  /* -- Written by the owner (relaxed), read by anyone. */
  _Alignas(SMARM_CACHE_PAD) sched_stats_t stats;
  _Atomic int64_t running_slice; /* the running actor's slice_ns; 0 on the scheduler's stack */
  _Atomic smarm_pid_t running_pid; /* and its pid, for the watchdog's report */
  _Atomic uint64_t cpu_sampled_ns; /* time on CPU the ticker saw and no actor was charged yet
                                      (preempt.c, sampling): the running actor's at its switch */

  /* -- Virtual time only (vclock.c, where the protocol is), cold: after everything else. Under
  ** rt->vclock.lock: */
  _Alignas(SMARM_CACHE_PAD) int vc_idle; /* registered idle */
  int64_t vc_earliest;        /* its earliest deadline on the actors' clock; INT64_MAX: none */
  uint32_t vc_outside;        /* its outside_waits when it registered */
  /* Any scheduler's thread: */
  _Atomic uint32_t vc_poke_out; /* vc_poke is in the inbox: set by a poker, cleared by the owner */
  smarm_msg_t *vc_poke;       /* its wake-up item (made before the threads start) */

  /* -- Any scheduler's thread, on a line of its own (the stats above move at every switch):
  ** spawns on "any" that picked this one and are on their way (added by the spawner, taken off
  ** by the owner when it makes the actor; relaxed: a hint for pick_any, which would otherwise
  ** send a burst of them all to the scheduler that has not seen them yet). */
  _Alignas(SMARM_CACHE_PAD) _Atomic int64_t spawns_coming;
} sched_t;

/* How far scheduler s has come: the ticker sees an actor overstay its slice when this has not
** moved, and a request to give way names it (preempt.c). Any thread. The switches are acquired:
** a switch stores running_slice and running_pid before its release store of them. */
static inline uint64_t sm_sched_progress(sched_t *s)
{
  return atomic_load_explicit(&s->stats.switches, memory_order_acquire) +
         atomic_load_explicit(&s->stats.preempts, memory_order_relaxed);
}

/* The scheduler of the calling thread, NULL outside the runtime. */
extern __attribute__((tls_model("initial-exec"))) _Thread_local sched_t *sm_sched_tls;

void sm_sched_init(sched_t *s, struct runtime *rt, unsigned index);

/* The generation a new runtime's actor tables start at: past every generation an earlier
** runtime of this process used (see sched.c). Called once per runtime, before sm_sched_init. */
uint32_t sm_sched_gen_base(void);
/* Runs actors until the runtime stops. */
void sm_sched_loop(sched_t *s);
/* After sm_sched_loop returned: releases every actor and stack (owner thread). */
void sm_sched_destroy_actors(sched_t *s);
/* After every scheduler thread has ended: frees what is left in the inbox. */
void sm_sched_drain_and_free(sched_t *s);

/* Creates an actor on s (owner thread only). */
struct spawn_ties;
/* ties (may be NULL): who it is linked to or monitored by from the start (faults.h). */
int sm_sched_spawn_local(sched_t *s, smarm_actor_fn fn, void *arg, size_t stack_size, void *data,
                         const struct spawn_ties *ties, smarm_pid_t *pid_out);
/* Frees s's reserves of pids other schedulers set aside for it (intersched.c; they end with
** those schedulers' tables). Owner thread, after its loop. */
void sm_sched_free_reserves(sched_t *s);
/* Answers the asks for pids held back while s's run queue was long, once it is short again
** (intersched.c, "Backpressure"); sched_poll's clock looks and sched_idle call it. */
void sm_sched_answer_held_reserves(sched_t *s);
/* Spawning into a pid set aside ahead (intersched.c, "Spawns that do not wait"): takes a free
** table entry for a later sm_sched_spawn_reserved (0, -ENOMEM or -EAGAIN), and makes the actor
** of such an entry (0 or -ENOMEM, the entry then freed: the pid names nothing, ever). */
int sm_sched_reserve_pid(sched_t *s, smarm_pid_t *pid_out);
int sm_sched_spawn_reserved(sched_t *s, smarm_pid_t pid, smarm_actor_fn fn, void *arg,
                            size_t stack_size, void *data, const struct spawn_ties *ties);
/* Ends the running actor `a` with the reason of its pending death (sm_faults_die_later). */
_Noreturn void sm_sched_die_pending(sched_t *s, actor_t *a);
/* A call about to ask another scheduler (sm_sched_ask), before it has made its request: an
** actor with a death pending dies here, at a call that may park, as at the others. sm_sched_ask
** itself is not such a point (its caller takes the answer first), so without this an actor that
** only made such calls in a loop (smarm_alive of another scheduler's pid) was never killed. The
** caller first releases what it was given to own (a message, a spawn's data). */
static inline void sm_sched_die_before_asking(sched_t *s, actor_t *self)
{
  if (SMARM_UNLIKELY(self->exit_pending))
    sm_sched_die_pending(s, self);
}

/* Owner-thread helpers of send_receive.c, intersched.c and faults.c. */
actor_t *sm_sched_lookup(sched_t *s, smarm_pid_t pid);   /* NULL if dead or not s's */
void sm_sched_wake(sched_t *s, actor_t *a);              /* parked -> runnable */
/* Into a's mailbox; wakes a receive. */
void sm_sched_deliver(sched_t *s, actor_t *a, smarm_msg_t *m);
/* Sends m (its kind and `to` set; `to` of a scheduler of the runtime) as smarm_send does: onto
** the inbox of to's scheduler when that is another, else to the actor here (a MSG_USER into its
** mailbox, a signal to faults.c), but not counted as sent. 0, or -ESRCH when the actor here is
** gone: the caller keeps m. (send_receive.c) */
int sm_sched_route(sched_t *s, smarm_msg_t *m);
/* The deadline timeout_ns from now on the real clock; -1 for none (a negative timeout, or one
** past the end of time). For the waits that stay on real time: smarm_await (IO), requests to
** another scheduler. */
int64_t sm_sched_deadline(int64_t timeout_ns);
/* The same on the actors' clock (smarm_clock_ns): sleeps, receive timeouts, message timers. */
int64_t sm_sched_actor_deadline(sched_t *s, int64_t timeout_ns);
/* The same for a call's wait (smarm_receive_after): from the coarse clock when a second or more
** (sched.c). */
int64_t sm_sched_call_deadline(sched_t *s, int64_t timeout_ns);
/* The slack it adds to the coarse clock, read once per runtime (runtime_t.coarse_slack_ns). */
int64_t sm_sched_coarse_slack(void);
/* Parks self in `state` until woken or until `deadline` (-1: none), a deadline on the actors'
** clock for ACTOR_SLEEPING and ACTOR_WAIT_MSG, on the real clock for the others. Returns 1 when
** the deadline passed, 0 when woken, -ENOMEM when no timer could be made. */
int sm_sched_park_until(sched_t *s, actor_t *self, uint8_t state, int64_t deadline);
/* Parks self (its state already set); when it resumes with a death pending (an exit signal woke
** it, faults.c), it dies there. The _undying form leaves the death to the caller's next parking
** call: sm_sched_ask uses it, so that a spawn's caller finishes taking its answer (the Lua
** binding hands its sockets over only then) before it can die. */
void sm_sched_park(sched_t *s, actor_t *self);
void sm_sched_park_undying(sched_t *s, actor_t *self);
void sm_sched_take_inbox(sched_t *s);
/* Sends request m (its payload starts with room for an int64_t answer) to scheduler k and parks
** the caller until that scheduler's reply brings the answer (intersched.c). */
int64_t sm_sched_ask(sched_t *s, actor_t *self, unsigned k, smarm_msg_t *m);
/* A spawn request, or a failed spawn's reply, that nobody will take (a reply whose asker gave
** up; either, left in an inbox at the runtime's end) lets go of the spawn's data
** (on_actor_stopped): no actor took it. */
void sm_sched_spawn_request_free(sched_t *s, smarm_msg_t *m);
/* The same for a MSG_SPAWN_CARRIED left in an inbox at the end: its kind given back, and its
** data to on_actor_stopped, whose owner owns the block (the actor's arg) from then on. */
void sm_sched_spawn_carried_free(sched_t *s, smarm_msg_t *m);
/* Message timers (send_after.c), all on the owner's thread: answers a MSG_TIMER_SET or
** MSG_TIMER_CANCEL request (its answer); releases what a request never delivered holds (from
** sm_sched_drain_and_free, for a MSG_TIMER_SET left in an inbox at the end); sends the messages of the timers due by `now`; frees the timers aimed at a,
** which ends (or is destroyed with its scheduler). */
int64_t sm_msg_timer_request(sched_t *s, smarm_msg_t *req);
void sm_msg_timer_request_free(smarm_msg_t *req);
void sm_msg_timers_fire(sched_t *s, int64_t now);
void sm_msg_timers_on_death(sched_t *s, actor_t *a);
/* At the scheduler's end: frees its timers aimed at names (their messages never sent). */
void sm_msg_timers_destroy(sched_t *s);

/* Pushes m (owned by the runtime from now on) onto target's inbox, counting any wake syscall;
** the deferred items for target go first, in the same chain (intersched.c). */
void sm_sched_push_remote(sched_t *s, sched_t *target, smarm_msg_t *m);
/* Defers m (to another scheduler's actor; nobody waits on it) until the next push to that
** scheduler, s going idle, or a full list; sm_sched_flush_deferred pushes them all quietly. */
void sm_sched_push_deferred(sched_t *s, smarm_msg_t *m);
void sm_sched_flush_deferred(sched_t *s);

/* Writes s's part of a dump to stderr (info.c; MSG_DUMP, on s's thread between its actors). */
void sm_sched_dump(sched_t *s);

/* The calling actor (NULL outside an actor); *s_out gets the calling thread's scheduler. */
static inline actor_t *sched_self(sched_t **s_out)
{
  sched_t *s = sm_sched_tls;
  *s_out = s;
  return s ? s->current : NULL;
}

/* Owner-side count bump, visible to readers on other threads. */
static inline void stat_add(_Atomic uint64_t *c, uint64_t n)
{
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                        memory_order_relaxed);
}

#endif
