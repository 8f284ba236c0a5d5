/*
** scale: how many parked actors one runtime holds, and what each costs.
**
** Spawns SMARM_SCALE_ACTORS (default 1,000,000) C actors spread over the schedulers; each parks
** in receive with a little state on its stack. Then reports resident memory per parked actor
** (RSS growth / actors), the kernel mappings in use (against vm.max_map_count), the spawn rate,
** then wakes every actor with a message, checks each answers with what its stack held, and
** reports the time to tear them all down.
**
** Output: one line `scenario=scale actors=... schedulers=... rss_per_actor_bytes=... maps=...
** max_map_count=... spawn_ns_per_actor=... wake_ns_per_actor=... stack_saves=... ok=1`.
*/
#define _GNU_SOURCE
#include "smarm.h"
#include "util/timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long actors;
static unsigned schedulers;

static long rss_bytes(void)
{
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
      rss = 0;
    fclose(f);
  }
  return rss * sysconf(_SC_PAGESIZE);
}

static long count_lines(const char *path)
{
  FILE *f = fopen(path, "r");
  long n = 0;
  int c;
  if (!f)
    return -1;
  while ((c = fgetc(f)) != EOF)
    n += c == '\n';
  fclose(f);
  return n;
}

static long read_long(const char *path)
{
  FILE *f = fopen(path, "r");
  long v = -1;
  if (f) {
    if (fscanf(f, "%ld", &v) != 1)
      v = -1;
    fclose(f);
  }
  return v;
}

/* A parked worker: keeps a small array on its stack, answers one message with its checksum. */
static void worker(void *arg)
{
  uint64_t id = (uint64_t)(uintptr_t)arg;
  volatile uint64_t state[8];
  for (int i = 0; i < 8; i++)
    state[i] = id * 31 + (uint64_t)i;
  smarm_msg_t *m;
  if (smarm_receive(SMARM_FOREVER, &m) < 0)
    return;
  smarm_pid_t reply_to;
  memcpy(&reply_to, smarm_msg_data(m), sizeof reply_to);
  uint64_t sum = 0;
  for (int i = 0; i < 8; i++)
    sum += state[i];
  uint64_t expect = id * 31 * 8 + 28;
  uint64_t ok = sum == expect;
  memcpy(smarm_msg_data(m), &ok, sizeof ok);
  smarm_send(reply_to, m);
}

typedef struct spawn_job {
  smarm_pid_t *pids;
  long first, step, failed_at;
  smarm_pid_t reply_to;
} spawn_job_t;

/* Spawns workers first, first + step, ... on its own scheduler; pids[i] is read by the main
** actor only after the "done" message, whose inbox push/take orders these writes before it. */
static void spawner(void *arg)
{
  spawn_job_t *job = arg;
  job->failed_at = -1;
  for (long i = job->first; i < actors; i += job->step) {
    int rc = smarm_spawn(worker, (void *)(uintptr_t)i, NULL, &job->pids[i]);
    if (rc < 0) {
      fprintf(stderr, "scale: spawn %ld failed: %d\n", i, rc);
      job->failed_at = i;
      break;
    }
    if ((i & 0xfff) == job->first)
      smarm_yield(); /* let the new workers run to their receive now and then */
  }
  smarm_msg_t *m = smarm_msg_new(0);
  smarm_send(job->reply_to, m);
}

static void main_actor(void *arg)
{
  (void)arg;
  smarm_pid_t *pids = malloc((size_t)actors * sizeof *pids);
  if (!pids) {
    fprintf(stderr, "scale: out of memory\n");
    return;
  }
  long rss0 = rss_bytes();
  int64_t t0 = wall_ns();
  /* One spawner per scheduler creates its share locally (a remote spawn is a round trip). */
  spawn_job_t jobs[SMARM_SCHED_MAX > 64 ? 64 : SMARM_SCHED_MAX];
  unsigned nspawners = schedulers < 64 ? schedulers : 64;
  for (unsigned k = 0; k < nspawners; k++) {
    jobs[k] = (spawn_job_t){.pids = pids, .first = k, .step = nspawners, .reply_to = smarm_self()};
    smarm_spawn_on((int)k, spawner, &jobs[k], NULL, NULL);
  }
  for (unsigned k = 0; k < nspawners; k++) {
    smarm_msg_t *m;
    smarm_receive(SMARM_FOREVER, &m);
    smarm_msg_free(m);
  }
  for (unsigned k = 0; k < nspawners; k++)
    if (jobs[k].failed_at >= 0 && jobs[k].failed_at < actors)
      actors = jobs[k].failed_at;
  /* Let every worker reach its receive. */
  for (int i = 0; i < 4; i++)
    smarm_sleep(50 * 1000 * 1000);
  int64_t t1 = wall_ns();
  long rss1 = rss_bytes();
  long maps = count_lines("/proc/self/maps");
  smarm_stats_t st;
  smarm_stats_read(-1, &st);
  fprintf(stderr, "\rscale: %ld parked, waking them\n", actors);

  smarm_pid_t me = smarm_self();
  long ok = 0;
  int64_t t2 = wall_ns();
  for (long i = 0; i < actors; i++) {
    smarm_msg_t *m = smarm_msg_new(sizeof(uint64_t));
    memcpy(smarm_msg_data(m), &me, sizeof me);
    if (smarm_send(pids[i], m) < 0)
      smarm_msg_free(m);
    /* Drain answers as we go so the mailbox stays short. */
    smarm_msg_t *r;
    while (smarm_receive(0, &r) == 0) {
      uint64_t v;
      memcpy(&v, smarm_msg_data(r), sizeof v);
      ok += v == 1;
      smarm_msg_free(r);
    }
  }
  long answered = ok;
  while (answered < actors) {
    smarm_msg_t *r;
    if (smarm_receive(10LL * 1000 * 1000 * 1000, &r) < 0)
      break;
    uint64_t v;
    memcpy(&v, smarm_msg_data(r), sizeof v);
    ok += v == 1;
    answered++;
    smarm_msg_free(r);
  }
  int64_t t3 = wall_ns();
  smarm_stats_t st2;
  smarm_stats_read(-1, &st2);
  printf("scenario=scale actors=%ld schedulers=%u rss_per_actor_bytes=%.0f maps=%ld "
         "max_map_count=%ld guarded_stacks=%llu spawn_ns_per_actor=%.0f wake_ns_per_actor=%.0f "
         "stack_saves=%llu answered_ok=%ld ok=%d\n",
         actors, schedulers, (double)(rss1 - rss0) / (double)actors, maps,
         read_long("/proc/sys/vm/max_map_count"), (unsigned long long)st.stacks,
         (double)(t1 - t0) / (double)actors, (double)(t3 - t2) / (double)actors,
         (unsigned long long)st2.stack_saves, ok, ok == actors);
  fflush(stdout);
  free(pids);
}

int main(void)
{
  const char *s = getenv("SMARM_SCALE_ACTORS");
  actors = s ? atol(s) : 1000000;
  if (actors < 1)
    actors = 1;
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  const char *k = getenv("SMARM_SCALE_SCHEDULERS");
  cfg.schedulers = k ? (unsigned)atoi(k) : 0;
  schedulers = cfg.schedulers ? cfg.schedulers : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
  int64_t t0 = wall_ns();
  int rc = smarm_run(&cfg, main_actor, NULL);
  fprintf(stderr, "scale: runtime ran %.2f s (teardown included), rc=%d\n",
          (double)(wall_ns() - t0) / 1e9, rc);
  return rc == 0 ? 0 : 1;
}
