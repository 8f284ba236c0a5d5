/*
** Links, monitors, exit signals and the notices of an actor's death: Erlang's fault-handling
** contract (docs/design.md, "Faults"; the rules are summed up in smarm.h).
**
** Records. Each actor's side lives with the actor, on its scheduler: its links (an array of
** pids: linking is rare and an actor has few links), the monitors it holds and those held on it
** (monitor_t, in per-scheduler tables by ref and in the actor's two lists, so that a server
** watched by a hundred thousand callers still finds one in O(1) and a death walks only its own).
**
** Protocol. A link or monitor is recorded by the acting side first, then a signal tells the
** other side (SIG_LINK, SIG_MONITOR), whose scheduler records its half, or answers at once for
** an actor that is gone (an exit signal or a DOWN with reason NOPROC). When an actor dies it
** sends SIG_EXIT_LINK to each linked pid and SIG_DOWN to each watcher, and SIG_DEMONITOR for each
** monitor it held (so that long-lived targets do not keep dead watchers' records). A receiver
** acts on a link's exit signal or a DOWN only while its own half still exists: unlink and
** demonitor remove the half first, so a signal already on its way is dropped when it arrives
** (Erlang's "not yet received" rule), with no acknowledgement round trip.
**
** One race is accepted, as in Erlang before OTP 23: an actor that unlinks and links again while
** the other dies may see the first death's reason instead of NOPROC; it is an exit signal either
** way.
**
** Dying. An exit signal that must kill an actor other than the running one records the reason
** and makes the actor runnable (sm_faults_die_later); the actor then ends itself on its own stack
** like smarm_exit, so that whatever the binding keeps on it is released the usual way: when it
** resumes from a park (sm_sched_park), at every yield or call that may park (smarm_yield,
** sm_sched_park_until, a receive or await that may wait), before its function first runs, and
** when its function returns (the pending reason wins), and before a call asks another scheduler
** (sm_sched_die_before_asking). The wait for that answer (sm_sched_ask) is not such a point: its
** caller finishes taking the answer first. A poll (timeout 0) is not either: the Lua binding
** polls where parking is refused.
*/
#include "faults.h"

#include "alloc.h"
#include "runtime.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- Refs ---------------------------------------------------------------------------------- */

/* Refs come from one process-wide counter, which schedulers take in blocks so that making one
** costs no atomic operation; a foreign thread takes one at a time. A 64-bit counter never wraps
** in a process's life. */
#define REF_BLOCK 4096
static _Atomic uint64_t ref_counter = 1;

smarm_ref_t smarm_make_ref(void)
{
  sched_t *s = sm_sched_tls;
  if (!s)
    return atomic_fetch_add_explicit(&ref_counter, 1, memory_order_relaxed);
  if (s->ref_next == s->ref_end) {
    s->ref_next = atomic_fetch_add_explicit(&ref_counter, REF_BLOCK, memory_order_relaxed);
    s->ref_end = s->ref_next + REF_BLOCK;
  }
  return s->ref_next++;
}

/* ---- Records ------------------------------------------------------------------------------- */

actor_faults_t *sm_faults_of(actor_t *a)
{
  if (a->faults)
    return a->faults;
  sched_t *s = a->sched;
  actor_faults_t *f = s->spare_faults;
  if (f) {
    s->spare_faults = f->next_spare;
    s->nspare_faults--;
    memset(f, 0, sizeof *f);
  } else {
    f = sm_calloc(SM_ALLOC_FAULTS, 1, sizeof *f);
  }
  a->faults = f;
  return f;
}

static void faults_free(sched_t *s, actor_faults_t *f)
{
  if (s->nspare_faults < SM_SPARE_RECORDS) {
    f->next_spare = s->spare_faults;
    s->spare_faults = f;
    s->nspare_faults++;
  } else {
    free(f);
  }
}

static monitor_t *monitor_new(sched_t *s)
{
  monitor_t *m = s->spare_monitors;
  if (!m)
    return sm_alloc(SM_ALLOC_FAULTS, sizeof *m);
  s->spare_monitors = m->next;
  s->nspare_monitors--;
  return m;
}

static void monitor_free(sched_t *s, monitor_t *m)
{
  if (s->nspare_monitors < SM_SPARE_RECORDS) {
    m->next = s->spare_monitors;
    s->spare_monitors = m;
    s->nspare_monitors++;
  } else {
    free(m);
  }
}

void sm_faults_free_spares(sched_t *s)
{
  while (s->spare_monitors) {
    monitor_t *m = s->spare_monitors;
    s->spare_monitors = m->next;
    free(m);
  }
  while (s->spare_faults) {
    actor_faults_t *f = s->spare_faults;
    s->spare_faults = f->next_spare;
    free(f);
  }
  s->nspare_monitors = s->nspare_faults = 0;
}

static int links_find(const actor_faults_t *f, smarm_pid_t pid)
{
  for (uint32_t i = 0; f && i < f->nlinks; i++)
    if (f->links[i] == pid)
      return (int)i;
  return -1;
}

/* Adds pid to a's links (once). 0 or -ENOMEM. */
static int links_add(actor_t *a, smarm_pid_t pid)
{
  actor_faults_t *f = sm_faults_of(a);
  if (!f)
    return -ENOMEM;
  if (links_find(f, pid) >= 0)
    return 0;
  if (f->nlinks == f->links_cap) {
    uint32_t cap = f->links_cap ? f->links_cap * 2 : 4;
    smarm_pid_t *l = realloc(f->links, cap * sizeof *l);
    if (!l)
      return -ENOMEM;
    f->links = l;
    f->links_cap = cap;
  }
  f->links[f->nlinks++] = pid;
  return 0;
}

/* Removes pid from a's links; returns whether it was there. */
static int links_remove(actor_t *a, smarm_pid_t pid)
{
  actor_faults_t *f = a->faults;
  int i = links_find(f, pid);
  if (i < 0)
    return 0;
  f->links[i] = f->links[--f->nlinks];
  return 1;
}

/* Records a monitor on a's side. watching: a holds it on `other`; else `other` holds it on a. */
static int monitor_add(sched_t *s, actor_t *a, int watching, smarm_ref_t ref, smarm_pid_t other)
{
  actor_faults_t *f = sm_faults_of(a);
  monitor_t *m = f ? monitor_new(s) : NULL;
  if (!m)
    return -ENOMEM;
  m->node.key = ref;
  m->other = other;
  m->owner = a;
  if (reftab_insert(watching ? &s->watching : &s->watchers, &m->node) < 0) {
    monitor_free(s, m);
    return -ENOMEM;
  }
  monitor_t **head = watching ? &f->watching : &f->watchers;
  m->prev = NULL;
  m->next = *head;
  if (*head)
    (*head)->prev = m;
  *head = m;
  return 0;
}

static monitor_t *monitor_find(sched_t *s, int watching, smarm_ref_t ref)
{
  reftab_node_t *n = reftab_find(watching ? &s->watching : &s->watchers, ref);
  return n ? (monitor_t *)((char *)n - offsetof(monitor_t, node)) : NULL;
}

static void monitor_remove(sched_t *s, int watching, monitor_t *m)
{
  reftab_remove(watching ? &s->watching : &s->watchers, &m->node);
  actor_faults_t *f = m->owner->faults;
  if (m->prev)
    m->prev->next = m->next;
  else if (watching)
    f->watching = m->next;
  else
    f->watchers = m->next;
  if (m->next)
    m->next->prev = m->prev;
  monitor_free(s, m);
}

/* ---- Signals ------------------------------------------------------------------------------- */

static smarm_notice_t *notice_of(smarm_msg_t *m) { return (smarm_notice_t *)m->data; }

/* Whether a reason of that code has bytes (SMARM_EXIT_VALUE's value, SMARM_EXIT_TERM's term). */
static int reason_has_bytes(int code)
{
  return code == SMARM_EXIT_VALUE || code == SMARM_EXIT_TERM;
}

/* A signal block: a notice (pid, ref, reason), the reason's bytes, and room for `extra` more
** (smarm_signal_outside: the sender's pid). NULL when out of memory. */
static smarm_msg_t *signal_block(uint16_t kind, smarm_pid_t to, smarm_pid_t from, smarm_pid_t pid,
                                 smarm_ref_t ref, int code, const void *data, size_t size,
                                 size_t extra)
{
  if (!reason_has_bytes(code))
    size = 0;
  smarm_msg_t *m = sm_msg_new(kind, sizeof(smarm_notice_t) + size + extra);
  if (!m)
    return NULL;
  m->to = to;
  m->from = from;
  smarm_notice_t *n = notice_of(m);
  n->pid = pid;
  n->ref = ref;
  n->reason = code;
  n->size = (uint32_t)size;
  if (size)
    memcpy(n + 1, data, size);
  return m;
}

static smarm_msg_t *signal_new(uint16_t kind, smarm_pid_t to, smarm_pid_t from, smarm_pid_t pid,
                               smarm_ref_t ref, int code, const void *data, size_t size)
{
  return signal_block(kind, to, from, pid, ref, code, data, size, 0);
}

/* ---- Processes of other nodes ---------------------------------------------------------------
** Their pids are remote pids (smarm.h): the records here hold them like any pid, the signals to
** them go to the hook (the distribution, which speaks to the other node), and the other node's
** signals come back through smarm_signal_outside as blocks like ours, the sender's pid bytes
** after the reason for the notice the block may become. The hook may be set at any time (each Lua
** VM sets the same one as it loads): relaxed, a function pointer alone. */
static _Atomic(smarm_remote_hook_fn) remote_hook;

/* The paths of other nodes are `cold` (kept in .text.unlikely): what they add would otherwise
** move every hot function linked after this file (docs/perf.md: layout costs up to 10% there). */
#define REMOTE_PATH __attribute__((noinline, cold))

REMOTE_PATH void smarm_set_remote_hook(smarm_remote_hook_fn hook)
{
  atomic_store_explicit(&remote_hook, hook, memory_order_relaxed);
}

static const struct { uint16_t sig; int kind; } signal_kinds[] = {
  {SIG_EXIT, SMARM_SIG_EXIT},           {SIG_EXIT_LINK, SMARM_SIG_EXIT_LINK},
  {SIG_LINK, SMARM_SIG_LINK},           {SIG_UNLINK, SMARM_SIG_UNLINK},
  {SIG_MONITOR, SMARM_SIG_MONITOR},     {SIG_DEMONITOR, SMARM_SIG_DEMONITOR},
  {SIG_DOWN, SMARM_SIG_DOWN},           {SIG_WATCH, SMARM_SIG_WATCH},
};
#define NSIGNAL_KINDS (sizeof signal_kinds / sizeof signal_kinds[0])

REMOTE_PATH static void remote_call(const smarm_signal_t *sig)
{
  smarm_remote_hook_fn hook = atomic_load_explicit(&remote_hook, memory_order_relaxed);
  if (hook)
    hook(sig);
}

/* A signal to a remote pid: to the hook, then freed. */
REMOTE_PATH static void remote_out(smarm_msg_t *m)
{
  smarm_notice_t *n = notice_of(m);
  smarm_signal_t sig = {-1, m->from, m->to, n->ref, n->reason, n + 1, n->size};
  for (size_t i = 0; i < NSIGNAL_KINDS; i++)
    if (signal_kinds[i].sig == m->kind)
      sig.kind = signal_kinds[i].kind;
  if (sig.kind >= 0)
    remote_call(&sig);
  sm_msg_release(m);
}

/* Sends signal m to its `to`: handled here at once when that actor is ours, else pushed onto
** its scheduler's inbox, or handed to the remote hook. A pid of a scheduler this runtime lacks
** names nobody: dropped. */
static void signal_send(sched_t *s, smarm_msg_t *m)
{
  unsigned k = smarm_pid_sched(m->to);
  if (k == s->index)
    sm_faults_deliver(s, m);
  else if (k < s->rt->nsched && m->kind == SIG_DEMONITOR) /* nobody waits on it */
    sm_sched_push_deferred(s, m);
  else if (k < s->rt->nsched)
    sm_sched_push_remote(s, &s->rt->scheds[k], m);
  else if (k == SMARM_PID_SCHED_REMOTE)
    remote_out(m);
  else
    sm_faults_deliver(s, m); /* finds no actor: answered as for a dead one */
}

/* signal_new + signal_send, where nobody could be told of a failure. Out of memory, a
** demonitor is dropped (the target keeps a record of a watcher that is gone until it dies
** itself: its DOWN then finds nobody); a notice of a death whose reason's bytes find no room
** goes with reason SMARM_EXIT_NOMEM instead, a smaller block. Only when even that block cannot
** be had does the process end, with a clear message: a link or monitor told nothing of a death
** would wait for ever, and no caller is there to hear the error. */
static void signal_post(sched_t *s, uint16_t kind, smarm_pid_t to, smarm_pid_t from,
                        smarm_pid_t pid, smarm_ref_t ref, int code, const void *data, size_t size)
{
  smarm_msg_t *m = signal_new(kind, to, from, pid, ref, code, data, size);
  if (!m && kind == SIG_DEMONITOR)
    return;
  if (!m && reason_has_bytes(code))
    m = signal_new(kind, to, from, pid, ref, SMARM_EXIT_NOMEM, NULL, 0);
  SMARM_CHECK(m != NULL, "out of memory sending a link or monitor signal");
  signal_send(s, m);
}

/* Stores a reason in a->faults (copying its bytes). 0 or -ENOMEM. */
static int store_reason(actor_t *a, int code, const void *data, size_t size)
{
  actor_faults_t *f = sm_faults_of(a);
  void *copy = NULL;
  if (!reason_has_bytes(code))
    size = 0;
  if (!f || (size && !(copy = sm_alloc(SM_ALLOC_FAULTS, size)))) {
    free(copy);
    return -ENOMEM;
  }
  if (size)
    memcpy(copy, data, size);
  free(f->exit_data);
  f->exit_code = code;
  f->exit_data = copy;
  f->exit_size = (uint32_t)size;
  return 0;
}

void sm_faults_die_later(sched_t *s, actor_t *a, int code, const void *data, size_t size)
{
  if (a->state == ACTOR_DEAD || a->exit_pending)
    return;
  /* Out of memory, the death still happens, for a reason that says so: without room for the
  ** reason's bytes, SMARM_EXIT_NOMEM in the record; without a record at all (the actor has no
  ** links, monitors or name, so nobody hears the reason), exit_pending alone, which
  ** sm_sched_die_pending reads as SMARM_EXIT_NOMEM. */
  if (store_reason(a, code, data, size) < 0 && a->faults)
    store_reason(a, SMARM_EXIT_NOMEM, NULL, 0); /* no bytes to copy: cannot fail */
  if (a->faults)
    a->faults->reason_set = 0;
  a->exit_pending = 1;
  if (a->state != ACTOR_RUNNING && a->state != ACTOR_RUNNABLE && a->state != ACTOR_WAIT_REPLY)
    sm_sched_wake(s, a);
}

/* An exit signal reaches a (alive): drop it, turn it into an EXIT notice, or kill a. */
static void exit_signal_arrives(sched_t *s, actor_t *a, smarm_msg_t *m, int via_link)
{
  smarm_notice_t *n = notice_of(m);
  if (via_link && !(a->faults && links_remove(a, n->pid))) {
    sm_msg_release(m); /* unlinked meanwhile */
    return;
  }
  if (!via_link && n->reason == SMARM_EXIT_KILL) {
    sm_faults_die_later(s, a, SMARM_EXIT_KILLED, NULL, 0);
  } else if (a->trap_exit) {
    m->kind = MSG_EXIT_NOTICE;
    m->from = n->pid;
    n->ref = 0;
    sm_sched_deliver(s, a, m);
    return;
  } else if (n->reason != SMARM_EXIT_NORMAL || n->pid == a->pid) {
    sm_faults_die_later(s, a, n->reason, n + 1, n->size);
  }
  sm_msg_release(m);
}

/* A link or monitor request m cannot be recorded: its pid names nobody (NOPROC), or memory is
** out (NOMEM). The answer goes back to the asker in this very block, which needs no memory, as
** `kind` (an exit signal or a DOWN) with that reason: the asker's half goes as for a death. */
static void answer_failed(sched_t *s, smarm_msg_t *m, uint16_t kind, int reason)
{
  smarm_notice_t *n = notice_of(m);
  m->kind = kind;
  n->pid = m->to;
  n->reason = reason;
  m->to = m->from;
  m->from = n->pid;
  signal_send(s, m);
}

static void deliver_signal(sched_t *s, smarm_msg_t *m);

/* A signal from a process of another node is followed by SMARM_SIG_HANDLED to the hook, so that
** its remote pid outlives every record the signal touched (an unlink that comes in between finds
** the same remote pid, and so the record). */
REMOTE_PATH static void remote_handled(smarm_pid_t from)
{
  smarm_signal_t sig = {SMARM_SIG_HANDLED, from, 0, 0, SMARM_EXIT_NORMAL, NULL, 0};
  remote_call(&sig);
}

void sm_faults_deliver(sched_t *s, smarm_msg_t *m)
{
  smarm_pid_t from = m->from;
  deliver_signal(s, m);
  if (smarm_pid_is_remote(from))
    remote_handled(from);
}

static void deliver_signal(sched_t *s, smarm_msg_t *m)
{
  actor_t *a = sm_sched_lookup(s, m->to);
  smarm_notice_t *n = notice_of(m);
  monitor_t *mon;
  switch (m->kind) {
  case SIG_EXIT:
  case SIG_EXIT_LINK:
    if (a)
      exit_signal_arrives(s, a, m, m->kind == SIG_EXIT_LINK);
    else
      sm_msg_release(m);
    return;
  case SIG_LINK:
    if (!a || links_add(a, m->from) < 0) {
      answer_failed(s, m, SIG_EXIT_LINK, a ? SMARM_EXIT_NOMEM : SMARM_EXIT_NOPROC);
      return;
    }
    break;
  case SIG_UNLINK:
    if (a && a->faults)
      links_remove(a, m->from);
    break;
  case SIG_MONITOR:
    if (!a || monitor_add(s, a, 0, n->ref, m->from) < 0) {
      answer_failed(s, m, SIG_DOWN, a ? SMARM_EXIT_NOMEM : SMARM_EXIT_NOPROC);
      return;
    }
    break;
  case SIG_WATCH: /* another node watches a: the hook hears of its end */
    if (a && sm_faults_of(a)) {
      a->faults->watched_remotely = 1;
    } else {
      smarm_signal_t sig = {SMARM_SIG_WATCHED_DOWN, m->to, 0, 0,
                            a ? SMARM_EXIT_NOMEM : SMARM_EXIT_NOPROC, NULL, 0};
      remote_call(&sig);
    }
    break;
  case SIG_DEMONITOR: /* only the monitor its watcher placed on this target */
    if ((mon = monitor_find(s, 0, n->ref)) && mon->owner == a && mon->other == m->from)
      monitor_remove(s, 0, mon);
    break;
  case SIG_DOWN:
    mon = monitor_find(s, 1, n->ref);
    if (a && mon && mon->owner == a) {
      monitor_remove(s, 1, mon);
      m->kind = MSG_DOWN_NOTICE;
      m->from = n->pid;
      sm_sched_deliver(s, a, m);
      return;
    }
    break; /* demonitored, or the watcher is gone */
  case SIG_REPLY: {
    smarm_ref_t alias; /* the payload's last bytes (smarm_send_reply checked the size) */
    memcpy(&alias, m->data + m->size - sizeof alias, sizeof alias);
    mon = monitor_find(s, 1, alias);
    if (a && mon && mon->owner == a) {
      m->kind = MSG_REPLY_NOTICE;
      sm_sched_deliver(s, a, m);
      return;
    }
    break; /* the call gave up (or ended): nobody waits for it */
  }
  default:
    SMARM_CHECK(0, "not a signal");
  }
  sm_msg_release(m);
}

void sm_faults_on_death(sched_t *s, actor_t *a, int code, const void *data, size_t size)
{
  actor_faults_t *f = a->faults;
  if (!f)
    return;
  for (uint32_t i = 0; i < f->nlinks; i++)
    signal_post(s, SIG_EXIT_LINK, f->links[i], a->pid, a->pid, 0, code, data, size);
  while (f->watchers) {
    monitor_t *m = f->watchers;
    signal_post(s, SIG_DOWN, m->other, a->pid, a->pid, m->node.key, code, data, size);
    monitor_remove(s, 0, m);
  }
  while (f->watching) {
    monitor_t *m = f->watching;
    signal_post(s, SIG_DEMONITOR, m->other, a->pid, a->pid, m->node.key, SMARM_EXIT_NORMAL, NULL,
                0);
    monitor_remove(s, 1, m);
  }
  if (f->watched_remotely) {
    smarm_signal_t sig = {SMARM_SIG_WATCHED_DOWN, a->pid, 0, 0, code, data, size};
    remote_call(&sig);
  }
  sm_faults_destroy(s, a);
}

void sm_faults_destroy(sched_t *s, actor_t *a)
{
  actor_faults_t *f = a->faults;
  if (!f)
    return;
  while (f->watchers)
    monitor_remove(s, 0, f->watchers);
  while (f->watching)
    monitor_remove(s, 1, f->watching);
  free(f->links);
  free(f->name);
  free(f->exit_data);
  faults_free(s, f);
  a->faults = NULL;
}

/* ---- Spawning with ties -------------------------------------------------------------------- */

/* One side of a spawn's ties: a's link to `other` and its half of the monitor; all or nothing. */
static int tie(sched_t *s, actor_t *a, smarm_pid_t other, int watching, const spawn_ties_t *t)
{
  if (t->link && links_add(a, other) < 0)
    return -ENOMEM;
  if (t->monitor && monitor_add(s, a, watching, t->monitor, other) < 0) {
    if (t->link)
      links_remove(a, other);
    return -ENOMEM;
  }
  return 0;
}

int sm_faults_tie_child(sched_t *s, actor_t *child, const spawn_ties_t *t)
{
  return tie(s, child, t->parent, 0, t);
}

int sm_faults_tie_parent(sched_t *s, actor_t *parent, smarm_pid_t child, const spawn_ties_t *t)
{
  return tie(s, parent, child, 1, t);
}

void sm_faults_untie_child(sched_t *s, smarm_pid_t child, const spawn_ties_t *t)
{
  if (t->link)
    signal_post(s, SIG_EXIT_LINK, child, t->parent, t->parent, 0, SMARM_EXIT_NOPROC, NULL, 0);
  if (t->monitor)
    signal_post(s, SIG_DEMONITOR, child, t->parent, t->parent, t->monitor, SMARM_EXIT_NORMAL,
                NULL, 0);
}

void sm_faults_spawn_failed(sched_t *s, smarm_pid_t child, const spawn_ties_t *t, int code)
{
  if (t->link)
    signal_post(s, SIG_EXIT_LINK, t->parent, child, child, 0, code, NULL, 0);
  if (t->monitor)
    signal_post(s, SIG_DOWN, t->parent, child, child, t->monitor, code, NULL, 0);
}

/* ---- The public API ------------------------------------------------------------------------ */

int sm_faults_valid_reason(int code, const void *data, size_t size)
{
  return code >= SMARM_EXIT_NORMAL && code <= SMARM_EXIT_TERM && (data || !size) &&
         size <= UINT32_MAX;
}

int smarm_exit_signal(smarm_pid_t to, int code, const void *data, size_t size)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  if (smarm_pid_gen(to) == 0 || !sm_faults_valid_reason(code, data, size))
    return -EINVAL;
  smarm_msg_t *m = signal_new(SIG_EXIT, to, self->pid, self->pid, 0, code, data, size);
  if (!m)
    return -ENOMEM;
  signal_send(s, m);
  if (to == self->pid && self->exit_pending) /* a signal to oneself takes effect now */
    sm_sched_die_pending(s, self);
  return 0;
}

int smarm_set_exit_reason(int code, const void *data, size_t size)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  if (!sm_faults_valid_reason(code, data, size))
    return -EINVAL;
  if (self->exit_pending) /* a kill already decided how it ends */
    return 0;
  if (store_reason(self, code, data, size) < 0)
    return -ENOMEM;
  self->faults->reason_set = 1;
  return 0;
}

int smarm_exit_pending(void)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  return self && self->exit_pending;
}

int smarm_dying_reason(const void **data, size_t *size)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self || !self->dying)
    return -1;
  actor_faults_t *f = self->faults;
  *data = f ? f->exit_data : NULL;
  *size = f ? f->exit_size : 0;
  return f ? f->exit_code : SMARM_EXIT_NOMEM; /* no record: sm_sched_die_pending's NOMEM */
}

int smarm_is_watched(void)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  actor_faults_t *f = self ? self->faults : NULL;
  return f && (f->nlinks || f->watchers || f->watched_remotely);
}

int smarm_link(smarm_pid_t pid)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  if (smarm_pid_gen(pid) == 0 || pid == self->pid)
    return -EINVAL;
  if (self->faults && links_find(self->faults, pid) >= 0)
    return 0;
  smarm_msg_t *m = signal_new(SIG_LINK, pid, self->pid, self->pid, 0, SMARM_EXIT_NORMAL, NULL, 0);
  if (!m || links_add(self, pid) < 0) {
    sm_msg_release(m);
    return -ENOMEM;
  }
  signal_send(s, m);
  return 0;
}

int smarm_unlink(smarm_pid_t pid)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  if (!self->faults || !links_remove(self, pid))
    return 0;
  smarm_msg_t *m = signal_new(SIG_UNLINK, pid, self->pid, self->pid, 0, SMARM_EXIT_NORMAL, NULL, 0);
  if (!m) { /* without the signal the other side would keep its half: keep ours too */
    links_add(self, pid);
    return -ENOMEM;
  }
  signal_send(s, m);
  return 0;
}

int smarm_trap_exit(int on)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  int was = self->trap_exit;
  self->trap_exit = on != 0;
  return was;
}

int smarm_monitor(smarm_pid_t pid, smarm_ref_t *ref_out)
{
  if (!ref_out)
    return -EINVAL;
  smarm_ref_t ref = smarm_make_ref();
  int rc = smarm_monitor_ref(pid, ref);
  if (rc == 0)
    *ref_out = ref;
  return rc;
}

int smarm_monitor_ref(smarm_pid_t pid, smarm_ref_t ref)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  if (smarm_pid_gen(pid) == 0 || !ref || monitor_find(s, 1, ref))
    return -EINVAL;
  actor_t *target = sm_sched_lookup(s, pid);
  if (target) { /* ours and alive: both sides here and now, no signal block (a call's path) */
    if (monitor_add(s, self, 1, ref, pid) < 0)
      return -ENOMEM;
    if (monitor_add(s, target, 0, ref, self->pid) < 0) {
      monitor_remove(s, 1, monitor_find(s, 1, ref));
      return -ENOMEM;
    }
    return 0;
  }
  smarm_msg_t *m = signal_new(SIG_MONITOR, pid, self->pid, self->pid, ref, SMARM_EXIT_NORMAL,
                              NULL, 0);
  if (!m || monitor_add(s, self, 1, ref, pid) < 0) {
    sm_msg_release(m);
    return -ENOMEM;
  }
  signal_send(s, m);
  return 0;
}

/* For smarm_demonitor's flush: a DOWN notice of `ref` in the mailbox. */
static int is_down_of(const smarm_msg_t *m, void *ref)
{
  return m->kind == MSG_DOWN_NOTICE &&
         ((const smarm_notice_t *)m->data)->ref == *(smarm_ref_t *)ref;
}

int smarm_demonitor(smarm_ref_t ref, int flush)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  monitor_t *mon = monitor_find(s, 1, ref);
  int active = mon && mon->owner == self;
  if (active) {
    smarm_pid_t target = mon->other;
    monitor_remove(s, 1, mon);
    monitor_t *theirs;
    if (smarm_pid_sched(target) == s->index) { /* ours: its half goes here and now */
      if ((theirs = monitor_find(s, 0, ref)) && theirs->other == self->pid)
        monitor_remove(s, 0, theirs);
    } else {
      signal_post(s, SIG_DEMONITOR, target, self->pid, self->pid, ref, SMARM_EXIT_NORMAL, NULL,
                  0);
    }
  }
  if (flush && !active) { /* its DOWN arrived: it may be in the mailbox (one still in the inbox
                           ** was dropped when its monitor was, above) */
    for (smarm_msg_t **at = &self->mailbox.head; *at; at = &(*at)->next)
      if (is_down_of(*at, &ref)) {
        sm_msg_release(mailbox_take_at(&self->mailbox, at));
        break;
      }
  }
  return active;
}

int smarm_msg_kind(const smarm_msg_t *msg) { return msg->kind; }

REMOTE_PATH int smarm_signal_outside(const smarm_signal_t *sig, const void *pid_bytes,
                                     size_t pid_size)
{
  uint16_t kind = 0;
  for (size_t i = 0; i < NSIGNAL_KINDS; i++)
    if (signal_kinds[i].kind == sig->kind)
      kind = signal_kinds[i].sig;
  if (!kind || smarm_pid_gen(sig->to) == 0 || smarm_pid_is_remote(sig->to) ||
      !sm_faults_valid_reason(sig->reason, sig->data, sig->size) || pid_size > UINT32_MAX)
    return -EINVAL;
  smarm_msg_t *m = signal_block(kind, sig->to, sig->from, sig->from, sig->ref, sig->reason,
                                sig->data, sig->size, pid_size);
  if (!m)
    return -ENOMEM;
  if (pid_size) /* after the reason: the notice's pid (smarm.h, smarm_notice_t) */
    memcpy((char *)m->data + m->size - pid_size, pid_bytes, pid_size);
  int rc = sm_runtime_push_outside(m);
  if (rc < 0)
    sm_msg_release(m);
  return rc;
}
