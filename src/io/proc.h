/*
** Child processes and signals on the IO thread (libuv's uv_spawn and uv_signal).
**
** Running a program: its stdin gets the request's bytes (then end of file), its stdout and stderr
** are collected whole; the request completes once the program has exited and both pipes have
** ended. A timed-out request kills the program (SIGKILL) and completes with what it wrote so far;
** a runtime's end kills the programs still running too. A program that cannot start because its
** cwd cannot be entered says so (cwd_failed), where the system says only "no such file".
**
** Waiting for a signal: the first waiter for a signal starts a libuv signal handle for it, the
** last one to leave stops it (the signal's default action applies again when nobody waits).
** Every waiter of a signal is completed when it arrives.
*/
#ifndef SMARM_IO_PROC_H
#define SMARM_IO_PROC_H

#include "io.h"

#include <stddef.h>

typedef struct proc_req {
  io_req_t base;
  /* run */
  char **argv, **env;   /* NULL-terminated, owned; env NULL: inherit */
  char *cwd;            /* owned, or NULL */
  char *input;          /* stdin bytes (owned) or NULL: stdin is /dev/null */
  size_t input_len;
  char *out, *err;      /* collected (owned) */
  size_t out_len, err_len;
  long long status;     /* exit status */
  int term_signal;      /* the signal that ended it, or 0 */
  int cwd_failed;       /* it could not start: cwd is not a folder it may enter */
  /* signal */
  int signum;
} proc_req_t;

proc_req_t *sm_proc_run_new(void);     /* a request to run argv */
proc_req_t *sm_proc_signal_new(void);  /* a request to wait for signum */

#endif
