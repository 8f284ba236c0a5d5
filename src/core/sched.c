/*
** Scheduler: run queue, switching, yield, sleep, parking, spawning and exiting actors.
**
** Everything in this file runs on the owning scheduler's thread, on its own stack or on one of its
** actors' stacks, and touches only that scheduler's state with no atomics; the exceptions are the
** statistics (relaxed stores others read), the names mutex an actor's death takes
** (sm_names_on_death) and the stop request the main actor's end sends (sm_runtime_request_stop).
**
** Invariants:
**  - s->current is the running actor, NULL while on the scheduler's own stack.
**  - A RUNNABLE actor is in the run queue exactly once (or is s->handoff, popped but waiting for
**    the scheduler stack to copy it in). A parked actor (WAIT_MSG, SLEEPING, WAIT_REPLY,
**    WAIT_WAKE) is in no queue; its timer is in the heap iff timer.index >= 0.
**  - The run queue's first s->ahead actors (the last is s->ahead_last) went to the front: new
**    actors, parents woken behind their children there, timer wake-ups; the others, the
**    ordinary ones, follow in the order they were queued, but for parents woken behind their
**    children there and a demoted front (runq_demote_new).
**    s->spawn_after, when set, is one of the first s->ahead.
**  - A running actor is always the occupant of its stack slot. We switch straight to an actor
**    only if it already is; otherwise the scheduler stack copies it in first (the slot may be the
**    very stack we would be copying from).
**  - A new actor has no slot (slot NULL) until it is bound to one right before its first switch
**    (bind_first_slot), so actors queued and not started yet hold no stack. slot NULL means it
**    never ran; not the converse (a bound one put back in the queue, or handed off, may not
**    have run yet).
**  - A dead actor's stack cannot be released while we run on it: exit leaves it in s->zombie and
**    whoever runs next releases it right after the switch (sched_bury).
*/
#define _GNU_SOURCE
#include "sched.h"

#include "faults.h"
#include "home.h"
#include "preempt.h"
#include "runtime.h"
#include "vclock.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* initial-exec: one instruction per access even when smarm is inside a loadable module (the
** Lua binding); the general-dynamic model would call __tls_get_addr on every yield. */
__attribute__((tls_model("initial-exec"))) _Thread_local sched_t *sm_sched_tls;

/* Timers are checked at least every this many decisions (yields and parks) of a busy scheduler,
** at the first decision after each tick of the ticker thread while an actor runs (preempt.c:
** look_at_clock), and always when it runs out of work; reading the clock on every yield would
** cost more than the yield. */
#define TIMER_CHECK_TICKS 64

/* An actor's end looks at the inbox only every EXIT_LOOK_EVERY-th time while at least
** EXIT_LOOK_BACKLOG actors are runnable (actor_exit). */
#define EXIT_LOOK_BACKLOG 64
#define EXIT_LOOK_EVERY 16

int64_t smarm_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* smarm_now_ns's clock to a few milliseconds, for a fifth of its cost: a spawn's time. */
static int64_t smarm_coarse_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t smarm_clock_ns(void)
{
  sched_t *s = sm_sched_tls;
  if (s && s->virtual_time)
    return vclock_now(&s->rt->vclock);
  return smarm_now_ns();
}

/* ---- Run queue (owner only: a doubly linked list through actor.run_prev/run_next) ---------- */

/* For assertions: the states of an actor parked in no queue. */
static inline int actor_is_parked(const actor_t *a)
{
  return a->state == ACTOR_WAIT_MSG || a->state == ACTOR_SLEEPING ||
         a->state == ACTOR_WAIT_REPLY || a->state == ACTOR_WAIT_WAKE;
}

/* Links a (in no queue) after `pos`, a queued actor or NULL for the head. */
static inline void runq_link_after(sched_t *s, actor_t *pos, actor_t *a)
{
  actor_t *next = pos ? pos->run_next : s->run_head;
  a->queued_seq = ++s->queued_seq;
  a->run_prev = pos;
  a->run_next = next;
  if (pos)
    pos->run_next = a;
  else
    s->run_head = a;
  if (next)
    next->run_prev = a;
  else
    s->run_tail = a;
  stat_add(&s->stats.runq, 1);
}

/* Unlinks a queued actor (its front bookkeeping is the caller's). */
static inline void runq_unlink(sched_t *s, actor_t *a)
{
  if (a->run_prev)
    a->run_prev->run_next = a->run_next;
  else
    s->run_head = a->run_next;
  if (a->run_next)
    a->run_next->run_prev = a->run_prev;
  else
    s->run_tail = a->run_prev;
  stat_add(&s->stats.runq, (uint64_t)-1);
}

/* The tail of runq_push (below); also for a popped actor that must wait its turn again. */
static inline void runq_append(sched_t *s, actor_t *a)
{
  runq_link_after(s, s->run_tail, a);
}

static inline void runq_push(sched_t *s, actor_t *a)
{
  /* RUNNABLE means "queued once": pushing a queued or dead actor, another scheduler's (actors
  ** never migrate), or one whose timer is still armed would corrupt the queue or the heap. */
  SMARM_ASSERT(a->sched == s);
  SMARM_ASSERT(a->state != ACTOR_RUNNABLE && a->state != ACTOR_DEAD);
  SMARM_ASSERT(a->timer.index < 0);
  a->state = ACTOR_RUNNABLE;
  runq_append(s, a);
}

/* Links a after `pos` (NULL: the head) and counts it at the front: pos is NULL or one of the
** first `ahead` entries. */
static inline void runq_link_ahead(sched_t *s, actor_t *pos, actor_t *a)
{
  runq_link_after(s, pos, a);
  if (s->ahead_last == pos) /* after the last of them, or the first of none */
    s->ahead_last = a;
  s->ahead++;
}

/* New actors first. A new actor goes ahead of the actors already queued, after the ones the
** same decision made before it (siblings run in spawn order), and a parent woken while children
** it made are still queued goes right behind them (sm_sched_wake): a tree of spawns (skynet, a
** fan-out that fans out) is then walked depth first and finished as it is made, with a few
** actors alive at a time, where a FIFO walked it breadth first and held them all at once
** (memory, first touches, cache misses: docs/perf.md, "New actors first" and "Parents behind
** their children"). Go's runnext and Tarantool's fiber.create, which runs the child at once, do
** the same for the same reason. The bound: after SPAWN_AHEAD_MAX turns in a row taken by actors
** at the front, the next turn goes to a waiting actor: of the first ordinary one (queued the
** ordinary way: woken, yielded, preempted) and the one at the back of the front, the one queued
** earlier (queued_seq; runq_pop_bound_turn). Each bound turn serves the elder of the two, the
** front is served from its back, and what goes in behind an entry there (a parent behind its
** children) must run before it can do so again, so no actor is passed for ever, and a chain of
** actors that each spawn the next cannot keep its own elders, or anyone else, from running:
** each SPAWN_AHEAD_MAX turns one of them has its turn. (Sending new actors to the tail instead,
** until the tail had a turn, walked a tree breadth first for those turns: skynet's schedulers
** held 2,000 actors each.) And when an actor is preempted (it ran a whole slice: not the
** short-lived kind this is for), the actors at the front move behind the ordinary ones
** (runq_demote_new). Queued actors stay a prefix of `ahead` entries (timer wake-ups also go to
** the front, counted there), then the ordinary ones. A seeded schedule draws from the whole
** queue, so there every actor joins the tail. */
#define SPAWN_AHEAD_MAX 1024

static inline void runq_push_ahead(sched_t *s, actor_t *a)
{
  SMARM_ASSERT(a->sched == s);
  SMARM_ASSERT(a->state != ACTOR_RUNNABLE && a->state != ACTOR_DEAD);
  SMARM_ASSERT(a->timer.index < 0);
  if (SMARM_UNLIKELY(s->rng)) {
    runq_push(s, a);
    return;
  }
  a->state = ACTOR_RUNNABLE;
  runq_link_ahead(s, s->spawn_after, a); /* spawn_after: NULL or one of the first `ahead` */
  s->spawn_after = a;
}

/* A preemption: the actors still at the front go behind the ordinary ones, in their order. */
static void runq_demote_new(sched_t *s)
{
  actor_t *last = s->ahead_last;
  if (last && last->run_next) { /* [front .. last][tail part] -> [tail part][front .. last] */
    actor_t *first = s->run_head, *tail_first = last->run_next;
    s->run_head = tail_first;
    tail_first->run_prev = NULL;
    s->run_tail->run_next = first;
    first->run_prev = s->run_tail;
    last->run_next = NULL;
    s->run_tail = last;
  }
  s->ahead = 0;
  s->ahead_last = NULL;
  s->spawn_after = NULL;
  s->front_streak = 0;
}

/* A seeded schedule's draw (cfg.seed): xorshift64* over a state that is never 0. */
static uint64_t rng_next(sched_t *s)
{
  uint64_t x = s->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  s->rng = x;
  return x * 0x2545F4914F6CDD1DULL;
}

/* A seeded schedule's pop: the runnable actor the generator draws, wherever it is in the queue.
** A walk of the queue per decision: for tests, whose queues are short. */
static actor_t *runq_pop_drawn(sched_t *s)
{
  size_t n = 0;
  for (actor_t *a = s->run_head; a; a = a->run_next)
    n++;
  if (!n)
    return NULL;
  size_t k = (size_t)(rng_next(s) % n);
  actor_t *a = s->run_head;
  while (k--)
    a = a->run_next;
  runq_unlink(s, a);
  s->spawn_after = NULL;
  s->ahead = 0; /* no front to keep: every pop is a draw (timers may still have put some there) */
  s->ahead_last = NULL;
  return a;
}

/* The turn that the bound (above) leaves to a waiting actor: of the first ordinary one and the
** last at the front, the one queued earlier (the front's one when no ordinary one waits). A
** parent woken behind its children gets a fresh stamp each time, and only a parent can have an
** unrun child of its own in front of it: so when the front's last is a parent right behind a
** child of its that has not run, that child is the front's candidate (a parent woken
** again after each bound turn would otherwise take them all, and its children none, a reviewer
** showed). The front's candidates are then taken from the back, and every entry reaches it.
** Called with ahead > 0. */
static actor_t *runq_pop_bound_turn(sched_t *s)
{
  actor_t *last = s->ahead_last, *first = last->run_next, *f = last;
  if (s->ahead > 1 && f->run_prev->spawner == f->pid && f->run_prev->scheduled == 0)
    f = f->run_prev;
  if (first && (int32_t)(first->queued_seq - f->queued_seq) < 0) {
    runq_unlink(s, first);
    return first;
  }
  if (f == last)
    s->ahead_last = s->ahead > 1 ? last->run_prev : NULL;
  s->ahead--;
  runq_unlink(s, f);
  return f;
}

static inline actor_t *runq_pop(sched_t *s)
{
  if (SMARM_UNLIKELY(s->rng))
    return runq_pop_drawn(s);
  actor_t *a = s->run_head;
  if (!a)
    return NULL;
  s->spawn_after = NULL;
  if (!s->ahead) {
    s->front_streak = 0; /* an ordinary actor has its turn */
  } else if (SMARM_LIKELY(s->front_streak < SPAWN_AHEAD_MAX)) {
    s->front_streak++;
  } else {
    s->front_streak = 0;
    return runq_pop_bound_turn(s);
  }
  if (s->ahead && --s->ahead == 0)
    s->ahead_last = NULL;
  runq_unlink(s, a);
  return a;
}

/* ---- Actor table and pids ------------------------------------------------------------------ */

static smarm_pid_t make_pid(unsigned sched, uint32_t slot, uint32_t gen)
{
  return ((uint64_t)sched << (SMARM_PID_SLOT_BITS + SMARM_PID_GEN_BITS)) |
         ((uint64_t)slot << SMARM_PID_GEN_BITS) | gen;
}

/* Generations carry on from one runtime to the next within a process, so a pid kept from an
** earlier runtime (a Lua VM outlives its runs) never names an actor of a later one: it is simply
** dead. Each scheduler raises next_gen_base past the generations its table used when it ends;
** the next runtime starts there. Once the base passes 2^27 it starts over at 1 (every slot
** still gets at least 2^27 generations per runtime): a pid could then repeat only against one
** kept across all the runtimes that used those 2^27 generations. Relaxed is enough: the threads
** that raise it end (pthread_join in smarm_run) before a later runtime reads it. */
#define GEN_BASE_LIMIT (1u << (SMARM_PID_GEN_BITS - 1))
static _Atomic uint32_t next_gen_base = 1;

uint32_t sm_sched_gen_base(void)
{
  uint32_t base = atomic_load_explicit(&next_gen_base, memory_order_relaxed);
  if (base > GEN_BASE_LIMIT) { /* start over, and say so: the schedulers only ever raise it */
    base = 1;
    atomic_store_explicit(&next_gen_base, base, memory_order_relaxed);
  }
  return base;
}

static void note_generations_used(const actor_table_t *t)
{
  uint32_t past = t->gen_base;
  for (uint32_t i = 0; i < t->used; i++)
    if (t->entries[i].gen + 1 > past)
      past = t->entries[i].gen + 1; /* gen is the next one this slot would give */
  uint32_t cur = atomic_load_explicit(&next_gen_base, memory_order_relaxed);
  while (past > cur && !atomic_compare_exchange_weak_explicit(&next_gen_base, &cur, past,
                                                              memory_order_relaxed,
                                                              memory_order_relaxed))
    ;
}

static int table_alloc(actor_table_t *t, uint32_t *index_out)
{
  if (t->free_head) {
    uint32_t i = t->free_head - 1;
    t->free_head = t->entries[i].next_free;
    if (!t->free_head)
      t->free_tail = 0;
    *index_out = i;
    return 0;
  }
  if (t->used == t->cap) {
    uint32_t cap = t->cap ? t->cap * 2 : 256;
    if (cap > (1u << SMARM_PID_SLOT_BITS))
      cap = 1u << SMARM_PID_SLOT_BITS;
    if (cap == t->cap)
      return -EAGAIN; /* 16M live actors on one scheduler */
    actor_entry_t *e = realloc(t->entries, cap * sizeof *e);
    if (!e)
      return -ENOMEM;
    t->entries = e;
    t->cap = cap;
  }
  uint32_t i = t->used++;
  t->entries[i].actor = NULL;
  t->entries[i].gen = t->gen_base;
  t->entries[i].next_free = 0;
  *index_out = i;
  return 0;
}

/* Frees an entry and advances its generation, so every pid naming the old actor goes stale. */
static void table_free(actor_table_t *t, uint32_t i)
{
  actor_entry_t *e = &t->entries[i];
  e->actor = NULL;
  e->next_free = 0;
  if (e->gen == (1u << SMARM_PID_GEN_BITS) - 1)
    return; /* every generation used: retire the entry for good rather than repeat a pid */
  e->gen++;
  if (t->free_tail)
    t->entries[t->free_tail - 1].next_free = i + 1;
  else
    t->free_head = i + 1;
  t->free_tail = i + 1;
}

actor_t *sm_sched_lookup(sched_t *s, smarm_pid_t pid)
{
  uint32_t i = smarm_pid_slot(pid);
  if (smarm_pid_sched(pid) != s->index || i >= s->table.used)
    return NULL;
  actor_entry_t *e = &s->table.entries[i];
  if (!e->actor || e->gen != smarm_pid_gen(pid))
    return NULL;
  return e->actor;
}

/* ---- Waking, timers, inbox ----------------------------------------------------------------- */

/* The heap of a timer of an actor parked in `state`: on the virtual clock, sleeps and receives
** wait on the actors' clock (vtimers), smarm_await and sm_sched_ask on the real one (vclock.h). */
static inline timer_heap_t *timer_heap_of(sched_t *s, uint8_t state)
{
  if (SMARM_UNLIKELY(s->virtual_time) && (state == ACTOR_SLEEPING || state == ACTOR_WAIT_MSG))
    return &s->vtimers;
  return &s->timers;
}

void sm_sched_deliver(sched_t *s, actor_t *a, smarm_msg_t *m)
{
  if (SMARM_UNLIKELY(a->mailbox.count + a->held >= a->max_mailbox)) {
    /* One too many: it dies where it stands (faults.c tells its links and monitors); what
    ** still comes until then is dropped (an actor about to die reads no more). */
    sm_faults_die_later(s, a, SMARM_EXIT_MAILBOX_OVERFLOW, NULL, 0);
    sm_msg_release(m);
    return;
  }
  mailbox_append(&a->mailbox, m);
  stat_add(&s->stats.received, 1);
  if (a->state == ACTOR_WAIT_MSG)
    sm_sched_wake(s, a);
}

/* A parent woken while children it spawned have not run yet goes right behind them: the last of
** those children (NULL if none); *front says whether that one is at the front. Skynet's node is
** woken by its first child's sum while its other nine wait; at the tail it waited for everyone
** queued, and a tree held its woken parents by the thousand, with their stacks (2,048 slots a
** scheduler mapped, 7,000 stack saves per tree: docs/perf.md, "Parents behind their children").
** Behind its children it runs once, with all their sums queued, and the tree is finished depth
** first as it is made. The children are the entries right after what the current decision put
** at the front (spawn_after): spawned by `a` and never run. The walk stops at the first that is
** not one; the parent then runs after all of them, unless the bound (runq_pop_bound_turn)
** takes it first, after which a later wake may walk the rest again. A timer wake-up at the head
** hides them (the parent then joins the tail): an order lost, nothing more. */
static actor_t *kids_queued_end(const sched_t *s, const actor_t *a, int *front)
{
  if (SMARM_UNLIKELY(s->rng))
    return NULL;
  actor_t *k, *last = NULL;
  int in_front;
  if (s->spawn_after) {
    k = s->spawn_after->run_next;
    in_front = s->spawn_after != s->ahead_last;
  } else {
    k = s->run_head;
    in_front = s->ahead > 0;
  }
  for (; k && k->spawner == a->pid && k->scheduled == 0; k = k->run_next) {
    last = k;
    *front = in_front;
    if (k == s->ahead_last)
      in_front = 0;
  }
  return last;
}

void sm_sched_wake(sched_t *s, actor_t *a)
{
  SMARM_ASSERT(actor_is_parked(a));
  if (a->timer.index >= 0)
    sm_timer_remove(timer_heap_of(s, a->state), &a->timer);
  int front = 0;
  actor_t *kid = kids_queued_end(s, a, &front);
  if (!kid) {
    runq_push(s, a);
    return;
  }
  SMARM_ASSERT(a->sched == s); /* runq_push's checks (the timer was removed above) */
  SMARM_ASSERT(a->timer.index < 0);
  a->state = ACTOR_RUNNABLE; /* behind its children, at the front if they are */
  if (front)
    runq_link_ahead(s, kid, a);
  else
    runq_link_after(s, kid, a);
}

/* Queues the actors of heap h whose deadline is past `now` (on h's clock), earliest first
** (`real_now`: the real clock, for last_head_ns). The first goes to the head of the
** queue, ahead of actors that are runnable because they yielded or were switched out, unless
** one already did less than its slice ago (last_head_ns): a 10 ms ticker beside 16 runaway
** actors then waits one slice, not 16, and actors that compute and sleep over and over, which
** starved the others when every timer went first (150 ms waits, over a second with four, both
** measured by reviewers), get the head at most once a slice, half the CPU at most. The others
** join the tail like any other wake-up (at a yield this still runs before the yielding actor
** queues itself). */
static void fire_actor_timers(sched_t *s, timer_heap_t *h, int64_t now, int64_t real_now)
{
  deadline_t *t;
  actor_t *last = NULL; /* the last of those this call put at the head */
  while ((t = timer_first(h)) && t->deadline <= now) {
    actor_t *a = (actor_t *)((char *)t - offsetof(actor_t, timer));
    SMARM_ASSERT(actor_is_parked(a)); /* only a parked actor has a timer */
    sm_timer_remove(h, t);
    a->timed_out = 1;
    if (real_now - s->last_head_ns < a->slice_ns) {
      runq_push(s, a);
      continue;
    }
    s->last_head_ns = real_now;
    a->state = ACTOR_RUNNABLE;
    runq_link_ahead(s, last, a); /* at the head, in deadline order */
    last = a;
    s->spawn_after = NULL; /* a spawn of this decision must not go behind them */
  }
}

/* Fires every due timer; `now` is the real clock. On the virtual clock the actors' timers and
** the message timers are due by its time instead (which stands still while this runs). */
static void fire_timers(sched_t *s, int64_t now)
{
  fire_actor_timers(s, &s->timers, now, now);
  int64_t actor_now = now;
  if (SMARM_UNLIKELY(s->virtual_time)) {
    actor_now = vclock_now(&s->rt->vclock);
    fire_actor_timers(s, &s->vtimers, actor_now, now);
  }
  if (s->msg_timers.count)
    sm_msg_timers_fire(s, actor_now);
}

/* Whether any timer waits: an actor's or a message's. */
static inline int timers_pending(const sched_t *s)
{
  return s->timers.count | s->msg_timers.count | (s->virtual_time ? s->vtimers.count : 0);
}

static inline uint64_t timers_count(const sched_t *s)
{
  return (uint64_t)s->timers.count + s->msg_timers.count + s->vtimers.count;
}

/* How many timers wait, for smarm_stats_read, and the embedder's on_sched_tick: where the
** scheduler looks at its timers anyway. */
static inline void publish_timers(sched_t *s)
{
  atomic_store_explicit(&s->stats.timers, timers_count(s), memory_order_relaxed);
  if (s->rt->cfg.on_sched_tick)
    s->rt->cfg.on_sched_tick(s->index, s->rt->cfg.userdata);
}

/* The earlier of two deadlines (either may be NULL). */
static deadline_t *earlier(deadline_t *a, deadline_t *b)
{
  return !a ? b : !b ? a : a->deadline <= b->deadline ? a : b;
}

/* A decision point's look at the inbox (when `look`) and, every TIMER_CHECK_TICKS of them or when
** the ticker asks, at the timers and the rest of a busy scheduler's upkeep: cheap unless there
** is something to do. The decision points call sched_poll (looking); an actor's end may not. */
static inline void sched_poll_inbox(sched_t *s, int look)
{
  if (look && inbox_maybe_nonempty(&s->inbox))
    sm_sched_take_inbox(s);
  if (SMARM_UNLIKELY(++s->ticks >= TIMER_CHECK_TICKS) ||
      SMARM_UNLIKELY(atomic_load_explicit(&s->look_at_clock, memory_order_relaxed))) {
    s->ticks = 0;
    atomic_store_explicit(&s->look_at_clock, 0, memory_order_relaxed);
    if (timers_pending(s))
      fire_timers(s, smarm_now_ns());
    publish_timers(s);
    if (s->deferred) /* a busy scheduler that never idles still sends them on */
      sm_sched_flush_deferred(s);
    if (s->reserves_held)
      sm_sched_answer_held_reserves(s);
    sm_home_collect(); /* and takes back its blocks (its actors may switch among themselves,
                       ** or yield with nothing else to run, and never pass its loop) */
  }
}

static inline void sched_poll(sched_t *s) { sched_poll_inbox(s, 1); }

/* ---- Switching ----------------------------------------------------------------------------- */

static void actor_entry(void *p);
static void end_unstarted(sched_t *s, actor_t *a);

/* Builds a's first frame at the top of its slot. The slot may carry ASan redzones of frames of
** an earlier actor that never returned (exit and shutdown discard frames): clear them. */
static void build_first_frame(actor_t *a)
{
  fiber_unpoison(a->slot->lo, stack_depth(a->slot));
  sm_ctx_make(&a->ctx, stack_top(a->slot), actor_entry, a);
  a->slot->occupant = a;
}

/* A record's bytes in the store: sizeof(actor_t) rounded up to an odd multiple of 16. Records
** lie in the store at a stride of their size, and the scheduler reads one field of many of
** them in turn (run queues, the idle pass): at a stride of 256 that field of every record fell
** in a quarter of the L1 cache's sets (16 of 64), and a loop of spawns measured 13% slower. */
#define RECORD_BYTES                                                                           \
  ((sizeof(actor_t) + 15) / 16 * 16 + ((sizeof(actor_t) + 15) / 16 % 2 == 0 ? 16 : 0))

/* Releases the stack and struct of the actor that exited just before the last switch. */
static void sched_bury(sched_t *s)
{
  actor_t *z = s->zombie;
  s->zombie = NULL;
  fiber_destroy(&z->fiber);
  if (z->slot->occupant == z)
    z->slot->occupant = NULL;
  sm_stack_unbind(&s->stacks, z->slot);
  z->slot = NULL;
  sm_store_free(&s->store, z, RECORD_BYTES);
}

/* Switches from `from` to `to` (NULL: the scheduler's own stack). Returns when `from` runs
** again. `to` must be the occupant of its slot. */
static inline __attribute__((always_inline)) void sched_switch(sched_t *s, actor_t *from, actor_t *to)
{
  ctx_t *from_ctx = from ? &from->ctx : &s->main_ctx;
  fiber_t *from_fiber = from ? &from->fiber : &s->main_fiber;
  ctx_t *to_ctx = &s->main_ctx;
  fiber_t *to_fiber = &s->main_fiber;
  if (to) {
    SMARM_ASSERT(to->slot->occupant == to);
    to->state = ACTOR_RUNNING;
    to->scheduled++;
    to_ctx = &to->ctx;
    to_fiber = &to->fiber;
  }
  if (SMARM_UNLIKELY(s->slice_timed)) /* the timed slice ends otherwise: no stray signal */
    sm_preempt_untime(s);
  s->current = to;
  if (from && SMARM_UNLIKELY(atomic_load_explicit(&s->cpu_sampled_ns, memory_order_relaxed)))
    from->cpu_ns += atomic_exchange_explicit(&s->cpu_sampled_ns, 0, memory_order_relaxed);
  /* The running actor's slice and pid before the progress that names its turn, released: a
  ** ticker that sees the new progress sees them too (preempt.c, "Protocol"). */
  atomic_store_explicit(&s->running_slice, to ? to->slice_ns : 0, memory_order_relaxed);
  atomic_store_explicit(&s->running_pid, to ? to->pid : 0, memory_order_relaxed);
  atomic_store_explicit(&s->stats.switches,
                        atomic_load_explicit(&s->stats.switches, memory_order_relaxed) + 1,
                        memory_order_release);
  fiber_before_switch(from_fiber, to_fiber, from && from->state == ACTOR_DEAD);
  sm_ctx_switch(from_ctx, to_ctx);
  /* Resumed: we are `from` again, on the same scheduler (actors never migrate). */
  fiber_after_switch(from_fiber);
  if (s->zombie)
    sched_bury(s);
}

/* Makes a's stack live in its slot, evicting the slot's occupant to the store (scheduler stack
** only: the slot may be the stack of the actor that ran last). With `discard` the occupant's
** bytes are dropped instead (the runtime's end, for an occupant that needs them no more).
** Returns 0, or -ENOMEM when the occupant's bytes could not be saved: then nothing changed. */
static int make_resident(sched_t *s, actor_t *a, int discard)
{
  stack_slot_t *slot = a->slot;
  if (slot->occupant == a)
    return 0;
  actor_t *o = slot->occupant;
  if (o && !discard) {
    o->saved = sm_stack_save(&s->store, slot, o->ctx.sp, &o->saved_len);
    if (!o->saved)
      return -ENOMEM;
    stat_add(&s->stats.stack_saves, 1);
    stat_add(&s->stats.saved_stacks, 1);
  }
  slot->occupant = NULL;
  if (a->saved) {
    sm_stack_restore(&s->store, slot, a->saved, a->saved_len);
    a->saved = NULL;
    stat_add(&s->stats.saved_stacks, (uint64_t)-1);
    slot->occupant = a;
  } else {
    build_first_frame(a); /* never ran */
  }
  return 0;
}

/* Binds a, which never ran (slot NULL), to a slot of the size its spawn asked for, and makes its
** TSan fiber; builds its first frame there when nobody's bytes are in the slot, else
** make_resident will, on the scheduler stack, once the occupant's bytes are saved. `anywhere`
** 0: only a free slot of that size (sm_stack_bind_free), what an actor that goes on may bind on
** its stack (no mmap, mprotect or malloc deepening the stack of an actor that gives way to park
** or yield: under ASan they reached the first line of its top page, which its end then reads
** the deep ring for); 1: any (sm_stack_bind), on the scheduler stack or the stack of an actor
** that is ending. Returns 0, or -ENOMEM (no slot to be had that way): then nothing changed. */
static int bind_first_slot(sched_t *s, actor_t *a, int anywhere)
{
  SMARM_ASSERT(!a->slot && !a->saved);
  stack_slot_t *slot = anywhere ? sm_stack_bind(&s->stacks, a->stack_size)
                                : sm_stack_bind_free(&s->stacks, a->stack_size);
  if (!slot)
    return -ENOMEM;
  a->slot = slot;
  a->saved_len = 0;
  fiber_create(&a->fiber, slot->lo, stack_depth(slot));
  atomic_store_explicit(&s->stats.stacks, s->stacks.mapped, memory_order_relaxed);
  if (!slot->occupant)
    build_first_frame(a);
  return 0;
}

/* `next` cannot run: its slot's occupant could not be saved, memory being out. That occupant
** dies alone, with reason SMARM_EXIT_NOMEM (its links and monitors are told as for any death),
** and on its own stack as a killed actor does: it is woken to die if parked, and queued ahead of
** `next`, which goes back to the end of the queue and finds the slot free once the occupant has
** gone (or tries again if another actor took it meanwhile). An occupant waiting for another
** scheduler's answer (WAIT_REPLY) dies once that answer wakes it; until then `next` comes round
** again at every turn of the queue. */
static void occupant_cannot_be_saved(sched_t *s, actor_t *next)
{
  sm_faults_die_later(s, next->slot->occupant, SMARM_EXIT_NOMEM, NULL, 0);
  runq_append(s, next); /* still RUNNABLE */
}

/* Leaves `self`, which is already queued, parked or dead, for the next runnable actor (directly
** when it is resident, else through the scheduler stack). Returns when self runs again. */
static inline __attribute__((always_inline)) void sched_leave(sched_t *s, actor_t *self)
{
  actor_t *next = SMARM_UNLIKELY(s->stopping) ? NULL : runq_pop(s);
  if (next == self) {
    self->state = ACTOR_RUNNING;
    return;
  }
  if (next && SMARM_UNLIKELY(!next->slot || next->slot->occupant != next)) {
    /* Not started: bound here (the common case: no detour), to a free slot of its size, or,
    ** when self is ending, to any: self's slot is free only once the next one runs, and if the
    ** scheduler stack bound it, in a chain of actors that each end as the next starts every
    ** start would take that detour. A shared slot (whose occupant may be this very stack) and
    ** a failed bind are the scheduler stack's. */
    if (next->slot || bind_first_slot(s, next, s->zombie == self) < 0 ||
        next->slot->occupant != next) {
      s->handoff = next;
      next = NULL;
    }
  }
  sched_switch(s, self, next);
}

void sm_sched_park_undying(sched_t *s, actor_t *self)
{
  /* A decision point like yield: actors that only exchange messages switch straight to each
  ** other and never reach the scheduler's stack, so timers must be checked here too. */
  sched_poll(s); /* may make self runnable again */
  sched_leave(s, self);
}

void sm_sched_park(sched_t *s, actor_t *self)
{
  sm_sched_park_undying(s, self);
  if (SMARM_UNLIKELY(self->exit_pending)) /* an exit signal woke it to die (faults.c) */
    sm_sched_die_pending(s, self);
}

/* ---- The scheduler's own stack ------------------------------------------------------------- */

/* The idle pass over parked actors (from idle_wait, at most once a second): an actor that has
** not run since the pass before looked at it leaves its slot as it would for a sharer
** (sm_stack_evict: its used bytes to the store, the slot's pages dropped) and is copied back when
** it next runs (make_resident). A waiting actor then costs its used bytes, about 1 KiB for a
** Lua actor parked in receive, not the pages its deepest calls touched: two for a chat server's
** connection. A slice of the pass stops after TRIM_PASS_NS or when the inbox gets something,
** leaving trim_cursor where the next slice goes on (an eviction is a copy and a system call:
** 100k actors take about 0.2 s). Returns whether an actor ran since the pass before: a later pass
** may evict it (the scheduler then wakes for it). */
#define TRIM_PASS_NS 5000000

static int trim_parked_stacks(sched_t *s, int64_t now, const deadline_t *t)
{
  int pending = 0;
  int64_t end = now + TRIM_PASS_NS;
  if (t && end > t->deadline)
    end = t->deadline; /* a slice never holds up a timer */
  uint32_t i = s->trim_cursor;
  for (uint32_t n = 0; i < s->table.used; i++, n++) {
    if ((n & 63) == 63 && (smarm_now_ns() >= end || inbox_maybe_nonempty(&s->inbox))) {
      s->trim_cursor = i;
      return pending;
    }
    actor_t *a = s->table.entries[i].actor;
    if (!a || !a->slot || a->slot->occupant != a)
      continue;
    switch (a->state) {
    case ACTOR_WAIT_MSG:
    case ACTOR_SLEEPING:
    case ACTOR_WAIT_REPLY:
      break; /* not ACTOR_WAIT_WAKE: smarm_await's waker may share state on the actor's stack */
    default:
      continue;
    }
    if (a->idle_mark != (uint32_t)a->scheduled) { /* ran since: look again next time */
      a->idle_mark = (uint32_t)a->scheduled;
      pending = 1;
      continue;
    }
    a->saved = sm_stack_evict(&s->store, a->slot, a->ctx.sp, &a->saved_len);
    if (a->saved) { /* else memory is out: it stays, and is looked at again next time */
      stat_add(&s->stats.stack_saves, 1);
      stat_add(&s->stats.saved_stacks, 1);
    }
  }
  s->trim_cursor = 0;
  return pending;
}

/* A spin pays only while this CPU would otherwise sit idle. When other threads want it (more
** runnable threads than CPUs: a busy machine, a test suite run in parallel, a noisy VM), a spinner
** holds up the very thread whose message it waits for, and its sched_yield hands a whole time
** slice to whatever else runs there (on Linux's EEVDF each yield also moves the yielder's
** deadline a slice later); parking at once lets the kernel wake it when the message comes. On a
** 2-vCPU guest with busy loops beside it, a TCP round trip between two schedulers took 0.2-2.8 ms
** spinning and 48 us parking at once, and a storm of spawn_on 36-63 s against 5.5-7.9 s
** (docs/perf.md, "Pausing the idle spin on a busy machine: tried, taken back").
**
** So an idle wait whose spin looks at the clock SPIN_LOST_NS or more after its look before (it
** lost the CPU, preempted or in a yield; a time slice is 0.75 ms or more) counts as lossy, and
** when SPIN_LOSSY_MAX of a scheduler's last 16 waits that spun to their yields (a shorter wait
** tells nothing: a ping-pong's answer comes sooner) were lossy, every scheduler's spin
** pauses for SPIN_PAUSE_NS: an idle scheduler parks at once. Counting waits rather than losses in
** a time window works whatever the kernel's tick (a yield to a busy thread may last 1 or 10 ms).
** One lossy wait is not enough: on an idle machine a yield meets the runtime's own threads now
** and then (the IO thread, a scheduler running actors for milliseconds), up to four times in a
** row in the echo and ping-pong benches. The scheduler that paused keeps its 16 waits marked
** lossy, so after the pause one lossy wait among its next nine pauses again: while the CPU stays
** taken, a probe costs one lost slice a second.
**
** A loss the runtime's own threads explain is not counted: when those that want a CPU (the other
** schedulers not parked in the kernel, and the helpers that say they run, the IO thread's loop:
** smarm_helper_running) are as many as the CPUs this thread may use. There the yield served
** the runtime itself, and parking would only add a wake-up per message: on an idle 2-vCPU guest,
** `bench/echo.lua clients` keeps the IO thread and both schedulers busy, and a pause counting
** those losses took its p50 from 125 to 180-197 us (docs/perf.md). A busy machine is one where
** a spin loses its CPU while fewer of the runtime's threads want one than there are CPUs.
**
** The pause is process-wide: a busy machine is the machine's, not a scheduler's, and it outlives
** a runtime (a program or a test suite running one after another). It is written only when a
** spin has just lost its CPU, by any scheduler; relaxed, since a stale value costs one spin more
** or one park sooner, never a lost wake-up (the park's own protocol, inbox.h). */
#define SPIN_LOST_NS 500000
#define SPIN_LOSSY_MAX 8
#define SPIN_HISTORY_MASK 0xffffu /* spin_history: the last 16 waits */
#define SPIN_PAUSE_NS 1000000000LL

static _Atomic int64_t spin_paused_until; /* an idle wait parks at once until then */

/* Helper threads running now (smarm_helper_running): process-wide, like the IO thread. */
static _Atomic int helpers_running;

void smarm_helper_running(int running)
{
  atomic_fetch_add_explicit(&helpers_running, running ? 1 : -1, memory_order_relaxed);
}

/* Whether the runtime's own threads that want a CPU now, s aside, fill the CPUs s's thread may
** share with them (above): the helpers that say they run, and the other schedulers not parked
** in the kernel (running actors or spinning); with pinned schedulers (cfg.pin_threads), only
** those pinned to s's CPU. Looked at when the loss is seen, not during it: a thread of ours that
** took the CPU and went to sleep since does not count, and that wait is lossy. Counting those
** too (whoever ran or went idle during the loss) was tried: it explained the losses of a TCP
** round trip beside busy loops, the case the pause is for (docs/perf.md). Read on a loss only
** (a system call for the CPU mask: a test pins its process); relaxed: a stale flag makes one
** wait lossy or not, never a lost wake-up. */
static int own_threads_fill_cpus(const sched_t *s)
{
  const runtime_t *rt = s->rt;
  int ncpu = 1, mine = rt->cfg.pin_threads ? sm_runtime_pin_cpu(rt, s->index) : -1;
  cpu_set_t cpus;
  if (mine < 0 && sched_getaffinity(0, sizeof cpus, &cpus) == 0)
    ncpu = CPU_COUNT(&cpus);
  int wanting = atomic_load_explicit(&helpers_running, memory_order_relaxed);
  if (wanting < 0) /* only through a host's unbalanced calls */
    wanting = 0;
  for (unsigned k = 0; k < rt->nsched && wanting < ncpu; k++) {
    const sched_t *o = &rt->scheds[k];
    if (o == s || (mine >= 0 && sm_runtime_pin_cpu(rt, k) != mine))
      continue;
    if (!atomic_load_explicit(&o->inbox.parked, memory_order_relaxed))
      wanting++;
  }
  return wanting >= ncpu;
}

/* Marks s's running idle wait lossy (above). Returns whether the spin is now paused. */
static int spin_lost_cpu(sched_t *s, int64_t now)
{
  if (s->spin_history & 1)
    return 0; /* this wait counted already */
  if (own_threads_fill_cpus(s))
    return 0; /* the runtime's own threads took it */
  s->spin_history |= 1;
  if (__builtin_popcount(s->spin_history & SPIN_HISTORY_MASK) < SPIN_LOSSY_MAX)
    return 0;
  s->spin_history = SPIN_HISTORY_MASK;
  atomic_store_explicit(&spin_paused_until, now + SPIN_PAUSE_NS, memory_order_relaxed);
  stat_add(&s->stats.spin_pauses, 1);
  return 1;
}

/* After spinning this long, the spin gives its CPU to any other runnable thread (sched_yield)
** between its looks at the inbox. A spinner holds a CPU that the thread it waits for may need:
** with the IO thread and two schedulers on two vCPUs, or an Erlang node beside a scheduler, the
** woken thread waited for the spinner's time slice to end (Linux's EEVDF does not preempt a
** running thread for a woken one at once). Yielding took a TCP round trip between two actors of
** two schedulers from 134 to 38 us (medians of four alternated runs) and a round trip to an
** Erlang node from a bimodal 41 or 95 us to 42-44 us (docs/perf.md). The first microseconds
** stay a pure spin: the waits of a cross-scheduler ping-pong are shorter, and a yield is a
** system call. */
#define SPIN_YIELD_AFTER_NS 5000

/* Nothing to run: spin on the inbox for spin_ns (a wake costs tens of microseconds on a VM, a
** spinning scheduler answers in about a hundred nanoseconds), yielding after SPIN_YIELD_AFTER_NS,
** unless the spin is paused (spin_lost_cpu); then park until `t` (the earliest deadline on the real
** clock, or NULL) or a stack trim is due. Returns early when the inbox gets something or `t`
** passes. */
static inline __attribute__((always_inline)) void idle_wait(sched_t *s, int64_t now,
                                                        const deadline_t *t)
{
  int64_t spin_end = now + s->spin_ns, yield_from = now + SPIN_YIELD_AFTER_NS;
  if (t && spin_end > t->deadline)
    spin_end = t->deadline;
  if (SMARM_UNLIKELY(now < atomic_load_explicit(&spin_paused_until, memory_order_relaxed)))
    spin_end = now;
  int counted = 0; /* in spin_history: a wait that reached its yields */
  for (unsigned i = 1; now < spin_end; i++) {
    if (inbox_maybe_nonempty(&s->inbox))
      return;
    if ((i & 63) == 0) {
      int64_t before = now;
      now = smarm_now_ns();
      if (now >= yield_from) {
        if (!counted) {
          s->spin_history <<= 1; /* not lossy yet */
          counted = 1;
        }
        sched_yield();
        now = smarm_now_ns();
      }
      if (SMARM_UNLIKELY(now - before >= SPIN_LOST_NS) && counted && spin_lost_cpu(s, now))
        break;
    }
  }
  int64_t timeout = -1;
  if (t) {
    timeout = t->deadline - now;
    if (timeout <= 0)
      return;
  }
  /* About to sleep anyway: give back the memory of stacks nobody has used for a second or more
  ** (at most one pass a second; while some may be given back later, sleep at most until then).
  ** The pass over parked actors goes in slices: one cut short returns, and the scheduler's loop
  ** (its timers and inbox first) comes back for the next. */
  uint64_t switches = atomic_load_explicit(&s->stats.switches, memory_order_relaxed);
  if (s->trim_cursor || now - s->last_trim_ns >= STACK_TRIM_PERIOD_NS) {
    if (!s->trim_cursor) {
      s->trim_pending = sm_stack_pool_trim(&s->stacks) | sm_store_trim(&s->store);
      s->trim_switches = switches;
    }
    s->trim_pending |= trim_parked_stacks(s, now, t);
    if (s->trim_cursor)
      return;
    /* The period runs from the pass's end (a sliced pass may have taken longer than it), and
    ** the pass took time: the timer's wait is measured again. */
    now = smarm_now_ns();
    s->last_trim_ns = now;
    if (t) {
      timeout = t->deadline - now;
      if (timeout <= 0)
        return;
    }
  }
  /* Actors that ran since the last pass may park for long: the next pass looks at them. */
  if (s->trim_pending || switches != s->trim_switches) {
    int64_t until_trim = s->last_trim_ns + STACK_TRIM_PERIOD_NS - now;
    if (until_trim < 0)
      until_trim = 0; /* never a negative timeout: it would mean none */
    if (timeout < 0 || timeout > until_trim)
      timeout = until_trim;
  }
  if (sm_inbox_park(&s->inbox, timeout))
    stat_add(&s->stats.parks, 1);
}

/* idle_wait, its time counted as idle (sched_stats_t says how a reader pairs the two). */
static void idle_counted(sched_t *s, int64_t now, const deadline_t *t)
{
  atomic_store_explicit(&s->stats.idle_since, now, memory_order_relaxed);
  idle_wait(s, now, t);
  uint64_t waited = (uint64_t)(smarm_now_ns() - now);
  atomic_store_explicit(&s->stats.idle_since, 0, memory_order_relaxed);
  atomic_store_explicit(&s->stats.idle_ns,
                        atomic_load_explicit(&s->stats.idle_ns, memory_order_relaxed) + waited,
                        memory_order_release);
}

/* Nothing to run, no timer due: wait (idle_wait). On the virtual clock the scheduler registers
** idle first, for the whole wait, spinning included: the last one to register can then jump at
** once instead of after a spin (vclock.c). */
static void sched_idle(sched_t *s)
{
  if (s->deferred)
    sm_sched_flush_deferred(s);
  if (s->reserves_held)
    sm_sched_answer_held_reserves(s);
  sm_home_before_idle();
  publish_timers(s);
  int64_t now = smarm_now_ns();
  if (SMARM_LIKELY(!s->virtual_time)) {
    deadline_t *t = earlier(timer_first(&s->timers), timer_first(&s->msg_timers));
    if (t && t->deadline <= now)
      return;
    idle_counted(s, now, t);
    return;
  }
  deadline_t *t = timer_first(&s->timers); /* on the real clock: awaits, requests */
  deadline_t *v = earlier(timer_first(&s->vtimers), timer_first(&s->msg_timers));
  if ((t && t->deadline <= now) || (v && v->deadline <= vclock_now(&s->rt->vclock)))
    return;
  if (sm_vclock_idle_enter(s, v ? v->deadline : INT64_MAX))
    return; /* a jump made its own timers due, or its inbox has something */
  idle_counted(s, now, t);
  sm_vclock_idle_leave(s); /* before the loop takes the inbox in */
}

void sm_sched_loop(sched_t *s)
{
  atomic_store_explicit(&s->stats.started_ns, smarm_now_ns(), memory_order_relaxed);
  for (;;) {
    if (s->zombie)
      sched_bury(s);
    sm_home_collect();
    if (inbox_maybe_nonempty(&s->inbox))
      sm_sched_take_inbox(s);
    if (s->stopping)
      return;
    if (timers_pending(s)) {
      uint64_t waiting = timers_count(s);
      fire_timers(s, smarm_now_ns());
      /* Told when some fired, not at every pass; else sched_poll's count goes on (resetting it
      ** here would starve a busy scheduler whose switches all pass here of its publications). */
      if (timers_count(s) != waiting) {
        s->ticks = 0;
        publish_timers(s);
      }
    }
    actor_t *next = s->handoff;
    if (next)
      s->handoff = NULL;
    else
      next = runq_pop(s);
    if (next) {
      if (SMARM_UNLIKELY(!next->slot) && SMARM_UNLIKELY(bind_first_slot(s, next, 1) < 0)) {
        end_unstarted(s, next);
        continue;
      }
      if (SMARM_UNLIKELY(make_resident(s, next, 0) < 0)) {
        occupant_cannot_be_saved(s, next);
        continue;
      }
      sched_switch(s, NULL, next);
      continue;
    }
    sched_idle(s);
  }
}

/* ---- Actor life ---------------------------------------------------------------------------- */

/* Runs (and forgets) a's cleanups, newest first. */
static void run_cleanups(actor_t *a)
{
  while (a->cleanups) {
    smarm_cleanup_t *c = a->cleanups;
    a->cleanups = c->next;
    c->fn(c->arg);
  }
}

/* What every end of an actor does once its own code is done: frees its mailbox, retires its pid
** and name, tells its links and monitors, and stops the run if it was the main actor. */
static void actor_ends(sched_t *s, actor_t *a, int code, const void *data, size_t size)
{
  mailbox_clear(&a->mailbox);
  sm_msg_timers_on_death(s, a); /* their messages would find it gone */
  table_free(&s->table, smarm_pid_slot(a->pid));
  stat_add(&s->stats.live, (uint64_t)-1);
  sm_names_on_death(s, a);
  /* Notices go out once what others can see of it is gone (its pid is stale, it is not counted
  ** live): whoever learns of the death and looks finds it dead. */
  sm_faults_on_death(s, a, code, data, size);
  if (s->index == 0 && a->pid == s->rt->main_pid) { /* main_pid is scheduler 0's */
    sm_runtime_request_stop(s->rt);
    s->stopping = 1;
  }
}

/* Ends a, the running actor, with that reason: tells its links and monitors, frees its mailbox,
** retires its pid and leaves its stack for the next actor to release. */
static _Noreturn void actor_exit(sched_t *s, actor_t *a, int code, const void *data, size_t size)
{
  a->state = ACTOR_DEAD;
  if (a->timer.index >= 0)
    sm_timer_remove(&s->timers, &a->timer);
  run_cleanups(a);
  actor_ends(s, a, code, data, size);
  /* A decision point like any other: a chain of actors that each spawn the next and end would
  ** otherwise never look at the inbox (a stop request) or the timers. While a backlog waits
  ** here (EXIT_LOOK_BACKLOG actors runnable), only every EXIT_LOOK_EVERY-th end looks at the
  ** inbox: in a storm of spawns from another scheduler each look found the one spawn pushed
  ** since the last, and read the inbox head the spawner had just written, a line moved between
  ** the cores per spawn both ways (docs/perf.md, "Fewer looks at the inbox"). What waits there
  ** is taken ends later, behind work that was queued first anyway; the timers are looked at as
  ** before. */
  sched_poll_inbox(s, atomic_load_explicit(&s->stats.runq, memory_order_relaxed) <
                          EXIT_LOOK_BACKLOG ||
                        ++s->exit_looks % EXIT_LOOK_EVERY == 0);
  s->zombie = a;
  sched_leave(s, a);
  SMARM_CHECK(0, "a dead actor was resumed");
  abort();
}

/* Ends a with the reason smarm_set_exit_reason stored, or normally. */
static _Noreturn void exit_as_set(sched_t *s, actor_t *a)
{
  if (a->exit_pending) /* a kill noted at a poll: it still wins */
    sm_sched_die_pending(s, a);
  actor_faults_t *f = a->faults;
  if (f && f->reason_set)
    actor_exit(s, a, f->exit_code, f->exit_data, f->exit_size); /* freed with a->faults */
  actor_exit(s, a, SMARM_EXIT_NORMAL, NULL, 0);
}

/* a never ran, and no slot could be bound for it (memory is out): it ends here, on the scheduler
** stack, none of its function run, with SMARM_EXIT_NOMEM, or with the reason of a kill it had
** pending (the death it was queued for: its fault record holds the reason until the notices are
** made, as in sm_sched_die_pending). Its links and monitors are told as for any death and its
** data goes to on_actor_stopped as for an actor the run's end stops (no dying reason: it has no
** stack to ask from); it has no stack, fiber, timer or cleanups, so its record goes at once. A
** main actor that ends so makes smarm_run return -ENOMEM, as a failed spawn of it did. */
static void end_unstarted(sched_t *s, actor_t *a)
{
  SMARM_ASSERT(!a->slot && !s->current && a->timer.index < 0 && !a->cleanups);
  a->state = ACTOR_DEAD;
  const actor_faults_t *f = a->exit_pending ? a->faults : NULL;
  if (!f && s->index == 0 && a->pid == s->rt->main_pid) /* main_pid is scheduler 0's */
    s->rt->main_unstarted = 1;
  if (a->data && s->rt->cfg.on_actor_stopped) {
    s->rt->cfg.on_actor_stopped(a->data, s->rt->cfg.userdata);
    a->data = NULL;
  }
  if (f)
    actor_ends(s, a, f->exit_code, f->exit_data, f->exit_size);
  else
    actor_ends(s, a, SMARM_EXIT_NOMEM, NULL, 0);
  sm_store_free(&s->store, a, RECORD_BYTES);
}

static void actor_entry(void *p)
{
  actor_t *a = p;
  sched_t *s = a->sched;
  fiber_after_switch(&a->fiber);
  if (s->zombie)
    sched_bury(s);
  if (SMARM_UNLIKELY(a->exit_pending)) /* killed before it ever ran: none of it runs */
    sm_sched_die_pending(s, a);
  a->fn(a->arg);
  exit_as_set(s, a);
}

void sm_sched_die_pending(sched_t *s, actor_t *a)
{
  SMARM_ASSERT(a == s->current && a->exit_pending);
  a->exit_pending = 0;
  if (a->data && s->rt->cfg.on_actor_stopped) { /* its frames go: let the embedder let go too */
    a->dying = 1;
    s->rt->cfg.on_actor_stopped(a->data, s->rt->cfg.userdata);
    a->dying = 0;
    a->data = NULL;
  }
  /* The reason stays in a->faults, which sm_faults_on_death frees after the last notice; none
  ** could be made to hold it when memory was out (sm_faults_die_later). */
  actor_faults_t *f = a->faults;
  if (!f)
    actor_exit(s, a, SMARM_EXIT_NOMEM, NULL, 0);
  actor_exit(s, a, f->exit_code, f->exit_data, f->exit_size);
}

/* Ties a new actor (not queued yet) to its spawner: its own side, and the spawner's when the
** spawner is ours too (a remote spawner records its side when the answer reaches it, or, for a
** spawn into a pid set aside ahead, before it sent the request: intersched.c). */
static int spawn_tie(sched_t *s, actor_t *a, const spawn_ties_t *ties)
{
  if (sm_faults_tie_child(s, a, ties) == 0) {
    actor_t *parent = sm_sched_lookup(s, ties->parent);
    if (!parent || sm_faults_tie_parent(s, parent, a->pid, ties) == 0)
      return 0;
  }
  return -ENOMEM;
}

/* Makes the actor of the table entry `index` (taken, not yet holding an actor); on failure the
** entry is freed. */
static int spawn_at(sched_t *s, uint32_t index, smarm_actor_fn fn, void *arg, size_t stack_size,
                    void *data, const spawn_ties_t *ties, smarm_pid_t *pid_out)
{
  int rc;
  size_t size = sm_stack_round_size(&s->stacks, stack_size ? stack_size : s->default_stack);
  if (!fn || !size) {
    table_free(&s->table, index);
    return -EINVAL;
  }
  actor_t *a = sm_store_alloc(&s->store, 0, RECORD_BYTES);
  if (!a) {
    table_free(&s->table, index);
    return -ENOMEM;
  }
  a->sched = s;
  a->state = ACTOR_NEW;
  a->trap_exit = 0;
  a->exit_pending = 0;
  a->dying = 0;
  a->faults = NULL;
  a->cleanups = NULL;
  a->pid = make_pid(s->index, index, s->table.entries[index].gen);
  a->timed_out = 0;
  a->timer.index = -1;
  mailbox_init(&a->mailbox);
  a->slot = NULL; /* bound when it first runs (bind_first_slot) */
  a->saved = NULL;
  a->stack_size = (uint32_t)size;
  a->fn = fn;
  a->arg = arg;
  a->data = data;
  a->reply = 0;
  a->ask_token = 0;
  a->await_token = a->await_woken = 0;
  a->msg_timers = NULL;
  size_t max_mailbox = ties && ties->max_mailbox ? ties->max_mailbox : s->rt->cfg.max_mailbox;
  a->max_mailbox = max_mailbox ? max_mailbox : SIZE_MAX;
  a->held = 0;
  a->scheduled = 0;
  a->idle_mark = 0;
  a->cpu_ns = 0;
  a->spawner = ties ? ties->spawner : 0;
  a->spawned_ns = smarm_coarse_now_ns();
  a->slice_ns = s->rng ? INT64_MAX /* a seeded schedule has no slices (cfg.seed) */
                : !ties || !ties->slice_ns ? s->rt->cfg.slice_ns
                : ties->slice_ns < 0    ? INT64_MAX
                                        : ties->slice_ns;
  s->table.entries[index].actor = a;
  rc = ties && ties->name ? sm_names_register_local(s, a, ties->name) : 0;
  if (rc == 0 && ties && ties->parent && spawn_tie(s, a, ties) < 0) {
    sm_names_on_death(s, a);
    rc = -ENOMEM;
  }
  if (rc < 0) {
    sm_faults_destroy(s, a);
    s->table.entries[index].actor = NULL;
    sm_store_free(&s->store, a, RECORD_BYTES);
    table_free(&s->table, index);
    return rc;
  }
  runq_push_ahead(s, a);
  stat_add(&s->stats.spawned, 1);
  stat_add(&s->stats.live, 1);
  if (pid_out)
    *pid_out = a->pid;
  return 0;
}

int sm_sched_spawn_local(sched_t *s, smarm_actor_fn fn, void *arg, size_t stack_size, void *data,
                         const spawn_ties_t *ties, smarm_pid_t *pid_out)
{
  uint32_t index;
  int rc = table_alloc(&s->table, &index);
  if (rc < 0)
    return rc;
  return spawn_at(s, index, fn, arg, stack_size, data, ties, pid_out);
}

int sm_sched_reserve_pid(sched_t *s, smarm_pid_t *pid_out)
{
  uint32_t index;
  int rc = table_alloc(&s->table, &index);
  if (rc == 0)
    *pid_out = make_pid(s->index, index, s->table.entries[index].gen);
  return rc;
}

int sm_sched_spawn_reserved(sched_t *s, smarm_pid_t pid, smarm_actor_fn fn, void *arg,
                            size_t stack_size, void *data, const spawn_ties_t *ties)
{
  uint32_t index = smarm_pid_slot(pid);
  SMARM_ASSERT(smarm_pid_sched(pid) == s->index && index < s->table.used &&
               !s->table.entries[index].actor &&
               s->table.entries[index].gen == smarm_pid_gen(pid));
  return spawn_at(s, index, fn, arg, stack_size, data, ties, NULL);
}

/* ---- Public API: the calling actor --------------------------------------------------------- */

void smarm_yield(void)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return;
  sched_poll(s);
  if (SMARM_UNLIKELY(self->exit_pending)) /* an exit signal just taken in kills it */
    sm_sched_die_pending(s, self);
  if (!s->run_head && SMARM_LIKELY(!s->stopping))
    return; /* the scheduler decided: nobody else wants to run */
  runq_push(s, self);
  sched_leave(s, self);
  if (SMARM_UNLIKELY(self->exit_pending))
    sm_sched_die_pending(s, self);
}

/* The request to give way that names the running slice, or 0. */
static inline uint64_t preempt_request(sched_t *s)
{
  /* Acquire: pairs with the ticker's release store, after it read the progress it names. */
  uint64_t asked = atomic_load_explicit(&s->preempt_asked, memory_order_acquire);
  return asked != 0 && asked == sm_sched_progress(s) + 1 ? asked : 0;
}

int smarm_preempt_due(void)
{
  sched_t *s;
  return sched_self(&s) && preempt_request(s) != 0;
}

void smarm_preempt(void)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return;
  uint64_t asked = preempt_request(s);
  if (asked) { /* honours a request: how long it waited (preempt.c) */
    int64_t asked_ns = atomic_load_explicit(&s->preempt_asked_ns, memory_order_relaxed);
    stat_add(&s->stats.preempt_wait_ns, (uint64_t)(smarm_now_ns() - asked_ns));
    if (asked == atomic_load_explicit(&s->timer_asked, memory_order_relaxed)) {
      stat_add(&s->stats.preempts_timed, 1);
      s->slice_timed = 0; /* it fired: a one-shot timer is disarmed */
    }
  }
  atomic_store_explicit(&s->preempt_asked, 0, memory_order_relaxed);
  if (asked)
    runq_demote_new(s); /* a slice ran out: the waiting ones go before the new ones now */
  stat_add(&s->stats.preempts, 1); /* a new slice, even when nobody else wants to run */
  s->ticks = TIMER_CHECK_TICKS;    /* the clock now: due timers go first */
  smarm_yield();
  if (asked) /* it may well run long again: its new slice ends on time (preempt.c) */
    sm_preempt_time_slice(s, self->slice_ns);
}

static inline int64_t deadline_from(int64_t now, int64_t timeout_ns)
{
  if (timeout_ns < 0)
    return -1;
  return timeout_ns <= INT64_MAX - now ? now + timeout_ns : -1; /* past the end of time: none */
}

int64_t sm_sched_deadline(int64_t timeout_ns)
{
  return timeout_ns < 0 ? -1 : deadline_from(smarm_now_ns(), timeout_ns);
}

int64_t sm_sched_actor_deadline(sched_t *s, int64_t timeout_ns)
{
  if (timeout_ns < 0)
    return -1;
  return deadline_from(SMARM_UNLIKELY(s->virtual_time) ? vclock_now(&s->rt->vclock)
                                                       : smarm_now_ns(),
                       timeout_ns);
}

/* A call's wait for its answer (smarm_receive_after), when a second or more, counts from the
** coarse clock, which costs a fifth of the precise one: the default 5 s timeout read the precise
** clock on every call, 5% of a call on one scheduler. The coarse clock is the precise one as of
** the kernel's last tick, so it lags by less than a tick (its resolution) while the kernel keeps
** time on time: two ticks added make the deadline no earlier than the precise clock's now plus
** the timeout. A guest whose host holds back the CPU that keeps its time lags more (CI's
** loaded VM once saw a 1 s wait end early with two ticks of 4 ms): 1/64 of the timeout more
** covers such a stall of up to 15 ms a second, and ends a 5 s call at most 86 ms late
** (smarm.h). Only calls: a sleep, a receive and a message timer keep the precise clock, which
** nothing can make early. */
#define COARSE_TIMEOUT_NS INT64_C(1000000000)

int64_t sm_sched_coarse_slack(void)
{
  struct timespec res;
  if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) != 0 || res.tv_sec != 0)
    return -1; /* not to be used */
  return 2 * (int64_t)res.tv_nsec;
}

int64_t sm_sched_call_deadline(sched_t *s, int64_t timeout_ns)
{
  int64_t slack = s->rt->coarse_slack_ns;
  if (timeout_ns >= COARSE_TIMEOUT_NS && slack >= 0 && SMARM_LIKELY(!s->virtual_time))
    return deadline_from(smarm_coarse_now_ns() + slack + (timeout_ns >> 6), timeout_ns);
  return sm_sched_actor_deadline(s, timeout_ns);
}

int sm_sched_park_until(sched_t *s, actor_t *self, uint8_t state, int64_t deadline)
{
  if (SMARM_UNLIKELY(self->exit_pending)) /* a death noted at a poll comes before any wait */
    sm_sched_die_pending(s, self);
  if (deadline >= 0) {
    self->timer.deadline = deadline;
    int rc = sm_timer_add(timer_heap_of(s, state), &self->timer);
    if (rc < 0)
      return rc;
  }
  SMARM_ASSERT(!self->timed_out); /* only this function's timer sets it, and it clears it */
  self->state = state;
  if (SMARM_UNLIKELY(state == ACTOR_WAIT_WAKE)) {
    /* Waiting outside (IO, another thread): the virtual clock may not jump meanwhile. The count
    ** comes down when it runs again, so after its wake was taken in (vclock.c, J1). */
    s->outside_waits++;
    sm_sched_park_undying(s, self);
    s->outside_waits--;
    if (SMARM_UNLIKELY(self->exit_pending))
      sm_sched_die_pending(s, self);
  } else {
    sm_sched_park(s, self); /* woken (the timer removed) or by the timer */
  }
  int expired = self->timed_out;
  self->timed_out = 0;
  return expired;
}

int smarm_sleep(int64_t ns)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  if (ns <= 0) {
    smarm_yield();
    return 0;
  }
  int rc = sm_sched_park_until(s, self, ACTOR_SLEEPING, sm_sched_actor_deadline(s, ns));
  return rc < 0 ? rc : 0;
}

uint64_t smarm_await_token(void)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return 0;
  return self->await_token += 1; /* starts at 1: 0 is never a token */
}

int smarm_await(uint64_t token, int64_t timeout_ns)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  if (token == 0 || token != self->await_token)
    return -EINVAL;
  if (inbox_maybe_nonempty(&s->inbox))
    sm_sched_take_inbox(s); /* the wake may be there already */
  if (SMARM_UNLIKELY(self->exit_pending) && timeout_ns != 0) /* a call that may park may die */
    sm_sched_die_pending(s, self);
  if (self->await_woken == token)
    return 0;
  if (timeout_ns == 0)
    return -ETIMEDOUT;
  int rc = sm_sched_park_until(s, self, ACTOR_WAIT_WAKE, sm_sched_deadline(timeout_ns));
  if (rc < 0)
    return rc;
  return self->await_woken == token ? 0 : -ETIMEDOUT;
}

void smarm_cleanup_push(smarm_cleanup_t *c)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return;
  c->next = self->cleanups;
  self->cleanups = c;
}

void smarm_cleanup_pop(smarm_cleanup_t *c)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return;
  SMARM_CHECK(self->cleanups == c, "smarm_cleanup_pop of a cleanup that is not the last pushed");
  self->cleanups = c->next;
}

void smarm_exit(void)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (self)
    exit_as_set(s, self);
}

void smarm_exit_reason(int code, const void *data, size_t size)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self || !sm_faults_valid_reason(code, data, size))
    return;
  actor_exit(s, self, code, data, size);
}

smarm_pid_t smarm_self(void)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  return self ? self->pid : 0;
}

size_t smarm_stack_headroom(void)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return SIZE_MAX;
  char *here = __builtin_frame_address(0);
  char *lo = self->slot->lo;
  return here > lo ? (size_t)(here - lo) : 0;
}

void *smarm_actor_data(void)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  return self ? self->data : NULL;
}

void smarm_actor_set_data(void *data)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (self)
    self->data = data;
}

/* The store is gone once the actors are (sm_sched_destroy_actors), before on_sched_stop runs. */
void *smarm_local_alloc(size_t len)
{
  sched_t *s = sm_sched_tls;
  return s && s->store.chunk ? sm_store_alloc(&s->store, 0, len) : NULL;
}

void smarm_local_free(void *block, size_t len)
{
  sched_t *s = sm_sched_tls;
  if (block && s && s->store.chunk)
    sm_store_free(&s->store, block, len);
}

int smarm_sched_index(void) { return sm_sched_tls ? (int)sm_sched_tls->index : -1; }

void *smarm_sched_data(void) { return sm_sched_tls ? sm_sched_tls->data : NULL; }

void smarm_sched_set_data(void *data)
{
  if (sm_sched_tls)
    sm_sched_tls->data = data;
}

int smarm_spawn(smarm_actor_fn fn, void *arg, const smarm_spawn_opts_t *opts,
                smarm_pid_t *pid_out)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  if (opts && opts->name && !sm_names_valid(opts->name))
    return -EINVAL;
  spawn_ties_t ties;
  spawn_ties_fill(&ties, self, opts);
  int rc = sm_sched_spawn_local(s, fn, arg, opts ? opts->stack_size : 0, opts ? opts->data : NULL,
                                &ties, pid_out);
  if (rc == 0 && ties.monitor)
    *opts->monitor = ties.monitor;
  return rc;
}

/* ---- Setup and teardown -------------------------------------------------------------------- */

void sm_sched_init(sched_t *s, runtime_t *rt, unsigned index)
{
  memset(s, 0, sizeof *s);
  sm_inbox_init(&s->inbox);
  s->index = index;
  s->rt = rt;
  s->spin_ns = rt->cfg.spin_ns;
  s->default_stack = rt->cfg.stack_size;
  sm_timer_heap_init(&s->timers);
  sm_timer_heap_init(&s->vtimers);
  sm_timer_heap_init(&s->msg_timers);
  s->name_timers = NULL;
  s->table.gen_base = rt->gen_base;
  if (rt->cfg.seed) { /* splitmix64 of the seed: nearby seeds give unrelated draws; never 0 */
    uint64_t z = rt->cfg.seed + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    s->rng = (z ^ (z >> 31)) | 1;
  }
  unsigned budget = rt->cfg.max_stacks / rt->nsched;
  sm_stack_pool_init(&s->stacks, budget ? budget : 1);
  sm_store_init(&s->store);
}

void sm_sched_destroy_actors(sched_t *s)
{
  if (s->zombie)
    sched_bury(s);
  sm_timer_heap_destroy(&s->timers); /* they point into the actors freed below */
  sm_timer_heap_destroy(&s->vtimers);
  /* Cleanups live on their actor's stack. Stopping allocates nothing: first those of the actors
  ** whose bytes are in place, then the others', each brought back over an occupant whose
  ** cleanups have run (the first pass, or an earlier one of this), so whose bytes can go. */
  for (uint32_t i = 0; i < s->table.used; i++) {
    actor_t *a = s->table.entries[i].actor;
    if (a && a->cleanups && a->slot->occupant == a) /* cleanups: it ran, so it has a slot */
      run_cleanups(a);
  }
  for (uint32_t i = 0; i < s->table.used; i++) {
    actor_t *a = s->table.entries[i].actor;
    if (a && a->cleanups) {
      make_resident(s, a, 1);
      run_cleanups(a);
    }
  }
  for (uint32_t i = 0; i < s->table.used; i++) {
    actor_t *a = s->table.entries[i].actor;
    if (!a)
      continue;
    if (a->data && s->rt->cfg.on_actor_stopped)
      s->rt->cfg.on_actor_stopped(a->data, s->rt->cfg.userdata);
    sm_faults_destroy(s, a);
    sm_msg_timers_on_death(s, a);
    mailbox_clear(&a->mailbox);
    if (a->slot) { /* else it never ran: no stack, no fiber */
      sm_stack_drop_saved(&s->store, a->saved, a->saved_len);
      if (a->slot->occupant == a)
        a->slot->occupant = NULL;
      sm_stack_unbind(&s->stacks, a->slot);
      fiber_destroy(&a->fiber);
    }
    sm_store_free(&s->store, a, RECORD_BYTES);
    s->table.entries[i].actor = NULL;
  }
  stat_add(&s->stats.live, -atomic_load_explicit(&s->stats.live, memory_order_relaxed));
  sm_name_cache_destroy(&s->names);
  reftab_destroy(&s->watching);
  reftab_destroy(&s->watchers);
  sm_msg_timers_destroy(s);
  sm_timer_heap_destroy(&s->msg_timers); /* emptied with the actors above and the line above */
  reftab_destroy(&s->msg_timer_refs);
  sm_faults_free_spares(s);
  sm_sched_free_reserves(s);
  sm_msg_free_chain(s->deferred); /* demonitors for records that end with their schedulers */
  s->deferred = s->deferred_tail = NULL;
  s->ndeferred = 0;
  note_generations_used(&s->table);
  free(s->table.entries);
  memset(&s->table, 0, sizeof s->table);
  s->run_head = s->run_tail = s->handoff = s->spawn_after = s->ahead_last = NULL;
  s->ahead = 0;
  sm_stack_pool_destroy(&s->stacks);
  sm_store_destroy(&s->store); /* every record and saved stack went back above */
}

void sm_sched_drain_and_free(sched_t *s)
{
  smarm_msg_t *m = sm_inbox_take_all(&s->inbox);
  while (m) {
    smarm_msg_t *next = m->next;
    if (m->kind == MSG_VCLOCK) { /* the scheduler's wake-up item: sm_vclock_destroy frees it */
      m = next;
      continue;
    }
    if (m->kind == MSG_SPAWN_CARRIED) { /* the block is the actor's arg */
      sm_sched_spawn_carried_free(s, m);
      m = next;
      continue;
    }
    if (m->kind == MSG_TIMER_SET) /* it holds a message of its own */
      sm_msg_timer_request_free(m);
    else if (m->kind == MSG_SPAWN || m->kind == MSG_SPAWN_REPLY)
      sm_sched_spawn_request_free(s, m); /* its data, if no actor took it */
    sm_msg_release(m);
    m = next;
  }
}
