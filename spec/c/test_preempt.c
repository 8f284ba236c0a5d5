/* Time slices in the core (src/core/preempt.c): the ticker asks an actor that overstays its slice
** to give way (smarm_preempt_due), on_preempt runs on the actor's thread, smarm_preempt switches.
** C actors cannot be interrupted, so these spin polling smarm_preempt_due() the way the Lua
** binding's hook does. Each case waits for an event that cannot happen without the ticker (the
** flag set by an actor that can only run once the spinner gives way), never for a time. */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#define MS (1000LL * 1000)

static _Atomic int handler_calls;
static _Atomic int flag;

static _Atomic int handler_on_wrong_thread;

/* on_preempt: in a signal handler on the scheduler's own thread. */
static void count_preempt_calls(unsigned sched, void *ud)
{
  (void)ud;
  if (smarm_sched_index() != (int)sched)
    atomic_store_explicit(&handler_on_wrong_thread, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&handler_calls, 1, memory_order_relaxed);
}

static void run_with(unsigned nsched, int64_t slice_ns, smarm_actor_fn fn)
{
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  cfg.schedulers = nsched;
  cfg.slice_ns = slice_ns;
  cfg.on_preempt = count_preempt_calls;
  CHECK_EQ(smarm_run(&cfg, fn, NULL), 0);
}

/* Spins until the flag is set, giving way whenever asked; counts the times it was asked. */
static void spinner(void *arg)
{
  int *asked = arg;
  int64_t guard = smarm_now_ns() + TEST_HANG_GUARD_NS;
  while (!atomic_load_explicit(&flag, memory_order_relaxed) && smarm_now_ns() < guard) {
    if (smarm_preempt_due()) {
      ++*asked;
      smarm_preempt(); /* (a new slice: a check that it is not due again right away would
                          depend on the thread not being descheduled for a slice: CI, TSan) */
    }
  }
}

static void set_flag(void *arg)
{
  (void)arg;
  atomic_store_explicit(&flag, 1, memory_order_relaxed);
}

static int asked;

static void main_spinner_gives_way(void *arg)
{
  (void)arg;
  smarm_pid_t a, b;
  CHECK_EQ(smarm_spawn(spinner, &asked, NULL, &a), 0);
  CHECK_EQ(smarm_spawn(set_flag, NULL, NULL, &b), 0);
  WAIT_UNTIL(!smarm_alive(a), 1 * MS);
  CHECK(!smarm_alive(a));
  smarm_stats_t st;
  CHECK_EQ(smarm_stats_read(-1, &st), 0);
  CHECK(st.preempts >= 1);
}

TEST(an_actor_past_its_slice_is_asked_to_give_way)
{
  atomic_store(&flag, 0);
  atomic_store(&handler_calls, 0);
  asked = 0;
  run_with(1, 1 * MS, main_spinner_gives_way);
  CHECK(asked >= 1);
  CHECK(!smarm_preempt_due()); /* outside an actor */
  smarm_preempt();             /* does nothing there */
}

/* An actor that runs on after a preemption has its next slices ended by its scheduler's own
** timer (preempt.c): asked at each slice's end rather than at the ticker's next look. A slice
** in which the thread had too little of the CPU (a loaded machine: the timer takes the actor
** for blocked) is left to the ticker, so it spins slices until the timer has ended one, at
** least four, within the hang guard: how many that takes is the machine's, not the test's. */
static void spin_until_a_timed_slice(void *arg)
{
  (void)arg;
  int n = 0;
  smarm_stats_t st = {0};
  int64_t guard = smarm_now_ns() + TEST_HANG_GUARD_NS;
  while ((n < 4 || st.preempts_timed == 0) && smarm_now_ns() < guard) {
    if (smarm_preempt_due()) {
      n++;
      smarm_preempt(); /* alone on its scheduler: it goes on at once, in a new slice */
      CHECK_EQ(smarm_stats_read(-1, &st), 0);
    }
  }
  CHECK(n >= 4);
  CHECK_EQ(st.preempts, (uint64_t)n);
  CHECK(st.preempts_timed >= 1);
  CHECK(st.preempts_timed < (uint64_t)n); /* not all: the first is the ticker's */
}

TEST(slices_after_a_preemption_are_ended_by_the_slice_timer)
{
  run_with(1, 2 * MS, spin_until_a_timed_slice);
}

/* A timed slice that its actor ends itself (here by sleeping) disarms the slice timer: it never
** interrupts another actor's system call later. Slices of 200 ms, so that the poller's calls
** (5 ms each, a sleep between) stay far inside its own slices and the ticker has no cause to
** signal it; the sleeper's timer, had it stayed armed, would fire in the middle of them. */
static _Atomic int eintrs;

static void preempted_then_sleeps(void *arg)
{
  (void)arg;
  int64_t guard = smarm_now_ns() + TEST_HANG_GUARD_NS;
  while (!smarm_preempt_due() && smarm_now_ns() < guard)
    ;
  /* The ticker signals after it asks: its SIGURG lands here, not in the poller's poll */
  while (!atomic_load_explicit(&handler_calls, memory_order_relaxed) && smarm_now_ns() < guard)
    ;
  smarm_preempt(); /* asked by the ticker: it goes on in a timed slice... */
  CHECK_EQ(smarm_sleep(600 * MS), 0); /* ...which it ends itself */
}

static void polls(void *arg)
{
  (void)arg;
  for (int i = 0; i < 60; i++) {
    if (poll(NULL, 0, 5) < 0 && errno == EINTR)
      atomic_fetch_add(&eintrs, 1);
    CHECK_EQ(smarm_sleep(1 * MS), 0);
  }
}

static void main_stray(void *arg)
{
  (void)arg;
  smarm_pid_t a, b;
  CHECK_EQ(smarm_spawn(preempted_then_sleeps, NULL, NULL, &a), 0);
  CHECK_EQ(smarm_spawn(polls, NULL, NULL, &b), 0);
  WAIT_UNTIL(!smarm_alive(a) && !smarm_alive(b), 1 * MS);
  CHECK(!smarm_alive(a) && !smarm_alive(b));
}

TEST(a_timed_slice_ended_early_leaves_no_signal_behind)
{
  atomic_store(&eintrs, 0);
  atomic_store(&handler_calls, 0);
  run_with(1, 200 * MS, main_stray);
  CHECK_EQ(atomic_load(&eintrs), 0);
}

/* An actor blocked in a system call uses no CPU: however long it blocks, it is not asked to give
** way (counted in wall time, it was asked after a slice and again and again, each signal cutting
** its call short). The asks are counted before the actor returns: the end of the run asks any
** actor still running. Slices of 20 ms, far longer than the ticker's own delays on a loaded
** machine, which count as time on the CPU up to a tick. Skipped where the thread's CPU clock
** cannot be read (the ticker then counts wall time). */
static _Atomic int blocked_eintrs, blocked_asks, blocked_no_clock;

static void blocks_in_poll(void *arg)
{
  (void)arg;
  clockid_t cpu;
  struct timespec ts;
  if (pthread_getcpuclockid(pthread_self(), &cpu) != 0 || clock_gettime(cpu, &ts) != 0) {
    atomic_store(&blocked_no_clock, 1);
    return;
  }
  int64_t end = smarm_now_ns() + 300 * MS;
  for (int64_t now = smarm_now_ns(); now < end; now = smarm_now_ns())
    if (poll(NULL, 0, (int)((end - now) / MS) + 1) < 0 && errno == EINTR)
      atomic_fetch_add(&blocked_eintrs, 1);
  atomic_store(&blocked_asks, atomic_load(&handler_calls));
}

/* Runs fn (which ends in blocks_in_poll) with 20 ms slices; 0 where the CPU clock is unreadable. */
static int run_blocked(smarm_actor_fn fn)
{
  atomic_store(&handler_calls, 0);
  atomic_store(&blocked_eintrs, 0);
  atomic_store(&blocked_no_clock, 0);
  run_with(1, 20 * MS, fn);
  return !atomic_load(&blocked_no_clock);
}

TEST(an_actor_blocked_in_a_system_call_is_not_asked)
{
  if (!run_blocked(blocks_in_poll))
    SKIP("the thread's CPU clock cannot be read here");
  CHECK_EQ(atomic_load(&blocked_asks), 0);
  CHECK_EQ(atomic_load(&blocked_eintrs), 0);
}

/* The same for a slice that the slice timer times: an actor asked once goes on in a timed slice
** and blocks in a system call for longer than the slice. The timer fires at the slice's wall
** end, finds that the thread had less than an eighth of it on its CPU, and does not ask (before,
** it asked, and the actor gave way as soon as the call returned). Its signal may still cut that
** one call short, as any signal does: at most one EINTR. */
static void timed_then_blocks(void *arg)
{
  (void)arg;
  int64_t guard = smarm_now_ns() + TEST_HANG_GUARD_NS;
  while (!smarm_preempt_due() && smarm_now_ns() < guard)
    ;
  while (!atomic_load_explicit(&handler_calls, memory_order_relaxed) && smarm_now_ns() < guard)
    ;
  smarm_preempt(); /* asked by the ticker: it goes on in a timed slice */
  atomic_store(&handler_calls, 0);
  blocks_in_poll(arg);
}

TEST(an_actor_blocked_in_a_timed_slice_is_not_asked)
{
  if (!run_blocked(timed_then_blocks))
    SKIP("the thread's CPU clock cannot be read here");
  CHECK_EQ(atomic_load(&blocked_asks), 0);
  CHECK(atomic_load(&blocked_eintrs) <= 1);
}

/* slice_ns < 0 in spawn opts: never asked, though the runtime's slice is short. */
static void never_asked(void *arg)
{
  (void)arg;
  int64_t end = smarm_now_ns() + 50 * MS;
  while (smarm_now_ns() < end)
    CHECK(!smarm_preempt_due());
}

static void main_never(void *arg)
{
  (void)arg;
  smarm_spawn_opts_t opts = {0};
  opts.slice_ns = -1;
  smarm_pid_t a;
  CHECK_EQ(smarm_spawn(never_asked, NULL, &opts, &a), 0);
  WAIT_UNTIL(!smarm_alive(a), 1 * MS);
}

TEST(an_actor_with_no_slice_is_never_asked)
{
  run_with(1, 100 * 1000, main_never);
}

/* The end of a run: every actor still spinning is asked at once, so the run ends, although the
** slices are off; the handler ran on their thread. */
static void spin_forever(void *arg)
{
  (void)arg;
  for (;;)
    if (smarm_preempt_due())
      smarm_preempt();
}

static void main_stop(void *arg)
{
  (void)arg;
  /* one: with slices off, a second spawn_on would wait for good for the spinning scheduler */
  CHECK_EQ(smarm_spawn_on(1, spin_forever, NULL, NULL, NULL), 0);
}

TEST(the_end_of_a_run_stops_spinning_actors)
{
  run_with(2, -1, main_stop); /* no slices: only the stop asks */
}

/* The handler runs on the spinning actor's thread, in the middle of its code: this spinner
** waits for it before it looks at smarm_preempt_due. */
static void spin_until_signalled(void *arg)
{
  (void)arg;
  int64_t guard = smarm_now_ns() + TEST_HANG_GUARD_NS;
  while (!atomic_load_explicit(&handler_calls, memory_order_relaxed) && smarm_now_ns() < guard)
    ;
  while (!atomic_load_explicit(&flag, memory_order_relaxed) && smarm_now_ns() < guard)
    if (smarm_preempt_due())
      smarm_preempt();
}

static void main_signalled(void *arg)
{
  (void)arg;
  smarm_pid_t a;
  CHECK_EQ(smarm_spawn_on(1, spin_until_signalled, NULL, NULL, &a), 0);
  CHECK_EQ(smarm_spawn_on(1, set_flag, NULL, NULL, NULL), 0); /* answered once a gives way */
  WAIT_UNTIL(!smarm_alive(a), 1 * MS);
  CHECK(!smarm_alive(a));
}

TEST(the_handler_runs_on_the_overstaying_actors_thread)
{
#if defined(__SANITIZE_THREAD__)
  (void)main_signalled;
  SKIP("TSan runs a signal's handler only at the thread's next interceptor call");
#else
  atomic_store(&flag, 0);
  atomic_store(&handler_calls, 0);
  atomic_store(&handler_on_wrong_thread, 0);
  run_with(2, 1 * MS, main_signalled);
  CHECK(atomic_load(&handler_calls) >= 1);
  CHECK_EQ(atomic_load(&handler_on_wrong_thread), 0);
#endif
}

/* on_sched_start blocks SIGUSR1 on each scheduler thread and on_sched_stop restores the thread's
** mask: after the run, the calling thread (scheduler 1's) has its mask as before, SIGURG
** included (the run blocks SIGURG at its end and must unblock only that). */
static _Thread_local sigset_t mask_at_start;

static void block_usr1(unsigned sched, void *ud)
{
  (void)sched;
  (void)ud;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, &mask_at_start);
}

static void restore_mask(unsigned sched, void *ud)
{
  (void)sched;
  (void)ud;
  pthread_sigmask(SIG_SETMASK, &mask_at_start, NULL);
}

/* New actors go ahead of the waiting ones (sched.c, runq_push_ahead), but not past a preemption:
** once one has run out its slice, an actor woken before them runs before the next new one. */
static char order[8];
static int norder;

static void woken_logs(void *arg)
{
  (void)arg;
  smarm_msg_t *m = NULL;
  CHECK_EQ(smarm_receive(-1, &m), 0);
  smarm_msg_free(m);
  order[norder++] = 'W';
}

static void spins_a_slice(void *arg)
{
  order[norder++] = (char)(uintptr_t)arg;
  int64_t guard = smarm_now_ns() + TEST_HANG_GUARD_NS;
  while (!smarm_preempt_due() && smarm_now_ns() < guard)
    ;
  smarm_preempt();
}

static void main_demote(void *arg)
{
  (void)arg;
  norder = 0;
  smarm_pid_t w;
  CHECK_EQ(smarm_spawn(woken_logs, NULL, NULL, &w), 0);
  smarm_yield(); /* it parks in receive */
  CHECK_EQ(smarm_send(w, smarm_msg_new(0)), 0);
  CHECK_EQ(smarm_spawn(spins_a_slice, (void *)(uintptr_t)'1', NULL, NULL), 0);
  CHECK_EQ(smarm_spawn(spins_a_slice, (void *)(uintptr_t)'2', NULL, NULL), 0);
  while (norder < 3)
    smarm_yield();
  order[norder] = '\0';
  CHECK(strcmp(order, "1W2") == 0); /* without the demotion: "12W" */
}

TEST(a_preemption_lets_the_waiting_actors_go_before_new_ones) { run_with(1, 2 * MS, main_demote); }

static void main_returns(void *arg) { (void)arg; }

TEST(the_callers_signal_mask_is_as_on_sched_stop_left_it)
{
  sigset_t before, after;
  pthread_sigmask(SIG_SETMASK, NULL, &before);
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  cfg.schedulers = 2;
  cfg.on_sched_start = block_usr1;
  cfg.on_sched_stop = restore_mask;
  CHECK_EQ(smarm_run(&cfg, main_returns, NULL), 0);
  pthread_sigmask(SIG_SETMASK, NULL, &after);
  CHECK_EQ(sigismember(&after, SIGUSR1), sigismember(&before, SIGUSR1));
  CHECK_EQ(sigismember(&after, SIGURG), sigismember(&before, SIGURG));
}

TEST_MAIN()
