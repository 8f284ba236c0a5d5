/*
** The entry points that any thread may call while a runtime runs, or at any time: smarm_stop,
** smarm_wake and smarm_wake_many (the IO thread's completions), smarm_send_outside (messages
** from threads that are no actors), smarm_stats_read and smarm_sched_count. The others that may
** be called from any thread are smarm_make_ref (faults.c, one atomic counter),
** smarm_whereis_outside (names.c, through sm_runtime_enter like those here) and the message
** blocks' functions (message.c); the rest of the core runs on the scheduler threads.
**
** Such a caller must never touch a runtime that smarm_run() has freed. It reaches the runtime
** through sm_runtime_enter()/sm_runtime_leave(), which count it in runtime_users; smarm_run()
** clears runtime_current, waits for the count to reach zero, and only then drains the inboxes and
** frees the runtime. Between enter and leave a caller only pushes onto inboxes (which take any
** thread's pushes, inbox.h) and reads relaxed statistics.
*/
#include "runtime.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

/* Set while a runtime runs (sm_runtime_publish); read by the entry points above from any thread.
** Such a reader may still be using the runtime when smarm_run() wants to free it, so readers
** announce themselves in runtime_users around the use (sm_runtime_enter/leave), and smarm_run()
** frees only after clearing runtime_current and seeing runtime_users at zero.
** Both sides store before they load, all seq_cst (the Dekker pattern of inbox.h): either the
** reader sees NULL, or smarm_run() sees the reader's count and waits for it. */
static _Atomic(runtime_t *) runtime_current;
static _Atomic int runtime_users;

runtime_t *sm_runtime_enter(void)
{
  atomic_fetch_add_explicit(&runtime_users, 1, memory_order_seq_cst);
  runtime_t *rt = atomic_load_explicit(&runtime_current, memory_order_seq_cst);
  if (!rt)
    atomic_fetch_sub_explicit(&runtime_users, 1, memory_order_release);
  return rt;
}

void sm_runtime_leave(void) { atomic_fetch_sub_explicit(&runtime_users, 1, memory_order_release); }

void sm_runtime_publish(runtime_t *rt)
{
  atomic_store_explicit(&runtime_current, rt, memory_order_seq_cst);
}

void sm_runtime_unpublish(void)
{
  atomic_exchange_explicit(&runtime_current, NULL, memory_order_seq_cst); /* an RMW: inbox.h */
  while (atomic_load_explicit(&runtime_users, memory_order_seq_cst) != 0)
    sched_yield();
}

void sm_runtime_request_stop(runtime_t *rt)
{
  if (atomic_exchange_explicit(&rt->stop_requested, 1, memory_order_acq_rel))
    return;
  for (unsigned k = 0; k < rt->nsched; k++) { /* made at start: a stop needs no memory */
    smarm_msg_t *m = rt->stop_items[k];
    rt->stop_items[k] = NULL;
    sm_inbox_push(&rt->scheds[k].inbox, m);
  }
}

void smarm_stop(void)
{
  runtime_t *rt = sm_runtime_enter();
  if (!rt)
    return;
  sm_runtime_request_stop(rt);
  sm_runtime_leave();
  if (smarm_self()) {
    /* An actor asked: its scheduler's inbox now holds the stop item, which its next decision
    ** takes in; it then leaves this actor for good (released with the others). */
    smarm_yield();
    SMARM_CHECK(0, "a stopped actor was resumed");
  }
}

unsigned smarm_sched_count(void)
{
  /* A scheduler thread's runtime lives while the thread runs: no need to count the caller in
  ** runtime_users, a line every thread's call would take in turn (spawn_on checks its argument
  ** with this, every time). */
  if (sm_sched_tls)
    return sm_sched_tls->rt->nsched;
  runtime_t *rt = sm_runtime_enter();
  if (!rt)
    return 0;
  unsigned n = rt->nsched;
  sm_runtime_leave();
  return n;
}

int smarm_stats_read(int sched, smarm_stats_t *out)
{
  runtime_t *rt = sm_runtime_enter();
  if (!rt)
    return -EPERM;
  if (!out || sched < -1 || sched >= (int)rt->nsched) {
    sm_runtime_leave();
    return -EINVAL;
  }
  memset(out, 0, sizeof *out);
  for (unsigned k = 0; k < rt->nsched; k++) {
    if (sched >= 0 && (unsigned)sched != k)
      continue;
    sched_stats_t *st = &rt->scheds[k].stats;
#define READ(f) out->f += atomic_load_explicit(&st->f, memory_order_relaxed)
    READ(switches);
    READ(parks);
    READ(wakes);
    READ(remote_sent);
    READ(stack_saves);
    READ(spawned);
    READ(live);
    READ(stacks);
    READ(preempts);
    READ(preempt_wait_ns);
    READ(preempts_timed);
    READ(sent);
    READ(received);
    READ(runq);
    READ(timers);
    READ(saved_stacks);
    READ(spin_pauses);
#undef READ
    /* busy = wall - idle, the idle wait under way included (sched_stats_t: the pair's order) */
    int64_t started = atomic_load_explicit(&st->started_ns, memory_order_relaxed);
    if (!started)
      continue;
    int64_t now = smarm_now_ns();
    uint64_t idle = atomic_load_explicit(&st->idle_ns, memory_order_acquire);
    int64_t since = atomic_load_explicit(&st->idle_since, memory_order_relaxed);
    if (since && now > since)
      idle += (uint64_t)(now - since);
    uint64_t wall = now > started ? (uint64_t)(now - started) : 0;
    out->wall_ns += wall;
    out->busy_ns += idle < wall ? wall - idle : 0;
  }
  sm_runtime_leave();
  return 0;
}

int smarm_wake(smarm_pid_t pid, uint64_t token) { return smarm_wake_many(&pid, &token, 1); }

/* Any thread reaches the actors' schedulers through the runtime's users count (above):
** either it sees no runtime, or scheduler 0 waits for it before draining inboxes. The wakes are
** chained per scheduler (newest first, so that each scheduler takes them in order) and each
** chain goes out in one push; a scheduler caller counts them in its own statistics. */
int smarm_wake_many(const smarm_pid_t *pids, const uint64_t *tokens, size_t n)
{
  if (n == 0)
    return 0;
  runtime_t *rt = sm_runtime_enter();
  if (!rt)
    return -ESRCH;
  struct chain {
    sched_t *target;
    smarm_msg_t *newest, *oldest;
  } chains[8];
  int nchains = 0, rc = 0;
  sched_t *self = sm_sched_tls;
  for (size_t i = 0; i <= n; i++) {
    /* past the last pair, or no room for one more scheduler: push what is chained */
    if (i == n || nchains == (int)(sizeof chains / sizeof *chains)) {
      for (int c = 0; c < nchains; c++) {
        int woke = sm_inbox_push_chain(&chains[c].target->inbox, chains[c].newest,
                                       chains[c].oldest);
        if (self) {
          stat_add(&self->stats.wakes, (uint64_t)woke);
          stat_add(&self->stats.remote_sent, 1);
        }
      }
      nchains = 0;
      if (i == n)
        break;
    }
    unsigned k = smarm_pid_sched(pids[i]);
    if (k >= rt->nsched || smarm_pid_gen(pids[i]) == 0) {
      rc = rc ? rc : -EINVAL;
      continue;
    }
    smarm_msg_t *m = sm_msg_new(MSG_WAKE, sizeof tokens[i]);
    if (!m) {
      rc = rc ? rc : -ENOMEM;
      continue;
    }
    memcpy(m->data, &tokens[i], sizeof tokens[i]);
    m->to = pids[i];
    int c = 0;
    while (c < nchains && chains[c].target != &rt->scheds[k])
      c++;
    if (c == nchains)
      chains[nchains++] = (struct chain){&rt->scheds[k], NULL, m};
    m->next = chains[c].newest;
    chains[c].newest = m;
  }
  sm_runtime_leave();
  return rc;
}

int sm_runtime_push_outside(smarm_msg_t *m)
{
  runtime_t *rt = sm_runtime_enter();
  if (!rt)
    return -ESRCH;
  unsigned k = smarm_pid_sched(m->to);
  if (k >= rt->nsched) {
    sm_runtime_leave();
    return -ESRCH;
  }
  m->next = NULL;
  sm_inbox_push_chain(&rt->scheds[k].inbox, m, m);
  sm_runtime_leave();
  return 0;
}

/* Pushes msg onto the receiver's scheduler's inbox as one item: that scheduler delivers it as it
** delivers another scheduler's message (intersched.c, MSG_USER). The inbox keeps one producer's
** pushes in order, so one thread's messages to one receiver keep theirs. */
int smarm_send_outside(smarm_pid_t to, smarm_msg_t *msg)
{
  if (!msg || smarm_pid_gen(to) == 0)
    return -EINVAL;
  msg->kind = MSG_USER;
  msg->from = 0;
  msg->to = to;
  return sm_runtime_push_outside(msg);
}
