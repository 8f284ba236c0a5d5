/*
** Context switch for x86-64 System V.
**
** Saved exactly: the callee-saved registers rbx, rbp, r12-r15, the stack pointer (in ctx->sp),
** the MXCSR control/status register and the x87 control word (psABI 3.2.1: both are
** "callee-saved" control state). The return address is the one pushed by the call to
** sm_ctx_switch. The direction flag is clear on both sides by the ABI.
**
** Frame left on a suspended stack, from ctx->sp upwards (64 bytes):
**   +0  MXCSR (4 bytes)  +4  x87 CW (2 bytes, 2 unused)
**   +8  r15  +16 r14  +24 r13  +32 r12  +40 rbx  +48 rbp  +56 return address
**
** Loading MXCSR and the x87 control word is slow (tens of cycles) and they almost never differ
** between actors, so they are stored always (into one zeroed 8-byte slot) and loaded only when
** the slot differs from the one just stored for the leaving side in a control bit; one 64-bit
** compare checks both. MXCSR's exception flags are status (caller-saved by the psABI) and are
** masked out of the compare, so actors whose float code left different sticky flags do not
** take the slow path on every switch. ret (not jmp) is right here: every actor leaves and resumes through the same call site
** in the scheduler, so the return-stack predictor is right except for a new actor's first entry.
**
** The CFI tracks every push and pop; since the stack being resumed holds a frame of the same
** layout, it stays true across the `movq ..., %rsp` that changes stacks, so an unwinder stopped
** anywhere in here sees one coherent stack.
*/
        .text
        .globl  sm_ctx_switch
        .hidden sm_ctx_switch
        .type   sm_ctx_switch, @function
        .p2align 4
sm_ctx_switch:                       /* rdi = from ctx, rsi = to ctx */
        .cfi_startproc
        pushq   %rbp
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rbp, 0
        pushq   %rbx
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rbx, 0
        pushq   %r12
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r12, 0
        pushq   %r13
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r13, 0
        pushq   %r14
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r14, 0
        pushq   %r15
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r15, 0
        pushq   $0                      /* FP control slot; bytes 6-7 stay zero */
        .cfi_adjust_cfa_offset 8
        stmxcsr (%rsp)
        fnstcw  4(%rsp)
        movq    %rsp, %rdx              /* the frame just written */
        movq    %rsp, (%rdi)            /* from->sp */
        movq    (%rsi), %rsp            /* to->sp: now on the other stack */
        movq    (%rsp), %rax            /* the target's control words ... */
        xorq    (%rdx), %rax            /* ... against the current ones, both at once, */
        movabsq $0xffffffffffc0, %rcx   /* ignoring MXCSR's sticky exception flags (bits */
        testq   %rcx, %rax              /* 0-5: caller-saved status, not control) */
        jnz     3f                      /* rare: an actor changed a control word */
        .cfi_remember_state
2:      addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %r15
        .cfi_adjust_cfa_offset -8
        .cfi_restore r15
        popq    %r14
        .cfi_adjust_cfa_offset -8
        .cfi_restore r14
        popq    %r13
        .cfi_adjust_cfa_offset -8
        .cfi_restore r13
        popq    %r12
        .cfi_adjust_cfa_offset -8
        .cfi_restore r12
        popq    %rbx
        .cfi_adjust_cfa_offset -8
        .cfi_restore rbx
        popq    %rbp
        .cfi_adjust_cfa_offset -8
        .cfi_restore rbp
        ret
3:      .cfi_restore_state
        ldmxcsr (%rsp)
        fldcw   4(%rsp)
        jmp     2b
        .cfi_endproc
        .size   sm_ctx_switch, .-sm_ctx_switch

/*
** First code run on a new stack: sm_ctx_make left fn in r12, arg in r13 and rbp = 0. The return
** address is marked undefined so debuggers, perf and unwinders stop here, at the stack's base;
** rbp = 0 ends frame-pointer walks at the same place.
**
** sm_ctx_make's first frame resumes at sm_ctx_entry_resume, one byte into the function
** and its FDE, not at sm_ctx_entry itself. Unwinders look a return address up at
** address - 1; a backtrace taken inside the first switch to a new stack (after the stack
** change, before ret) would otherwise land outside this FDE and this symbol, in the padding
** after sm_ctx_switch. The label has no type or size, so debuggers and profilers still
** name the code sm_ctx_entry.
*/
        .globl  sm_ctx_entry
        .hidden sm_ctx_entry
        .type   sm_ctx_entry, @function
        .p2align 4
sm_ctx_entry:
        .cfi_startproc
        .cfi_undefined rip
        nop
        .globl  sm_ctx_entry_resume
        .hidden sm_ctx_entry_resume
sm_ctx_entry_resume:
        xorl    %ebp, %ebp
        movq    %r13, %rdi
        callq   *%r12
        ud2                             /* fn must not return */
        .cfi_endproc
        .size   sm_ctx_entry, .-sm_ctx_entry

        .section .note.GNU-stack,"",@progbits
