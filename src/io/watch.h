/*
** Watching the file system (smarm.fs.watch) on the IO thread: libuv's fs events (inotify on
** Linux). A watch is a libuv handle named by an id; what it sees goes to its owner, the actor that
** started it, as IO events (io.h: source IO_EV_WATCH; IO_EV_DATA with a watch_payload_t and the
** changed entry's name after it, IO_EV_ERROR with the error). A watch ends when it is stopped
** (a posted IOWATCH_STOP: its handle's __gc, close) or the IO thread stops.
**
** Owner: everything here but the request structs belongs to the IO thread.
*/
#ifndef SMARM_IO_WATCH_H
#define SMARM_IO_WATCH_H

#include "io.h"

#include <stdint.h>

enum watch_op {
  IOWATCH_START, /* path, owner -> new_id */
  IOWATCH_STOP,  /* id (posted) */
};

/* What changed (libuv's uv_fs_event bits). */
enum { WATCH_RENAME = 1, WATCH_CHANGE = 2 };

/* An IO_EV_DATA event's payload: this, then the entry's name (name_len bytes; none when the
** watched file itself changed). */
typedef struct watch_payload {
  uint32_t what; /* WATCH_RENAME | WATCH_CHANGE */
  uint32_t name_len;
} watch_payload_t;

typedef struct watch_req {
  io_req_t base;
  enum watch_op op;
  char *path;         /* start: owned */
  smarm_pid_t owner;  /* start: who gets the events */
  uint64_t id;        /* stop */
  uint64_t new_id;    /* start's result */
  int new_taken;      /* the caller took new_id (written and read as tcp.h's) */
} watch_req_t;

/* A request for op (zeroed, run on the IO thread), or NULL. */
watch_req_t *sm_watch_req_new(enum watch_op op);

#endif
