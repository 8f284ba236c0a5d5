/*
** The IO thread: one libuv loop that runs the blocking work of actors' IO calls, so that an IO call
** parks only its actor, never its scheduler (../shared/design.md, IO).
**
** An actor makes a request (sm_io_req_new), fills in what its work needs, and calls sm_io_call(),
** which hands the request to the IO thread and parks the actor in smarm_await(). The IO thread runs
** the request's work function on libuv's thread pool (files, DNS: blocking system calls), then,
** back on the loop, wakes the actor with smarm_wake(); the completion reaches the actor through its
** own scheduler's inbox. The IO thread starts with the first request of a runtime and stops after
** the runtime has ended (sm_io_shutdown), once the work in flight has finished.
**
** Ownership: a request has two references, the actor's and the IO thread's. The IO side writes the
** result (req->err and the work's own fields) before smarm_wake() and then drops its reference;
** the actor reads the result only after sm_io_call() returned 0, then drops its own. Whoever drops
** the last one frees the request (sm_io_req_release; atomic, acq_rel). So an actor that is stopped
** while its request is in flight (the Lua layer releases the actor's reference when it frees the
** actor) leaks nothing, and a late completion never touches freed memory.
**
** Owner: requests move between the actor's scheduler thread and the IO thread as described; the
** loop and everything libuv owns belong to the IO thread alone.
*/
#ifndef SMARM_IO_IO_H
#define SMARM_IO_IO_H

#include "smarm.h"

#include <stdatomic.h>
#include <stddef.h>

typedef struct io_req io_req_t;

/* Runs on a thread of libuv's pool: does the blocking work, sets req->err (0 or a negative errno)
** and its own result fields. Must not touch Lua or the runtime. */
typedef void (*io_work_fn)(io_req_t *req);

/* Runs on the IO thread itself (sockets): starts the request on the loop, which must end in
** exactly one sm_io_complete(req), now or from a later libuv callback. */
typedef void (*io_loop_fn)(io_req_t *req, void *uv_loop);

/* On the IO thread, for a request started by its io_loop_fn and not completed yet: stop waiting
** for it (its caller timed out) and sm_io_complete() it with -ETIMEDOUT, leaving whatever it works
** on usable. */
typedef void (*io_cancel_fn)(io_req_t *req);

/* Frees what the work's own fields hold (called once, by whoever releases the last reference);
** may be NULL. */
typedef void (*io_free_fn)(io_req_t *req);

struct io_req {
  io_req_t *next;       /* the submission queue's link (IO side) */
  _Atomic int refs;     /* 2 from sm_io_call() until each side is done with it */
  smarm_pid_t pid;      /* the actor to wake, and its await token */
  uint64_t token;
  io_work_fn work;      /* either work (on the pool) ... */
  io_loop_fn on_loop;   /* ... or on_loop (on the IO thread) */
  io_cancel_fn cancel;  /* for on_loop requests that can time out (sm_io_call_timeout) */
  io_free_fn free_fields;
  int err;              /* the result: 0 or a negative errno (written by the IO side) */
  int completed;        /* set by sm_io_complete (IO side), read by the caller after a wake */
  int waited;           /* sm_io_post: nobody waits, nobody to wake */
  _Atomic int abandoned; /* pool work whose actor ended while it ran: set on the loop thread
                            (cancel_on_loop), read by the pool thread (sm_io_interrupted) */
  void *uv;             /* pool work: its uv_work_t (io.c); on_loop: the module's state on the
                           loop while the request runs (NULL once done) */
};

/* A zeroed request of `size` bytes (a struct that starts with an io_req_t), or NULL. */
io_req_t *sm_io_req_new(size_t size, io_work_fn work, io_free_fn free_fields);

/* The same for a request that runs on the IO thread (on_loop, and cancel if it can time out). */
io_req_t *sm_io_req_new_loop(size_t size, io_loop_fn on_loop, io_cancel_fn cancel,
                             io_free_fn free_fields);

/* How many requests have been handed to the IO thread and not completed, now; any thread. */
uint64_t sm_io_in_flight(void);

/* On the IO thread: the request is done (err and its fields written): wakes its caller and drops
** the IO side's reference. */
void sm_io_complete(io_req_t *req);

/* sm_io_complete with its result: req->err = err first. */
static inline void io_finish(io_req_t *req, int err)
{
  req->err = err;
  sm_io_complete(req);
}

/* Drops one reference; the last one frees the request. */
void sm_io_req_release(io_req_t *req);

/* From an actor: submits req and parks until its work is done. Returns 0 (req->err holds the
** work's result), or a negative errno when the request could not be submitted (-ENOMEM, -EPERM
** outside an actor, -ECANCELED when the IO thread cannot start); then the IO side holds no
** reference and the caller keeps its own. If the actor ends while it waits (killed, or stopped
** at shutdown), the caller's reference is released for it and a request on the loop is
** cancelled: a caller that keeps its reference where it outlives it (the Lua binding's box)
** hands it over for the call. */
int sm_io_call(io_req_t *req);

/* sm_io_call with a time limit (SMARM_FOREVER: none). When it runs out, the IO thread is asked to
** cancel the request (req->cancel) and the caller waits for that answer, so the request is either
** cancelled (returns -ETIMEDOUT; the IO side released it or will) or completed in the meantime
** (returns 0 with its result: nothing is lost in the race). */
int sm_io_call_timeout(io_req_t *req, int64_t timeout_ns);

/* From any thread, also inside __gc: hands req to the IO thread and returns at once (nobody
** waits; the IO side holds the only reference). Returns 0 or -ECANCELED (no IO thread: req is
** released). */
int sm_io_post(io_req_t *req);

/* Called on the IO thread when it stops (after a runtime), to close what a module keeps open;
** register once per module (any thread). */
typedef void (*io_stop_fn)(void *uv_loop);
void sm_io_on_stop(io_stop_fn fn);

/* After a runtime has ended (no actor can call any more): lets the work in flight finish, stops
** the IO thread and releases its references. Does nothing if it never started. Pool work that
** blocks (a FIFO with no writer, a terminal that sends no line) is interrupted: its thread gets
** a signal every 10 ms, so a blocking system call returns EINTR; work functions must then give
** up rather than retry (sm_io_interrupted). The same happens, while the runtime runs, to the
** pool work of an actor that ended while it waited for it (killed): its pool thread is freed
** for the others (libuv's pool has four). */
void sm_io_shutdown(void);

/* The scheduler threads of a runtime that uses the IO thread call these from their
** smarm_config_t on_sched_start / on_sched_stop hooks (the Lua binding does). Under
** ThreadSanitizer they block the asynchronous signals whose handlers belong on the IO thread
** (SIGCHLD for processes, SIGINT/SIGTERM/SIGHUP for smarm.signal, the interrupt signal of the
** stop): TSan runs a handler only when the receiving thread next passes one of its
** interceptors, and a scheduler parked in a raw futex call passes none, so such a signal could
** stay unhandled for good; blocked there, the kernel hands it to the IO thread, which unblocks
** them. Elsewhere a handler runs at once in whichever thread the kernel picks, and these do
** nothing. */
void sm_io_sched_thread_enter(unsigned sched, void *userdata);
void sm_io_sched_thread_leave(unsigned sched, void *userdata);

/* For work functions: 1 once the IO layer is stopping, when a system call that failed with EINTR
** must not be retried. */
int sm_io_interrupted(void);

/* For libuv allocation callbacks: grows *data (capacity *cap, of which len bytes are used) by
** doubling, from `room` up, until at least `room` bytes are free. 0, or -ENOMEM when out of memory
** (the buffer stays as it was). */
int sm_io_buf_reserve(char **data, size_t *cap, size_t len, size_t room);

/* ---- Events: the IO thread's own messages to an actor -------------------------------------- */
/* A socket in active mode (tcp.c, udp.c) tells its owner what happens to it, a spawned program
** who asked of its exit (proc.c), a watch its owner what changed (watch.c), and the node a
** message from another node (dist.c), in messages that the IO thread sends itself
** (smarm_send_outside). Such a block starts with an io_event_t, whose
** first byte (IO_EVENT_TAG) is no tag of the binding's codec, so its decoder knows it (codec.h);
** the payload follows: the bytes (data), or nothing. */
#define IO_EVENT_TAG 0xE5

enum io_event_source {
  IO_EV_TCP = 1, IO_EV_UNIX = 2, IO_EV_UDP = 3, IO_EV_PROCESS = 4, IO_EV_WATCH = 5, IO_EV_DIST = 6
};
enum io_event_kind { IO_EV_DATA = 1, IO_EV_CLOSED = 2, IO_EV_ERROR = 3, IO_EV_EXIT = 4 };

typedef struct io_event {
  uint8_t tag;    /* IO_EVENT_TAG */
  uint8_t source; /* io_event_source */
  uint8_t kind;   /* io_event_kind */
  uint8_t pad;
  int32_t err;    /* IO_EV_ERROR: a negative errno (libuv's) */
  uint64_t id;    /* the socket's id */
} io_event_t;

/* A new event block with room for n payload bytes after the header, filled but for the payload
** (smarm_msg_data(msg) + sizeof(io_event_t)), or NULL when out of memory. */
smarm_msg_t *sm_io_event_new(int source, int kind, uint64_t id, int err, size_t n);

/* libuv's name for a negative errno ("ENOENT"), and its message. */
const char *sm_io_err_name(int err);
const char *sm_io_strerror(int err);

#endif
