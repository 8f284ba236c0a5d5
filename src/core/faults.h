/*
** Faults: links, monitors, exit signals and the notices an actor's death sends (faults.c).
**
** Everything here runs on the scheduler thread that owns the actors it touches. An actor's side
** of a link or monitor is recorded by its own scheduler; the two sides learn of each other
** through signals (SIG_* items, message.h), which travel like messages: directly into the
** handler when both actors share a scheduler, else through the other scheduler's inbox. Since
** everything one actor sends another takes one path, signals, messages and notices between a
** pair of actors arrive in the order sent.
*/
#ifndef SMARM_CORE_FAULTS_H
#define SMARM_CORE_FAULTS_H

#include "sched.h"

/* Who a new actor is tied to from its start (smarm_spawn_opts_t: link, monitor). */
typedef struct spawn_ties { /* struct tag declared in sched.h */
  smarm_pid_t parent; /* the spawning actor; 0: no ties */
  int link;
  smarm_ref_t monitor; /* 0: none */
  const char *name;    /* registered before it runs; NULL: none */
  int64_t slice_ns;    /* not ties, but they travel with them: smarm_spawn_opts_t's */
  size_t max_mailbox;
  smarm_pid_t spawner; /* who asked for it (smarm_actor_info); 0: not an actor */
} spawn_ties_t;

/* Writes into *t the ties that opts ask for, with a new ref for a monitor: field by field, where
** they are to stay (a spawn_on writes them into the block that travels: intersched.c). */
static inline void spawn_ties_fill(spawn_ties_t *t, const actor_t *self,
                                   const smarm_spawn_opts_t *opts)
{
  int tied = opts && (opts->link || opts->monitor);
  t->parent = tied ? self->pid : 0;
  t->link = tied && opts->link != 0;
  t->monitor = tied && opts->monitor ? smarm_make_ref() : 0;
  t->name = opts ? opts->name : NULL;
  t->slice_ns = opts ? opts->slice_ns : 0;
  t->max_mailbox = opts ? opts->max_mailbox : 0;
  t->spawner = self ? self->pid : 0;
}

/* a->faults, made on first need; NULL when out of memory. */
actor_faults_t *sm_faults_of(actor_t *a);

/* Whether (code, data, size) is a reason an actor may end with (SMARM_EXIT_*). */
int sm_faults_valid_reason(int code, const void *data, size_t size);

/* Handles a SIG_* item addressed to an actor of s (takes ownership of m). */
void sm_faults_deliver(sched_t *s, smarm_msg_t *m);

/* Makes `a` die with that reason when it next runs (at once if it is parked, except in
** ACTOR_WAIT_REPLY, which ends in one round trip). The first reason wins. */
void sm_faults_die_later(sched_t *s, actor_t *a, int code, const void *data, size_t size);

/* Called by the dying actor `a` (on its own stack, once its pid went stale and its name was
** released, so that whoever hears of the death finds it dead): sends every
** linked actor an exit signal and every watcher a DOWN, ends the monitors it holds, and frees
** a->faults. */
void sm_faults_on_death(sched_t *s, actor_t *a, int code, const void *data, size_t size);

/* The new actor's side of its ties (on the child's scheduler, before it can run), and the
** parent's side (on the parent's scheduler, when it learns the child's pid). Return 0 or
** -ENOMEM. */
int sm_faults_tie_child(sched_t *s, actor_t *child, const spawn_ties_t *t);
int sm_faults_tie_parent(sched_t *s, actor_t *parent, smarm_pid_t child, const spawn_ties_t *t);

/* The spawn failed or its parent is gone: undoes the child's side with signals. */
void sm_faults_untie_child(sched_t *s, smarm_pid_t child, const spawn_ties_t *t);

/* A spawn into a reserved pid failed (intersched.c), after the parent recorded its side: tells
** the parent as for a child that died at once with reason `code`. */
void sm_faults_spawn_failed(sched_t *s, smarm_pid_t child, const spawn_ties_t *t, int code);

/* Shutdown: frees a's records without telling anyone (every actor is going). */
void sm_faults_destroy(sched_t *s, actor_t *a);

/* Frees the records s keeps for reuse (its end). */
#define SM_SPARE_RECORDS 256
void sm_faults_free_spares(sched_t *s);

#endif
