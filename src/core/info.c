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

int smarm_actor_info(smarm_pid_t pid, smarm_actor_info_t *out)
{
  sched_t *s;
  if (!sched_self(&s))
    return -EPERM;
  if (smarm_pid_sched(pid) != s->index)
    return smarm_pid_sched(pid) < s->rt->nsched ? -EXDEV : -ESRCH;
  actor_t *a = sm_sched_lookup(s, pid);
  if (!a || a->state == ACTOR_DEAD)
    return -ESRCH;
  out->pid = pid;
  out->status = status_of(a);
  out->mailbox = a->mailbox.count + a->held;
  out->name = sm_names_held(s, a);
  out->data = a->data;
  return 0;
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
    smarm_actor_info_t info = {a->pid, status_of(a), a->mailbox.count + a->held,
                               sm_names_held(s, a), a->data};
    fprintf(stderr, "  actor <%u.%u.%u>: %s, %zu in its mailbox%s%s\n", smarm_pid_sched(a->pid) + 1,
            smarm_pid_slot(a->pid), smarm_pid_gen(a->pid), status_text[info.status], info.mailbox,
            info.name ? ", name " : "", info.name ? info.name : "");
    if (cfg->on_dump)
      cfg->on_dump(&info, cfg->userdata);
  }
  fflush(stderr);
  funlockfile(stderr);
}
