/*
** Stack overflow reporting.
**
** Every actor runs on a stack with a PROT_NONE guard below it (stack.h), so running off the end
** faults on the guard. The fault is handled on a per-thread alternate signal stack (the faulting
** stack has no room left): if the address is in the guard of the actor running on this thread,
** the handler writes which actor overflowed and its stack size to stderr and aborts. Any other
** fault is handed on: to the handler installed before ours if there was one, else the default
** disposition is restored and the faulting instruction runs again under it, so a program's own
** SIGSEGV handling and core dumps still work.
**
** Only async-signal-safe calls here: write(2), sigaction(2), abort(3). The handler reads the
** thread's scheduler through a thread-local and two fields of the running actor's slot, all
** written by this same thread.
*/
#define _GNU_SOURCE
#include "runtime.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ALTSTACK_BYTES (64 * 1024)

static struct sigaction old_segv, old_bus;

static char *put_str(char *p, const char *s)
{
  while (*s)
    *p++ = *s++;
  return p;
}

static char *put_u64(char *p, uint64_t v)
{
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n)
    *p++ = tmp[--n];
  return p;
}

static void on_fault(int sig, siginfo_t *info, void *uctx)
{
  sched_t *s = sm_sched_tls;
  actor_t *a = s ? s->current : NULL;
  if (a && a->slot && stack_in_guard(a->slot, info->si_addr)) {
    char buf[256], *p = buf;
    p = put_str(p, "smarm: stack overflow in actor <");
    p = put_u64(p, smarm_pid_sched(a->pid) + 1);
    p = put_str(p, ".");
    p = put_u64(p, smarm_pid_slot(a->pid));
    p = put_str(p, ".");
    p = put_u64(p, smarm_pid_gen(a->pid));
    p = put_str(p, "> (stack size ");
    p = put_u64(p, a->slot->size);
    p = put_str(p, " bytes); aborting\n");
    ssize_t unused = write(2, buf, (size_t)(p - buf));
    (void)unused;
    abort();
  }
  /* Not an actor's guard: the fault belongs to whoever handled it before us. */
  struct sigaction *old = sig == SIGSEGV ? &old_segv : &old_bus;
  if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
    old->sa_sigaction(sig, info, uctx);
  } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
    old->sa_handler(sig);
  } else {
    /* Default action: restore it and return; the faulting instruction runs again and the
    ** process dies the ordinary way (core dump included). */
    sigaction(sig, old, NULL);
  }
}

int sm_overflow_install(void)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &old_segv) != 0)
    return -errno;
  if (sigaction(SIGBUS, &sa, &old_bus) != 0) {
    int err = -errno;
    sigaction(SIGSEGV, &old_segv, NULL);
    return err;
  }
  return 0;
}

void sm_overflow_uninstall(void)
{
  sigaction(SIGSEGV, &old_segv, NULL);
  sigaction(SIGBUS, &old_bus, NULL);
}

/* The alternate stack and the one it replaced, kept together to restore on leave. */
typedef struct altstack {
  stack_t old;
  void *mem;
} altstack_t;

int sm_overflow_thread_enter(void **altstack_out)
{
  altstack_t *as = malloc(sizeof *as);
  if (!as)
    return -ENOMEM;
  as->mem = mmap(NULL, ALTSTACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (as->mem == MAP_FAILED) {
    free(as);
    return -ENOMEM;
  }
  stack_t ss = {.ss_sp = as->mem, .ss_size = ALTSTACK_BYTES, .ss_flags = 0};
  if (sigaltstack(&ss, &as->old) != 0) {
    int err = -errno;
    munmap(as->mem, ALTSTACK_BYTES);
    free(as);
    return err;
  }
  *altstack_out = as;
  return 0;
}

void sm_overflow_thread_leave(void *p)
{
  altstack_t *as = p;
  if (!as)
    return;
  /* An old stack that was never set up reads back with SS_DISABLE, which restores "none". */
  sigaltstack(&as->old, NULL);
  munmap(as->mem, ALTSTACK_BYTES);
  free(as);
}
