/*
** A scheduler's inbox: the only structure of a scheduler that other threads write.
**
** Producers (any thread) push messages and control items; the owning scheduler takes them all
** at once. The inbox is an intrusive lock-free stack (one compare-and-swap per push when
** uncontended); the owner detaches the whole chain with one exchange and reverses it, which gives
** back each producer's push order, so messages from one sender stay in order.
**
** The same cache block holds `parked`, the futex word through which the owner sleeps. Keeping
** both words in one block means a producer moves one cache line per push: it has to touch
** `head` anyway and reads `parked` right after.
**
** No lost wake-up. The owner parks like this:          A producer pushes like this:
**   O1  parked = 1                  (seq_cst exchange)   P1  CAS head: old -> item (seq_cst)
**   O2  read head; non-empty -> parked = 0, return       P2  read parked          (seq_cst)
**   O3  futex_wait(&parked, 1, timeout)                  P3  if it was 1: exchange parked to 0;
**   O4  parked = 0                                           whoever got the 1 calls futex_wake
** All four ordered operations are seq_cst, so they fall in one total order. If P2 comes before
** O1 in that order, then P1 did too and O2 sees the item: the owner does not sleep. Otherwise P2
** sees parked == 1 (O1, or a later store by the owner, who only stores 0 once awake), the
** producer wakes it, and futex_wait returns at once if the wake (its exchange to 0) got in before
** O3 went to sleep, because the kernel compares the word to 1 under its lock. A producer makes a
** syscall only when the owner announced it is parking, and only one producer per park does.
** O2 reads `head`, the word P1's read-modify-write publishes: reading anything the producer
** writes later with a plain store would reopen the race.
**
** O1 is an exchange, not a store. In C11 a seq_cst store followed by a seq_cst load is enough,
** and real hardware keeps it (x86 xchg; arm64 stlr then ldar), but qemu-user running arm64 code
** on an x86 host (our aarch64 CI) puts its fences before stlr and after ldar, none between: the
** host's store buffer can let O2 pass O1, and the wake-up is lost (the likely cause of a hang
** of ping_pong_no_spin that CI saw once). A read-modify-write is a full barrier everywhere. Every
** "store, then load the other side's word" in smarm (the IO loop's io_spinning, runtime_current at
** shutdown) stores with an exchange for the same reason.
*/
#ifndef SMARM_CORE_INBOX_H
#define SMARM_CORE_INBOX_H

#include "check.h"
#include "message.h"

#include <stdatomic.h>
#include <stdint.h>

typedef struct inbox {
  _Alignas(SMARM_CACHE_PAD) _Atomic(smarm_msg_t *) head; /* P1 / O2 */
  _Atomic uint32_t parked;                                /* O1, O4 / P2, P3; futex word */
  char pad[SMARM_CACHE_PAD - sizeof(void *) - sizeof(uint32_t)];
} inbox_t;

void sm_inbox_init(inbox_t *in);

/* Producer side (any thread). Takes ownership of m. Returns 1 if it had to wake the owner with
** a syscall, else 0. */
int sm_inbox_push(inbox_t *in, smarm_msg_t *m);

/* A quiet push: P1 only, never a wake-up. The owner may sleep on with m in its inbox, and sees
** it at its next take (its next wake-up, poll or stop: sm_sched_drain_and_free frees what is
** left). Only for items whose handling may wait because nothing waits for it (a demonitor's
** SIG_DEMONITOR only removes a record), never for one that something depends on. */
void sm_inbox_push_quiet(inbox_t *in, smarm_msg_t *m);

/* The same for a chain linked newest first through `next`, newest..oldest: one CAS for all. */
int sm_inbox_push_chain(inbox_t *in, smarm_msg_t *newest, smarm_msg_t *oldest);

/* Owner side: a cheap look (relaxed), for polling in hot loops. */
static inline int inbox_maybe_nonempty(inbox_t *in)
{
  return atomic_load_explicit(&in->head, memory_order_relaxed) != NULL;
}

/* Owner side: detaches everything pushed so far, oldest first (NULL if empty). */
smarm_msg_t *sm_inbox_take_all(inbox_t *in);

/* Owner side: sleeps until a push wakes it, or timeout_ns passes (<0: no timeout). Returns 1 if
** it slept in the kernel, 0 if the re-check found work (or a wake got in first) and it did not. */
int sm_inbox_park(inbox_t *in, int64_t timeout_ns);

#endif
