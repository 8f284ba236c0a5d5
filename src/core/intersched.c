/*
** The protocol between schedulers: everything one scheduler's inbox carries from other threads,
** and how its owner delivers each item.
**
** Items are message blocks of the kinds in message.h. Messages (MSG_USER) go to the receiver's
** mailbox; wakes (MSG_WAKE, from smarm_wake on any thread) to an actor awaiting that token;
** requests (MSG_SPAWN, MSG_ALIVE, MSG_REGISTER, MSG_TIMER_*) are answered with their own block
** turned into a reply to the asking actor, which waits parked in ACTOR_WAIT_REPLY (but a
** MSG_SPAWN into a pid set aside ahead, below, has nobody waiting); MSG_RESERVE is answered to
** the asking scheduler (MSG_RESERVED); MSG_STOP ends the
** scheduler's loop; the signals between actors (SIG_*: links, monitors, exit signals, replies
** to calls) go to faults.c.
** Only the owner of a scheduler touches its actors, so every question about them (may I spawn
** here, is this pid alive) travels as such a request.
**
** Requests that time out. A scheduler answers between its actors' slices, so a request waits
** long only on a scheduler stuck in C (a long FFI call, a blocking library). The asker waits at
** most the config's request_timeout_ns and then goes on with -ETIMEDOUT; the request stays in
** that scheduler's inbox and takes effect when it gets to it. So that its late answer is not
** taken for the answer to a later request, each request carries its asker's ask_token (in its
** answer slot until answered, in the reply's `from` after): an answer whose token is not the one
** its asker waits for is dropped. A late spawn's reply that reports a failure hands the spawn's
** data to on_actor_stopped, as for an actor stopped before it ran (the asker left it with us).
**
** Order: one producer's pushes onto one inbox are taken in push order (inbox.h), and an actor
** never changes scheduler, so whatever one actor sends another (messages, requests) arrives in
** the order sent.
**
** Everything here runs on a scheduler thread; sm_sched_push_remote() is how a scheduler writes
** another's inbox (any thread's wakes go through any_thread.c, the stop items too).
**
** Deferred items. A demonitor's SIG_DEMONITOR only removes a record nobody waits on, so it is
** not pushed at once: it waits in the sender's `deferred` list (owner only) and rides in the
** same chain as the next push to its scheduler, ahead of it, so a remote call's demonitor costs
** no cache-line trip (nor wake-up) of its own. The list goes out quietly (no wake-up) when the
** scheduler goes idle, every TIMER_CHECK_TICKS decisions of a busy one (sched_poll), or when it
** holds SCHED_DEFERRED_MAX items; what is left at the end is freed with the scheduler. Until it
** arrives the target keeps the watcher's record: smarm_is_watched says 1 meanwhile, as it does
** for a demonitor still in flight. Order holds: every push from this scheduler to that one goes through
** sm_sched_push_remote, which sends that scheduler's deferred items first, in order, and a
** flush keeps their order. (Deferring a call's SIG_MONITOR the same way was measured slower:
** pushed at once, the server's scheduler records it while the caller encodes the request.)
*/
#include "faults.h"
#include "runtime.h"
#include "sched.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHED_DEFERRED_MAX 64

static unsigned target_of(const smarm_msg_t *m) { return smarm_pid_sched(m->to); }

void sm_sched_push_remote(sched_t *s, sched_t *target, smarm_msg_t *m)
{
  smarm_msg_t *oldest = m;
  if (SMARM_UNLIKELY(s->deferred != NULL)) {
    /* take target's deferred items out, oldest first, and chain them behind m (newest first) */
    smarm_msg_t *chain = NULL, **link = &s->deferred, *tail = NULL;
    oldest = NULL;
    while (*link) {
      smarm_msg_t *d = *link;
      if (target_of(d) == target->index) {
        *link = d->next;
        s->ndeferred--;
        d->next = chain;
        chain = d;
        if (!oldest)
          oldest = d;
      } else {
        tail = d;
        link = &d->next;
      }
    }
    s->deferred_tail = tail;
    m->next = chain;
    if (!oldest)
      oldest = m;
  }
  stat_add(&s->stats.remote_sent, 1); /* before the push, which publishes it (send_receive.c) */
  if (sm_inbox_push_chain(&target->inbox, m, oldest))
    stat_add(&s->stats.wakes, 1);
}

void sm_sched_flush_deferred(sched_t *s)
{
  while (s->deferred) {
    smarm_msg_t *d = s->deferred;
    s->deferred = d->next;
    sm_inbox_push_quiet(&s->rt->scheds[target_of(d)].inbox, d);
  }
  s->deferred_tail = NULL;
  s->ndeferred = 0;
}

void sm_sched_push_deferred(sched_t *s, smarm_msg_t *m)
{
  m->next = NULL;
  if (s->deferred_tail)
    s->deferred_tail->next = m;
  else
    s->deferred = m;
  s->deferred_tail = m;
  if (++s->ndeferred >= SCHED_DEFERRED_MAX)
    sm_sched_flush_deferred(s);
}

/* Every request's payload begins with the room for its answer. */
typedef struct spawn_request {
  int64_t answer; /* the new pid, or a negative errno */
  smarm_actor_fn fn;
  void *arg;
  size_t stack_size;
  void *data;
  spawn_ties_t ties;
  smarm_pid_t reserved; /* a pid set aside for it (no answer is sent); 0: the asker waits */
  int coming;           /* counted in the target's spawns_coming (a spawn on "any") */
  uint16_t kind;        /* MSG_SPAWN_CARRIED: the kind its block had, given back on arrival */
} spawn_request_t;

_Static_assert(sizeof(spawn_request_t) + _Alignof(spawn_request_t) - 1 <= SMARM_SPAWN_ROOM,
               "SMARM_SPAWN_ROOM holds a spawn request");

/* The request a MSG_SPAWN_CARRIED block carries at its end (smarm_spawn_on_block). */
static spawn_request_t *carried_request(smarm_msg_t *m)
{
  uintptr_t at = (uintptr_t)m->data + m->size - SMARM_SPAWN_ROOM;
  uintptr_t align = _Alignof(spawn_request_t);
  return (spawn_request_t *)((at + align - 1) & ~(align - 1));
}

/* ---- Spawns that do not wait ---------------------------------------------------------------
** A spawn on another scheduler needs no round trip when its pid is known ahead. Each scheduler
** keeps, per scheduler it spawns on, pids that one set aside for it (spawn_reserve_t, owner
** only). A spawn takes one and pushes a MSG_SPAWN carrying it (`reserved`); nothing answers.
** When fewer than RESERVE_BATCH are left, one MSG_RESERVE asks the target for RESERVE_BATCH
** more: the target takes that many free entries of its actor table (sm_sched_reserve_pid; they
** hold no actor, so each of those pids names nothing meanwhile, and they are on no free list,
** so nothing else takes them) and sends the block back as MSG_RESERVED. With none left (the
** first spawns, or a burst faster than the refills) the spawn asks and waits as before; so does
** a spawn with a name, whose "taken" must reach the caller.
**
** Why a pid may be handed out before its actor exists: whoever learns it learns it from the
** spawner, after the spawner pushed the MSG_SPAWN, and everything sent to that pid goes through
** the target's inbox, which is taken in push order (inbox.h) and delivered in that order. So the
** MSG_SPAWN comes before any message, signal or request naming the pid, from any scheduler.
**
** A spawn whose arg is a message block (smarm_spawn_on_block: a binding's encoded function and
** arguments) writes its request into the block's last SMARM_SPAWN_ROOM bytes and pushes the
** block itself as MSG_SPAWN_CARRIED: one block crosses, not two. Each block that crosses costs
** its cache lines' moves between cores, which dominate a spawn there (docs/perf.md). The target
** gives the block its own kind back before the actor gets it.
**
** Failure. The target cannot make the actor only for lack of memory. Its entry is then freed
** (the pid stays stale for ever), on_actor_stopped gets the spawn's data, and the spawner hears
** what its ties ask for: a link an exit signal, a monitor a DOWN, both with reason
** SMARM_EXIT_NOMEM (the spawner recorded its side of the ties before the push, so both find
** their records). Without ties nobody is there to tell: one line goes to stderr. */
#define RESERVE_BATCH 128

typedef struct spawn_reserve {
  uint32_t count;
  int asked; /* a MSG_RESERVE is on its way */
  smarm_pid_t pids[2 * RESERVE_BATCH];
} spawn_reserve_t;

typedef struct spawn_reserve_msg {
  unsigned asker, target; /* the scheduler the pids are for, and theirs */
  uint32_t count;  /* filled in by the target: at most RESERVE_BATCH, fewer when out of room */
  smarm_pid_t pids[RESERVE_BATCH];
} spawn_reserve_msg_t;

/* s's reserve for spawns on scheduler k, made on first need; NULL when out of memory. */
static spawn_reserve_t *reserve_of(sched_t *s, unsigned k)
{
  if (!s->reserves && !(s->reserves = calloc(s->rt->nsched, sizeof *s->reserves)))
    return NULL;
  if (!s->reserves[k])
    s->reserves[k] = calloc(1, sizeof *s->reserves[k]);
  return s->reserves[k];
}

void sm_sched_free_reserves(sched_t *s)
{
  sm_msg_free_chain(s->reserves_held); /* asks nobody answers now: they hold no pid yet */
  s->reserves_held = NULL;
  for (unsigned k = 0; s->reserves && k < s->rt->nsched; k++)
    free(s->reserves[k]);
  free(s->reserves);
  s->reserves = NULL;
}

/* A pid scheduler k set aside for s, or 0 (none left: the spawn waits for its answer). Asks for
** more when few are left. Called by the running actor: taking the inbox in here is what a yield
** does (a kill it brings is acted on at the actor's next park or yield). */
static smarm_pid_t reserved_pid(sched_t *s, unsigned k)
{
  spawn_reserve_t *r = reserve_of(s, k);
  if (!r)
    return 0;
  if (r->count < RESERVE_BATCH && !r->asked) {
    smarm_msg_t *m = sm_msg_new(MSG_RESERVE, sizeof(spawn_reserve_msg_t));
    if (m) {
      spawn_reserve_msg_t *q = (spawn_reserve_msg_t *)m->data;
      q->asker = s->index;
      q->target = k;
      q->count = 0;
      r->asked = 1;
      sm_sched_push_remote(s, &s->rt->scheds[k], m);
    }
  }
  if (!r->count && r->asked)
    sm_sched_take_inbox(s); /* the answer may be in already (a caller that never parks) */
  return r->count ? r->pids[--r->count] : 0;
}

void sm_sched_spawn_carried_free(sched_t *s, smarm_msg_t *m)
{
  spawn_request_t *req = carried_request(m);
  m->kind = req->kind;
  /* last: its owner may free the block, the request with it */
  if (req->data && s->rt->cfg.on_actor_stopped)
    s->rt->cfg.on_actor_stopped(req->data, s->rt->cfg.userdata);
}

/* Target side of a MSG_SPAWN into a reserved pid that found no memory (see above). */
static void reserved_spawn_failed(sched_t *s, spawn_request_t *req)
{
  if (req->data && s->rt->cfg.on_actor_stopped)
    s->rt->cfg.on_actor_stopped(req->data, s->rt->cfg.userdata);
  if (req->ties.parent)
    sm_faults_spawn_failed(s, req->reserved, &req->ties, SMARM_EXIT_NOMEM);
  else
    fprintf(stderr, "smarm: an actor spawned on scheduler %u could not start: not enough memory\n",
            s->index + 1);
}

/* Target side of a MSG_SPAWN or MSG_SPAWN_CARRIED into a reserved pid: nobody waits for it. */
static void spawn_reserved(sched_t *s, spawn_request_t *req)
{
  if (req->coming)
    atomic_fetch_sub_explicit(&s->spawns_coming, 1, memory_order_relaxed);
  if (sm_sched_spawn_reserved(s, req->reserved, req->fn, req->arg, req->stack_size, req->data,
                              &req->ties) < 0)
    reserved_spawn_failed(s, req);
}

/* Backpressure. A spawner that spawns on k faster than k runs what it spawned would leave an
** ever longer run queue there: a spawn_on loop of `function() end` measured 190,000 actors
** waiting for their first slice after 200,000 spawns, 66 MB, and each spawn slower as they left
** the caches. (A local spawn has no such problem: the child shares its spawner's CPU.) So k
** holds an ask for pids while more than SPAWN_BACKLOG actors wait in its run queue (and while
** it holds others: asks are answered in turn), and answers them once no more than that wait
** (looked at with the clock, sched_poll, and when idle). Meanwhile a spawner spends the pids it
** has and then spawns with a round trip each (the waiting spawn above, answered at once as
** ever), so nothing waits longer than before and no timeout is nearer: one spawn per switch of
** k. While each switch of k ends an actor, that bounds the queue one spawning actor can leave
** (SPAWN_BACKLOG plus the 255 pids a reserve holds, plus one); a switch that preempts one lets
** one more in, and several actors spawning at once get one spawn each per switch: slowed, not
** bounded. The run queue counts k's own actors too: a busy k slows spawns from elsewhere the
** same way. */
#define SPAWN_BACKLOG 1024

static uint64_t runq_length(sched_t *s)
{
  return atomic_load_explicit(&s->stats.runq, memory_order_relaxed); /* our own count */
}

/* Target side of MSG_RESERVE: sets the pids aside and sends them back. */
static void reserve_answer_now(sched_t *s, smarm_msg_t *m)
{
  spawn_reserve_msg_t *q = (spawn_reserve_msg_t *)m->data;
  while (q->count < RESERVE_BATCH && sm_sched_reserve_pid(s, &q->pids[q->count]) == 0)
    q->count++;
  m->kind = MSG_RESERVED;
  sm_sched_push_remote(s, &s->rt->scheds[q->asker], m);
}

static void reserve_answer(sched_t *s, smarm_msg_t *m)
{
  if (s->reserves_held || runq_length(s) > SPAWN_BACKLOG) {
    m->next = s->reserves_held; /* newest first: answered oldest first */
    s->reserves_held = m;
    return;
  }
  reserve_answer_now(s, m);
}

void sm_sched_answer_held_reserves(sched_t *s)
{
  if (!s->reserves_held || runq_length(s) > SPAWN_BACKLOG)
    return;
  smarm_msg_t *m = NULL;
  while (s->reserves_held) { /* reversed: oldest first */
    smarm_msg_t *next = s->reserves_held->next;
    s->reserves_held->next = m;
    m = s->reserves_held;
    s->reserves_held = next;
  }
  while (m) {
    smarm_msg_t *next = m->next;
    reserve_answer_now(s, m);
    m = next;
  }
}

/* Asker side: the pids arrive. */
static void reserve_arrived(sched_t *s, smarm_msg_t *m)
{
  spawn_reserve_msg_t *q = (spawn_reserve_msg_t *)m->data;
  spawn_reserve_t *r = s->reserves[q->target]; /* made before it asked */
  for (uint32_t i = 0; i < q->count && r->count < 2 * RESERVE_BATCH; i++)
    r->pids[r->count++] = q->pids[i];
  r->asked = 0;
  sm_msg_release(m);
}

/* Answers a request from another scheduler's actor (m->from, parked in ACTOR_WAIT_REPLY unless
** it gave up) with the request's own block, as a reply of `kind`; the token that was in the
** answer slot goes to `from` (see the top). */
static void reply(sched_t *s, smarm_msg_t *m, uint16_t kind, int64_t answer)
{
  smarm_pid_t asker = m->from;
  uint64_t token;
  memcpy(&token, m->data, sizeof token);
  m->kind = kind;
  m->to = asker;
  m->from = token;
  memcpy(m->data, &answer, sizeof answer);
  sm_sched_push_remote(s, &s->rt->scheds[smarm_pid_sched(asker)], m);
}

static void deliver(sched_t *s, smarm_msg_t *m)
{
  actor_t *a;
  switch (m->kind) {
  case MSG_USER:
    a = sm_sched_lookup(s, m->to);
    if (!a) { /* the receiver died after the send: dropped, as documented */
      sm_msg_release(m);
      return;
    }
    sm_sched_deliver(s, a, m);
    return;
  case MSG_SPAWN: {
    spawn_request_t *req = (spawn_request_t *)m->data;
    if (req->reserved) { /* nobody waits (see "Spawns that do not wait") */
      spawn_reserved(s, req);
      sm_msg_release(m);
      return;
    }
    if (req->ties.name)
      req->ties.name = (const char *)(req + 1);
    smarm_pid_t pid = 0;
    int rc = sm_sched_spawn_local(s, req->fn, req->arg, req->stack_size, req->data, &req->ties,
                                  &pid);
    reply(s, m, MSG_SPAWN_REPLY, rc < 0 ? rc : (int64_t)pid);
    return;
  }
  case MSG_SPAWN_CARRIED: { /* the block is the actor's arg (req.arg): it goes on as its own
                             ** kind, and with the data if the actor cannot be made */
    spawn_request_t req = *carried_request(m);
    m->kind = req.kind;
    spawn_reserved(s, &req);
    return;
  }
  case MSG_ALIVE:
    reply(s, m, MSG_REPLY, sm_sched_lookup(s, m->to) != NULL);
    return;
  case MSG_TIMER_SET:
  case MSG_TIMER_CANCEL:
    reply(s, m, MSG_REPLY, sm_msg_timer_request(s, m));
    return;
  case MSG_REGISTER:
    a = sm_sched_lookup(s, m->to);
    reply(s, m, MSG_REPLY,
          a ? sm_names_register_local(s, a, (char *)m->data + sizeof(int64_t)) : -ESRCH);
    return;
  case MSG_REPLY:
  case MSG_SPAWN_REPLY: {
    int64_t answer;
    memcpy(&answer, m->data, sizeof answer);
    a = sm_sched_lookup(s, m->to);
    if (a && (a->state != ACTOR_WAIT_REPLY || a->ask_token != m->from))
      a = NULL; /* the asker gave up on this request (timed out), or ended */
    spawn_request_t *req = (spawn_request_t *)m->data;
    if (m->kind == MSG_SPAWN_REPLY && answer > 0) {
      /* The spawner's side of the ties, before anything the child sends can arrive. */
      if (req->ties.parent && a)
        SMARM_CHECK(sm_faults_tie_parent(s, a, (smarm_pid_t)answer, &req->ties) == 0,
                    "out of memory recording a spawn's link or monitor"); /* the child runs */
      else if (req->ties.parent) /* the spawner gave up, or was stopped: to the child's link
                                    ** it is gone (noproc), its monitor is dropped */
        sm_faults_untie_child(s, (smarm_pid_t)answer, &req->ties);
    } else if (m->kind == MSG_SPAWN_REPLY && !a) {
      sm_sched_spawn_request_free(s, m); /* a late failure (the top) */
    }
    if (a) {
      a->reply = answer;
      sm_sched_wake(s, a);
    }
    sm_msg_release(m);
    return;
  }
  case MSG_RESERVE:
    reserve_answer(s, m);
    return;
  case MSG_RESERVED:
    reserve_arrived(s, m);
    return;
  case MSG_DUMP:
    sm_sched_dump(s);
    sm_msg_release(m);
    return;
  case MSG_STOP:
    s->stopping = 1;
    sm_msg_release(m);
    return;
  case MSG_VCLOCK: /* it woke s for the virtual clock (vclock.c); its link was read */
    sm_vclock_poke_taken(s);
    return;
  case MSG_WAKE: {
    uint64_t token;
    memcpy(&token, m->data, sizeof token);
    a = sm_sched_lookup(s, m->to);
    sm_msg_release(m);
    if (!a || token != a->await_token)
      return; /* gone, or an await that timed out: nobody waits for it */
    a->await_woken = token; /* kept if the actor has not parked yet */
    if (a->state == ACTOR_WAIT_WAKE)
      sm_sched_wake(s, a);
    return;
  }
  default:
    sm_faults_deliver(s, m); /* the signals between actors */
  }
}

void sm_sched_take_inbox(sched_t *s)
{
  smarm_msg_t *m = sm_inbox_take_all(&s->inbox);
  while (m) {
    smarm_msg_t *next = m->next;
    deliver(s, m);
    m = next;
  }
}

/* The scheduler with the fewest live actors (and spawns on their way), ties going round robin;
** `advance`: move the round robin on (a spawn), else only look (smarm_sched_pick_any, so that
** the spawn that follows picks the same). */
static unsigned pick_any(sched_t *s, int advance)
{
  runtime_t *rt = s->rt;
  unsigned start = (advance ? atomic_fetch_add_explicit(&rt->spawn_rr, 1, memory_order_relaxed)
                            : atomic_load_explicit(&rt->spawn_rr, memory_order_relaxed)) %
                   rt->nsched;
  unsigned best = start;
  uint64_t best_live = UINT64_MAX;
  for (unsigned i = 0; i < rt->nsched; i++) {
    unsigned k = (start + i) % rt->nsched;
    uint64_t live = atomic_load_explicit(&rt->scheds[k].stats.live, memory_order_relaxed) +
                    (uint64_t)atomic_load_explicit(&rt->scheds[k].spawns_coming,
                                                   memory_order_relaxed);
    if (live < best_live) {
      best_live = live;
      best = k;
    }
  }
  return best;
}

void sm_sched_spawn_request_free(sched_t *s, smarm_msg_t *m)
{
  spawn_request_t *req = (spawn_request_t *)m->data;
  int64_t answer;
  memcpy(&answer, m->data, sizeof answer);
  if ((m->kind == MSG_SPAWN || answer < 0) && req->data && s->rt->cfg.on_actor_stopped)
    s->rt->cfg.on_actor_stopped(req->data, s->rt->cfg.userdata);
}

int64_t sm_sched_ask(sched_t *s, actor_t *self, unsigned k, smarm_msg_t *m)
{
  uint64_t token = ++self->ask_token;
  memcpy(m->data, &token, sizeof token); /* the answer slot carries it until answered */
  m->from = self->pid;
  int64_t deadline = sm_sched_deadline(s->rt->cfg.request_timeout_ns);
  if (deadline >= 0) {
    self->timer.deadline = deadline;
    if (sm_timer_add(&s->timers, &self->timer) < 0)
      deadline = -1; /* no room for a timer: wait without one, as with no limit */
  }
  self->state = ACTOR_WAIT_REPLY;
  sm_sched_push_remote(s, &s->rt->scheds[k], m);
  sm_sched_park_undying(s, self); /* a death waits for the caller's next park (sched.h) */
  if (self->timed_out) {
    self->timed_out = 0;
    return -ETIMEDOUT; /* the answer, when it comes, finds another token (the top) */
  }
  return self->reply;
}

/* smarm_spawn_on and smarm_spawn_on_block (block: arg, which may carry the request). */
static int spawn_on(int sched, smarm_actor_fn fn, void *arg, smarm_msg_t *block,
                    const smarm_spawn_opts_t *opts, smarm_pid_t *pid_out)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  size_t stack_size = opts ? opts->stack_size : 0;
  if (!fn || (stack_size && !sm_stack_round_size(&s->stacks, stack_size)) ||
      (opts && opts->name && !sm_names_valid(opts->name)) ||
      (block && block->size < SMARM_SPAWN_ROOM))
    return -EINVAL;
  int dying = self->exit_pending; /* on entry: one that reserved_pid's inbox look brings waits */
  int any = sched == SMARM_SCHED_ANY;
  if (any)
    sched = (int)pick_any(s, 1);
  if (sched < 0 || (unsigned)sched >= s->rt->nsched)
    return -EINVAL;
  smarm_ref_t monitor;
  int64_t answer;
  if ((unsigned)sched == s->index) {
    spawn_ties_t ties;
    spawn_ties_fill(&ties, self, opts);
    smarm_pid_t pid = 0;
    int rc = sm_sched_spawn_local(s, fn, arg, stack_size, opts ? opts->data : NULL, &ties, &pid);
    answer = rc < 0 ? rc : (int64_t)pid;
    monitor = ties.monitor;
  } else {
    const char *name = opts ? opts->name : NULL;
    size_t name_len = name ? strlen(name) + 1 : 0;
    void *data = opts ? opts->data : NULL;
    smarm_pid_t reserved = name_len ? 0 : reserved_pid(s, (unsigned)sched);
    if (!reserved && SMARM_UNLIKELY(dying)) { /* it would ask: it dies */
      if (data && s->rt->cfg.on_actor_stopped) /* as for a spawn that failed */
        s->rt->cfg.on_actor_stopped(data, s->rt->cfg.userdata);
      sm_sched_die_before_asking(s, self);
    }
    smarm_msg_t *m =
      reserved && block ? block : sm_msg_new(MSG_SPAWN, sizeof(spawn_request_t) + name_len);
    /* The request is written where it travels, field by field. One made on the stack and then
    ** copied was read back in wider loads than the stores that made it, which the CPU cannot
    ** forward: each waited for every older store to reach the cache, the block's among them,
    ** whose lines the target had read (a tenth of the spawner's time in `spawn_on.lua there`,
    ** docs/perf.md). */
    spawn_request_t *req = !m ? NULL : m == block ? carried_request(block)
                                                  : (spawn_request_t *)m->data;
    if (req)
      spawn_ties_fill(&req->ties, self, opts);
    if (!m || (reserved && req->ties.parent &&
               sm_faults_tie_parent(s, self, reserved, &req->ties) < 0)) {
      if (reserved) /* unused */
        s->reserves[sched]->pids[s->reserves[sched]->count++] = reserved;
      if (m && m != block)
        sm_msg_release(m);
      return -ENOMEM;
    }
    monitor = req->ties.monitor;
    req->answer = 0;
    req->fn = fn;
    req->arg = arg;
    req->stack_size = stack_size;
    req->data = data;
    req->reserved = reserved;
    req->coming = reserved && any;
    req->kind = m == block ? block->kind : 0;
    if (m == block)
      block->kind = MSG_SPAWN_CARRIED;
    else if (name_len) /* the request's ties.name points here */
      memcpy(req + 1, name, name_len);
    if (reserved) {
      if (req->coming) /* (read before the push: the block is the target's after it) */
        atomic_fetch_add_explicit(&s->rt->scheds[sched].spawns_coming, 1, memory_order_relaxed);
      sm_sched_push_remote(s, &s->rt->scheds[sched], m);
      answer = (int64_t)reserved;
    } else {
      answer = sm_sched_ask(s, self, (unsigned)sched, m);
    }
  }
  if (answer < 0)
    return (int)answer;
  if (pid_out)
    *pid_out = (smarm_pid_t)answer;
  if (monitor)
    *opts->monitor = monitor;
  return 0;
}

int smarm_spawn_on(int sched, smarm_actor_fn fn, void *arg, const smarm_spawn_opts_t *opts,
                   smarm_pid_t *pid_out)
{
  return spawn_on(sched, fn, arg, NULL, opts, pid_out);
}

int smarm_spawn_on_block(int sched, smarm_actor_fn fn, smarm_msg_t *block,
                         const smarm_spawn_opts_t *opts, smarm_pid_t *pid_out)
{
  if (!block)
    return -EINVAL;
  return spawn_on(sched, fn, block, block, opts, pid_out);
}

int smarm_sched_pick_any(int take)
{
  sched_t *s;
  if (!sched_self(&s))
    return -EPERM;
  return (int)pick_any(s, take);
}

int smarm_alive(smarm_pid_t pid)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  unsigned k = smarm_pid_sched(pid);
  if (k == s->index)
    return sm_sched_lookup(s, pid) != NULL;
  if (k >= s->rt->nsched)
    return 0;
  sm_sched_die_before_asking(s, self);
  smarm_msg_t *m = sm_msg_new(MSG_ALIVE, sizeof(int64_t));
  if (!m)
    return -ENOMEM;
  m->to = pid;
  return (int)sm_sched_ask(s, self, k, m);
}
