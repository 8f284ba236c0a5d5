/*
** Registered names: one process-wide table of name -> pid per runtime, read through a cache per
** scheduler (names.c).
**
** The table (runtime_t.names) is guarded by a mutex and carries a version that every change
** bumps. A scheduler answers a lookup from its own cache while the version it read (one acquire
** load of a word that changes only when a name does) is the cache's; otherwise it drops the
** cache and asks the table under the mutex. So a send by name takes no lock shared by the
** schedulers, except just after a name changed somewhere.
**
** Each actor's scheduler remembers the name it gave that actor (actor_faults_t.name) and
** removes it from the table when the actor dies, before its exit signals and DOWNs go out (a
** supervisor that sees the DOWN can register the name again at once). A name another actor
** unregistered meanwhile is left alone: the table entry is removed only if it still names the
** dying pid.
*/
#ifndef SMARM_CORE_NAMES_H
#define SMARM_CORE_NAMES_H

#include "../smarm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* An open-addressing table of owned strings -> pids (also the schedulers' caches, where pid 0
** caches "nobody holds it"). */
typedef struct name_entry {
  char *name; /* NULL: empty slot */
  uint32_t hash;
  smarm_pid_t pid;
} name_entry_t;

typedef struct name_table {
  name_entry_t *slots; /* mask + 1 of them */
  uint32_t mask, count, tombs;
} name_table_t;

typedef struct name_registry {
  pthread_mutex_t lock;
  name_table_t table;        /* under lock */
  _Atomic uint64_t version;  /* bumped (release, under lock) by every change */
} name_registry_t;

typedef struct name_cache {
  name_table_t table;
  uint64_t version;
} name_cache_t;

void sm_names_init(name_registry_t *r);
void sm_names_destroy(name_registry_t *r);
void sm_name_cache_destroy(name_cache_t *c);

struct sched;
struct actor;
/* The pid holding `name`, 0 if none (the caller's scheduler, through its cache). */
smarm_pid_t sm_names_lookup(struct sched *s, const char *name);
/* On the holder's scheduler, as it dies: removes its name if it still holds it. */
void sm_names_on_death(struct sched *s, struct actor *a);
/* Whether name is one (1 to SMARM_NAME_MAX bytes). */
int sm_names_valid(const char *name);
/* On pid's scheduler: registers name for the live actor a (register's work, names.c). */
int sm_names_register_local(struct sched *s, struct actor *a, const char *name);
/* On a's scheduler: the name a holds, or NULL; valid until a's scheduler changes a's name (a
** register or a death there), so for as long as the caller, on that scheduler, does not park. */
const char *sm_names_held(struct sched *s, const struct actor *a);

#endif
