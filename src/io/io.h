/*
** The IO thread: one libuv loop that runs the blocking work of actors' IO calls, so that an IO call
** parks only its actor, never its scheduler (../shared/design.md, IO).
**
** An actor makes a request (io_req_new), fills in what its work needs, and calls io_call(), which
** hands the request to the IO thread and parks the actor in smarm_await(). The IO thread runs the
** request's work function on libuv's thread pool (files, DNS: blocking system calls), then, back
** on the loop, wakes the actor with smarm_wake(); the completion reaches the actor through its own
** scheduler's inbox. The IO thread starts with the first request of a runtime and stops after the
** runtime has ended (io_shutdown), once the work in flight has finished.
**
** Ownership: a request has two references, the actor's and the IO thread's. The IO side writes the
** result (req->err and the work's own fields) before smarm_wake() and then drops its reference;
** the actor reads the result only after io_call() returned 0, then drops its own. Whoever drops the
** last one frees the request (io_req_release; atomic, acq_rel). So an actor that is stopped while
** its request is in flight (the Lua layer releases the actor's reference when it frees the actor)
** leaks nothing, and a late completion never touches freed memory.
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

/* Frees what the work's own fields hold (called once, by whoever releases the last reference);
** may be NULL. */
typedef void (*io_free_fn)(io_req_t *req);

struct io_req {
  io_req_t *next;       /* the submission queue's link (IO side) */
  _Atomic int refs;     /* 2 from io_call() until each side is done with it */
  smarm_pid_t pid;      /* the actor to wake, and its await token */
  uint64_t token;
  io_work_fn work;
  io_free_fn free_fields;
  int err;              /* the result: 0 or a negative errno (written by the IO side) */
  void *uv;             /* the IO thread's libuv request (io.c) */
};

/* A zeroed request of `size` bytes (a struct that starts with an io_req_t), or NULL. */
io_req_t *io_req_new(size_t size, io_work_fn work, io_free_fn free_fields);

/* Drops one reference; the last one frees the request. */
void io_req_release(io_req_t *req);

/* From an actor: submits req and parks until its work is done. Returns 0 (req->err holds the
** work's result), or a negative errno when the request could not be submitted (-ENOMEM, -EPERM
** outside an actor, -ECANCELED when the IO thread cannot start); then the IO side holds no
** reference and the caller keeps its own. */
int io_call(io_req_t *req);

/* After a runtime has ended (no actor can call any more): lets the work in flight finish, stops
** the IO thread and releases its references. Does nothing if it never started. */
void io_shutdown(void);

/* libuv's name for a negative errno ("ENOENT"), and its message. */
const char *io_err_name(int err);
const char *io_strerror(int err);

#endif
