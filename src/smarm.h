/*
** smarm: stackful actors on shared-nothing scheduler threads.
**
** This is the whole public C API. A program configures a runtime, starts it with smarm_run(),
** which runs a main actor on scheduler 0 (the calling thread) and N-1 more scheduler threads,
** and returns when the main actor ends or smarm_stop() is called. Every actor has its own C stack
** and is owned by the scheduler that created it for its whole life; actors talk only by copying
** messages into each other's mailboxes.
**
** Conventions:
**  - Functions return 0 or a negative errno (-EINVAL, -ESRCH, -ETIMEDOUT, -EPERM, -ENOMEM).
**  - Functions that park or act on "the calling actor" must be called from inside an actor
**    (they return -EPERM, or do nothing for void functions, elsewhere).
**  - Times are nanoseconds on CLOCK_MONOTONIC. A timeout of SMARM_FOREVER (or any negative
**    value, or one so large its deadline would pass INT64_MAX) waits without end; 0 polls.
**  - Memory on an actor's stack belongs to that actor alone: never hand another actor or thread
**    a pointer into it (as a spawn argument, inside a message) across a receive, sleep or spawn
**    on another scheduler. When actors outnumber the runtime's guarded stacks, and when an actor
**    waits there across two idle passes of its scheduler (a second or two), its stack bytes are
**    moved to the heap while it is parked (docs/design.md, "Stacks"). smarm_await alone keeps
**    the stack in place while slots suffice (its waker may share state there). Use heap or
**    static memory for shared state.
**  - Scheduler indexes are 0-based in C (the Lua layer shows them 1-based).
*/
#ifndef SMARM_H
#define SMARM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SMARM_VERSION "0.1.0"

/* Every function of this API is visible outside the library; everything else of smarm is built
** hidden (-fvisibility=hidden), and its internal names of external linkage start with sm_, so
** that neither a program linking libsmarm.a nor a C module loaded by the smarm executable meets
** them. */
#if defined(__GNUC__)
#define SMARM_API __attribute__((visibility("default")))
#else
#define SMARM_API
#endif

/* A pid names an actor for its whole life and never names another one: it packs the owning
** scheduler, a slot in that scheduler's actor table and the slot's generation, which changes
** each time the slot is reused (a slot whose generations are used up is retired, not reused).
** Generations carry on across the runtimes of a process: a pid of an earlier runtime is dead in
** a later one. 0 is never a valid pid. Printed for people as <scheduler+1.slot.generation>. */
typedef uint64_t smarm_pid_t;

#define SMARM_PID_SCHED_BITS 12
#define SMARM_PID_SLOT_BITS 24
#define SMARM_PID_GEN_BITS 28

static inline unsigned smarm_pid_sched(smarm_pid_t pid)
{
  return (unsigned)(pid >> (SMARM_PID_SLOT_BITS + SMARM_PID_GEN_BITS));
}
static inline uint32_t smarm_pid_slot(smarm_pid_t pid)
{
  return (uint32_t)(pid >> SMARM_PID_GEN_BITS) & ((1u << SMARM_PID_SLOT_BITS) - 1);
}
static inline uint32_t smarm_pid_gen(smarm_pid_t pid)
{
  return (uint32_t)pid & ((1u << SMARM_PID_GEN_BITS) - 1);
}

#define SMARM_FOREVER ((int64_t)-1)
#define SMARM_SCHED_ANY (-1)
/* Fewer schedulers than the pid field allows: the Lua layer relies on it (lsmarm.c, pid_key). */
#define SMARM_SCHED_MAX 1024

typedef void (*smarm_actor_fn)(void *arg);

typedef struct smarm_msg smarm_msg_t; /* a message block ("Messages" below) */

/* ---- Runtime ------------------------------------------------------------------------------ */

struct smarm_actor_info; /* "Looking at actors", below */

typedef struct smarm_config {
  unsigned schedulers;   /* threads; 0 = online CPUs (at most SMARM_SCHED_MAX) */
  size_t stack_size;     /* default actor stack size in bytes; 0 = 256 KiB (rounded to pages) */
  unsigned max_stacks;   /* guarded stacks for the whole runtime, split between schedulers (at
                            least one each); 0 = 4096. Beyond that, actors share stacks by
                            copying (docs/design.md). Each costs two kernel mappings. */
  int64_t spin_ns;       /* how long an idle scheduler spins before parking; <0 = 50 us. A
                            machine whose CPUs are all taken pauses the spin (smarm_stats_t,
                            spin_pauses) */
  int pin_threads;       /* nonzero: pin scheduler k to CPU k % online CPUs */
  /* Called on each scheduler's own thread before it runs any actor / after it ran its last.
  ** Scheduler 0's hooks run on the thread that called smarm_run(). */
  void (*on_sched_start)(unsigned sched, void *userdata);
  void (*on_sched_stop)(unsigned sched, void *userdata);
  /* Called on a scheduler's own thread where it looks at its timers anyway: before it idles, and
  ** every 64 decisions while busy (maybe on an actor's stack, between its actors' code). For
  ** quick bookkeeping only: it must not call into smarm (the Lua binding tells its VM's memory to
  ** smarm.stats there). NULL: none. */
  void (*on_sched_tick)(unsigned sched, void *userdata);
  /* Called on the owning scheduler's thread for each actor that has a non-NULL
  ** smarm_actor_data and ends without its function returning: stopped by shutdown (before
  ** on_sched_stop), ended by an exit signal or a kill (smarm_dying_reason then says why), or
  ** ended before its first run for want of a stack slot (on the scheduler's stack, mid-run;
  ** smarm_dying_reason says -1): the place to release what the data holds. Its C frames are
  ** already discarded. */
  void (*on_actor_stopped)(void *actor_data, void *userdata);
  /* Time slices (docs/design.md, "Preemption"). slice_ns: how long an actor may run without
  ** parking or yielding before it is asked to give way, in its thread's CPU time (time the thread
  ** waits for a CPU or blocks in a system call does not count); 0 = 2 ms, negative = never. When
  ** an actor's slice is over, on_preempt(sched, userdata) is called ON THAT SCHEDULER'S THREAD
  ** FROM A SIGNAL HANDLER (SIGURG) while the actor runs: it may only do async-signal-safe work
  ** that makes the actor's code call smarm_preempt() soon (the Lua binding arms a debug hook).
  ** NULL: no actor is ever interrupted (C actors give way only where they park or yield). */
  int64_t slice_ns;
  void (*on_preempt)(unsigned sched, void *userdata);
  /* The watchdog: an actor that has not given way (parked, yielded or been preempted) for this
  ** long is reported on stderr, one line with its pid, scheduler and time, again at twice, four
  ** times... the time while it lasts: it is stuck in C (a long FFI call, a blocking library),
  ** in a __gc finalizer, or runs with no slice. 0 = 1 s; negative = off. */
  int64_t watchdog_ns;
  /* With each watchdog report, called ON THAT SCHEDULER'S THREAD FROM A SIGNAL HANDLER (SIGURG),
  ** in the middle of the stuck actor: it may write (write(2), nothing that allocates or locks)
  ** what it can safely tell of where the actor stands (the Lua binding: its traceback). NULL:
  ** the report's line alone. */
  void (*on_watchdog)(unsigned sched, void *userdata);
  /* How long an actor waits for another scheduler to answer a request (a spawn there, an alive,
  ** a register, a message timer's set or cancel): a scheduler answers between its actors' slices,
  ** so only one stuck in C (a long FFI call, a blocking library) makes it wait that long. Past
  ** it the call fails with -ETIMEDOUT, and the request may still take effect when that
  ** scheduler gets to it. 0 = 5 s; negative = no limit. */
  int64_t request_timeout_ns;
#define SMARM_REQUEST_TIMEOUT_DEFAULT_NS 5000000000LL /* what request_timeout_ns = 0 means */
  /* Every actor's max_mailbox (smarm_spawn_opts_t) unless its spawn says otherwise; 0 = none. */
  size_t max_mailbox;
  /* A seeded schedule, for tests: not 0, the next actor to run is drawn from the runnable ones
  ** by a generator seeded with it (not first come, first served), so the same seed gives the
  ** same interleaving and another seed explores another. Needs schedulers == 1 (-EINVAL
  ** otherwise), and takes time slices away (every actor's, slice_ns included: where an actor is
  ** switched out would depend on the machine's speed). IO completions still come when they come;
  ** with clock = SMARM_CLOCK_VIRTUAL (the Lua binding's default under a seed) timers replay too. */
  uint64_t seed;
  /* The dump (Go's SIGQUIT): this signal makes every scheduler write its actors to stderr, each
  ** between its actors (a pid, where it stands, its name, then on_dump's lines), without stopping
  ** anything. 0 = SIGQUIT; negative = none (the signal keeps its action); else that signal. The
  ** handler is the run's: the old action comes back when it ends. smarm_dump() asks the same. */
  int dump_signal;
  /* Called on the owning scheduler's thread (not in a signal handler) at a decision point: its
  ** loop, or while an actor parks or yields (then on that actor's stack, no actor's code
  ** running), after each actor's line of a dump, to write more of it (the Lua binding: its
  ** traceback). NULL: the line alone. */
  void (*on_dump)(const struct smarm_actor_info *actor, void *userdata);
  /* The clock actors see (smarm_clock_ns): SMARM_CLOCK_REAL (0), or SMARM_CLOCK_VIRTUAL for
  ** tests: it starts at 0 and stands still while any actor can run; when every actor waits (no
  ** actor runnable, nothing in flight between schedulers, no actor in smarm_await: no IO in
  ** flight), it jumps to the earliest deadline of a sleep, a receive's timeout or a message
  ** timer, so an hour of retries runs in milliseconds. smarm_await's timeouts (IO), the time
  ** slices, the watchdog and request_timeout_ns stay on the real clock (docs/design.md,
  ** "Virtual time"). Any other value: -EINVAL. */
  int clock;
  /* Freed memory that glibc's heaps keep instead of giving it back to the kernel, in bytes (it
  ** sets M_TRIM_THRESHOLD, and M_MMAP_THRESHOLD to an eighth of it within 128 KiB to 32 MiB,
  ** so that blocks up to that size come from the heaps, not mappings of their own). Message blocks are allocated on
  ** one thread and freed on another: with glibc's defaults a stream of 64 KiB messages gave its
  ** pages back and faulted them in again for every message (docs/perf.md, "Big blocks kept").
  ** The setting is the process's (mallopt) and outlives the run. 0 = 32 MiB; above INT_MAX:
  ** INT_MAX; negative = leave glibc's settings alone (an embedder that tunes malloc itself);
  ** a build without glibc ignores it. */
  int64_t keep_freed_bytes;
  void *userdata;
} smarm_config_t;

/* Fills cfg with the defaults. */
SMARM_API void smarm_config_init(smarm_config_t *cfg);

/* Runs a runtime on the calling thread (scheduler 0) plus cfg->schedulers - 1 new threads. The
** main actor runs main_fn(arg) on scheduler 0. Returns when the main actor ends or smarm_stop()
** is called: every other actor is then stopped where it is parked (its C frames are discarded,
** not unwound), and all threads, stacks and messages are released. Returns 0, -EINVAL for a bad
** config, -EBUSY if a runtime is already running in this process, or -ENOMEM/-EAGAIN when
** resources could not be obtained. cfg may be NULL for the defaults. */
SMARM_API int smarm_run(const smarm_config_t *cfg, smarm_actor_fn main_fn, void *arg);

/* Asks the running runtime to stop (from any thread; idempotent; no effect when none runs).
** smarm_run() returns soon after. Called from an actor, it does not return to the caller's code:
** the actor is stopped too. */
SMARM_API void smarm_stop(void);

/* ---- Actors ------------------------------------------------------------------------------- */

typedef uint64_t smarm_ref_t; /* a unique reference (smarm_make_ref); 0 is never one */

typedef struct smarm_spawn_opts {
  size_t stack_size; /* 0 = the runtime's default */
  void *data;        /* the actor's smarm_actor_data() from the start: an actor stopped before it
                        ever ran still reaches on_actor_stopped with it */
  int link;          /* nonzero: link the caller and the new actor before either can run on */
  smarm_ref_t *monitor; /* non-NULL: the caller monitors the new actor from the start; the
                        monitor's ref is stored here */
  const char *name;  /* non-NULL: registered for the new actor before it can run (a taken name
                        fails the spawn with -EEXIST) */
  int64_t slice_ns;  /* its time slice: 0 = the runtime's (smarm_config_t.slice_ns), negative =
                        never asked to give way */
  size_t max_mailbox; /* 0 = the runtime's (smarm_config_t.max_mailbox); else the most messages
                        its mailbox may hold: one more and it dies with reason
                        SMARM_EXIT_MAILBOX_OVERFLOW, where it stands (as if killed), and the
                        messages still coming are dropped */
} smarm_spawn_opts_t;

/* Creates an actor running fn(arg) on the caller's scheduler; it runs when the caller next yields
** or parks, ahead of the actors already queued there and after the ones the caller spawned before
** it since it last gave way (docs/design.md, the run queue: bounded so that nobody starves). opts
** may be NULL. *pid_out (may be NULL) receives its pid. The actor ends when fn
** returns or it calls smarm_exit(). Returns 0, -EPERM outside an actor, -EINVAL (NULL fn, stack
** size over 1 GiB), -ENOMEM, or -EAGAIN (16M actors alive on this scheduler). Its C stack is
** found when it first runs, not here: an actor for which none can be had then (memory or
** address space out) ends with SMARM_EXIT_NOMEM before fn runs, its links and monitors told and
** opts->data given to on_actor_stopped. */
SMARM_API int smarm_spawn(smarm_actor_fn fn, void *arg, const smarm_spawn_opts_t *opts,
                          smarm_pid_t *pid_out);

/* Like smarm_spawn, on scheduler `sched` (0-based) or SMARM_SCHED_ANY (the scheduler with the
** fewest live actors; ties go round robin). A spawn on another scheduler returns at once with a
** pid that scheduler set aside ahead; the actor is made when it takes the request from its
** inbox, before anything else that names the pid (whoever learns the pid through smarm learns
** it after the request went; an actor of that scheduler that reads the pid from memory shared
** outside smarm may find it not alive yet). If that scheduler then finds no memory for it,
** opts->data goes to on_actor_stopped, the pid never names an actor, and the spawner's link
** and monitor (opts) hear of a death with SMARM_EXIT_NOMEM (without them a line goes to
** stderr). A spawn with opts->name,
** or with no pid set aside (the first spawns there, a burst), parks the caller until that
** scheduler has created the actor, and reports its failures here. `arg` crosses
** threads as a plain pointer: what it points to must stay valid until the new actor is done
** with it. -ETIMEDOUT: that scheduler did not answer within the config's request_timeout_ns (it
** is stuck in C); the spawn may still happen when it gets to it, so `arg` and opts->data stay
** the runtime's: the actor then runs with them, or, if that spawn fails, on_actor_stopped is
** called for opts->data (on the caller's scheduler), as for an actor stopped before it ran. A
** monitor asked for is not made; a link asked for reaches the child as the exit signal of a
** dead spawner (SMARM_EXIT_NOPROC): the child ends unless it traps exits, so a timed-out linked
** spawn leaves no actor that nobody knows of running. */
SMARM_API int smarm_spawn_on(int sched, smarm_actor_fn fn, void *arg,
                             const smarm_spawn_opts_t *opts, smarm_pid_t *pid_out);

/* The bytes at the end of a block's payload that smarm_spawn_on_block may write. */
#define SMARM_SPAWN_ROOM 144

/* smarm_spawn_on with a message block as fn's arg (a binding's spawn: its function and
** arguments encoded): block comes from smarm_msg_new, and the last SMARM_SPAWN_ROOM bytes of its
** payload are the runtime's until fn starts. With a pid set aside, the request to the other
** scheduler travels inside the block: one block crosses instead of two. fn gets the block with
** its kind as it was. Otherwise the block is fn's arg like any other: an actor that never starts
** hands opts->data to on_actor_stopped, whose owner then frees the block. -EINVAL also for a
** NULL block or one smaller than SMARM_SPAWN_ROOM. */
SMARM_API int smarm_spawn_on_block(int sched, smarm_actor_fn fn, smarm_msg_t *block,
                                   const smarm_spawn_opts_t *opts, smarm_pid_t *pid_out);

/* The scheduler (0-based) that a spawn on SMARM_SCHED_ANY picks now. take = 0: only looks (the
** next spawn picks the same unless the counts move first); take = 1: picks as a spawn does,
** moving the round robin of ties on (for a binding that, having looked, spawns there itself).
** -EPERM outside an actor. */
SMARM_API int smarm_sched_pick_any(int take);

/* Pid of the calling actor, 0 outside an actor. */
SMARM_API smarm_pid_t smarm_self(void);

/* Ends the calling actor at once with reason SMARM_EXIT_NORMAL: its C frames are discarded (not
** unwound), its mailbox is freed, and its links and monitors are told (see "Faults" below).
** Outside an actor it returns without effect. */
SMARM_API void smarm_exit(void);

/* Cleanups: work to do if the calling actor ends while it is inside some call (it is killed, it
** calls smarm_exit, or the runtime stops it where it is parked), since its C frames are then
** discarded, not unwound. smarm_cleanup_push registers c (c->fn and c->arg set by the caller; c
** stays the caller's and valid until popped: a variable of the calling frame is fine);
** smarm_cleanup_pop(c) unregisters it without running it, and must name the last one pushed.
** When the actor ends, its cleanups run newest first: on its own stack for a kill or an exit,
** on its scheduler's thread for a stop at shutdown (then fn must not call actor functions).
** Outside an actor both do nothing. The IO layer's sm_io_call uses them. */
typedef struct smarm_cleanup {
  void (*fn)(void *arg);
  void *arg;
  struct smarm_cleanup *next; /* the runtime's */
} smarm_cleanup_t;
SMARM_API void smarm_cleanup_push(smarm_cleanup_t *c);
SMARM_API void smarm_cleanup_pop(smarm_cleanup_t *c);

/* Lets the scheduler decide again: inbox, timers, then every other runnable actor goes first.
** Returns at once when nothing else is runnable. */
SMARM_API void smarm_yield(void);

/* Preemption, for bindings that can interrupt their actors' code (smarm_config_t.on_preempt).
** smarm_preempt_due: nonzero when the calling actor has been asked to give way (its slice is over,
** or the runtime stops) and has not done so since; 0 outside an actor. smarm_preempt: gives way
** like smarm_yield (due timers first), counted as a preemption; an exit signal taken in there
** ends the actor, as in smarm_yield. */
SMARM_API int smarm_preempt_due(void);
SMARM_API void smarm_preempt(void);

/* Parks the calling actor for at least ns nanoseconds of the actors' clock (smarm_clock_ns; <= 0:
** yield). Returns 0, -EPERM, or -ENOMEM (no memory for the timer). */
SMARM_API int smarm_sleep(int64_t ns);

/* Waiting for work another thread does (the IO thread): the actor takes a token, hands its pid and
** the token to that thread with the work, and parks in smarm_await(); the thread calls
** smarm_wake(pid, token) when the work is done. A wake that comes before the actor parks is kept,
** and a wake for an older token (an await that timed out) or a dead actor is ignored. Whatever the
** two sides share (the work's result) must be written before smarm_wake() and is visible to the
** actor after smarm_await() returns 0 (the wake travels through the owner's inbox). */
SMARM_API uint64_t smarm_await_token(void); /* the caller's next token; 0 outside an actor */

/* Parks until smarm_wake(self, token) or timeout_ns (SMARM_FOREVER: no limit) of the real clock,
** whatever the runtime's clock: this is a wait on the world outside, and on the virtual clock
** an actor parked here holds the clock still until it runs again. Returns 0 when woken,
** -ETIMEDOUT, -EINVAL (not the caller's current token), -EPERM or -ENOMEM (timer). */
SMARM_API int smarm_await(uint64_t token, int64_t timeout_ns);

/* From any thread while the runtime runs: wakes `pid` if it awaits `token`. Returns 0 (also when
** the actor is gone: nothing to do), -ENOMEM, -EINVAL (a pid that cannot exist) or -ESRCH (no
** runtime is running). */
SMARM_API int smarm_wake(smarm_pid_t pid, uint64_t token);

/* smarm_wake for n (pid, token) pairs at once: one push (one compare-and-swap, at most one
** wake-up) per scheduler concerned. Returns 0 or the first error (the others are still woken). */
SMARM_API int smarm_wake_many(const smarm_pid_t *pids, const uint64_t *tokens, size_t n);

/* Whether pid names a live actor: 1 yes, 0 no (it ended, or never existed in this runtime). For
** an actor of another scheduler the caller parks while that scheduler answers (one round trip).
** -EPERM outside an actor, -ENOMEM, -ETIMEDOUT (that scheduler did not answer within the
** config's request_timeout_ns). The answer may be stale as soon as it is given. */
SMARM_API int smarm_alive(smarm_pid_t pid);

/* Bytes left on the calling actor's stack below the caller's frame, before its guard page; SIZE_MAX
** outside an actor. Code that recurses through C (a callback that calls back in) checks it and
** fails cleanly instead of reaching the guard page, which aborts the process. */
SMARM_API size_t smarm_stack_headroom(void);

/* One user pointer per actor (the Lua layer keeps its coroutine here). */
SMARM_API void *smarm_actor_data(void);
SMARM_API void smarm_actor_set_data(void *data);

/* Small blocks for state that lives with the calling scheduler's actors (the Lua layer's per-actor
** state), from the scheduler's own store: dense, and faulted in a chunk at a time, where malloc
** grows a thread's arena a few pages at a time, each step a system call and a fault. NULL
** outside a scheduler's thread, in on_sched_stop (the store is gone by then), or when memory is
** out. A block must be freed with smarm_local_free on the scheduler that made it, with the same
** len, before that scheduler ends: by its actor, or in on_actor_stopped (which is in time), not
** in on_sched_stop, where freeing does nothing. A debug build's store aborts at its end if a
** block is left; LeakSanitizer does not see such a leak (the store's memory is its own). */
SMARM_API void *smarm_local_alloc(size_t len);
SMARM_API void smarm_local_free(void *block, size_t len);

/* Scheduler of the caller (0-based; -1 outside the runtime) and how many there are (0 when no
** runtime is running). */
SMARM_API int smarm_sched_index(void);
SMARM_API unsigned smarm_sched_count(void);

/* One user pointer per scheduler, set by on_sched_start (the Lua layer keeps its VM here). */
SMARM_API void *smarm_sched_data(void);
SMARM_API void smarm_sched_set_data(void *data);

/* CLOCK_MONOTONIC in nanoseconds: the real clock, whatever the runtime's clock option (the
** runtime keeps it for its slices, watchdog, request timeouts and IO; benchmarks measure with
** it). */
SMARM_API int64_t smarm_now_ns(void);

#define SMARM_CLOCK_REAL 0
#define SMARM_CLOCK_VIRTUAL 1
/* The clock actors see, in nanoseconds: the one their sleeps, receive timeouts and message timers
** run on. On a scheduler thread of a runtime with SMARM_CLOCK_VIRTUAL, its virtual time (from 0
** at the start of the run); anywhere else, smarm_now_ns(). */
SMARM_API int64_t smarm_clock_ns(void);

/* ---- Messages ----------------------------------------------------------------------------- */

/* A message is one heap block: a header and `size` bytes of payload. Ownership moves with it:
** the allocator's caller owns it; smarm_send() takes it on success; while queued the runtime
** owns it (and frees it if the receiver is gone); a successful receive hands it to the receiver,
** which must smarm_msg_free() it. (smarm_msg_t is declared with the spawns, which may take one.) */

SMARM_API smarm_msg_t *smarm_msg_new(size_t size); /* NULL when out of memory or size >= 4 GiB */

/* A message may own resources that must be released if nobody takes them (the Lua layer's
** sockets travel this way). An owning message passes through the drop hook whenever it is freed:
** by smarm_msg_free, or by the runtime when it drops the message undelivered (a dead receiver, a
** mailbox or inbox emptied at exit or shutdown). A receiver that takes the resources over marks
** the message not owning before freeing it. The hook is one per process, set before use; it may
** run on any scheduler thread and must not park. */
typedef void (*smarm_msg_hook)(smarm_msg_t *msg);
SMARM_API void smarm_msg_set_drop_hook(smarm_msg_hook hook);
SMARM_API void smarm_msg_set_owning(smarm_msg_t *msg, int owning);
SMARM_API void smarm_msg_free(smarm_msg_t *msg);   /* NULL is allowed */
SMARM_API void *smarm_msg_data(smarm_msg_t *msg);
SMARM_API size_t smarm_msg_size(const smarm_msg_t *msg);
SMARM_API smarm_pid_t smarm_msg_sender(const smarm_msg_t *msg); /* set by smarm_send */

/* Queues msg for `to`. Messages from one sender to one receiver arrive in the order sent.
** Returns 0 and takes ownership of msg: it is delivered, or dropped and freed if the receiver
** turns out to be dead by the time it arrives (a remote receiver is checked only then).
** Returns -ESRCH when the receiver is on the caller's scheduler and dead, or on a scheduler this
** runtime does not have (a pid of an earlier runtime), -EINVAL for pid 0 or a NULL msg, -EPERM
** outside an actor; on failure the caller keeps msg. */
SMARM_API int smarm_send(smarm_pid_t to, smarm_msg_t *msg);

/* From a thread that is no actor (the IO thread, a C library's callback thread) while a runtime
** runs: queues msg for `to` as smarm_send does. Messages one such thread sends to one receiver
** arrive in the order sent; the sender is 0 (smarm_msg_sender). Returns 0 and takes msg (it is
** delivered, or dropped and freed if the receiver turns out to be dead when it arrives), or
** -ESRCH when no runtime runs or `to` is of a scheduler it does not have, -EINVAL for pid 0 or a
** NULL msg; then the caller keeps msg. From an actor, use smarm_send. */
SMARM_API int smarm_send_outside(smarm_pid_t to, smarm_msg_t *msg);

/* Takes the oldest message from the caller's mailbox, waiting up to timeout_ns of the actors'
** clock (smarm_clock_ns; 0 = poll, SMARM_FOREVER = no limit). Returns 0 with *out set, -ETIMEDOUT, -EPERM, -EINVAL (NULL out) or
** -ENOMEM (no memory for the timer). */
SMARM_API int smarm_receive(int64_t timeout_ns, smarm_msg_t **out);

/* Selective receive: takes the oldest message for which match(msg, ud) returns nonzero; the
** others stay queued in their order. Each call scans the mailbox from its oldest message, then
** only messages that arrive while it waits. match runs on the caller's stack and must not park
** or receive. Returns like smarm_receive. */
typedef int (*smarm_match_fn)(const smarm_msg_t *msg, void *ud);
SMARM_API int smarm_receive_match(smarm_match_fn match, void *ud, int64_t timeout_ns,
                                  smarm_msg_t **out);

/* The oldest message of the caller's mailbox, taken when match accepts it and nothing must come
** before it: no message or signal waits in the scheduler's inbox, no exit signal is to be
** honoured. It never parks, takes nothing in and runs no code but match: for a binding's path
** that may not switch or call back (the Lua binding's FFI receive). Returns 0 with *out set,
** -EAGAIN (no message, match refused it, or something comes first: receive as usual), -EPERM
** (not an actor) or -EINVAL (NULL match or out). */
SMARM_API int smarm_receive_first(smarm_match_fn match, void *ud, smarm_msg_t **out);

/* Number of messages queued in the caller's mailbox (those already delivered to it). */
SMARM_API size_t smarm_mailbox_size(void);
/* For bindings that take messages out of the mailbox and keep some aside (the Lua binding's
** selective receive): the calling actor now holds n such messages, which count toward its
** max_mailbox (smarm_spawn_opts_t) like those still in the mailbox. */
SMARM_API void smarm_mailbox_set_held(size_t n);

/* ---- Faults: exit reasons, links, monitors, exit signals ------------------------------------
**
** Erlang's contract (docs/design.md, "Faults"). Every actor ends with a reason: a code, and for
** SMARM_EXIT_VALUE some bytes whose meaning belongs to the layer that made them (the Lua binding
** stores a value encoded as a message). When an actor ends, every linked actor gets an exit
** signal with its reason and every monitor a DOWN notice. An exit signal kills an actor that
** does not trap exits unless its reason is SMARM_EXIT_NORMAL; a trapping actor receives it as
** an EXIT notice instead, except SMARM_EXIT_KILL sent by smarm_exit_signal(), which always kills
** (the victim's reason is then SMARM_EXIT_KILLED). Signals between one pair of actors (messages,
** exit signals, notices) arrive in the order sent. A kill takes effect when the victim next
** parks, yields or is resumed: at once for an actor that is parked or runnable; an actor
** running on another scheduler dies at its next yield or parking call. Its C frames are
** discarded like smarm_exit's, and on_actor_stopped (smarm_config_t) runs for its data. */

enum smarm_exit_code {
  SMARM_EXIT_NORMAL = 0, /* the actor's function returned, or smarm_exit() */
  SMARM_EXIT_KILL,       /* as a signal only: untrappable (smarm_exit_signal) */
  SMARM_EXIT_KILLED,     /* the reason of an actor that an untrappable kill ended */
  SMARM_EXIT_NOPROC,     /* the pid named no live actor (link, monitor) */
  SMARM_EXIT_VALUE,      /* the reason is the bytes that come with it */
  SMARM_EXIT_MAILBOX_OVERFLOW, /* its mailbox passed its max_mailbox (smarm_spawn_opts_t) */
  SMARM_EXIT_NOMEM,      /* memory ran out where only its death could follow: its parked stack
                            could not be saved to let another actor run on the slot they share
                            (docs/design.md, "Stacks"), no stack slot could be had for its first
                            run (none of its function ran), or a link or monitor could not be
                            recorded (the asker's exit signal or DOWN carries it) */
  SMARM_EXIT_NOCONNECTION, /* the link or monitor was to a process of another node whose
                              connection ended (or could not be made) */
  SMARM_EXIT_TERM,       /* the reason is an Erlang term: its bytes (the external format,
                            version byte first) come with it (a process of another node) */
};

/* Ends the calling actor like smarm_exit() with reason `code` (with SMARM_EXIT_VALUE, `size`
** bytes at `data`, copied). An actor may end with SMARM_EXIT_KILL as Erlang's exit(kill) does:
** its links then receive `kill` as an ordinary (trappable) reason. Outside an actor, or with a
** bad code, it returns without effect. */
SMARM_API void smarm_exit_reason(int code, const void *data, size_t size);

/* Sets the reason the calling actor ends with when its function returns or it calls
** smarm_exit() (copied; a kill still ends it with its own reason). Returns 0, -EINVAL (bad code),
** -ENOMEM, -EPERM outside an actor. */
SMARM_API int smarm_set_exit_reason(int code, const void *data, size_t size);

/* Whether anything would hear of the calling actor's end: a link, or a monitor on it. 1 or 0
** (0 outside an actor). The Lua binding prints the report of a crash nobody hears of. */
SMARM_API int smarm_is_watched(void);

/* A call that asks another scheduler and parks for its answer (smarm_alive, smarm_register,
** smarm_send_after and smarm_cancel_timer of another scheduler's actor, a named or unreserved
** smarm_spawn_on there) does not return when a death is pending on entry: the caller dies there
** (what it handed over released: the message, the spawn's data through on_actor_stopped; a
** plain `arg` not owned by that data is the caller's to lose), as at any parking call. */

/* Inside on_actor_stopped for an actor that an exit signal or a kill ends (not shutdown): the
** reason it ends with (SMARM_EXIT_*) and, for SMARM_EXIT_VALUE, its bytes (*data, *size: valid
** during the callback). -1 elsewhere. smarm_is_watched() there says whether anything hears of
** its end: the Lua binding reports a crash that spread along a link to an actor nobody watches. */
SMARM_API int smarm_dying_reason(const void **data, size_t *size);

/* Whether the calling actor has a death pending: an exit signal that ends it at its next parking
** point or when its function returns, whatever reason it sets (a poll does not take it). 1 or 0
** (0 outside an actor). The Lua binding then closes what the actor owns, as for any abnormal
** end. */
SMARM_API int smarm_exit_pending(void);

/* Sends an exit signal with that reason to `to`, as if from a linked actor that died, except
** that SMARM_EXIT_KILL is untrappable and that no link is needed. A signal to oneself takes
** effect before the call returns. Returns 0 (also when `to` is dead: nothing happens), -EINVAL
** (pid 0, bad code), -ENOMEM, -EPERM outside an actor. */
SMARM_API int smarm_exit_signal(smarm_pid_t to, int code, const void *data, size_t size);

/* Links the caller and `pid` (both ways; linking twice is one link). A dead pid sends the caller
** an exit signal with reason SMARM_EXIT_NOPROC at once. Returns 0, -EINVAL (pid 0 or self),
** -ENOMEM, -EPERM. */
SMARM_API int smarm_link(smarm_pid_t pid);

/* Removes the link both ways; an exit signal of that link not yet received is dropped. 0 also
** when there was no link. */
SMARM_API int smarm_unlink(smarm_pid_t pid);

/* Whether exit signals become EXIT notices in the mailbox (nonzero) or kill (0, the default).
** Returns the previous setting, or -EPERM outside an actor. */
SMARM_API int smarm_trap_exit(int on);

/* A reference unique for the life of the process (any thread). */
SMARM_API smarm_ref_t smarm_make_ref(void);

/* Starts watching `pid`: when it ends (or at once, with SMARM_EXIT_NOPROC, if it is not alive),
** the caller receives a DOWN notice carrying *ref_out. Each call is a separate monitor.
** Returns 0, -EINVAL, -ENOMEM, -EPERM. */
SMARM_API int smarm_monitor(smarm_pid_t pid, smarm_ref_t *ref_out);

/* smarm_monitor with a ref the caller made (smarm_make_ref) and uses for no other monitor, so
** that it can be put in a request before the monitor exists (smarm.call). -EINVAL for ref 0 or
** one of the caller's monitors. */
SMARM_API int smarm_monitor_ref(smarm_pid_t pid, smarm_ref_t ref);

/* Stops the monitor `ref` of the caller; a DOWN of it that has not yet been received is
** dropped; with `flush`, one already in the mailbox is removed too. Returns 1 if the monitor was
** active, 0 if not (unknown, or its DOWN already arrived), -EPERM. */
SMARM_API int smarm_demonitor(smarm_ref_t ref, int flush);

/* Notices are messages of their own kinds, received like any other (smarm_receive); their
** payload is a smarm_notice_t followed by the reason's bytes (SMARM_EXIT_VALUE). */
enum smarm_msg_kind {
  SMARM_MSG_USER = 0,
  SMARM_MSG_EXIT, /* an exit signal turned into a message (smarm_trap_exit): pid sent it */
  SMARM_MSG_DOWN, /* a monitored actor ended (pid), or was not alive: ref is the monitor's */
  SMARM_MSG_REPLY, /* smarm_send_reply; its payload is the reply's bytes, then the alias */
};

typedef struct smarm_notice {
  smarm_pid_t pid;
  smarm_ref_t ref;   /* DOWN: the monitor; EXIT: 0 */
  int32_t reason;    /* enum smarm_exit_code */
  uint32_t size;     /* bytes of a SMARM_EXIT_VALUE or _TERM reason, right after this header;
                        the message's bytes after those, if any, are the sender's pid in the
                        external format without the version byte: a process of another node
                        (smarm_signal_outside) */
} smarm_notice_t;

/* SMARM_MSG_USER, _EXIT, _DOWN or _REPLY. */
SMARM_API int smarm_msg_kind(const smarm_msg_t *msg);

/* ---- Message timers (Erlang's send_after and cancel_timer) ---------------------------------
**
** A timer sends a message to an actor later. A timer aimed at a pid lives on its target's
** scheduler and goes with its target: when the target ends, its timers are freed and their
** messages never sent. A timer aimed at a name looks the name up when it fires, as Erlang's
** send_after to an atom does: it lives on its setter's scheduler until it fires, is cancelled
** or the runtime ends, and sends to whoever holds the name then (nobody: nothing is sent). */

typedef struct smarm_timer {
  smarm_pid_t to;
  smarm_ref_t ref;
} smarm_timer_t;

/* Sends msg (taken over) to `to` once ns nanoseconds of the actors' clock (smarm_clock_ns) have
** passed; *out names the timer. A `to`
** of another scheduler costs one round trip (the caller parks for it), after which the timer
** exists: a cancel that follows, from any actor, finds it. A dead `to` takes msg too and sends
** nothing (a cancel then finds nothing). msg is taken in every case but -EINVAL and -EPERM.
** Returns 0; -EINVAL (NULL msg or out, ns < 0, a generation-0 pid); -ENOMEM (msg freed); -EPERM
** outside an actor; -ETIMEDOUT (the other scheduler did not answer within request_timeout_ns:
** msg is taken, and the timer may still be set when that scheduler gets to it). */
SMARM_API int smarm_send_after(int64_t ns, smarm_pid_t to, smarm_msg_t *msg, smarm_timer_t *out);

/* Sends msg (taken over) to whoever holds `name` (smarm_register) once ns nanoseconds of the
** actors' clock have passed, the name looked up then; *out names the timer (its `to` is a pid
** of the caller's scheduler with slot and generation 0, which no actor has). No round trip: the
** timer lives on the caller's scheduler. The message's sender is the caller. Returns 0;
** -EINVAL (NULL msg or out, ns < 0, a name that is not 1 to SMARM_NAME_MAX bytes: msg stays the
** caller's); -ENOMEM (msg freed); -EPERM outside an actor (msg stays the caller's). */
SMARM_API int smarm_send_after_name(int64_t ns, const char *name, smarm_msg_t *msg,
                                    smarm_timer_t *out);

/* Cancels a timer: its message is never sent. Returns the nanoseconds it had left (>= 0), or
** -ENOENT when it has fired already, was cancelled, or its target (a pid) ended; -ENOMEM; -EPERM
** outside an actor; -ETIMEDOUT (see smarm_send_after). A timer of another scheduler costs one
** round trip. */
SMARM_API int64_t smarm_cancel_timer(smarm_timer_t timer);

/* ---- Requests and replies: aliases and receive marks (Erlang's gen call) ------------------
**
** A caller monitors the server (the monitor's ref is also the alias replies are sent through),
** marks its mailbox, sends the request with its pid and the ref, and waits for a message after
** the mark: the reply or the DOWN. The server answers with smarm_send_reply(). A reply that
** arrives once the caller no longer holds the monitor (it gave up, or the call ended) is
** dropped on arrival and never reaches the mailbox, and the wait never looks at the messages
** queued before the mark, however many. */

/* Like smarm_send, for a message whose payload ends with a smarm_ref_t alias (its last 8 bytes,
** so that a payload's own format keeps its start): delivered as a SMARM_MSG_REPLY only while
** `to` holds the monitor of that ref, else dropped. -EINVAL for a payload smaller than a ref;
** otherwise returns like smarm_send. */
SMARM_API int smarm_send_reply(smarm_pid_t to, smarm_msg_t *msg);

/* A place in the caller's mailbox: every message that arrives later is after it. It stays
** valid until a message before it is taken by anything but smarm_receive_after from it. */
typedef struct smarm_mark {
  void *at;
} smarm_mark_t;
SMARM_API smarm_mark_t smarm_mailbox_mark(void); /* {NULL} outside an actor */

/* smarm_receive_match over the messages after `mark` only. Returns like it; -EINVAL for a NULL
** mark or out. A call's wait: a timeout of a second or more is measured on the kernel's coarse
** clock, which costs less to read: it ends up to two of the kernel's ticks (a few ms) plus 1/64
** of the timeout later than asked, and earlier only if the kernel's own timekeeping falls behind
** by more than that (a guest whose timekeeping CPU the host holds back). Shorter ones, and
** every other wait, are precise. */
SMARM_API int smarm_receive_after(smarm_mark_t mark, smarm_match_fn match, void *ud,
                                  int64_t timeout_ns, smarm_msg_t **out);

/* ---- Registered names ------------------------------------------------------------------------
**
** A name (a string of 1 to SMARM_NAME_MAX bytes) names at most one actor and an actor holds at
** most one name; every scheduler sees the same names. A name is released when its actor ends,
** before the actor's links and monitors are told. Lookups (whereis, send by name) are answered
** by the caller's scheduler from a cache that a change of any name invalidates, so they take no
** lock shared by all schedulers (docs/design.md, "Names"). */
#define SMARM_NAME_MAX 255

/* Gives `pid` the name. Returns 0, -EEXIST (the name is taken), -EBUSY (pid has a name),
** -ESRCH (pid is not alive), -EINVAL (bad name, pid 0), -ENOMEM, -EPERM outside an actor. For
** an actor of another scheduler the caller parks while that scheduler answers; -ETIMEDOUT when
** it does not within request_timeout_ns (the name may still be given when it gets to it). */
SMARM_API int smarm_register(const char *name, smarm_pid_t pid);

/* Removes the name. Returns 0, -ENOENT (nobody holds it), -EINVAL, -EPERM. */
SMARM_API int smarm_unregister(const char *name);

/* The pid holding the name, or 0 (also outside an actor). */
SMARM_API smarm_pid_t smarm_whereis(const char *name);
/* The same from a thread that is no actor (the IO thread), while a runtime runs: asks the table
** itself (no scheduler's cache). 0 when nobody holds the name or no runtime runs. */
SMARM_API smarm_pid_t smarm_whereis_outside(const char *name);

/* ---- Processes of other nodes ----------------------------------------------------------------
**
** A remote pid (scheduler field SMARM_PID_SCHED_REMOTE) stands for a process of another node: the
** distribution (src/io/dist.h) makes them and says what each means. Links and monitors to one are
** recorded like any, and the signals to it (a link, an unlink, an exit signal, a monitor, a
** demonitor) go to the remote hook instead of an inbox; signals from the other node come in
** through smarm_signal_outside. An actor watched from another node (SMARM_SIG_WATCH) has the hook
** called with SMARM_SIG_WATCHED_DOWN when it ends: the other node keeps the monitors' refs. */
#define SMARM_PID_SCHED_REMOTE ((1u << SMARM_PID_SCHED_BITS) - 1)
static inline int smarm_pid_is_remote(smarm_pid_t pid)
{
  return smarm_pid_sched(pid) == SMARM_PID_SCHED_REMOTE;
}

enum smarm_signal_kind {
  SMARM_SIG_EXIT,          /* from sends to an exit signal (smarm_exit_signal, Erlang's exit/2) */
  SMARM_SIG_EXIT_LINK,     /* from, linked to to, ended with the reason */
  SMARM_SIG_LINK,          /* from links to to */
  SMARM_SIG_UNLINK,        /* from unlinks from to */
  SMARM_SIG_MONITOR,       /* from starts the monitor ref on to */
  SMARM_SIG_DEMONITOR,     /* the monitor ref of from on to ends */
  SMARM_SIG_DOWN,          /* to the watcher to: from, watched by ref, ended with the reason */
  SMARM_SIG_WATCH,         /* in only: another node watches to (hook: WATCHED_DOWN when it ends) */
  SMARM_SIG_WATCHED_DOWN,  /* out only: from, watched from another node, ended (or was no actor:
                              SMARM_EXIT_NOPROC) */
  SMARM_SIG_HANDLED,       /* out only: a signal from the remote pid `from` (smarm_signal_outside)
                              has been handled: the records it changed are changed */
};

typedef struct smarm_signal {
  int kind;             /* enum smarm_signal_kind */
  smarm_pid_t from, to; /* out: to is remote (from for WATCHED_DOWN); in: from is (0 for WATCH) */
  smarm_ref_t ref;      /* MONITOR, DEMONITOR, DOWN */
  int reason;           /* EXIT, EXIT_LINK, DOWN, WATCHED_DOWN: enum smarm_exit_code */
  const void *data;     /* the reason's bytes (SMARM_EXIT_VALUE, SMARM_EXIT_TERM) */
  size_t size;
} smarm_signal_t;

/* Called for every signal to a remote pid and every WATCHED_DOWN, on the scheduler thread of
** the sending actor (the dying one, in its last moments), and with HANDLED on the receiver's
** scheduler thread once a signal that came in through smarm_signal_outside with a remote
** sender has been handled (its remote pid may be let go: no record it touched waits for it;
** blocks still queued when a run ends get no HANDLED). It must not block or call back into the
** runtime, and copies what it keeps. NULL: such signals are dropped. Set from any thread, any
** time. */
typedef void (*smarm_remote_hook_fn)(const smarm_signal_t *sig);
SMARM_API void smarm_set_remote_hook(smarm_remote_hook_fn hook);

/* From any thread while a runtime runs: delivers sig (from a remote pid, except WATCH) to the
** local actor sig->to as if its sender were an actor; pid_bytes (the sender's pid in the external
** format, without the version byte) go with the notice it may become. Returns 0, -EINVAL, -ENOMEM,
** -ESRCH (no runtime runs, or to names none of its schedulers). */
SMARM_API int smarm_signal_outside(const smarm_signal_t *sig, const void *pid_bytes,
                                   size_t pid_size);

/* The name the calling actor holds, or NULL; valid until its name changes. */
SMARM_API const char *smarm_own_name(void);

/* smarm_send to the name's holder; -ENOENT (the caller keeps msg) when nobody holds it. */
SMARM_API int smarm_send_named(const char *name, smarm_msg_t *msg);

/* Calls fn(name, pid, ud) for each name registered when it is called (a snapshot: fn may itself
** register or send). Returns how many, -ENOMEM or -EPERM. */
SMARM_API int smarm_registered(void (*fn)(const char *name, smarm_pid_t pid, void *ud), void *ud);

/* ---- Looking at actors ------------------------------------------------------------------- */

/* Where a live actor stands (smarm_actor_info). */
enum smarm_actor_status {
  SMARM_ACTOR_RUNNING,   /* it is the caller */
  SMARM_ACTOR_RUNNABLE,  /* waiting for its turn (new, yielded, woken, switched out) */
  SMARM_ACTOR_RECEIVING, /* parked in a receive (maybe with a timeout) */
  SMARM_ACTOR_SLEEPING,  /* parked in smarm_sleep */
  SMARM_ACTOR_ASKING,    /* parked until another scheduler answers (a spawn there, alive...) */
  SMARM_ACTOR_AWAITING,  /* parked in smarm_await: the Lua binding's IO and the like */
};

typedef struct smarm_actor_info {
  smarm_pid_t pid;
  int status;           /* enum smarm_actor_status */
  size_t mailbox;       /* messages waiting for it, those its binding set aside included */
  const char *name;     /* its registered name, or NULL: valid until the caller parks */
  void *data;           /* its smarm_actor_data() */
  size_t stack_size;    /* bytes of C stack it was given (rounded to pages); before it first
                           runs, the size it asked for (it may get a larger one) */
  size_t stack_used;    /* bytes of it in use: from its top down to where it parked or was
                           switched out (the caller: to this call); 0 before it first runs */
  uint64_t scheduled;   /* times it was switched in */
  uint64_t cpu_ns;      /* time on CPU, sampled: the runtime's ticker (up to a millisecond apart
                           while actors run) charges the running actor the time since its last
                           look, at that actor's next switch; right in share over many ticks */
  smarm_pid_t spawner;  /* the actor that spawned it; 0: none (the run's main actor) */
  int64_t spawned_ns;   /* when, on smarm_now_ns's clock, to a few milliseconds */
} smarm_actor_info_t;

/* Fills *out for a live actor of the CALLING actor's scheduler (the owner answers for its own:
** nothing here is read across threads). Returns 0, -ESRCH (not alive), -EXDEV (an actor of
** another scheduler: ask there, e.g. from an actor spawned on it), -EPERM outside an actor. */
SMARM_API int smarm_actor_info(smarm_pid_t pid, smarm_actor_info_t *out);

/* What smarm_actor_ties lists: the actors linked to it; those it monitors; those that monitor
** it (an actor monitored twice is listed twice). */
enum smarm_ties { SMARM_TIES_LINKS, SMARM_TIES_MONITORS, SMARM_TIES_MONITORED_BY };

/* The pids an actor of the CALLING actor's scheduler is tied to (enum smarm_ties), as
** smarm_local_actors gives them: at most cap in out, returns how many there are. -ESRCH,
** -EXDEV, -EPERM as smarm_actor_info; -EINVAL for another `which`. */
SMARM_API long smarm_actor_ties(smarm_pid_t pid, int which, smarm_pid_t *out, size_t cap);

/* Asks for a dump (smarm_config_t.dump_signal): every scheduler writes its actors to stderr at
** its next decision point, each part whole; an idle one within a few milliseconds, one stuck in C
** when it gets back. Any thread may call it, a signal handler too; nothing if no runtime runs. */
SMARM_API void smarm_dump(void);

/* The pids of the calling actor's scheduler's live actors, the caller's included: writes at most
** cap of them to out and returns how many there are (call again with more room when that is
** more than cap); -EPERM outside an actor. */
SMARM_API long smarm_local_actors(smarm_pid_t *out, size_t cap);

/* ---- Statistics --------------------------------------------------------------------------- */

typedef struct smarm_stats {
  uint64_t switches;     /* context switches performed */
  uint64_t parks;        /* times an idle scheduler went to sleep in the kernel (futex wait) */
  uint64_t wakes;        /* futex wakes issued by this scheduler's senders/wakers */
  uint64_t remote_sent;  /* items pushed onto other schedulers' inboxes */
  uint64_t stack_saves;  /* parked actors' stacks copied out: to make room, or parked long
                            (see design) */
  uint64_t spawned;      /* actors created */
  uint64_t live;         /* actors alive now */
  uint64_t stacks;       /* guarded stacks mapped now */
  uint64_t preempts;     /* actors that gave way because their time slice was over */
  uint64_t preempt_wait_ns; /* summed over the preemptions the runtime asked for (not a C
                            actor's own smarm_preempt): ns from the request to give way to the
                            switch. The request comes at the slice's end when the slice timer
                            asks (preempts_timed), else up to a tick (half a slice) after it */
  uint64_t preempts_timed; /* of preempts, those the scheduler's slice timer asked for: the
                            slices of an actor that run on after a preemption (docs/design.md).
                            When the ticker asks for the same slice too, it counts here */
  uint64_t busy_ns;      /* ns not idle (running actors or its own work) since it started */
  uint64_t wall_ns;      /* ns since it started: busy_ns / wall_ns is its busy share */
  uint64_t sent;         /* messages its actors sent, to any scheduler */
  uint64_t received;     /* messages put in its actors' mailboxes: sent ones, exit and DOWN
                            notices, send_after's */
  uint64_t runq;         /* actors in its run queue now */
  uint64_t timers;       /* timers pending: actors' timeouts and sleeps, message timers (as of
                            the last time it fired some, went idle or passed 64 decisions) */
  uint64_t saved_stacks; /* parked actors whose stacks are saved to the heap now: their slot
                            given to another, or they waited across two idle passes (design) */
  uint64_t spin_pauses;  /* times its idle spins kept losing their CPU to threads other than
                            the runtime's own (its schedulers and declared helpers: a busy
                            machine) and it paused the spin of every scheduler in the process
                            for a second: an idle scheduler parks at once meanwhile
                            (docs/design.md, "The inbox and parking") */
} smarm_stats_t;

/* Sums the counters of every scheduler (sched = -1) or reads one. Counters are read without
** stopping anyone, so a sum is a snapshot of moving values. Any thread may call it. Returns 0,
** -EINVAL (NULL out, sched < -1 or too large), or -EPERM when no runtime is running. */
SMARM_API int smarm_stats_read(int sched, smarm_stats_t *out);

/* For a thread that works for the runtime's actors beside its schedulers (the IO layer's loop):
** say 1 when it starts to run or spin, 0 before it sleeps in the kernel (balanced; any thread,
** any time, with or without a runtime). An idle scheduler whose spin loses its CPU while the
** runtime's own threads, these included, want as many CPUs as it may use does not take the loss
** for a busy machine (smarm_stats_t, spin_pauses). */
SMARM_API void smarm_helper_running(int running);

#ifdef __cplusplus
}
#endif
#endif
