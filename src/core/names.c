/*
** Registered names (see names.h for the protocol between the table and the schedulers' caches).
*/
#define _GNU_SOURCE
#include "names.h"

#include "faults.h"
#include "runtime.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- A table of owned strings ------------------------------------------------------------- */

#define TOMB ((char *)&tomb_marker)
static const char tomb_marker;

static uint32_t name_hash(const char *s)
{
  uint32_t h = 2166136261u; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static name_entry_t *table_slot(const name_table_t *t, const char *name, uint32_t h)
{
  if (!t->slots)
    return NULL;
  for (uint32_t i = h & t->mask;; i = (i + 1) & t->mask) {
    name_entry_t *e = &t->slots[i];
    if (!e->name)
      return NULL;
    if (e->name != TOMB && e->hash == h && strcmp(e->name, name) == 0)
      return e;
  }
}

static void table_clear(name_table_t *t)
{
  for (uint32_t i = 0; t->slots && i <= t->mask; i++)
    if (t->slots[i].name != TOMB)
      free(t->slots[i].name);
  free(t->slots);
  memset(t, 0, sizeof *t);
}

/* Makes room for one more entry (rehashing away tombstones). 0 or -ENOMEM. */
static int table_reserve(name_table_t *t)
{
  if (t->slots && (t->count + t->tombs + 1) * 4 <= (t->mask + 1) * 3)
    return 0;
  uint32_t size = 16;
  while (size * 3 < (t->count + 1) * 4 * 2)
    size *= 2;
  name_entry_t *slots = calloc(size, sizeof *slots);
  if (!slots)
    return -ENOMEM;
  for (uint32_t i = 0; t->slots && i <= t->mask; i++) {
    name_entry_t *e = &t->slots[i];
    if (!e->name || e->name == TOMB)
      continue;
    uint32_t j = e->hash & (size - 1);
    while (slots[j].name)
      j = (j + 1) & (size - 1);
    slots[j] = *e;
  }
  free(t->slots);
  t->slots = slots;
  t->mask = size - 1;
  t->tombs = 0;
  return 0;
}

/* Adds name (copied) -> pid; the name must not be there. 0 or -ENOMEM. */
static int table_put(name_table_t *t, const char *name, smarm_pid_t pid)
{
  char *copy = strdup(name);
  if (!copy || table_reserve(t) < 0) {
    free(copy);
    return -ENOMEM;
  }
  uint32_t h = name_hash(name);
  uint32_t i = h & t->mask;
  while (t->slots[i].name && t->slots[i].name != TOMB)
    i = (i + 1) & t->mask;
  if (t->slots[i].name == TOMB)
    t->tombs--;
  t->slots[i] = (name_entry_t){copy, h, pid};
  t->count++;
  return 0;
}

static void table_delete(name_table_t *t, name_entry_t *e)
{
  free(e->name);
  e->name = TOMB;
  t->count--;
  t->tombs++;
}

/* ---- The registry and the caches ----------------------------------------------------------- */

void sm_names_init(name_registry_t *r)
{
  pthread_mutex_init(&r->lock, NULL);
  memset(&r->table, 0, sizeof r->table);
  atomic_store_explicit(&r->version, 1, memory_order_relaxed);
}

void sm_names_destroy(name_registry_t *r)
{
  table_clear(&r->table);
  pthread_mutex_destroy(&r->lock);
}

void sm_name_cache_destroy(name_cache_t *c) { table_clear(&c->table); }

/* Under the lock: the change is visible to a cache once it reads the new version. */
static void registry_changed(name_registry_t *r)
{
  /* release: pairs with the acquire in sm_names_lookup, so a cache that sees the new version
  ** then reads the table (under the lock) sees the change. */
  atomic_fetch_add_explicit(&r->version, 1, memory_order_release);
}

#define CACHE_MAX 1024 /* names a scheduler remembers before it starts over */

smarm_pid_t sm_names_lookup(sched_t *s, const char *name)
{
  name_registry_t *r = &s->rt->names;
  name_cache_t *c = &s->names;
  uint64_t v = atomic_load_explicit(&r->version, memory_order_acquire);
  if (v != c->version || c->table.count >= CACHE_MAX) {
    table_clear(&c->table);
    c->version = v;
  }
  uint32_t h = name_hash(name);
  name_entry_t *e = table_slot(&c->table, name, h);
  if (e)
    return e->pid;
  pthread_mutex_lock(&r->lock);
  e = table_slot(&r->table, name, h);
  smarm_pid_t pid = e ? e->pid : 0;
  v = atomic_load_explicit(&r->version, memory_order_relaxed);
  pthread_mutex_unlock(&r->lock);
  if (v == c->version)
    table_put(&c->table, name, pid); /* a cache that cannot grow just asks again next time */
  return pid;
}

int sm_names_register_local(sched_t *s, actor_t *a, const char *name)
{
  name_registry_t *r = &s->rt->names;
  actor_faults_t *f = sm_faults_of(a);
  char *copy = f ? strdup(name) : NULL; /* before the lock: nothing to undo after it */
  if (!copy)
    return -ENOMEM;
  pthread_mutex_lock(&r->lock);
  int rc = 0;
  name_entry_t *held = f->name ? table_slot(&r->table, f->name, name_hash(f->name)) : NULL;
  if (table_slot(&r->table, name, name_hash(name)))
    rc = -EEXIST;
  else if (held && held->pid == a->pid)
    rc = -EBUSY; /* one name per actor */
  else if ((rc = table_put(&r->table, name, a->pid)) == 0)
    registry_changed(r);
  pthread_mutex_unlock(&r->lock);
  if (rc < 0) {
    free(copy);
    return rc;
  }
  free(f->name);
  f->name = copy;
  return 0;
}

void sm_names_on_death(sched_t *s, actor_t *a)
{
  if (!a->faults || !a->faults->name)
    return;
  name_registry_t *r = &s->rt->names;
  pthread_mutex_lock(&r->lock);
  name_entry_t *e = table_slot(&r->table, a->faults->name, name_hash(a->faults->name));
  if (e && e->pid == a->pid) {
    table_delete(&r->table, e);
    registry_changed(r);
  }
  pthread_mutex_unlock(&r->lock);
  free(a->faults->name);
  a->faults->name = NULL;
}

/* ---- The public API ------------------------------------------------------------------------ */

int sm_names_valid(const char *name)
{
  return name && name[0] && strlen(name) <= SMARM_NAME_MAX;
}

int smarm_register(const char *name, smarm_pid_t pid)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  if (!self)
    return -EPERM;
  if (!sm_names_valid(name) || smarm_pid_gen(pid) == 0)
    return -EINVAL;
  unsigned k = smarm_pid_sched(pid);
  if (k == s->index) {
    actor_t *a = sm_sched_lookup(s, pid);
    return a ? sm_names_register_local(s, a, name) : -ESRCH;
  }
  if (k >= s->rt->nsched)
    return -ESRCH;
  sm_sched_die_before_asking(s, self);
  size_t len = strlen(name);
  smarm_msg_t *m = sm_msg_new(MSG_REGISTER, sizeof(int64_t) + len + 1);
  if (!m)
    return -ENOMEM;
  m->to = pid;
  memcpy(m->data + sizeof(int64_t), name, len + 1);
  return (int)sm_sched_ask(s, self, k, m);
}

int smarm_unregister(const char *name)
{
  sched_t *s;
  if (!sched_self(&s))
    return -EPERM;
  if (!sm_names_valid(name))
    return -EINVAL;
  name_registry_t *r = &s->rt->names;
  pthread_mutex_lock(&r->lock);
  name_entry_t *e = table_slot(&r->table, name, name_hash(name));
  if (e) {
    table_delete(&r->table, e);
    registry_changed(r);
  }
  pthread_mutex_unlock(&r->lock);
  return e ? 0 : -ENOENT;
}

const char *sm_names_held(sched_t *s, const actor_t *a)
{
  if (!a->faults || !a->faults->name)
    return NULL;
  name_registry_t *r = &s->rt->names;
  pthread_mutex_lock(&r->lock);
  name_entry_t *e = table_slot(&r->table, a->faults->name, name_hash(a->faults->name));
  int held = e && e->pid == a->pid; /* not unregistered by another actor meanwhile */
  pthread_mutex_unlock(&r->lock);
  return held ? a->faults->name : NULL;
}

const char *smarm_own_name(void)
{
  sched_t *s;
  actor_t *self = sched_self(&s);
  return self ? sm_names_held(s, self) : NULL;
}

smarm_pid_t smarm_whereis(const char *name)
{
  sched_t *s;
  if (!sched_self(&s) || !sm_names_valid(name))
    return 0;
  return sm_names_lookup(s, name);
}

smarm_pid_t smarm_whereis_outside(const char *name)
{
  if (!sm_names_valid(name))
    return 0;
  runtime_t *rt = sm_runtime_enter(); /* any_thread.c: the runtime stays while we use it */
  if (!rt)
    return 0;
  name_registry_t *r = &rt->names;
  pthread_mutex_lock(&r->lock);
  name_entry_t *e = table_slot(&r->table, name, name_hash(name));
  smarm_pid_t pid = e ? e->pid : 0;
  pthread_mutex_unlock(&r->lock);
  sm_runtime_leave();
  return pid;
}

int smarm_send_named(const char *name, smarm_msg_t *msg)
{
  sched_t *s;
  if (!sched_self(&s))
    return -EPERM;
  if (!sm_names_valid(name))
    return -EINVAL;
  smarm_pid_t pid = sm_names_lookup(s, name);
  return pid ? smarm_send(pid, msg) : -ENOENT;
}

int smarm_registered(void (*fn)(const char *name, smarm_pid_t pid, void *ud), void *ud)
{
  sched_t *s;
  if (!sched_self(&s))
    return -EPERM;
  name_registry_t *r = &s->rt->names;
  /* A snapshot first: fn may itself register or send by name. */
  pthread_mutex_lock(&r->lock);
  uint32_t n = r->table.count, got = 0;
  name_entry_t *copy = calloc(n ? n : 1, sizeof *copy);
  for (uint32_t i = 0; copy && r->table.slots && i <= r->table.mask; i++) {
    name_entry_t *e = &r->table.slots[i];
    if (e->name && e->name != TOMB && (copy[got].name = strdup(e->name)))
      copy[got++].pid = e->pid;
  }
  pthread_mutex_unlock(&r->lock);
  if (!copy)
    return -ENOMEM;
  for (uint32_t i = 0; i < got; i++) {
    if (fn)
      fn(copy[i].name, copy[i].pid, ud);
    free(copy[i].name);
  }
  free(copy);
  return (int)got;
}
