/*
** switch_cost: what a yield, a switch, a message round trip and a spawn cost in the C core.
**
** Method (kept from the predecessor's profile, see docs/perf.md): each sample brackets a batch
** of operations with a serialised cycle counter and the monotonic clock; the bracket's own cost
** (the floor, measured back to back before each configuration) is subtracted and the rest is
** divided by the operations in the batch. Samples go into log-linear histograms (constant cost
** per sample); several runs after a warm-up are pooled. max is mostly OS noise (interrupts,
** the hypervisor), p50 is the figure to compare.
**
** Modes (one output line each, `scenario=switch_cost mode=... key=value ...`):
**   local           one actor alone on one scheduler, yield loop (the decision, no switch)
**   pair            two actors on one scheduler yielding in turn; per op = one yield = one switch
**   local_pingpong  message round trip between two actors of one scheduler
**   remote          message round trip between actors on two schedulers (both spinning)
**   remote_parked   the same with spin_ns = 0: every wait parks in the kernel
**   spawn           spawn of an actor that runs and exits, with a pooled stack
**   parallel N      N schedulers, each with its own pair; per op = one switch (N = 1 2 4 8)
**
** Knobs: SMARM_SWITCH_ROUNDS (measured ops per run), SMARM_SWITCH_WARMUP (ops before measuring),
** SMARM_SWITCH_RUNS (runs pooled), SMARM_SWITCH_BATCH (ops per sample).
** Usage: switch_cost [mode ...] [parallel N ...]   (no arguments: every mode)
*/
#define _GNU_SOURCE
#include "util/histogram.h"
#include "smarm.h"
#include "util/timing.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct knobs {
  long rounds, warmup, runs, batch;
} knobs_t;

static knobs_t knobs;

static long env_long(const char *name, long dflt)
{
  const char *s = getenv(name);
  long v = s ? strtol(s, NULL, 10) : dflt;
  return v > 0 ? v : dflt;
}

/* What one configuration measured. Histograms hold picoseconds and centi-cycles per op. */
typedef struct result {
  histogram_t ps, ccyc;
  int64_t total_ns;
  uint64_t total_cyc;
  double floor_ns, floor_cyc;
  double ghz; /* cycles per ns over a 5 ms calibration interval */
  long ops;
} result_t;

static void result_reset(result_t *r)
{
  sm_hist_reset(&r->ps);
  sm_hist_reset(&r->ccyc);
  r->total_ns = 0;
  r->total_cyc = 0;
  r->floor_ns = r->floor_cyc = 0;
  r->ghz = 0;
  r->ops = 0;
}

/* The bracket's own cost: the median of back-to-back empty brackets. */
static void measure_floor(result_t *r)
{
  static histogram_t ns, cyc;
  sm_hist_reset(&ns);
  sm_hist_reset(&cyc);
  for (int i = 0; i < 20000; i++) {
    int64_t t0 = wall_ns();
    uint64_t c0 = cycles_begin();
    uint64_t c1 = cycles_end();
    int64_t t1 = wall_ns();
    sm_hist_record(&ns, (uint64_t)(t1 - t0));
    sm_hist_record(&cyc, c1 - c0);
  }
  r->floor_ns = (double)sm_hist_quantile(&ns, 0.5);
  r->floor_cyc = (double)sm_hist_quantile(&cyc, 0.5);
  /* The two lenses' exchange rate: long enough that the brackets' own cost does not matter. */
  int64_t t0 = wall_ns();
  uint64_t c0 = cycles_begin();
  while (wall_ns() - t0 < 5 * 1000 * 1000)
    ;
  uint64_t c1 = cycles_end();
  int64_t t1 = wall_ns();
  r->ghz = (double)(c1 - c0) / (double)(t1 - t0);
}

/* Runs warmup + rounds operations per run, in samples of `batch`; op(ctx, n) performs n
** operations, each counting as ops_per_call (a pair's yield is two yields). Always inlined so
** `op` is a direct call.
**
** Why op runs the whole batch itself: a switch makes the resumed actor return into its own
** callers while the CPU's return-stack predictor holds the other actor's return addresses. When
** every actor yields from the same loop (as every Lua actor does, through one C function) the
** predictions are right; a measuring loop that differs from its partner's would instead pay one
** mispredicted return per switch (about 4 ns here), which is the benchmark's artefact, not the
** runtime's. So both actors of a pair run yield_n(). */
typedef void (*op_fn)(void *ctx, long n);

static inline __attribute__((always_inline)) void measure(op_fn op, void *ctx, int ops_per_call,
                                                           result_t *r)
{
  long samples = knobs.rounds / knobs.batch;
  if (samples < 1)
    samples = 1;
  double per_sample_ops = (double)knobs.batch * ops_per_call;
  for (long run = 0; run < knobs.runs; run++) {
    op(ctx, knobs.warmup);
    for (long s = 0; s < samples; s++) {
      int64_t t0 = wall_ns();
      uint64_t c0 = cycles_begin();
      op(ctx, knobs.batch);
      uint64_t c1 = cycles_end();
      int64_t t1 = wall_ns();
      double ns = (double)(t1 - t0) - r->floor_ns;
      double cyc = (double)(c1 - c0) - r->floor_cyc;
      sm_hist_record(&r->ps, ns > 0 ? (uint64_t)(ns * 1000.0 / per_sample_ops) : 0);
      sm_hist_record(&r->ccyc, cyc > 0 ? (uint64_t)(cyc * 100.0 / per_sample_ops) : 0);
      r->total_ns += t1 - t0;
      r->total_cyc += c1 - c0;
      r->ops += (long)per_sample_ops;
    }
  }
}

static void print_result(const char *mode, unsigned schedulers, const result_t *r,
                         const char *extra)
{
  printf("scenario=switch_cost mode=%s schedulers=%u rounds=%ld runs=%ld batch=%ld "
         "p50_ns=%.1f p90_ns=%.1f p99_ns=%.1f max_ns=%.1f p50_cyc=%.1f ghz=%.3f floor_ns=%.1f "
         "ops=%ld%s%s\n",
         mode, schedulers, knobs.rounds, knobs.runs, knobs.batch,
         sm_hist_quantile(&r->ps, 0.5) / 1000.0, sm_hist_quantile(&r->ps, 0.9) / 1000.0,
         sm_hist_quantile(&r->ps, 0.99) / 1000.0, sm_hist_quantile(&r->ps, 1.0) / 1000.0,
         sm_hist_quantile(&r->ccyc, 0.5) / 100.0,
         r->ghz, r->floor_ns, r->ops,
         extra ? " " : "", extra ? extra : "");
  fflush(stdout);
}

static int run_with(unsigned schedulers, int64_t spin_ns, smarm_actor_fn fn, void *arg)
{
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  cfg.schedulers = schedulers;
  cfg.pin_threads = 1;
  if (spin_ns >= 0)
    cfg.spin_ns = spin_ns;
  int rc = smarm_run(&cfg, fn, arg);
  if (rc < 0)
    fprintf(stderr, "switch_cost: smarm_run failed: %d\n", rc);
  return rc;
}

/* ---- local and pair ---------------------------------------------------------------------- */

static volatile int pair_done; /* tells the partner of a pair to stop */

/* Yields n times, or (n < 0) until pair_done. noinline: one call site for every actor. */
static __attribute__((noinline)) void yield_n(void *ctx, long n)
{
  (void)ctx;
  if (n < 0) {
    while (!pair_done)
      smarm_yield();
    return;
  }
  for (long i = 0; i < n; i++)
    smarm_yield();
}

static result_t result;

static void main_local(void *arg)
{
  (void)arg;
  measure_floor(&result);
  measure(yield_n, NULL, 1, &result);
}

static void yield_partner(void *arg) { yield_n(arg, -1); }

static void main_pair(void *arg)
{
  (void)arg;
  pair_done = 0;
  smarm_spawn(yield_partner, NULL, NULL, NULL);
  smarm_yield();
  measure_floor(&result);
  measure(yield_n, NULL, 2, &result);
  pair_done = 1;
  smarm_yield();
}

/* ---- message round trips --------------------------------------------------------------- */

/* Echoes every message back to its sender (the same block: no allocation per message) until a
** zero-size one arrives. */
static void echo(void *arg)
{
  (void)arg;
  for (;;) {
    smarm_msg_t *m;
    if (smarm_receive(SMARM_FOREVER, &m) < 0)
      return;
    if (smarm_msg_size(m) == 0) {
      smarm_msg_free(m);
      return;
    }
    smarm_send(smarm_msg_sender(m), m);
  }
}

typedef struct pingpong {
  smarm_pid_t peer;
  smarm_msg_t *msg; /* the one block bouncing between the two actors */
} pingpong_t;

static void op_round_trip(void *ctx, long n)
{
  pingpong_t *pp = ctx;
  for (long i = 0; i < n; i++) {
    smarm_send(pp->peer, pp->msg);
    smarm_receive(SMARM_FOREVER, &pp->msg);
  }
}

static const char *pingpong_extra; /* syscall counts of the last round-trip run */

static void main_pingpong(void *arg)
{
  int where = *(int *)arg; /* scheduler of the echo actor */
  pingpong_t pp;
  smarm_spawn_on(where, echo, NULL, NULL, &pp.peer);
  pp.msg = smarm_msg_new(8);
  memset(smarm_msg_data(pp.msg), 0, 8);
  op_round_trip(&pp, 1);
  measure_floor(&result);
  smarm_stats_t before, after;
  smarm_stats_read(-1, &before);
  measure(op_round_trip, &pp, 1, &result);
  smarm_stats_read(-1, &after);
  smarm_msg_free(pp.msg);
  smarm_send(pp.peer, smarm_msg_new(0));
  long msgs = 2 * (knobs.warmup + knobs.rounds / knobs.batch * knobs.batch) * knobs.runs;
  static char extra[160];
  snprintf(extra, sizeof extra, "futex_per_1k_msgs=%.3f parks=%llu wakes=%llu",
           1000.0 * (double)((after.parks - before.parks) + (after.wakes - before.wakes)) /
               (double)msgs,
           (unsigned long long)(after.parks - before.parks),
           (unsigned long long)(after.wakes - before.wakes));
  result.ops = msgs / 2;
  pingpong_extra = extra;
}

/* ---- spawn ----------------------------------------------------------------------------- */

static void nothing(void *arg) { (void)arg; }

static void op_spawn_exit(void *ctx, long n)
{
  (void)ctx;
  for (long i = 0; i < n; i++) {
    smarm_spawn(nothing, NULL, NULL, NULL);
    smarm_yield(); /* the child runs, exits, and its stack goes back to the pool */
  }
}

static void main_spawn(void *arg)
{
  (void)arg;
  op_spawn_exit(NULL, 1);
  measure_floor(&result);
  measure(op_spawn_exit, NULL, 1, &result);
}

/* ---- parallel -------------------------------------------------------------------------- */

typedef struct par_shared {
  unsigned n;
  _Atomic unsigned ready;
  smarm_pid_t main;
  result_t results[8];
} par_shared_t;

static par_shared_t par;

/* Partner of a parallel pair: yields until its measurer is done (the flag is per scheduler). */
static __attribute__((noinline)) void par_yield_n(void *ctx, long n)
{
  volatile int *done = ctx;
  if (n < 0) {
    while (!*done)
      smarm_yield();
    return;
  }
  for (long i = 0; i < n; i++)
    smarm_yield();
}

static void par_partner(void *arg) { par_yield_n(arg, -1); }

static void par_measurer(void *arg)
{
  result_t *r = arg;
  volatile int done = 0;
  smarm_spawn(par_partner, (void *)&done, NULL, NULL);
  measure_floor(r);
  /* Start together: each scheduler's pair waits (yielding) until all are ready. */
  atomic_fetch_add(&par.ready, 1);
  while (atomic_load(&par.ready) < par.n)
    smarm_yield();
  measure(par_yield_n, (void *)&done, 2, r);
  done = 1;
  smarm_yield();
  smarm_msg_t *m = smarm_msg_new(0);
  smarm_send(par.main, m);
}

static void main_parallel(void *arg)
{
  (void)arg;
  par.main = smarm_self();
  for (unsigned k = 0; k < par.n; k++)
    smarm_spawn_on((int)k, par_measurer, &par.results[k], NULL, NULL);
  for (unsigned k = 0; k < par.n; k++) {
    smarm_msg_t *m;
    smarm_receive(SMARM_FOREVER, &m);
    smarm_msg_free(m);
  }
}

static void run_parallel(unsigned n)
{
  if (n < 1 || n > 8) {
    fprintf(stderr, "switch_cost: parallel N takes 1..8\n");
    return;
  }
  memset(&par, 0, sizeof par);
  par.n = n;
  for (unsigned k = 0; k < n; k++)
    result_reset(&par.results[k]);
  if (run_with(n, -1, main_parallel, NULL) < 0)
    return;
  result_reset(&result);
  for (unsigned k = 0; k < n; k++) {
    sm_hist_merge(&result.ps, &par.results[k].ps);
    sm_hist_merge(&result.ccyc, &par.results[k].ccyc);
    result.total_ns += par.results[k].total_ns;
    result.total_cyc += par.results[k].total_cyc;
    result.floor_ns += par.results[k].floor_ns / n;
    result.ghz += par.results[k].ghz / n;
    result.ops += par.results[k].ops;
  }
  print_result("parallel", n, &result, NULL);
}

/* ---- driver ---------------------------------------------------------------------------- */

static void run_mode(const char *mode)
{
  result_reset(&result);
  if (strcmp(mode, "local") == 0) {
    if (run_with(1, -1, main_local, NULL) == 0)
      print_result(mode, 1, &result, NULL);
  } else if (strcmp(mode, "pair") == 0) {
    if (run_with(1, -1, main_pair, NULL) == 0)
      print_result(mode, 1, &result, NULL);
  } else if (strcmp(mode, "local_pingpong") == 0 || strcmp(mode, "remote") == 0 ||
             strcmp(mode, "remote_parked") == 0) {
    int local = strcmp(mode, "local_pingpong") == 0;
    int parked = strcmp(mode, "remote_parked") == 0;
    knobs_t saved = knobs;
    if (parked) { /* every round trip sleeps twice in the kernel: keep it short */
      knobs.rounds = knobs.rounds / 100 > 1000 ? knobs.rounds / 100 : 1000;
      knobs.warmup = 100;
      knobs.batch = 1;
    }
    int where = local ? 0 : 1;
    if (run_with(local ? 1 : 2, parked ? 0 : -1, main_pingpong, &where) == 0)
      print_result(mode, local ? 1 : 2, &result, pingpong_extra);
    knobs = saved;
  } else if (strcmp(mode, "spawn") == 0) {
    if (run_with(1, -1, main_spawn, NULL) == 0)
      print_result(mode, 1, &result, NULL);
  } else {
    fprintf(stderr, "switch_cost: unknown mode '%s'\n", mode);
    exit(2);
  }
}

int main(int argc, char **argv)
{
  knobs.rounds = env_long("SMARM_SWITCH_ROUNDS", 1000000);
  knobs.warmup = env_long("SMARM_SWITCH_WARMUP", 10000);
  knobs.runs = env_long("SMARM_SWITCH_RUNS", 5);
  knobs.batch = env_long("SMARM_SWITCH_BATCH", 16);
  if (argc < 2) {
    const char *all[] = {"local", "pair", "local_pingpong", "remote", "remote_parked", "spawn"};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
      run_mode(all[i]);
    for (unsigned n = 1; n <= 8; n *= 2)
      run_parallel(n);
    return 0;
  }
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "parallel") == 0) {
      if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9')
        run_parallel((unsigned)atoi(argv[++i]));
      else
        for (unsigned n = 1; n <= 8; n *= 2)
          run_parallel(n);
    } else {
      run_mode(argv[i]);
    }
  }
  return 0;
}
