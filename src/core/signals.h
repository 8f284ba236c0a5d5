/*
** The asynchronous signals whose handlers belong on the IO thread: those libuv handles for
** process.run (SIGCHLD) and smarm.signal.wait (SIGINT, SIGTERM, SIGHUP), and the one the IO
** thread's stop uses to interrupt blocked pool work. Under TSan the schedulers block this set
** (runtime.c) and the IO thread unblocks it (io.c): one list, so the two cannot drift apart.
*/
#ifndef SMARM_CORE_SIGNALS_H
#define SMARM_CORE_SIGNALS_H

#include <signal.h>

#define SMARM_IO_INTERRUPT_SIGNAL SIGURG /* ignored by default: harmless where not handled */

static inline void smarm_io_signal_set(sigset_t *set)
{
  sigemptyset(set);
  sigaddset(set, SIGCHLD);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  sigaddset(set, SIGHUP);
  sigaddset(set, SMARM_IO_INTERRUPT_SIGNAL);
}

#endif
