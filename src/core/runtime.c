/*
** smarm_run(): starting the schedulers, stopping them, releasing everything.
**
** Start: the calling thread builds the runtime, installs the overflow reporter, starts
** schedulers 1..N-1 on new threads and becomes scheduler 0, where the main actor runs.
**
** Stop: the first smarm_stop() (or the main actor's end) pushes a stop item onto every
** scheduler's inbox; a scheduler that takes it in stops running actors, returns from
** sm_sched_loop() and releases its own actors and stacks (it owns them). Scheduler 0 then joins the
** other threads. Only when every scheduler thread has ended can nobody push any more, so only then
** does scheduler 0's thread free what is left in the inboxes (messages sent to schedulers that
** had already stopped).
*/
#define _GNU_SOURCE
#include "runtime.h"

#include "home.h"
#include "preempt.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_STACK_BYTES (256 * 1024)
#define DEFAULT_MAX_STACKS 4096 /* docs/design.md, Stacks: why not more */
#define DEFAULT_KEEP_FREED_BYTES (32LL << 20) /* smarm.h, keep_freed_bytes */
#define DEFAULT_SPIN_NS 50000
#define DEFAULT_SLICE_NS 2000000
#define DEFAULT_WATCHDOG_NS 1000000000LL

/* One runtime per process at a time (the overflow reporter and the any-thread entry points find
** it through one global). */
static _Atomic int runtime_busy;

void smarm_config_init(smarm_config_t *cfg)
{
  memset(cfg, 0, sizeof *cfg);
  cfg->spin_ns = -1;
}

/* ---- Scheduler threads --------------------------------------------------------------------- */

typedef struct thread_state {
  void *altstack;
  sigset_t old_mask; /* the thread's signal mask before sm_preempt_sched_done blocked SIGURG */
} thread_state_t;

int sm_runtime_pin_cpu(const runtime_t *rt, unsigned index)
{
  return rt->online_cpus > 0 ? (int)(index % (unsigned long)rt->online_cpus) : -1;
}

static void pin_to_cpu(const runtime_t *rt, unsigned index)
{
  int cpu = sm_runtime_pin_cpu(rt, index);
  if (cpu < 0)
    return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Per-thread setup of a scheduler: thread-local pointer, fiber of the thread's own stack,
** alternate signal stack, user hook. */
static void thread_enter(sched_t *s, thread_state_t *ts)
{
  pthread_attr_t attr;
  void *lo = NULL;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &lo, &size);
    pthread_attr_destroy(&attr);
  }
  fiber_init_thread(&s->main_fiber, lo, size);
  sm_sched_tls = s;
  sm_home_claim();
  ts->altstack = NULL;
  sm_overflow_thread_enter(&ts->altstack); /* without it overflows still abort, less clearly */
  sm_preempt_sched_enter(s);
  if (s->rt->cfg.pin_threads)
    pin_to_cpu(s->rt, s->index);
  if (s->rt->cfg.on_sched_start)
    s->rt->cfg.on_sched_start(s->index, s->rt->cfg.userdata);
}

static void thread_leave(sched_t *s, thread_state_t *ts)
{
  if (s->rt->cfg.on_sched_stop)
    s->rt->cfg.on_sched_stop(s->index, s->rt->cfg.userdata);
  sm_overflow_thread_leave(ts->altstack);
  sm_home_release();
  sm_sched_tls = NULL;
}

static void run_scheduler(sched_t *s, thread_state_t *ts)
{
  sm_sched_loop(s);
  sm_preempt_sched_done(s->rt, s->index, &ts->old_mask);
  sm_sched_destroy_actors(s);
}

static void *scheduler_thread(void *p)
{
  sched_t *s = p;
  thread_state_t ts;
  thread_enter(s, &ts);
  run_scheduler(s, &ts);
  thread_leave(s, &ts);
  return NULL; /* (SIGURG stays blocked: the thread ends) */
}

static int config_resolve(const smarm_config_t *in, smarm_config_t *out)
{
  if (in)
    *out = *in;
  else
    smarm_config_init(out);
  if (out->schedulers == 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    out->schedulers = n > 0 ? (unsigned)n : 1;
    if (out->schedulers > SMARM_SCHED_MAX)
      out->schedulers = SMARM_SCHED_MAX;
  }
  if (out->schedulers > SMARM_SCHED_MAX)
    return -EINVAL;
  if (out->stack_size == 0)
    out->stack_size = DEFAULT_STACK_BYTES;
  if (out->stack_size < STACK_MIN_BYTES || out->stack_size > STACK_MAX_BYTES)
    return -EINVAL;
  if (out->max_stacks == 0)
    out->max_stacks = DEFAULT_MAX_STACKS;
  if (out->spin_ns < 0)
    out->spin_ns = DEFAULT_SPIN_NS;
  if (out->watchdog_ns == 0)
    out->watchdog_ns = DEFAULT_WATCHDOG_NS;
  else if (out->watchdog_ns < 0)
    out->watchdog_ns = INT64_MAX; /* off */
  if (out->request_timeout_ns == 0)
    out->request_timeout_ns = SMARM_REQUEST_TIMEOUT_DEFAULT_NS;
  if (out->clock != SMARM_CLOCK_REAL && out->clock != SMARM_CLOCK_VIRTUAL)
    return -EINVAL;
  if (out->slice_ns == 0)
    out->slice_ns = DEFAULT_SLICE_NS;
  else if (out->slice_ns < 0)
    out->slice_ns = INT64_MAX; /* never */
  if (out->dump_signal > 0 && (out->dump_signal >= 65 || out->dump_signal == SIGURG ||
                               out->dump_signal == SIGSEGV || out->dump_signal == SIGKILL ||
                               out->dump_signal == SIGSTOP))
    return -EINVAL; /* (SIGURG: the time slices'; SIGSEGV: stack overflows') */
  if (out->keep_freed_bytes == 0)
    out->keep_freed_bytes = DEFAULT_KEEP_FREED_BYTES;
  if (out->seed) {
    if (out->schedulers != 1)
      return -EINVAL;
    out->slice_ns = INT64_MAX; /* sched.c leaves every actor without a slice too */
  }
  return 0;
}

/* glibc's heaps keep `bytes` of freed memory (smarm.h: keep_freed_bytes). With its defaults a
** heap gives back its top once 128 KiB of it is free, and a block of 128 KiB or more is a mapping
** of its own until a free raises that threshold: blocks that are allocated on one scheduler and
** freed on another, as messages are, had their pages given back and faulted in again all the
** time. */
static void keep_freed_memory(int64_t bytes)
{
#ifdef __GLIBC__
  if (bytes <= 0)
    return;
  int keep = bytes > INT_MAX ? INT_MAX : (int)bytes, map = keep / 8;
  if (map < 128 << 10) /* glibc's own starting point: never below it */
    map = 128 << 10;
  if (map > 32 << 20) /* glibc's most (it refuses more) */
    map = 32 << 20;
  /* The mapping threshold first: the trim threshold alone stops glibc raising it, which made
  ** every block of 128 KiB or more a mapping of its own (docs/perf.md, "Big blocks kept"). */
  if (mallopt(M_MMAP_THRESHOLD, map) == 1)
    mallopt(M_TRIM_THRESHOLD, keep);
#else
  (void)bytes;
#endif
}

int smarm_run(const smarm_config_t *cfg, smarm_actor_fn main_fn, void *arg)
{
  if (!main_fn)
    return -EINVAL;
  int expected = 0;
  if (!atomic_compare_exchange_strong(&runtime_busy, &expected, 1))
    return -EBUSY;
  int rc;
  runtime_t *rt = calloc(1, sizeof *rt);
  pthread_t *threads = NULL;
  if (!rt) {
    rc = -ENOMEM;
    goto out_busy;
  }
  if ((rc = config_resolve(cfg, &rt->cfg)) < 0)
    goto out_rt;
  keep_freed_memory(rt->cfg.keep_freed_bytes);
  rt->nsched = rt->cfg.schedulers;
  rt->online_cpus = sysconf(_SC_NPROCESSORS_ONLN); /* read once: glibc reads /sys for it */
  rt->coarse_slack_ns = sm_sched_coarse_slack();
  rt->scheds = aligned_alloc(SMARM_CACHE_PAD, rt->nsched * sizeof(sched_t));
  threads = calloc(rt->nsched, sizeof *threads);
  /* The stop items are made now, so that stopping (which may follow running out of memory)
  ** allocates nothing: the run always ends. */
  rt->stop_items = calloc(rt->nsched, sizeof *rt->stop_items);
  if (!rt->scheds || !threads || !rt->stop_items) {
    rc = -ENOMEM;
    goto out_rt;
  }
  for (unsigned k = 0; k < rt->nsched; k++) {
    if (!(rt->stop_items[k] = sm_msg_new(MSG_STOP, 0))) {
      rc = -ENOMEM;
      goto out_rt;
    }
  }
  rt->gen_base = sm_sched_gen_base();
  sm_names_init(&rt->names);
  for (unsigned k = 0; k < rt->nsched; k++)
    sm_sched_init(&rt->scheds[k], rt, k);
  if ((rc = sm_vclock_init(rt)) < 0) {
    sm_names_destroy(&rt->names);
    goto out_rt;
  }

  cpu_set_t old_affinity;
  int restore_affinity = rt->cfg.pin_threads &&
                         pthread_getaffinity_np(pthread_self(), sizeof old_affinity,
                                                &old_affinity) == 0;
  int handler_installed = sm_overflow_install() == 0;
  sm_preempt_init(rt); /* failing, it leaves no ticker (sm_preempt_start says so) */
  sm_runtime_publish(rt);

  unsigned started = 1;
  for (; started < rt->nsched; started++) {
    if (pthread_create(&threads[started], NULL, scheduler_thread, &rt->scheds[started]) != 0)
      break;
    rt->scheds[started].thread = threads[started];
  }
  rt->scheds[0].thread = pthread_self();
  for (unsigned k = started; k < rt->nsched; k++)
    rt->scheds[k].ticker_done = 1; /* never started */
  /* Without a ticker (no memory, no thread) the run goes on unpreempted: timers stay exact for
  ** schedulers that park, late only on busy ones (every 64 decisions). */
  sm_preempt_start(rt);

  sched_t *s0 = &rt->scheds[0];
  thread_state_t ts;
  thread_enter(s0, &ts);
  rc = 0;
  if (started < rt->nsched) {
    rc = -EAGAIN;
    sm_runtime_request_stop(rt);
  } else {
    rc = sm_sched_spawn_local(s0, main_fn, arg, 0, NULL, NULL, &rt->main_pid);
    if (rc < 0)
      sm_runtime_request_stop(rt);
  }
  run_scheduler(s0, &ts);
  thread_leave(s0, &ts);
  if (rc == 0 && rt->main_unstarted) /* its function never ran: as a spawn that failed */
    rc = -ENOMEM;
  for (unsigned k = 1; k < started; k++)
    pthread_join(threads[k], NULL);
  /* No scheduler pushes any more; foreign threads may still be in smarm_stop() (see
  ** runtime_users): unpublish, wait for them, and only then empty the inboxes. */
  sm_runtime_unpublish();
  sm_preempt_stop(rt);
  if (!sigismember(&ts.old_mask, SIGURG)) {
    /* Unblock SIGURG alone: on_sched_stop (io.c's under TSan, an embedder's) may have changed the
    ** rest of the mask since. A SIGURG of ours still pending is taken first, so that the old
    ** action sm_preempt_stop restored (a user's handler) never sees it. */
    sigset_t urg;
    sigemptyset(&urg);
    sigaddset(&urg, SIGURG);
    struct timespec none = {0, 0};
    while (sigtimedwait(&urg, NULL, &none) == SIGURG)
      ;
    pthread_sigmask(SIG_UNBLOCK, &urg, NULL);
  }
  for (unsigned k = 0; k < rt->nsched; k++)
    sm_sched_drain_and_free(&rt->scheds[k]);
  sm_names_destroy(&rt->names);

  if (handler_installed)
    sm_overflow_uninstall();
  if (restore_affinity)
    pthread_setaffinity_np(pthread_self(), sizeof old_affinity, &old_affinity);
out_rt:
  sm_vclock_destroy(rt); /* after the inboxes were drained: they may hold its items */
  for (unsigned k = 0; rt->stop_items && k < rt->nsched; k++)
    sm_msg_release(rt->stop_items[k]); /* NULL once sent; all unsent if the start failed */
  free(rt->stop_items);
  free(threads);
  free(rt->scheds);
  free(rt);
out_busy:
  atomic_store(&runtime_busy, 0);
  return rc;
}
