/*
** Child processes and signals on the IO thread (libuv's uv_spawn and uv_signal).
**
** Running a program (run): its stdin gets the request's bytes (then end of file), its stdout and
** stderr are collected whole; the request completes once the program has exited and both pipes
** have ended. A timed-out request kills the program (SIGKILL) and completes with what it wrote
** so far. A program that cannot start because its cwd cannot be entered says so (cwd_failed),
** where the system says only "no such file".
**
** A live program (spawn): started with each of its standard streams a pipe, inherited or
** /dev/null; a pipe is one end of a socketpair whose other end becomes a Unix stream socket of
** tcp.c (an id: the binding gives it the sockets' methods), and the program is named by an id of
** its own, for waits, kills and its exit message; released, it is forgotten once it has exited.
** Both kinds are started by the same code, and are killed (SIGKILL; a program that leads its own
** process group, the group) when the runtime ends or a signal ends the process (below).
**
** Waiting for a signal: the first waiter for a signal starts a libuv signal handle for it, the
** last one to leave stops it (the signal's default action applies again when nobody waits),
** unless it was caught (IOPROC_CATCH: kept for the run, an arrival between waits kept for the
** next waiter).
** Every waiter of a signal is completed when it arrives.
*/
#ifndef SMARM_IO_PROC_H
#define SMARM_IO_PROC_H

#include "io.h"

#include <stddef.h>
#include <stdint.h>

enum proc_op {
  IOPROC_RUN,     /* argv, env, cwd, input -> status, term_signal, out, err */
  IOPROC_SIGNAL,  /* signum (completes when it comes) */
  IOPROC_CATCH,   /* signum (caught for the rest of the run; completes at once) */
  IOPROC_SPAWN,   /* argv, env, cwd, stdio, group, notify -> new_id, os_pid, stdio_id, stdio_fd */
  IOPROC_WAIT,    /* id -> status, term_signal (completes once it has exited) */
  IOPROC_KILL,    /* id, signum (-ESRCH once it has exited) */
  IOPROC_RELEASE, /* id (posted: the handle is gone) */
};

/* A spawned program's standard stream. */
enum { IOPROC_NULL = 0, IOPROC_PIPE = 1, IOPROC_INHERIT = 2, IOPROC_TO_STDOUT = 3 /* stderr */ };

/* The exit message of a spawned program (io.h's event, IO_EV_PROCESS, IO_EV_EXIT): this after
** the header. */
typedef struct proc_exit_payload {
  int64_t status;
  int32_t term_signal;
  int32_t os_pid;
} proc_exit_payload_t;

typedef struct proc_req {
  io_req_t base;
  enum proc_op op;
  char **argv, **env;   /* NULL-terminated, owned; env NULL: inherit */
  char *cwd;            /* owned, or NULL */
  /* run */
  char *input;          /* stdin bytes (owned) or NULL: stdin is /dev/null */
  size_t input_len;
  char *out, *err;      /* collected (owned) */
  size_t out_len, err_len;
  long long status;     /* exit status (run, wait) */
  int term_signal;      /* the signal that ended it, or 0 (run, wait) */
  int cwd_failed;       /* it could not start: cwd is not a folder it may enter */
  /* spawn */
  int stdio[3];         /* IOPROC_NULL, _PIPE, _INHERIT (_TO_STDOUT for stderr) */
  int group;            /* the program leads a process group of its own; kills go to the group */
  smarm_pid_t notify;   /* who gets its exit message (0: nobody) */
  uint64_t new_id;      /* the program's id */
  int os_pid;
  uint64_t stdio_id[3]; /* the pipes' sockets (tcp.c), 0 where no pipe */
  int stdio_fd[3];
  int new_taken;        /* the caller took what spawn made (lproc.c), written and read as tcp.h's */
  /* wait, kill, release */
  uint64_t id;
  struct proc_req *wait_next; /* wait: the program's next wait (proc.c) */
  /* signal, kill */
  int signum;
} proc_req_t;

proc_req_t *sm_proc_run_new(void);     /* a request to run argv */
proc_req_t *sm_proc_signal_new(void);  /* a request to wait for signum */
proc_req_t *sm_proc_req_new(enum proc_op op); /* spawn, wait, kill, release */

#endif
