/*
** Machine contexts: the one piece of smarm that is written per architecture.
**
** A context is just the stack pointer of a suspended C stack. Everything else a suspended stack
** needs (the callee-saved registers of the ABI, the floating-point control words, the address to
** resume at) is pushed onto that stack by ctx_switch() before it leaves, and popped by the
** ctx_switch() that resumes it. Caller-saved registers need no saving: ctx_switch is an ordinary
** call, so the compiler already assumes they are clobbered.
**
** Files: arch/<arch>/switch.S holds ctx_switch and the entry trampoline; arch/<arch>/context.c
** builds the first frame of a new stack so that the first switch to it "returns" into the
** trampoline, which calls fn(arg). fn must never return (the trampoline traps if it does).
*/
#ifndef SMARM_ARCH_CONTEXT_H
#define SMARM_ARCH_CONTEXT_H

typedef struct ctx {
  void *sp; /* saved stack pointer; the saved registers sit just above it */
} ctx_t;

/* Saves the caller's state on its stack, stores the stack pointer in *from, switches to the
** stack saved in *to and returns there. *from may equal a context that will never be resumed. */
void sm_ctx_switch(ctx_t *from, ctx_t *to);

/* Prepares *ctx so that switching to it runs fn(arg) on the stack that ends at stack_top
** (exclusive; 16-byte aligned). Writes a few dozen bytes just below stack_top. */
void sm_ctx_make(ctx_t *ctx, void *stack_top, void (*fn)(void *), void *arg);

/* Bytes that sm_ctx_make writes below stack_top. */
#define CTX_INITIAL_FRAME_BYTES 192

#endif
