/*
** First frame of a new AArch64 stack, laid out exactly as sm_ctx_switch (switch.S) leaves a
** suspended one, so that the first switch to it loads x30 = sm_ctx_entry_resume (inside
** sm_ctx_entry, see switch.S) and "returns" there with fn in x19 and arg in x20.
*/
#include "../context.h"

#include <stdint.h>
#include <string.h>

void sm_ctx_entry_resume(void); /* a label inside sm_ctx_entry (switch.S) */

void sm_ctx_make(ctx_t *ctx, void *stack_top, void (*fn)(void *), void *arg)
{
  uint64_t *frame = (uint64_t *)((char *)stack_top - 160);
  memset(frame, 0, 160);
  frame[0] = (uint64_t)(uintptr_t)fn;   /* x19 */
  frame[1] = (uint64_t)(uintptr_t)arg;  /* x20 */
  frame[10] = 0;                        /* x29: ends frame-pointer walks */
  frame[11] = (uint64_t)(uintptr_t)sm_ctx_entry_resume; /* x30 */
  ctx->sp = frame;
}
