/* The raw context switch (src/arch/<arch>/switch.S, context.c), below the scheduler: callee-saved
** registers, stack alignment, the first frame sm_ctx_make builds, many switches back and forth. */
#include "test.h"

#include "arch/context.h"

#include <stddef.h>
#include <stdint.h>

#define STACK_BYTES (64 * 1024)

/* A 64 KiB stack from malloc; top is rounded down to 16 bytes. */
typedef struct test_stack {
  unsigned char *base;
  void *top;
} test_stack_t;

static test_stack_t stack_new(void)
{
  test_stack_t s;
  s.base = malloc(STACK_BYTES);
  if (!s.base) {
    fprintf(stderr, "out of memory\n");
    abort();
  }
  s.top = (void *)(((uintptr_t)s.base + STACK_BYTES) & ~(uintptr_t)15);
  return s;
}

static uint64_t mix64(uint64_t x)
{
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* ---- Register probe ------------------------------------------------------------------------
**
** test_switch_probe(p, from, to), written in assembly below, saves its caller's callee-saved
** state, loads p->in[] into every callee-saved register of the ABI (including the frame pointer
** and, on x86-64, MXCSR and the x87 control word), calls sm_ctx_switch(from, to) and, when
** switched back to, stores those registers into p->out[] before restoring the caller's state.
** Nothing compiled from C runs between the loads, the switch and the stores. Both sides of a
** switch use it, with different values, so any register the switch loses or leaks shows up.
*/
#if defined(__x86_64__)
#define NREGS 8
static const char *const reg_names[NREGS] = {"rbx", "rbp", "r12", "r13",
                                             "r14", "r15", "mxcsr", "x87 cw"};
#define REG_MXCSR 6
#define REG_FCW 7
#elif defined(__aarch64__)
#define NREGS 19
static const char *const reg_names[NREGS] = {"x19", "x20", "x21", "x22", "x23", "x24", "x25",
                                             "x26", "x27", "x28", "x29", "d8",  "d9",  "d10",
                                             "d11", "d12", "d13", "d14", "d15"};
#else
#error "test_switch.c knows the callee-saved registers of x86_64 and aarch64 only"
#endif

typedef struct probe {
  uint64_t in[NREGS];
  uint64_t out[NREGS];
  uint64_t sp_before; /* sp just before the call to sm_ctx_switch */
  uint64_t sp_after;  /* sp just after it returned */
} probe_t;

/* Offsets of out[], sp_before and sp_after, as plain numbers for the assembler. */
#define STR_(x) #x
#define STR(x) STR_(x)
#if defined(__x86_64__)
#define OFF_OUT 64
#define OFF_SP_BEFORE 128
#define OFF_SP_AFTER 136
#else
#define OFF_OUT 152
#define OFF_SP_BEFORE 304
#define OFF_SP_AFTER 312
#endif
_Static_assert(offsetof(probe_t, out) == OFF_OUT, "probe_t layout is hard-coded in the asm");
_Static_assert(offsetof(probe_t, sp_before) == OFF_SP_BEFORE, "probe_t layout");
_Static_assert(offsetof(probe_t, sp_after) == OFF_SP_AFTER, "probe_t layout");

void test_switch_probe(probe_t *p, ctx_t *from, ctx_t *to);

#if defined(__x86_64__)
/* Entry rsp is 8 mod 16; six pushes and 24 bytes make it 0 mod 16 at the call. */
__asm__(".text\n"
        ".globl test_switch_probe\n"
        ".hidden test_switch_probe\n"
        ".type test_switch_probe, @function\n"
        ".p2align 4\n"
        "test_switch_probe:\n" /* rdi = probe, rsi = from, rdx = to */
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $24, %rsp\n"
        "  stmxcsr 0(%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rdi, 8(%rsp)\n"
        "  movq %rdi, %rax\n"
        "  movq %rsi, %rdi\n"
        "  movq %rdx, %rsi\n"
        "  ldmxcsr 48(%rax)\n"
        "  fldcw 56(%rax)\n"
        "  movq 0(%rax), %rbx\n"
        "  movq 8(%rax), %rbp\n"
        "  movq 16(%rax), %r12\n"
        "  movq 24(%rax), %r13\n"
        "  movq 32(%rax), %r14\n"
        "  movq 40(%rax), %r15\n"
        "  movq %rsp, " STR(OFF_SP_BEFORE) "(%rax)\n"
        "  call sm_ctx_switch@PLT\n"
        "  movq 8(%rsp), %rax\n"
        "  movq %rsp, " STR(OFF_SP_AFTER) "(%rax)\n"
        "  movq %rbx, " STR(OFF_OUT) "+0(%rax)\n"
        "  movq %rbp, " STR(OFF_OUT) "+8(%rax)\n"
        "  movq %r12, " STR(OFF_OUT) "+16(%rax)\n"
        "  movq %r13, " STR(OFF_OUT) "+24(%rax)\n"
        "  movq %r14, " STR(OFF_OUT) "+32(%rax)\n"
        "  movq %r15, " STR(OFF_OUT) "+40(%rax)\n"
        "  movq $0, " STR(OFF_OUT) "+48(%rax)\n"
        "  movq $0, " STR(OFF_OUT) "+56(%rax)\n"
        "  stmxcsr " STR(OFF_OUT) "+48(%rax)\n"
        "  fnstcw " STR(OFF_OUT) "+56(%rax)\n"
        "  ldmxcsr 0(%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $24, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size test_switch_probe, .-test_switch_probe\n");
#else
/* A 176-byte frame: x29/x30, x19-x28, d8-d15 and the probe pointer; sp stays 16-aligned. */
__asm__(".text\n"
        ".globl test_switch_probe\n"
        ".hidden test_switch_probe\n"
        ".type test_switch_probe, %function\n"
        ".p2align 4\n"
        "test_switch_probe:\n" /* x0 = probe, x1 = from, x2 = to */
        "  hint 34\n"            /* bti c: a no-op unless built with branch protection */
        "  stp x29, x30, [sp, #-176]!\n"
        "  mov x29, sp\n"
        "  stp x19, x20, [sp, #16]\n"
        "  stp x21, x22, [sp, #32]\n"
        "  stp x23, x24, [sp, #48]\n"
        "  stp x25, x26, [sp, #64]\n"
        "  stp x27, x28, [sp, #80]\n"
        "  stp d8, d9, [sp, #96]\n"
        "  stp d10, d11, [sp, #112]\n"
        "  stp d12, d13, [sp, #128]\n"
        "  stp d14, d15, [sp, #144]\n"
        "  str x0, [sp, #160]\n"
        "  ldp x19, x20, [x0, #0]\n"
        "  ldp x21, x22, [x0, #16]\n"
        "  ldp x23, x24, [x0, #32]\n"
        "  ldp x25, x26, [x0, #48]\n"
        "  ldp x27, x28, [x0, #64]\n"
        "  ldr x29, [x0, #80]\n"
        "  ldp d8, d9, [x0, #88]\n"
        "  ldp d10, d11, [x0, #104]\n"
        "  ldp d12, d13, [x0, #120]\n"
        "  ldp d14, d15, [x0, #136]\n"
        "  mov x9, sp\n"
        "  str x9, [x0, #" STR(OFF_SP_BEFORE) "]\n"
        "  mov x0, x1\n"
        "  mov x1, x2\n"
        "  bl sm_ctx_switch\n"
        "  ldr x0, [sp, #160]\n"
        "  mov x9, sp\n"
        "  str x9, [x0, #" STR(OFF_SP_AFTER) "]\n"
        "  stp x19, x20, [x0, #" STR(OFF_OUT) "+0]\n"
        "  stp x21, x22, [x0, #" STR(OFF_OUT) "+16]\n"
        "  stp x23, x24, [x0, #" STR(OFF_OUT) "+32]\n"
        "  stp x25, x26, [x0, #" STR(OFF_OUT) "+48]\n"
        "  stp x27, x28, [x0, #" STR(OFF_OUT) "+64]\n"
        "  str x29, [x0, #" STR(OFF_OUT) "+80]\n"
        "  stp d8, d9, [x0, #" STR(OFF_OUT) "+88]\n"
        "  stp d10, d11, [x0, #" STR(OFF_OUT) "+104]\n"
        "  stp d12, d13, [x0, #" STR(OFF_OUT) "+120]\n"
        "  stp d14, d15, [x0, #" STR(OFF_OUT) "+136]\n"
        "  ldp x19, x20, [sp, #16]\n"
        "  ldp x21, x22, [sp, #32]\n"
        "  ldp x23, x24, [sp, #48]\n"
        "  ldp x25, x26, [sp, #64]\n"
        "  ldp x27, x28, [sp, #80]\n"
        "  ldp d8, d9, [sp, #96]\n"
        "  ldp d10, d11, [sp, #112]\n"
        "  ldp d12, d13, [sp, #128]\n"
        "  ldp d14, d15, [sp, #144]\n"
        "  ldp x29, x30, [sp], #176\n"
        "  ret\n"
        ".size test_switch_probe, .-test_switch_probe\n");
#endif

#if defined(__x86_64__)
/* Valid MXCSR values (all exceptions masked; rounding modes, flush-to-zero) and x87 control
** words (precision and rounding control). The two sides pick them so that they sometimes agree:
** the switch skips the (slow) loads when the values match, and both paths must be right. */
static const uint32_t mxcsr_values[] = {0x1F80, 0x3F80, 0x5F80, 0x7F80, 0x9F80};
static const uint16_t fcw_values[] = {0x037F, 0x027F, 0x0F7F, 0x077F, 0x0B7F};
#define MXCSR_FLAGS 0x3Fu /* sticky exception flags: status, not control */
#endif

static void probe_fill(probe_t *p, uint64_t seed, uint64_t round)
{
  memset(p, 0, sizeof *p);
  for (int r = 0; r < NREGS; r++)
    p->in[r] = mix64(seed ^ (round << 8) ^ (uint64_t)r);
#if defined(__x86_64__)
  p->in[REG_MXCSR] = mxcsr_values[(seed + round) % 5];
  p->in[REG_FCW] = fcw_values[(seed + round / 5) % 5];
#endif
}

/* Number of registers that did not come back as they went in (each one printed). */
static int probe_mismatches(const probe_t *p, const char *side, uint64_t round)
{
  int bad = 0;
  for (int r = 0; r < NREGS; r++) {
    uint64_t got = p->out[r], want = p->in[r];
#if defined(__x86_64__)
    if (r == REG_MXCSR)
      got &= ~(uint64_t)MXCSR_FLAGS;
#endif
    if (got != want) {
      fprintf(stderr, "  %s, round %" PRIu64 ": %s = 0x%016" PRIx64 ", want 0x%016" PRIx64 "\n",
              side, round, reg_names[r], got, want);
      bad++;
    }
  }
  return bad;
}

#define SEED_MAIN 0x6D61696E00000000ull
#define SEED_FIBER 0x6669626500000000ull
#define PROBE_ROUNDS 1000

typedef struct probe_env {
  ctx_t main, fiber;
  uint64_t fiber_rounds;  /* times the fiber's probe came back */
  int fiber_mismatches;
  int fiber_misaligned;
  int fiber_sp_moved;
} probe_env_t;

static void probe_fiber(void *arg)
{
  probe_env_t *e = arg;
  for (uint64_t round = 0;; round++) {
    probe_t p;
    probe_fill(&p, SEED_FIBER, round);
    test_switch_probe(&p, &e->fiber, &e->main);
    e->fiber_rounds++;
    e->fiber_mismatches += probe_mismatches(&p, "fiber", round);
    e->fiber_misaligned += (p.sp_before & 15) != 0;
    e->fiber_sp_moved += p.sp_after != p.sp_before;
  }
}

TEST(switch_preserves_callee_saved_registers)
{
  test_stack_t st = stack_new();
  probe_env_t e;
  memset(&e, 0, sizeof e);
  sm_ctx_make(&e.fiber, st.top, probe_fiber, &e);
  int mismatches = 0, misaligned = 0, moved = 0;
  for (uint64_t round = 0; round < PROBE_ROUNDS; round++) {
    probe_t p;
    probe_fill(&p, SEED_MAIN, round);
    test_switch_probe(&p, &e.main, &e.fiber);
    mismatches += probe_mismatches(&p, "main", round);
    misaligned += (p.sp_before & 15) != 0;
    moved += p.sp_after != p.sp_before;
    /* The fiber is parked inside its probe; its saved sp must be 16-byte aligned too. */
    misaligned += ((uintptr_t)e.fiber.sp & 15) != 0;
  }
  CHECK_EQ(mismatches, 0);
  CHECK_EQ(misaligned, 0);
  CHECK_EQ(moved, 0);
  CHECK_EQ(e.fiber_rounds, PROBE_ROUNDS - 1); /* entered once, then resumed 999 times */
  CHECK_EQ(e.fiber_mismatches, 0);
  CHECK_EQ(e.fiber_misaligned, 0);
  CHECK_EQ(e.fiber_sp_moved, 0);
  free(st.base); /* the fiber stays parked forever: nothing on its stack needs unwinding */
}

/* ---- Entry: arguments, alignment, initial state ------------------------------------------- */

typedef struct entry_env {
  ctx_t main, fiber;
  void *arg_seen;
  uintptr_t frame;       /* __builtin_frame_address(0) in fn */
  uintptr_t aligned_local;
  uint32_t mxcsr;
  uint16_t fcw;
} entry_env_t;

static void entry_fn(void *arg)
{
  entry_env_t *e = arg;
  _Alignas(16) volatile unsigned char local[16];
  local[0] = 1;
  e->arg_seen = arg;
  e->frame = (uintptr_t)__builtin_frame_address(0);
  e->aligned_local = (uintptr_t)&local[0];
#if defined(__x86_64__)
  uint32_t mxcsr;
  uint16_t fcw;
  __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fcw));
  e->mxcsr = mxcsr;
  e->fcw = fcw;
#endif
  sm_ctx_switch(&e->fiber, &e->main);
  abort(); /* never resumed */
}

TEST(new_context_entry_is_aligned_and_clean)
{
  /* Several stack tops, each 16-byte aligned but otherwise different mod 64 and mod 4096. */
  for (int shift = 0; shift < 8; shift++) {
    test_stack_t st = stack_new();
    void *top = (char *)st.top - 16 * shift - 4096 * (shift & 1);
    entry_env_t e;
    memset(&e, 0, sizeof e);
    sm_ctx_make(&e.fiber, top, entry_fn, &e);
    CHECK_EQ((uintptr_t)e.fiber.sp & 15, 0);
#if defined(__x86_64__)
    /* A new context starts with the default FP control state, whatever the creator has. */
    uint32_t mine = 0x7F80, saved_mxcsr;
    uint16_t mine_cw = 0x0F7F, saved_cw;
    __asm__ volatile("stmxcsr %0\n\tfnstcw %1\n\tldmxcsr %2\n\tfldcw %3"
                     : "=m"(saved_mxcsr), "=m"(saved_cw)
                     : "m"(mine), "m"(mine_cw));
    sm_ctx_switch(&e.main, &e.fiber);
    uint32_t after_mxcsr;
    uint16_t after_cw;
    __asm__ volatile("stmxcsr %0\n\tfnstcw %1\n\tldmxcsr %2\n\tfldcw %3"
                     : "=m"(after_mxcsr), "=m"(after_cw)
                     : "m"(saved_mxcsr), "m"(saved_cw));
    CHECK_EQ(e.mxcsr & ~MXCSR_FLAGS, 0x1F80);
    CHECK_EQ(e.fcw, 0x037F);
    CHECK_EQ(after_mxcsr & ~MXCSR_FLAGS, 0x7F80); /* and ours came back */
    CHECK_EQ(after_cw, 0x0F7F);
#else
    sm_ctx_switch(&e.main, &e.fiber);
#endif
    CHECK(e.arg_seen == &e);
    CHECK_EQ(e.frame & 15, 0);
    CHECK_EQ(e.aligned_local & 15, 0);
    CHECK(e.frame < (uintptr_t)top && e.frame > (uintptr_t)top - 1024);
    free(st.base);
  }
}

TEST(initial_frame_fits_in_its_bound)
{
  test_stack_t st = stack_new();
  unsigned char *top = st.top;
  memset(st.base, 0xA5, STACK_BYTES);
  ctx_t c;
  sm_ctx_make(&c, top, entry_fn, NULL);
  CHECK((unsigned char *)c.sp >= top - CTX_INITIAL_FRAME_BYTES && (unsigned char *)c.sp < top);
  int outside = 0;
  for (unsigned char *b = st.base; b < top - CTX_INITIAL_FRAME_BYTES; b++)
    outside += *b != 0xA5;
  for (unsigned char *b = top; b < st.base + STACK_BYTES; b++)
    outside += *b != 0xA5;
  CHECK_EQ(outside, 0);
  free(st.base);
}

/* ---- Many switches ------------------------------------------------------------------------- */

#define RING 3
#define LAPS 1000

typedef struct ring_env {
  ctx_t main;
  ctx_t ctx[RING];
  int id_seen[RING];
  long visits[RING];
  long trace_len;
  int trace_bad;
  void *parked_sp[RING]; /* where each fiber parks: the same every lap */
  int sp_moved;
} ring_env_t;

typedef struct ring_arg {
  ring_env_t *e;
  int id;
} ring_arg_t;

/* Fiber i passes control to fiber i+1; the last one returns to main. Locals on each stack must
** survive all the switches. */
static void ring_fn(void *arg)
{
  ring_arg_t *a = arg;
  ring_env_t *e = a->e;
  const int id = a->id;
  volatile long mine = 0;
  e->id_seen[id] = id;
  for (;;) {
    mine++;
    if (mine != ++e->visits[id])
      e->trace_bad++;
    if (e->trace_len++ % RING != id)
      e->trace_bad++;
    ctx_t *next = id + 1 < RING ? &e->ctx[id + 1] : &e->main;
    sm_ctx_switch(&e->ctx[id], next);
    if (!e->parked_sp[id])
      e->parked_sp[id] = e->ctx[id].sp;
    else if (e->parked_sp[id] != e->ctx[id].sp)
      e->sp_moved++;
  }
}

TEST(switch_back_and_forth_1000_times)
{
  test_stack_t st[RING];
  ring_arg_t args[RING];
  ring_env_t e;
  memset(&e, 0, sizeof e);
  for (int i = 0; i < RING; i++) {
    st[i] = stack_new();
    args[i] = (ring_arg_t){&e, i};
    sm_ctx_make(&e.ctx[i], st[i].top, ring_fn, &args[i]);
    e.id_seen[i] = -1;
  }
  volatile long laps_here = 0;
  for (long lap = 0; lap < LAPS; lap++) {
    sm_ctx_switch(&e.main, &e.ctx[0]);
    laps_here++;
    for (int i = 0; i < RING; i++)
      if (e.visits[i] != lap + 1)
        e.trace_bad++;
  }
  CHECK_EQ(laps_here, LAPS);
  for (int i = 0; i < RING; i++) {
    CHECK_EQ(e.id_seen[i], i);
    CHECK_EQ(e.visits[i], LAPS);
  }
  CHECK_EQ(e.trace_len, (long)RING * LAPS);
  CHECK_EQ(e.trace_bad, 0);
  CHECK_EQ(e.sp_moved, 0);
  for (int i = 0; i < RING; i++)
    free(st[i].base);
}

TEST_MAIN()
