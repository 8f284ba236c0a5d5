/*
** Looking at actors (smarm.h, "Looking at actors"): what a scheduler tells of its own actors.
** Only the owner reads its table and its actors, so nothing here crosses threads; a caller on
** another scheduler asks from an actor spawned on the owner (the Lua binding's smarm.info).
*/
#define _POSIX_C_SOURCE 200809L /* flockfile */
#include "names.h"
#include "runtime.h"
#include "sched.h"

#include <errno.h>
#include <stdio.h>

static const char *const status_text[] = {
  [SMARM_ACTOR_RUNNING] = "running",          [SMARM_ACTOR_RUNNABLE] = "runnable",
  [SMARM_ACTOR_RECEIVING] = "waiting in receive", [SMARM_ACTOR_SLEEPING] = "waiting in sleep",
  [SMARM_ACTOR_ASKING] = "waiting for an answer", [SMARM_ACTOR_AWAITING] = "waiting in io",
};

static int status_of(const actor_t *a)
{
  switch (a->state) {
  case ACTOR_RUNNING: return SMARM_ACTOR_RUNNING;
  case ACTOR_WAIT_MSG: return SMARM_ACTOR_RECEIVING;
  case ACTOR_SLEEPING: return SMARM_ACTOR_SLEEPING;
  case ACTOR_WAIT_REPLY: return SMARM_ACTOR_ASKING;
  case ACTOR_WAIT_WAKE: return SMARM_ACTOR_AWAITING;
  default: return SMARM_ACTOR_RUNNABLE; /* new, or in the run queue */
  }
}

/* The live actor pid of the caller's scheduler, in *out; 0 or -EPERM, -EXDEV, -ESRCH. */
static int local_actor(smarm_pid_t pid, sched_t **s_out, actor_t **out)
{
  sched_t *s;
  if (!sched_self(&s))
    return -EPERM;
  if (smarm_pid_sched(pid) != s->index)
    return smarm_pid_sched(pid) < s->rt->nsched ? -EXDEV : -ESRCH;
  actor_t *a = sm_sched_lookup(s, pid);
  if (!a || a->state == ACTOR_DEAD)
    return -ESRCH;
  *s_out = s;
  *out = a;
  return 0;
}

/* Bytes of a's stack in use: its top down to its saved stack pointer (or the caller's frame). */
static size_t stack_used(const sched_t *s, const actor_t *a)
{
  if (!a->slot || a->state == ACTOR_NEW || (a->state == ACTOR_RUNNABLE && !a->scheduled))
    return 0;
  if (a->saved)
    return a->saved_len;
  const char *top = stack_top(a->slot);
  const char *sp = a == s->current ? (const char *)__builtin_frame_address(0)
                                   : (const char *)a->ctx.sp;
  return sp && sp < top ? (size_t)(top - sp) : 0;
}

static void fill_info(sched_t *s, actor_t *a, smarm_actor_info_t *out)
{
  out->pid = a->pid;
  out->status = status_of(a);
  out->mailbox = a->mailbox.count + a->held;
  out->name = sm_names_held(s, a);
  out->data = a->data;
  out->stack_size = a->slot ? a->slot->size : a->stack_size; /* not started: the size asked */
  out->stack_used = stack_used(s, a);
  out->scheduled = a->scheduled;
  out->cpu_ns = a->cpu_ns;
  out->spawner = a->spawner;
  out->spawned_ns = a->spawned_ns;
}

int smarm_actor_info(smarm_pid_t pid, smarm_actor_info_t *out)
{
  sched_t *s;
  actor_t *a;
  int rc = local_actor(pid, &s, &a);
  if (rc == 0)
    fill_info(s, a, out);
  return rc;
}

long smarm_actor_ties(smarm_pid_t pid, int which, smarm_pid_t *out, size_t cap)
{
  sched_t *s;
  actor_t *a;
  int rc = local_actor(pid, &s, &a);
  if (rc < 0)
    return rc;
  if (which != SMARM_TIES_LINKS && which != SMARM_TIES_MONITORS && which != SMARM_TIES_MONITORED_BY)
    return -EINVAL;
  const actor_faults_t *f = a->faults;
  size_t n = 0;
  if (!f)
    return 0;
  if (which == SMARM_TIES_LINKS) {
    for (uint32_t i = 0; i < f->nlinks; i++, n++)
      if (n < cap)
        out[n] = f->links[i];
    return (long)n;
  }
  for (const monitor_t *m = which == SMARM_TIES_MONITORS ? f->watching : f->watchers; m;
       m = m->next, n++)
    if (n < cap)
      out[n] = m->other;
  return (long)n;
}

long smarm_local_actors(smarm_pid_t *out, size_t cap)
{
  sched_t *s;
  if (!sched_self(&s))
    return -EPERM;
  size_t n = 0;
  for (uint32_t i = 0; i < s->table.used; i++) {
    const actor_t *a = s->table.entries[i].actor;
    if (!a || a->state == ACTOR_DEAD)
      continue;
    if (n < cap)
      out[n] = a->pid;
    n++;
  }
  return (long)n;
}

/* This scheduler's part of a dump (MSG_DUMP, between its actors): a header, then each live actor's
** line and cfg.on_dump's lines, under stderr's lock so that the parts of two schedulers do not
** interleave. */
void sm_sched_dump(sched_t *s)
{
  const smarm_config_t *cfg = &s->rt->cfg;
  flockfile(stderr);
  fprintf(stderr, "smarm: dump: scheduler %u of %u\n", s->index + 1, s->rt->nsched);
  for (uint32_t i = 0; i < s->table.used; i++) {
    actor_t *a = s->table.entries[i].actor;
    if (!a || a->state == ACTOR_DEAD)
      continue;
    smarm_actor_info_t info;
    fill_info(s, a, &info);
    fprintf(stderr, "  actor <%u.%u.%u>: %s, %zu in its mailbox%s%s\n", smarm_pid_sched(a->pid) + 1,
            smarm_pid_slot(a->pid), smarm_pid_gen(a->pid), status_text[info.status], info.mailbox,
            info.name ? ", name " : "", info.name ? info.name : "");
    if (cfg->on_dump)
      cfg->on_dump(&info, cfg->userdata);
  }
  fflush(stderr);
  funlockfile(stderr);
}
