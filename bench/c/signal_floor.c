/*
** The floor under preemption's latency (bench/fairness.lua preempt_wait): how long a signal sent
** with pthread_kill takes to reach a thread that spins in user code, the way smarm's ticker
** reaches a scheduler whose actor overstays its slice. Measured from just before pthread_kill
** to the handler's first instruction, once a millisecond, with the spinning thread on another
** CPU (the usual case) and on the sender's own CPU. A virtual machine's cross-CPU interrupt
** dominates it; smarm's own part is what fairness.lua reports beyond this. `thread_timer` is the
** floor under a slice that the scheduler's own timer ends (preempt.c): a POSIX timer aimed at
** the spinning thread (SIGEV_THREAD_ID), armed by that thread for 1 ms ahead as a scheduler
** arms its own (the kernel queues a timer on the arming CPU), measured from expiry to handler.
** Knobs: SMARM_SIGNAL_ROUNDS (default 1000). Run: build/release/bench/c/signal_floor
*/
#define _GNU_SOURCE
#include "util/histogram.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef sigev_notify_thread_id /* glibc before 2.35 names it only through the union */
#define sigev_notify_thread_id _sigev_un._tid
#endif

static _Atomic int64_t sent_ns, took_ns; /* sender: the send's time; handler: the delay, or -1 */
static atomic_int stop;
static _Atomic int64_t arm_at; /* main: the expiry the spinner arms its timer for; 0: none */
static timer_t timer;          /* the spinner's, when `by_timer` */

static int64_t now_ns(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void on_signal(int sig)
{
  (void)sig;
  atomic_store(&took_ns, now_ns() - atomic_load(&sent_ns));
}

static void *spin(void *arg)
{
  int by_timer = arg != NULL;
  if (by_timer) {
    struct sigevent ev = {0};
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGURG;
    ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
    if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) {
      perror("signal_floor: timer_create");
      exit(1);
    }
  }
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    int64_t at = atomic_load_explicit(&arm_at, memory_order_relaxed);
    if (at) {
      struct itimerspec when = {{0, 0}, {at / 1000000000, at % 1000000000}};
      timer_settime(timer, TIMER_ABSTIME, &when, NULL);
      atomic_store(&arm_at, 0);
    }
  }
  if (by_timer)
    timer_delete(timer);
  return NULL;
}

static void pin(pthread_t t, int cpu)
{
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(t, sizeof set, &set);
}

/* One signal to t: by pthread_kill, or by its own timer 1 ms from now; sets sent_ns to the send
** or the expiry. */
static void send_one(pthread_t t, int by_timer)
{
  atomic_store(&took_ns, -1);
  if (!by_timer) {
    usleep(1000);
    atomic_store(&sent_ns, now_ns());
    pthread_kill(t, SIGURG);
    return;
  }
  int64_t at = now_ns() + 1000000;
  atomic_store(&sent_ns, at);
  atomic_store(&arm_at, at);
  usleep(900); /* the wait below spins only near the expiry */
}

static void measure(const char *variant, int same_cpu, int by_timer, long rounds)
{
  atomic_store(&stop, 0);
  pthread_t t;
  if (pthread_create(&t, NULL, spin, by_timer ? &timer : NULL) != 0) {
    perror("signal_floor: pthread_create");
    exit(1);
  }
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  pin(pthread_self(), 0);
  pin(t, same_cpu || ncpu < 2 ? 0 : 1);
  usleep(10000);
  static histogram_t h; /* large: not on the stack */
  sm_hist_reset(&h);
  for (long i = 0; i < rounds; i++) {
    send_one(t, by_timer);
    while (atomic_load(&took_ns) < 0)
      sched_yield(); /* on the same CPU the handler runs only once this thread gives way */
    sm_hist_record(&h, (uint64_t)atomic_load(&took_ns) * 1000); /* picoseconds */
  }
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  printf("scenario=signal_floor variant=%s p50_ns=%.1f p90_ns=%.1f p99_ns=%.1f max_ns=%.1f "
         "ops=%ld\n", variant, sm_hist_quantile(&h, 0.50) / 1e3, sm_hist_quantile(&h, 0.90) / 1e3,
         sm_hist_quantile(&h, 0.99) / 1e3, h.max / 1e3, rounds);
}

int main(void)
{
  const char *env = getenv("SMARM_SIGNAL_ROUNDS");
  long rounds = env ? atol(env) : 1000;
  if (rounds < 1)
    rounds = 1000;
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGURG, &sa, NULL);
  measure("other_cpu", 0, 0, rounds);
  measure("same_cpu", 1, 0, rounds);
  measure("thread_timer", 0, 1, rounds);
  return 0;
}
