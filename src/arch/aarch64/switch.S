/*
** Context switch for AArch64 (AAPCS64).
**
** Saved exactly: x19-x28, the frame pointer x29, the link register x30 (the resume address),
** sp (in ctx->sp) and the low 64 bits of v8-v15 (d8-d15), which AAPCS64 makes callee-saved.
** x18 (the platform register) is left alone. FPCR is not saved: AAPCS64 lets a callee change
** only with a documented contract, and nothing in smarm changes it per actor.
**
** Frame left on a suspended stack, from ctx->sp upwards (160 bytes):
**   +0 x19 x20  +16 x21 x22  +32 x23 x24  +48 x25 x26  +64 x27 x28  +80 x29 x30
**   +96 d8 d9  +112 d10 d11  +128 d12 d13  +144 d14 d15
*/
        .text
        .globl  smarm_ctx_switch
        .type   smarm_ctx_switch, %function
        .p2align 4
smarm_ctx_switch:                       /* x0 = from ctx, x1 = to ctx */
        .cfi_startproc
        sub     sp, sp, #160
        .cfi_adjust_cfa_offset 160
        stp     x19, x20, [sp, #0]
        stp     x21, x22, [sp, #16]
        stp     x23, x24, [sp, #32]
        stp     x25, x26, [sp, #48]
        stp     x27, x28, [sp, #64]
        stp     x29, x30, [sp, #80]
        stp     d8, d9, [sp, #96]
        stp     d10, d11, [sp, #112]
        stp     d12, d13, [sp, #128]
        stp     d14, d15, [sp, #144]
        mov     x9, sp
        str     x9, [x0]                /* from->sp */
        ldr     x9, [x1]                /* to->sp: now on the other stack */
        mov     sp, x9
        ldp     x19, x20, [sp, #0]
        ldp     x21, x22, [sp, #16]
        ldp     x23, x24, [sp, #32]
        ldp     x25, x26, [sp, #48]
        ldp     x27, x28, [sp, #64]
        ldp     x29, x30, [sp, #80]
        ldp     d8, d9, [sp, #96]
        ldp     d10, d11, [sp, #112]
        ldp     d12, d13, [sp, #128]
        ldp     d14, d15, [sp, #144]
        add     sp, sp, #160
        ret
        .cfi_endproc
        .size   smarm_ctx_switch, .-smarm_ctx_switch

/*
** First code run on a new stack: ctx_make left fn in x19, arg in x20 and x29 = 0. The link
** register is marked undefined so unwinders stop here, at the stack's base.
*/
        .globl  smarm_ctx_entry
        .type   smarm_ctx_entry, %function
        .p2align 4
smarm_ctx_entry:
        .cfi_startproc
        .cfi_undefined x30
        mov     x29, #0
        mov     x0, x20
        blr     x19
        brk     #0                      /* fn must not return */
        .cfi_endproc
        .size   smarm_ctx_entry, .-smarm_ctx_entry

        .section .note.GNU-stack,"",%progbits
