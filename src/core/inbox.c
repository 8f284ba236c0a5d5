/*
** Scheduler inbox: lock-free multi-producer stack plus futex parking. The protocol and the
** no-lost-wake-up argument are in inbox.h, next to the fields they are about.
*/
#define _GNU_SOURCE
#include "inbox.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void sm_inbox_init(inbox_t *in)
{
  atomic_init(&in->head, NULL);
  atomic_init(&in->parked, 0);
}

static void futex_wake_one(_Atomic uint32_t *word)
{
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Returns 1 if the thread slept (woken or timed out), 0 if the word had already changed. */
static int futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
  struct timespec ts, *tsp = NULL;
  if (timeout_ns >= 0) {
    ts.tv_sec = (time_t)(timeout_ns / 1000000000);
    ts.tv_nsec = (long)(timeout_ns % 1000000000);
    tsp = &ts;
  }
  /* EINTR, EAGAIN (the word already changed) and ETIMEDOUT all mean: go and look again. */
  if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, tsp, NULL, 0) == 0)
    return 1;
  return errno != EAGAIN;
}

int sm_inbox_push(inbox_t *in, smarm_msg_t *m) { return sm_inbox_push_chain(in, m, m); }

int sm_inbox_push_chain(inbox_t *in, smarm_msg_t *m, smarm_msg_t *oldest)
{
  smarm_msg_t *old = atomic_load_explicit(&in->head, memory_order_relaxed);
  do {
    oldest->next = old;
    /* P1. Release publishes m's contents to the owner's acquire exchange in sm_inbox_take_all;
    ** seq_cst also orders it before P2 (pairs with O1/O2, see inbox.h). */
  } while (!atomic_compare_exchange_weak_explicit(&in->head, &old, m, memory_order_seq_cst,
                                                  memory_order_relaxed));
  /* P2: pairs with O1. */
  if (SMARM_LIKELY(atomic_load_explicit(&in->parked, memory_order_seq_cst) == 0))
    return 0;
  /* P3: only the producer that turns 1 into 0 makes the syscall. */
  if (atomic_exchange_explicit(&in->parked, 0, memory_order_seq_cst) == 1) {
    futex_wake_one(&in->parked);
    return 1;
  }
  return 0;
}

void sm_inbox_push_quiet(inbox_t *in, smarm_msg_t *m)
{
  smarm_msg_t *old = atomic_load_explicit(&in->head, memory_order_relaxed);
  do {
    m->next = old;
    /* P1 without P2/P3: release publishes m's contents to the owner's acquire exchange. */
  } while (!atomic_compare_exchange_weak_explicit(&in->head, &old, m, memory_order_release,
                                                  memory_order_relaxed));
}

smarm_msg_t *sm_inbox_take_all(inbox_t *in)
{
  /* Acquire pairs with the producers' P1 CAS: their writes to the items are visible. */
  smarm_msg_t *m = atomic_exchange_explicit(&in->head, NULL, memory_order_acquire);
  smarm_msg_t *fifo = NULL;
  while (m) { /* the stack is newest first; reverse it */
    smarm_msg_t *next = m->next;
    m->next = fifo;
    fifo = m;
    m = next;
  }
  return fifo;
}

int sm_inbox_park(inbox_t *in, int64_t timeout_ns)
{
  atomic_exchange_explicit(&in->parked, 1, memory_order_seq_cst);        /* O1, see inbox.h */
  if (atomic_load_explicit(&in->head, memory_order_seq_cst) != NULL) {  /* O2 */
    atomic_store_explicit(&in->parked, 0, memory_order_relaxed);
    return 0;
  }
  int slept = futex_wait(&in->parked, 1, timeout_ns);                    /* O3 */
  atomic_store_explicit(&in->parked, 0, memory_order_relaxed);           /* O4 */
  return slept;
}
