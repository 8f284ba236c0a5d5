/*
** The ticker: one thread per runtime that wakes every tick (half the shortest running slice,
** 50 us to 1 ms; longer, up to IDLE_TICK_NS, while no scheduler runs an actor) and looks at each
** scheduler from outside:
**
**   - While an actor runs there, it sets look_at_clock: the scheduler's next decision point
**     (a yield, a park, a preemption) fires the due timers even if its 64-decision count is not
**     up, so a busy scheduler's timers are late by at most a tick.
**   - When the scheduler's progress (switches + preemptions) has not moved for the running
**     actor's slice, and its thread has had the CPU for that long (used_its_slice: the thread's
**     CPU-time clock, read by the ticker, a system call at the second look of a turn and at each
**     look from its slice's end until it is asked; time off the CPU, on a loaded machine or in a
**     blocking system call, does not count),
**     it asks that actor to give way: it stores progress + 1 in preempt_asked and
**     sends the scheduler's thread SIGURG, whose handler (on that thread, interrupting the
**     actor) calls cfg.on_preempt. The Lua binding arms a debug hook there; the hook calls
**     smarm_preempt(), which gives way like a yield. While the runtime stops, every running actor
**     is asked at once, so the end of a run ends actors that spin in compiled loops.
**   - The watchdog: when the progress has not moved for cfg.watchdog_ns (1 s), it prints the
**     running actor's pid (running_pid, stored with running_slice) on stderr, and again at twice,
**     four times... that time while the actor stays stuck. With each report it sets dump_asked
**     and signals the thread, whose handler calls cfg.on_watchdog (the binding writes the
**     actor's traceback where its VM's state allows).
**
** Protocol (who writes what):
**   preempt_asked   ticker: release compare-and-swap to progress + 1, after reading the progress,
**                   unless it holds a newer request (the slice timer's, below).
**                   owner: relaxed store of 0 when it gives way (smarm_preempt). The owner reads
**                   it (acquire) and compares with its own progress: a request made before the
**                   actor switched, or one the actor already honoured, names an older progress
**                   and is ignored, so a late signal or hook never preempts the wrong slice.
**   preempt_asked_ns ticker: relaxed store of the request's time, before preempt_asked's release
**                   store; the owner reads it after acquiring preempt_asked (smarm_preempt_due),
**                   for stats.preempt_wait_ns (a later request's time at worst: a shorter wait;
**                   when the ticker and the slice timer both ask for one slice, whichever wrote
**                   last: the figure is approximate, as is preempts_timed then).
**   dump_asked      ticker: relaxed store of 1 before the signal; the handler takes it (exchange
**                   with 0): a report whose signal found the actor gone is not dumped later by
**                   another, beyond the next report's.
**   look_at_clock   ticker: relaxed store of 1; owner: relaxed store of 0 when it looked. A lost
**                   1 (the owner's 0 overwrote it) costs one tick's lateness.
**   running_slice   owner (at each switch), relaxed, then stats.switches with a release store;
**                   the ticker loads switches (acquire, sm_sched_progress) and then the slice,
**                   so the slice it sees is the turn's it names, or a later one's (whose own
**                   progress makes a request from this look stale). stats.preempts: relaxed.
**   cpu_sampled_ns  ticker: relaxed add, at each look that finds an actor running, of the time
**                   since its last look; owner: at a switch that finds it non-zero, a relaxed
**                   exchange with 0, added to the actor switched from. Sampling, as a profiler's:
**                   an actor seen running at a look is charged the whole tick; over many ticks
**                   each actor's share comes out right. Ordering nothing else.
**   dump_asked      (the runtime's) smarm_dump, from any thread or the dump signal's handler,
**                   inside sm_runtime_enter/leave: relaxed store of 1; the ticker takes it
**                   (exchange with 0) and pushes a MSG_DUMP to each scheduler, whose inbox
**                   orders the rest. Two asks before a tick make one dump.
**   ticker_done     under ticker_lock: the ticker signals a thread only while holding the lock
**                   and seeing the flag clear, so it never signals a thread that has ended.
**                   One sent just before stays pending: sm_preempt_sched_done blocks SIGURG
**                   first, on the thread, so it never lands on the alternate stack being unmapped.
**   timed_progress, timed_end_ns, timed_cpu_end_ns, timed_slice_ns, timer_asked: the slice
**                   timer's, below. Owner thread and its SIGURG handler only (on that thread):
**                   atomics, so that the handler reads whole values; timed_progress is stored
**                   (release) after the others and loaded (acquire) before them.
**
** The slice timer. The ticker learns that a slice began only at its next look, so the slice it
** times ends up to a tick late (Go's sysmon does the same). An actor that is switched out at the
** end of a slice is the one likely to run long again, so when it goes on (smarm_preempt, once
** the yield returns) its new slice is timed exactly: sm_preempt_time_slice stores the slice's
** progress and end (timed_progress, timed_end_ns) and arms a POSIX timer of the scheduler's own
** thread (SIGEV_THREAD_ID) for that end. The kernel raises SIGURG on the thread itself at that
** time (no other thread has to run, no interrupt has to cross CPUs); the handler, seeing
** si_code SI_TIMER, the progress unchanged and the slice's CPU time used too (timed_cpu_end_ns,
** the thread's CPU clock read at the arming and in the handler), asks as the ticker would
** (preempt_asked_ns: the slice's end; preempt_asked: progress + 1; timer_asked: the same, so
** that smarm_preempt counts it in preempts_timed), then arms the hook like any request. When
** the timed slice ends otherwise (the actor parks, yields, dies, or the ticker's request came
** first), the switch disarms the timer (sm_preempt_untime, on slice_timed: a syscall only then),
** so that it never interrupts another actor's system call with EINTR; a signal already raised by
** then finds the progress moved, or the end not come (a later arming), and does nothing. The
** ticker never stores an older progress's request over a newer one (a compare-and-swap): had it
** read the progress a slice ago and been descheduled since, it would undo the timer's request.
** Without the timer (timer_create failed) the ticker alone asks.
**
** A request whose signal found no Lua code to interrupt (the actor sat in a long C call that
** uses the CPU) is sent again after a slice, then twice as long each time up to a second: a
** missed arming is retried, and a long C call is not flooded with EINTR; each retry needs CPU
** time used since the ask before it, so an actor blocked in a system call is not asked again,
** nor at all if it blocked before its slice of CPU was up. The slice timer fires at the wall
** time a slice would end (CLOCK_MONOTONIC: exact, where a CPU-time timer fires only at the
** kernel's next tick, 4 ms at HZ=250), where a thread that had less than an eighth of that wall time on its CPU (its actor blocked
** in a system call) is left to the ticker, which asks once the slice's CPU time is used, so the
** actor is not asked as its call returns; a thread that shares a loaded CPU is asked at the wall
** end, as the timer always did (a version that waited for the slice's CPU time made the timer
** lose to the ticker under load). It times only the slices of an actor that was asked once
** already.
**
** SIGURG: ignored by default, so a signal that arrives after the handler is gone is harmless;
** the handler is installed for the run with SA_RESTART and keeps errno.
*/
#define _GNU_SOURCE
#include "preempt.h"

#include "runtime.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id /* glibc before 2.35 names it only through the union */
#define sigev_notify_thread_id _sigev_un._tid
#endif

#define MIN_TICK_NS 50000LL
#define MAX_TICK_NS 1000000LL
#define IDLE_TICK_NS 16000000LL
#define MAX_RETRY_NS 1000000000LL

typedef struct slice_timer { /* a scheduler thread's timer (below): that thread's alone */
  timer_t id;
  int ok;
} slice_timer_t;

typedef struct watch {      /* the ticker's own notes on one scheduler */
  uint64_t progress;        /* switches + preempts when last seen to move */
  int64_t looked;           /* when it last looked, and whether an actor ran then: the time
                               between two such looks is charged (sampling time on CPU) */
  int ran;
  int64_t since;            /* when it moved (the running actor's slice counts from here) */
  int64_t asked_at;         /* when the running actor was last asked; 0: not yet */
  int64_t retry_ns;         /* wait before asking again */
  int64_t report_after;     /* the watchdog's next report, counted from since */
  clockid_t cpu_clock;      /* the scheduler thread's CPU-time clock (cpu_state: CPU_OK) */
  int cpu_state;            /* CPU_UNTRIED, CPU_OK or CPU_NONE (no such clock: wall time) */
  int64_t cpu_base;         /* that clock at cpu_base_at, a look after since; -1: not read */
  int64_t cpu_base_at;
} watch_t;

enum { CPU_UNTRIED, CPU_OK, CPU_NONE };

/* The watchdog: the running actor has not given way for `stuck` ns. One line on stderr (the
** ticker's thread: no signal context). */
static void report_stuck(const sched_t *s, int64_t stuck)
{
  smarm_pid_t pid = atomic_load_explicit(&s->running_pid, memory_order_relaxed);
  fprintf(stderr,
          "smarm: watchdog: actor <%u.%u.%u> on scheduler %u has run %.2f s without giving way "
          "(inside C code, a __gc finalizer, or with no time slice)\n",
          smarm_pid_sched(pid) + 1, smarm_pid_slot(pid), smarm_pid_gen(pid), s->index + 1,
          (double)stuck / 1e9);
}

static struct sigaction old_urg; /* one runtime per process at a time */
static struct sigaction old_dump;
static int dump_signal_installed; /* the signal old_dump belongs to */

/* The dump signal's handler: only a flag, which the ticker reads (async-signal-safe). */
static void on_dump_signal(int sig)
{
  (void)sig;
  smarm_dump();
}

void smarm_dump(void)
{
  runtime_t *rt = sm_runtime_enter(); /* atomics alone: fine in a signal handler */
  if (!rt)
    return;
  atomic_store_explicit(&rt->dump_asked, 1, memory_order_relaxed);
  sm_runtime_leave();
}

/* The ticker, on a dump asked: one MSG_DUMP to each scheduler still running (info.c writes its
** part). Memory short: that scheduler's part is left out. */
static void send_dump(runtime_t *rt)
{
  for (unsigned k = 0; k < rt->nsched; k++) {
    if (rt->scheds[k].ticker_done)
      continue;
    smarm_msg_t *m = sm_msg_new(MSG_DUMP, 0);
    if (m)
      sm_inbox_push(&rt->scheds[k].inbox, m);
  }
}

/* The calling thread's CPU time in ns, 0 where it cannot be read (the slice timer's, on the
** owner's thread and in its handler: a system call, made only when a slice is timed or ends). */
static int64_t thread_cpu_now_ns(void)
{
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    return 0;
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The slice timer fired, in the owner's handler: asks the running actor to give way if its slice
** is the one timed and its end has come (a signal delivered late, as valgrind and TSan do, may
** meet a later arming). */
static void slice_timer_fired(sched_t *s)
{
  uint64_t timed = atomic_load_explicit(&s->timed_progress, memory_order_acquire);
  if (!s->current || !timed || timed != sm_sched_progress(s) ||
      smarm_now_ns() < atomic_load_explicit(&s->timed_end_ns, memory_order_relaxed))
    return;
  /* The wall time is up. If the thread had less than an eighth of that time on its CPU, the
  ** actor blocked in a system call (or the thread was nearly starved): the ticker asks once the
  ** slice's CPU time is used, and the actor does not give way as soon as its call returns. A
  ** thread that merely shares its CPU is asked now, as before. (clock_gettime is
  ** async-signal-safe.) */
  int64_t cpu_end = atomic_load_explicit(&s->timed_cpu_end_ns, memory_order_relaxed);
  if (cpu_end) {
    int64_t slice = atomic_load_explicit(&s->timed_slice_ns, memory_order_relaxed);
    int64_t used = thread_cpu_now_ns() - (cpu_end - slice);
    int64_t elapsed = smarm_now_ns() - (atomic_load_explicit(&s->timed_end_ns,
                                                             memory_order_relaxed) - slice);
    if (used * 8 < elapsed)
      return;
  }
  atomic_store_explicit(&s->preempt_asked_ns,
                        atomic_load_explicit(&s->timed_end_ns, memory_order_relaxed),
                        memory_order_relaxed);
  atomic_store_explicit(&s->timer_asked, timed + 1, memory_order_relaxed);
  atomic_store_explicit(&s->preempt_asked, timed + 1, memory_order_relaxed);
}

static void on_sigurg(int sig, siginfo_t *info, void *uc)
{
  (void)sig;
  (void)uc;
  int saved = errno;
  sched_t *s = sm_sched_tls;
  if (s && info && info->si_code == SI_TIMER)
    slice_timer_fired(s);
  if (s && atomic_exchange_explicit(&s->dump_asked, 0, memory_order_relaxed) && s->current &&
      s->rt->cfg.on_watchdog)
    s->rt->cfg.on_watchdog(s->index, s->rt->cfg.userdata);
  if (s && s->current && s->rt->cfg.on_preempt &&
      atomic_load_explicit(&s->preempt_asked, memory_order_relaxed))
    s->rt->cfg.on_preempt(s->index, s->rt->cfg.userdata);
  errno = saved;
}

static int64_t tick_for(int64_t slice)
{
  int64_t t = slice / 2;
  return t < MIN_TICK_NS ? MIN_TICK_NS : t > MAX_TICK_NS ? MAX_TICK_NS : t;
}

/* The CPU time scheduler s's thread has used, in ns, or -1 where it cannot be read. */
static int64_t thread_cpu_ns(const sched_t *s, watch_t *w)
{
  if (w->cpu_state == CPU_UNTRIED)
    w->cpu_state = pthread_getcpuclockid(s->thread, &w->cpu_clock) == 0 ? CPU_OK : CPU_NONE;
  struct timespec ts;
  if (w->cpu_state != CPU_OK)
    return -1;
  if (clock_gettime(w->cpu_clock, &ts) != 0) {
    w->cpu_state = CPU_NONE; /* not tried again at every look */
    return -1;
  }
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The turn's CPU base: the thread's CPU time now (-1: none to be had). */
static void cpu_mark(const sched_t *s, watch_t *w, int64_t now)
{
  w->cpu_base = thread_cpu_ns(s, w);
  w->cpu_base_at = now;
}

/* Whether the running actor has had its slice of CPU: the time from since to the base (a later
** look), counted whole up to a tick or half the slice (the ticker cannot tell; more is the
** ticker's own delay), and the thread's CPU time after it. Asked already, it is asked again only
** if its thread has had the CPU for that much since (the base is taken at each ask). A thread
** kept off its CPU (a loaded machine: other processes' threads, a hypervisor) or blocked in a
** system call uses none, and its actor is not asked for that time: asked, it would give way as
** soon as it ran again, having run for no time, and the trace its VM was recording would be
** stopped. A turn with no base yet takes it here and is asked at a later look; without the
** thread's CPU clock, wall time, as before. */
static int used_its_slice(const sched_t *s, watch_t *w, int64_t now, int64_t slice)
{
  if (w->cpu_base < 0) {
    cpu_mark(s, w, now);
    return w->cpu_base < 0;
  }
  int64_t cpu = thread_cpu_ns(s, w);
  if (cpu < 0)
    return 1;
  int64_t tick = tick_for(slice), cap = tick < slice / 2 ? tick : slice / 2;
  if (w->asked_at)
    return cpu - w->cpu_base >= cap;
  int64_t before = w->cpu_base_at - w->since;
  return (before < cap ? before : cap) + (cpu - w->cpu_base) >= slice;
}

/* One look at scheduler s at time now; returns the tick it needs (IDLE_TICK_NS: none). */
static int64_t look_at(runtime_t *rt, sched_t *s, watch_t *w, int64_t now, int stopping)
{
  /* The progress first: the slice read after it is that turn's or a later one's. Read the other
  ** way round, an owner descheduled in the middle of a switch (progress stored, slice not yet)
  ** showed the old actor's slice beside the new turn for as long as it stayed off its CPU, and
  ** the new actor was asked to give way at once (even one with no slice). */
  uint64_t progress = sm_sched_progress(s);
  int64_t slice = atomic_load_explicit(&s->running_slice, memory_order_relaxed);
  if (progress != w->progress) {
    w->progress = progress;
    w->since = now;
    w->asked_at = 0;
    w->report_after = rt->cfg.watchdog_ns;
    w->cpu_base = -1;
  }
  /* only between two looks that both found an actor running: after an idle look nobody knows
  ** when the work began, and the ticker looks seldom while idle */
  int64_t since_look = w->ran ? now - w->looked : 0;
  w->looked = now;
  w->ran = slice != 0;
  if (!slice)
    return IDLE_TICK_NS; /* on its own stack: idle, or between two actors */
  /* sampling: the time since the last look was the running actor's (its next switch takes it) */
  atomic_fetch_add_explicit(&s->cpu_sampled_ns, (uint64_t)since_look, memory_order_relaxed);
  atomic_store_explicit(&s->look_at_clock, 1, memory_order_relaxed);
  if (now - w->since >= w->report_after) {
    report_stuck(s, now - w->since);
    w->report_after = w->report_after < INT64_MAX / 2 ? 2 * w->report_after : INT64_MAX;
    if (rt->cfg.on_watchdog) { /* the handler writes where the actor stands */
      atomic_store_explicit(&s->dump_asked, 1, memory_order_relaxed);
      pthread_kill(s->thread, SIGURG);
    }
  }
  if (!rt->cfg.on_preempt)
    return MAX_TICK_NS;
  if (!stopping && (slice == INT64_MAX || now - w->since < slice)) {
    if (slice != INT64_MAX && w->cpu_base < 0 && now > w->since)
      cpu_mark(s, w, now); /* the turn goes on past a tick: a syscall per such turn */
    return tick_for(slice);
  }
  if (w->asked_at && now - w->asked_at < w->retry_ns)
    return tick_for(slice);
  if (!stopping && !used_its_slice(s, w, now, slice))
    return tick_for(slice);
  /* the first retry after a slice (a tick while stopping), then twice as long each time */
  int64_t first = stopping ? MIN_TICK_NS : slice;
  w->retry_ns = !w->asked_at ? first : w->retry_ns < MAX_RETRY_NS / 2 ? 2 * w->retry_ns
                                                                     : MAX_RETRY_NS;
  w->asked_at = now;
  if (!stopping)
    cpu_mark(s, w, now); /* an ask again needs the CPU used after this one */
  atomic_store_explicit(&s->preempt_asked_ns, now, memory_order_relaxed);
  uint64_t had = atomic_load_explicit(&s->preempt_asked, memory_order_relaxed);
  while (had <= progress && /* never over a newer request (the slice timer's) */
         !atomic_compare_exchange_weak_explicit(&s->preempt_asked, &had, progress + 1,
                                                memory_order_release, memory_order_relaxed))
    ;
  pthread_kill(s->thread, SIGURG);
  return tick_for(slice);
}

static void *ticker_main(void *p)
{
  runtime_t *rt = p;
  watch_t *w = rt->ticker_watch;
  int64_t tick = MAX_TICK_NS;
  pthread_mutex_lock(&rt->ticker_lock);
  while (!rt->ticker_stop) {
    int64_t until = smarm_now_ns() + tick;
    struct timespec ts = {until / 1000000000, until % 1000000000};
    while (!rt->ticker_stop &&
           pthread_cond_timedwait(&rt->ticker_cond, &rt->ticker_lock, &ts) != ETIMEDOUT)
      ;
    if (rt->ticker_stop)
      break;
    int64_t now = smarm_now_ns();
    int stopping = atomic_load_explicit(&rt->stop_requested, memory_order_relaxed);
    if (atomic_exchange_explicit(&rt->dump_asked, 0, memory_order_relaxed) && !stopping)
      send_dump(rt);
    int64_t next = IDLE_TICK_NS;
    for (unsigned k = 0; k < rt->nsched; k++) {
      if (rt->scheds[k].ticker_done)
        continue;
      int64_t t = look_at(rt, &rt->scheds[k], &w[k], now, stopping);
      if (t < next)
        next = t;
    }
    /* idle: back off gently, so that an actor that starts to spin is seen within IDLE_TICK_NS */
    tick = next < IDLE_TICK_NS ? next : tick * 2 < IDLE_TICK_NS ? tick * 2 : IDLE_TICK_NS;
  }
  pthread_mutex_unlock(&rt->ticker_lock);
  return NULL;
}

int sm_preempt_init(runtime_t *rt)
{
  watch_t *w = rt->ticker_watch = calloc(rt->nsched, sizeof(watch_t));
  if (!w)
    return -ENOMEM;
  rt->slice_timers = calloc(rt->nsched, sizeof(slice_timer_t)); /* none: the ticker alone asks */
  for (unsigned k = 0; k < rt->nsched; k++)
    w[k].progress = UINT64_MAX; /* the first look starts every clock (cpu_base: -1 there) */
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&rt->ticker_cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&rt->ticker_lock, NULL);
  if (rt->cfg.on_preempt || rt->cfg.on_watchdog) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigurg;
    /* SA_ONSTACK: the scheduler thread's alternate stack (overflow.c), not the actor's, which
    ** may be small and nearly full when the signal lands */
    sa.sa_flags = SA_RESTART | SA_ONSTACK | SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    rt->urg_installed = sigaction(SIGURG, &sa, &old_urg) == 0;
  }
  int dump = rt->cfg.dump_signal ? rt->cfg.dump_signal : SIGQUIT;
  if (rt->cfg.dump_signal >= 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_dump_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    rt->dump_installed = sigaction(dump, &sa, &old_dump) == 0;
    dump_signal_installed = dump;
  }
  return 0;
}

int sm_preempt_start(runtime_t *rt)
{
  if (!rt->ticker_watch)
    return -ENOMEM;
  int rc = pthread_create(&rt->ticker, NULL, ticker_main, rt);
  if (rc != 0)
    return -rc;
  rt->ticker_running = 1;
  return 0;
}

void sm_preempt_sched_enter(sched_t *s)
{
  if (!s->rt->slice_timers || !s->rt->urg_installed || !s->rt->cfg.on_preempt)
    return;
  slice_timer_t *t = &s->rt->slice_timers[s->index];
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = SIGURG;
  ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
  t->ok = timer_create(CLOCK_MONOTONIC, &ev, &t->id) == 0;
}

void sm_preempt_time_slice(sched_t *s, int64_t slice_ns)
{
  slice_timer_t *t = s->rt->slice_timers ? &s->rt->slice_timers[s->index] : NULL;
  if (!t || !t->ok || slice_ns == INT64_MAX)
    return;
  int64_t end = smarm_now_ns() + slice_ns, cpu = thread_cpu_now_ns();
  atomic_store_explicit(&s->timed_cpu_end_ns, cpu ? cpu + slice_ns : 0, memory_order_relaxed);
  atomic_store_explicit(&s->timed_slice_ns, slice_ns, memory_order_relaxed);
  /* The slice is named before the timer is set, so that a slice shorter than timer_settime
  ** itself is still ended by it; an earlier arming expiring meanwhile finds the end not come
  ** (the handler's clock check). The end before the progress: a release store, which the
  ** handler's acquire load pairs with (same thread: it keeps the compiler's order). */
  atomic_store_explicit(&s->timed_end_ns, end, memory_order_relaxed);
  atomic_store_explicit(&s->timed_progress, sm_sched_progress(s), memory_order_release);
  struct itimerspec when = {{0, 0}, {end / 1000000000, end % 1000000000}};
  if (timer_settime(t->id, TIMER_ABSTIME, &when, NULL) != 0) {
    atomic_store_explicit(&s->timed_progress, 0, memory_order_relaxed); /* the ticker asks */
    return;
  }
  s->slice_timed = 1;
}

void sm_preempt_untime(sched_t *s)
{
  s->slice_timed = 0;
  atomic_store_explicit(&s->timed_progress, 0, memory_order_relaxed);
  struct itimerspec never = {{0, 0}, {0, 0}};
  timer_settime(s->rt->slice_timers[s->index].id, 0, &never, NULL);
}

void sm_preempt_sched_done(runtime_t *rt, unsigned index, sigset_t *old_mask)
{
  /* A SIGURG sent before this (under ticker_lock, like ticker_done) may still be pending: blocked,
  ** it cannot land on the alternate stack the thread unmaps next (overflow.c); it is discarded
  ** when sm_preempt_stop restores SIGURG's old action (its default: ignore). Valgrind delivers
  ** signals late, and pushed such a handler's frame onto the unmapped stack. */
  sigset_t urg;
  sigemptyset(&urg);
  sigaddset(&urg, SIGURG);
  pthread_sigmask(SIG_BLOCK, &urg, old_mask);
  slice_timer_t *t = rt->slice_timers ? &rt->slice_timers[index] : NULL;
  if (t && t->ok) /* a signal it raised before stays blocked, discarded like the ticker's */
    timer_delete(t->id);
  if (t)
    t->ok = 0;
  if (!rt->ticker_watch)
    return;
  pthread_mutex_lock(&rt->ticker_lock);
  rt->scheds[index].ticker_done = 1;
  pthread_mutex_unlock(&rt->ticker_lock);
}

void sm_preempt_stop(runtime_t *rt)
{
  if (!rt->ticker_watch)
    return;
  if (rt->ticker_running) {
    pthread_mutex_lock(&rt->ticker_lock);
    rt->ticker_stop = 1;
    pthread_cond_signal(&rt->ticker_cond);
    pthread_mutex_unlock(&rt->ticker_lock);
    pthread_join(rt->ticker, NULL);
    rt->ticker_running = 0;
  }
  if (rt->urg_installed)
    sigaction(SIGURG, &old_urg, NULL);
  rt->urg_installed = 0;
  if (rt->dump_installed)
    sigaction(dump_signal_installed, &old_dump, NULL);
  rt->dump_installed = 0;
  pthread_cond_destroy(&rt->ticker_cond);
  pthread_mutex_destroy(&rt->ticker_lock);
  free(rt->ticker_watch);
  rt->ticker_watch = NULL;
  free(rt->slice_timers);
  rt->slice_timers = NULL;
}
