/*
** Context switch for x86-64 System V.
**
** Saved exactly: the callee-saved registers rbx, rbp, r12-r15, the stack pointer (in ctx->sp),
** the MXCSR control/status register and the x87 control word (psABI 3.2.1: both are
** "callee-saved" control state). The return address is the one pushed by the call to
** smarm_ctx_switch. The direction flag is clear on both sides by the ABI.
**
** Frame left on a suspended stack, from ctx->sp upwards (64 bytes):
**   +0  MXCSR (4 bytes)  +4  x87 CW (2 bytes, 2 unused)
**   +8  r15  +16 r14  +24 r13  +32 r12  +40 rbx  +48 rbp  +56 return address
**
** Loading MXCSR and the x87 control word is slow (tens of cycles) and they almost never differ
** between actors, so they are stored always but loaded only when they differ from the current
** values. ret (not jmp) is right here: every actor leaves and resumes through the same call site
** in the scheduler, so the return-stack predictor is right except for a new actor's first entry.
*/
        .text
        .globl  smarm_ctx_switch
        .type   smarm_ctx_switch, @function
        .p2align 4
smarm_ctx_switch:                       /* rdi = from ctx, rsi = to ctx */
        .cfi_startproc
        pushq   %rbp
        .cfi_adjust_cfa_offset 8
        pushq   %rbx
        .cfi_adjust_cfa_offset 8
        pushq   %r12
        .cfi_adjust_cfa_offset 8
        pushq   %r13
        .cfi_adjust_cfa_offset 8
        pushq   %r14
        .cfi_adjust_cfa_offset 8
        pushq   %r15
        .cfi_adjust_cfa_offset 8
        subq    $8, %rsp
        .cfi_adjust_cfa_offset 8
        stmxcsr (%rsp)
        fnstcw  4(%rsp)
        movl    (%rsp), %eax            /* current MXCSR */
        movzwl  4(%rsp), %ecx           /* current x87 CW */
        movq    %rsp, (%rdi)            /* from->sp */
        movq    (%rsi), %rsp            /* to->sp: now on the other stack */
        cmpl    (%rsp), %eax
        je      1f
        ldmxcsr (%rsp)
1:      cmpw    4(%rsp), %cx
        je      2f
        fldcw   4(%rsp)
2:      addq    $8, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        ret
        .cfi_endproc
        .size   smarm_ctx_switch, .-smarm_ctx_switch

/*
** First code run on a new stack: ctx_make left fn in r12, arg in r13 and rbp = 0. The return
** address is marked undefined so debuggers, perf and unwinders stop here, at the stack's base;
** rbp = 0 ends frame-pointer walks at the same place.
*/
        .globl  smarm_ctx_entry
        .type   smarm_ctx_entry, @function
        .p2align 4
smarm_ctx_entry:
        .cfi_startproc
        .cfi_undefined rip
        xorl    %ebp, %ebp
        movq    %r13, %rdi
        callq   *%r12
        ud2                             /* fn must not return */
        .cfi_endproc
        .size   smarm_ctx_entry, .-smarm_ctx_entry

        .section .note.GNU-stack,"",@progbits
