/* Running out of memory is an error or a death, never an abort (issue 10, item 8): an actor whose
** parked stack cannot be saved dies alone with SMARM_EXIT_NOMEM, and a runtime stops with no
** memory left. The failures are injected through the core's allocation seam (src/core/alloc.h),
** so these cases never exhaust the machine. */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include "core/alloc.h"

#include <errno.h>

#define CHILD_STACK (64 * 1024) /* smaller than the main actor's: children share among themselves */

/* Sends its parent (arg) one message, then waits for ever. */
static void report_then_wait(void *arg)
{
  smarm_pid_t parent = (smarm_pid_t)(uintptr_t)arg;
  CHECK_EQ(test_send_u64(parent, smarm_self()), 0);
  smarm_msg_t *m;
  while (smarm_receive(SMARM_FOREVER, &m) == 0)
    smarm_msg_free(m);
}

/* Receives the next message, which must be a notice of `kind` (SMARM_MSG_DOWN or _EXIT) about
** pid (and for a DOWN, of ref); returns its reason (-1 if not). */
static int expect_notice(int kind, smarm_pid_t pid, smarm_ref_t ref)
{
  smarm_msg_t *m;
  int rc = smarm_receive(TEST_HANG_GUARD_NS, &m);
  CHECK_EQ(rc, 0);
  if (rc != 0)
    return -1;
  int reason = -1;
  CHECK_EQ(smarm_msg_kind(m), kind);
  if (smarm_msg_kind(m) == kind) {
    const smarm_notice_t *n = smarm_msg_data(m);
    CHECK_EQ(n->pid, pid);
    if (kind == SMARM_MSG_DOWN)
      CHECK_EQ(n->ref, ref);
    reason = n->reason;
  }
  smarm_msg_free(m);
  return reason;
}
#define expect_down(pid, ref) expect_notice(SMARM_MSG_DOWN, pid, ref)
#define expect_exit(pid) expect_notice(SMARM_MSG_EXIT, pid, 0)

/* One scheduler with two stacks: the main actor's, and one that the children share (their size
** has no slot of its own once the budget is spent). A parks there; B's first run must save A's
** bytes, and that save fails: A dies, with reason NOMEM, and B runs on. */
static void main_save_fails(void *arg)
{
  (void)arg;
  smarm_pid_t self = smarm_self(), a = 0, b = 0;
  smarm_ref_t ref_a = 0, ref_b = 0;
  smarm_spawn_opts_t opts = {.stack_size = CHILD_STACK, .monitor = &ref_a};
  CHECK_EQ(smarm_spawn(report_then_wait, (void *)(uintptr_t)self, &opts, &a), 0);
  CHECK_EQ(test_recv_u64(TEST_HANG_GUARD_NS), (int64_t)a); /* A ran and parks in its slot */

  sm_alloc_fail(SM_ALLOC_STACK_SAVE, 1);
  opts.monitor = &ref_b;
  CHECK_EQ(smarm_spawn(report_then_wait, (void *)(uintptr_t)self, &opts, &b), 0);
  CHECK_EQ(expect_down(a, ref_a), SMARM_EXIT_NOMEM); /* A died alone, before B ran */
  CHECK_EQ(test_recv_u64(TEST_HANG_GUARD_NS), (int64_t)b);
  CHECK_EQ(smarm_alive(b), 1);
  CHECK_EQ(smarm_alive(a), 0);
  sm_alloc_fail(0, 0);

  /* The slot works on: B is saved and restored as usual when another child comes. */
  smarm_pid_t c = 0;
  opts.monitor = NULL;
  CHECK_EQ(smarm_spawn(report_then_wait, (void *)(uintptr_t)self, &opts, &c), 0);
  CHECK_EQ(test_recv_u64(TEST_HANG_GUARD_NS), (int64_t)c);
  CHECK_EQ(smarm_exit_signal(b, SMARM_EXIT_KILL, NULL, 0), 0);
  CHECK_EQ(expect_down(b, ref_b), SMARM_EXIT_KILLED); /* B was brought back to die */
}

TEST(a_stack_that_cannot_be_saved_ends_its_actor_alone)
{
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  cfg.schedulers = 1;
  cfg.max_stacks = 2;
  CHECK_EQ(smarm_run(&cfg, main_save_fails, NULL), 0);
}

/* ---- stopping ---- */

static _Atomic int cleanups_run;

static void count_cleanup(void *arg)
{
  (void)arg;
  atomic_fetch_add(&cleanups_run, 1);
}

/* Pushes a cleanup that lives on its own stack, reports, and waits for ever. */
static void wait_with_cleanup(void *arg)
{
  smarm_cleanup_t c = {count_cleanup, NULL, NULL};
  smarm_cleanup_push(&c);
  report_then_wait(arg);
}

#define PER_SCHED 6

/* Children on both schedulers, sharing their stacks (one slot per scheduler), parked with a
** cleanup each; then every allocation fails, and the main actor ends: the runtime must stop,
** run every cleanup (bringing each parked stack back over another) and return. */
static void main_stop_without_memory(void *arg)
{
  (void)arg;
  smarm_pid_t self = smarm_self();
  smarm_spawn_opts_t opts = {.stack_size = CHILD_STACK};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < PER_SCHED; i++) {
      smarm_pid_t pid;
      CHECK_EQ(smarm_spawn_on(k, wait_with_cleanup, (void *)(uintptr_t)self, &opts, &pid), 0);
    }
  for (int i = 0; i < 2 * PER_SCHED; i++)
    CHECK(test_recv_u64(TEST_HANG_GUARD_NS) > 0);
  sm_alloc_fail(SM_ALLOC_ALL, UINT32_MAX);
}

TEST(a_runtime_stops_with_no_memory_left)
{
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  cfg.schedulers = 2;
  cfg.max_stacks = 4; /* two slots a scheduler: the main actor's, and one for the children */
  atomic_store(&cleanups_run, 0);
  CHECK_EQ(smarm_run(&cfg, main_stop_without_memory, NULL), 0);
  sm_alloc_fail(0, 0);
  CHECK_EQ(atomic_load(&cleanups_run), 2 * PER_SCHED);
}

/* A link or monitor that its target's scheduler cannot record is answered, as for a death,
** with reason NOMEM: the asker is told and nothing is left half made. (On the asker's own
** scheduler both sides are made within the call, which returns -ENOMEM instead.) */
static smarm_pid_t spawn_reporting(int where)
{
  smarm_pid_t pid = 0;
  CHECK_EQ(smarm_spawn_on(where, report_then_wait, (void *)(uintptr_t)smarm_self(), NULL, &pid),
           0);
  CHECK_EQ(test_recv_u64(TEST_HANG_GUARD_NS), (int64_t)pid);
  return pid;
}

static void main_tie_fails(void *arg)
{
  (void)arg;
  /* A monitor placed and taken back here leaves our fault record and spare monitor records, so
  ** that our own side of the next monitor allocates nothing: the one armed failure hits the
  ** target's side, on scheduler 2, where no actor has died (no spare records there). */
  smarm_pid_t x = spawn_reporting(0), y = spawn_reporting(1), z = spawn_reporting(1);
  smarm_ref_t ref = 0;
  CHECK_EQ(smarm_monitor(x, &ref), 0);
  CHECK_EQ(smarm_demonitor(ref, 0), 1);

  sm_alloc_fail(SM_ALLOC_FAULTS, 1);
  CHECK_EQ(smarm_monitor(y, &ref), 0);
  CHECK_EQ(expect_down(y, ref), SMARM_EXIT_NOMEM);
  CHECK_EQ(smarm_alive(y), 1); /* refused, not killed */

  /* A link refused the same way: the exit signal reaches a trapping asker as an EXIT notice. */
  smarm_trap_exit(1);
  sm_alloc_fail(SM_ALLOC_FAULTS, 1);
  CHECK_EQ(smarm_link(z), 0);
  CHECK_EQ(expect_exit(z), SMARM_EXIT_NOMEM);
  sm_alloc_fail(0, 0);
  CHECK_EQ(smarm_alive(z), 1);
}

TEST(a_tie_that_cannot_be_recorded_is_refused_with_nomem)
{
  smarm_config_t cfg;
  smarm_config_init(&cfg);
  cfg.schedulers = 2;
  CHECK_EQ(smarm_run(&cfg, main_tie_fails, NULL), 0);
}

/* A spawn on another scheduler does not wait for its pid (set aside ahead): when that scheduler
** then finds no memory for the actor, the spawner's monitor and link hear of it as of a death
** with reason NOMEM, and the pid names nothing. */
static _Atomic int blocks_stopped;

static void main_spawn_fails_there(void *arg)
{
  (void)arg;
  /* As above: our side of the ties allocates nothing; and the first spawn on scheduler 2 asked
  ** for pids, which arrived before its answer. */
  smarm_pid_t x = spawn_reporting(0);
  spawn_reporting(1);
  smarm_ref_t ref = 0;
  CHECK_EQ(smarm_monitor(x, &ref), 0);
  CHECK_EQ(smarm_demonitor(ref, 0), 1);

  smarm_pid_t pid = 0;
  smarm_spawn_opts_t opts = {.monitor = &ref};
  sm_alloc_fail(SM_ALLOC_FAULTS, 1);
  CHECK_EQ(smarm_spawn_on(1, report_then_wait, (void *)(uintptr_t)smarm_self(), &opts, &pid), 0);
  CHECK_EQ(smarm_pid_sched(pid), 1);
  CHECK_EQ(expect_down(pid, ref), SMARM_EXIT_NOMEM);
  CHECK_EQ(smarm_alive(pid), 0);

  smarm_trap_exit(1);
  opts = (smarm_spawn_opts_t){.link = 1};
  sm_alloc_fail(SM_ALLOC_FAULTS, 1);
  CHECK_EQ(smarm_spawn_on(1, report_then_wait, (void *)(uintptr_t)smarm_self(), &opts, &pid), 0);
  CHECK_EQ(expect_exit(pid), SMARM_EXIT_NOMEM);
  sm_alloc_fail(0, 0);
  CHECK_EQ(smarm_alive(pid), 0);
  smarm_trap_exit(0);

  /* A spawn whose request travels in its block (smarm_spawn_on_block): the block reaches
  ** on_actor_stopped as the spawn's data (ASan's leak check sees it freed there). */
  smarm_msg_t *block = smarm_msg_new(SMARM_SPAWN_ROOM);
  CHECK(block != NULL);
  opts = (smarm_spawn_opts_t){.monitor = &ref, .data = block};
  sm_alloc_fail(SM_ALLOC_FAULTS, 1);
  CHECK_EQ(smarm_spawn_on_block(1, report_then_wait, block, &opts, &pid), 0);
  CHECK_EQ(expect_down(pid, ref), SMARM_EXIT_NOMEM);
  sm_alloc_fail(0, 0);
  CHECK_EQ(atomic_load(&blocks_stopped), 1);
}

/* on_actor_stopped of the spawn above: its data is its block, back to the kind it had. */
static void free_stopped_block(void *data, void *ud)
{
  (void)ud;
  CHECK_EQ(smarm_msg_kind(data), SMARM_MSG_USER);
  smarm_msg_free(data);
  atomic_fetch_add(&blocks_stopped, 1);
}

TEST(a_spawn_that_finds_no_memory_there_is_heard_as_a_death)
{
  atomic_store(&blocks_stopped, 0);
  CHECK_EQ(test_run_stopped(2, main_spawn_fails_there, NULL, free_stopped_block), 0);
}

/* A new actor is bound to a stack slot when it first runs, not when it is spawned: a spawn that
** would find no memory for a slot succeeds, and the actor, finding none when its turn comes
** either, ends with reason NOMEM before any of its code runs: its monitor is told and its name
** freed as for any death, and its data goes to on_actor_stopped. Once memory is back the same
** size gets its slot. (Before, the spawn itself failed with -ENOMEM.) */
#define UNSHARED_STACK (1024 * 1024) /* larger than every slot there: none to share */

static _Atomic int ran_anyway;

static void must_not_run(void *arg)
{
  (void)arg;
  atomic_store(&ran_anyway, 1);
}

static void main_first_bind_fails(void *arg)
{
  (void)arg;
  smarm_pid_t self = smarm_self(), pid = 0;
  smarm_ref_t ref = 0;
  smarm_msg_t *block = smarm_msg_new(16);
  CHECK(block != NULL);
  smarm_spawn_opts_t opts = {
      .stack_size = UNSHARED_STACK, .monitor = &ref, .name = "unbound", .data = block};
  sm_alloc_fail(SM_ALLOC_STACK_SLOT, UINT32_MAX);
  int rc = smarm_spawn(must_not_run, NULL, &opts, &pid);
  CHECK_EQ(rc, 0);
  if (rc < 0) { /* no actor, no DOWN to wait for */
    sm_alloc_fail(0, 0);
    smarm_msg_free(block);
    return;
  }
  CHECK_EQ(smarm_whereis("unbound"), pid);
  CHECK_EQ(expect_down(pid, ref), SMARM_EXIT_NOMEM);
  sm_alloc_fail(0, 0);
  CHECK_EQ(smarm_alive(pid), 0);
  CHECK_EQ(smarm_whereis("unbound"), 0);
  CHECK_EQ(atomic_load(&ran_anyway), 0);
  CHECK_EQ(atomic_load(&blocks_stopped), 1);

  opts = (smarm_spawn_opts_t){.stack_size = UNSHARED_STACK, .monitor = &ref};
  CHECK_EQ(smarm_spawn(report_then_wait, (void *)(uintptr_t)self, &opts, &pid), 0);
  CHECK_EQ(test_recv_u64(TEST_HANG_GUARD_NS), (int64_t)pid);
  CHECK_EQ(smarm_exit_signal(pid, SMARM_EXIT_KILL, NULL, 0), 0);
  CHECK_EQ(expect_down(pid, ref), SMARM_EXIT_KILLED);
}

TEST(a_new_actor_that_finds_no_stack_slot_ends_with_nomem_unrun)
{
  atomic_store(&blocks_stopped, 0);
  atomic_store(&ran_anyway, 0);
  CHECK_EQ(test_run_stopped(1, main_first_bind_fails, NULL, free_stopped_block), 0);
}

/* Killed while queued, then no slot for it at its turn: it dies of the kill, as it would have
** with a stack (the review of the change found NOMEM reported instead). */
static void main_killed_before_a_failed_bind(void *arg)
{
  (void)arg;
  smarm_pid_t pid = 0;
  smarm_ref_t ref = 0;
  smarm_spawn_opts_t opts = {.stack_size = UNSHARED_STACK, .monitor = &ref};
  sm_alloc_fail(SM_ALLOC_STACK_SLOT, UINT32_MAX);
  CHECK_EQ(smarm_spawn(must_not_run, NULL, &opts, &pid), 0);
  CHECK_EQ(smarm_exit_signal(pid, SMARM_EXIT_KILL, NULL, 0), 0); /* before its first turn */
  CHECK_EQ(expect_down(pid, ref), SMARM_EXIT_KILLED);
  sm_alloc_fail(0, 0);
  CHECK_EQ(atomic_load(&ran_anyway), 0);
}

TEST(a_new_actor_killed_before_a_failed_bind_dies_of_the_kill)
{
  atomic_store(&ran_anyway, 0);
  RUN(1, main_killed_before_a_failed_bind, NULL);
}

/* The main actor is bound to its slot at its first turn too: a run whose main actor finds no
** memory for one ends at once and says -ENOMEM, as when its spawn failed, its function never
** run (the review of the change found that it returned 0). */
TEST(a_main_actor_that_finds_no_stack_slot_fails_the_run)
{
  atomic_store(&ran_anyway, 0);
  sm_alloc_fail(SM_ALLOC_STACK_SLOT, UINT32_MAX);
  int rc = smarm_run(NULL, must_not_run, NULL);
  sm_alloc_fail(0, 0);
  CHECK_EQ(rc, -ENOMEM);
  CHECK_EQ(atomic_load(&ran_anyway), 0);
  CHECK_EQ(smarm_run(NULL, must_not_run, NULL), 0); /* memory back: it runs */
  CHECK_EQ(atomic_load(&ran_anyway), 1);
}

TEST_MAIN()
