/*
** Looking at actors (smarm.h, "Looking at actors"): what a scheduler tells of its own actors.
** Only the owner reads its table and its actors, so nothing here crosses threads; a caller on
** another scheduler asks from an actor spawned on the owner (the Lua binding's smarm.info).
*/
#include "names.h"
#include "runtime.h"
#include "sched.h"

#include <errno.h>

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
