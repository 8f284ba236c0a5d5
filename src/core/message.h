/*
** Message blocks: the one structure that travels between actors and schedulers.
**
** A message is one heap block: this header, then the payload. The same block travels the whole
** way: allocated by the sender (smarm_msg_new), linked through `next` into the receiving
** scheduler's inbox (remote) or straight into the receiver's mailbox (local, mailbox.h), and
** handed to the receiver, who frees it. Who owns it at each step:
**   sender (after smarm_msg_new) -> runtime (after a successful smarm_send; the inbox or the
**   mailbox holds it; if the receiver is dead on arrival the receiving scheduler frees it)
**   -> receiver (after smarm_receive returns it) -> freed by the receiver.
** Control items between schedulers (spawn requests and replies, wakes, stop) are messages of
** other kinds, so one inbox carries everything (intersched.c delivers them).
*/
#ifndef SMARM_CORE_MESSAGE_H
#define SMARM_CORE_MESSAGE_H

#include "../smarm.h"

#include <stddef.h>
#include <stdint.h>
enum msg_kind {
  MSG_USER = SMARM_MSG_USER,
  MSG_EXIT_NOTICE = SMARM_MSG_EXIT, /* an exit signal a trapping actor receives as a message */
  MSG_DOWN_NOTICE = SMARM_MSG_DOWN, /* a monitored actor ended */
  MSG_REPLY_NOTICE = SMARM_MSG_REPLY, /* a reply to a live alias */
  MSG_SPAWN,        /* payload: spawn_request_t (its answer: pid or negative errno); `to` is
                    ** unused (addressed to the scheduler) */
  MSG_SPAWN_CARRIED, /* a spawn into a pid set aside, whose request is at the end of the new
                    ** actor's own block, its arg (smarm_spawn_on_block; intersched.c) */
  MSG_ALIVE,        /* payload: room for the reply; `to` is the pid asked about, `from` the asker */
  MSG_REPLY,        /* payload: int64_t answer (alive: 1 or 0); `to` is the asker, parked in
                    ** ACTOR_WAIT_REPLY */
  MSG_STOP,         /* the runtime is stopping */
  MSG_WAKE,         /* payload: uint64_t await token; `to` is the awaiting actor (smarm_wake) */
  MSG_SPAWN_REPLY,  /* MSG_REPLY to a spawn request: its payload is still the spawn_request_t */
  MSG_REGISTER,     /* payload: room for the answer, then a name; `to` is the pid to name */
  MSG_TIMER_SET,    /* send_after.c: a timer for `to` (answer, deadline, ref, the message) */
  MSG_TIMER_CANCEL, /* send_after.c: cancel the timer `ref` of `to` (answer: time left) */
  MSG_DUMP,         /* info.c: write this scheduler's actors to stderr (the ticker's, for smarm_dump) */
  MSG_RESERVE,      /* intersched.c: set pids aside for spawns from another scheduler; payload:
                    ** spawn_reserve_msg_t, filled in and sent back as MSG_RESERVED */
  MSG_RESERVED,
  MSG_VCLOCK,       /* vclock.c: a scheduler's own wake-up item on the virtual clock; no payload,
                    ** made once, never freed with the inbox */
  /* Signals between actors (faults.c). Payload: a smarm_notice_t (and a reason's bytes); `to`
  ** is the actor acted on, `from` the one acting. */
  SIG_EXIT,         /* smarm_exit_signal: notice.pid sent it, notice.reason */
  SIG_EXIT_LINK,    /* notice.pid, linked to `to`, ended with notice.reason */
  SIG_LINK,         /* `from` links to `to` */
  SIG_UNLINK,       /* `from` unlinks from `to` */
  SIG_MONITOR,      /* `from` starts monitor notice.ref on `to` */
  SIG_DEMONITOR,    /* the monitor notice.ref on `to` ends */
  SIG_DOWN,         /* to the watcher `to`: notice.pid, watched by notice.ref, ended */
  SIG_REPLY,        /* smarm_send_reply: delivered as MSG_REPLY_NOTICE while `to` holds the
                    ** monitor whose ref the payload ends with, else dropped */
  SIG_WATCH,        /* smarm_signal_outside: another node watches `to` (faults.c) */
};

struct smarm_msg {
  smarm_msg_t *next;
  smarm_pid_t to;
  smarm_pid_t from;
  uint32_t size;
  uint16_t kind;
  uint8_t owning;   /* smarm_msg_set_owning: the drop hook runs when it is freed */
  uint8_t home;     /* the allocating thread's home (home.h): where it is freed */
  /* The payload follows at a 16-byte aligned offset (the header is 32 bytes). */
  _Alignas(16) unsigned char data[];
};

smarm_msg_t *sm_msg_new(uint32_t kind, size_t size);

/* Frees a message, running the drop hook first if it is owning (every free goes through here). */
void sm_msg_release(smarm_msg_t *m);

/* Frees a chain of messages linked through next. */
void sm_msg_free_chain(smarm_msg_t *m);

#endif
