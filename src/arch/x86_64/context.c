/*
** First frame of a new x86-64 stack, laid out exactly as sm_ctx_switch (switch.S) leaves a
** suspended one, so that the first switch to it pops these values and "returns" into
** sm_ctx_entry (at sm_ctx_entry_resume, see switch.S) with fn in r12 and arg in r13.
*/
#include "../context.h"

#include <stdint.h>
#include <string.h>

void sm_ctx_entry_resume(void); /* a label inside sm_ctx_entry (switch.S) */

void sm_ctx_make(ctx_t *ctx, void *stack_top, void (*fn)(void *), void *arg)
{
  /* 16 spare bytes at the top keep rsp 16-byte aligned when the trampoline starts (after ret
  ** popped the entry address), so its call gives fn the alignment the ABI promises. */
  uint64_t *frame = (uint64_t *)((char *)stack_top - 16 - 64);
  uint32_t mxcsr = 0x1F80;  /* power-on defaults: all exceptions masked, round to nearest */
  uint16_t fcw = 0x037F;
  memset(frame, 0, 64 + 16);
  memcpy(&frame[0], &mxcsr, 4);
  memcpy((char *)&frame[0] + 4, &fcw, 2);
  frame[1] = 0;                           /* r15 */
  frame[2] = 0;                           /* r14 */
  frame[3] = (uint64_t)(uintptr_t)arg;    /* r13 */
  frame[4] = (uint64_t)(uintptr_t)fn;     /* r12 */
  frame[5] = 0;                           /* rbx */
  frame[6] = 0;                           /* rbp: ends frame-pointer walks */
  frame[7] = (uint64_t)(uintptr_t)sm_ctx_entry_resume; /* return address */
  ctx->sp = frame;
}
