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
**
** sp stays 16-byte aligned throughout (AAPCS64 requires SP mod 16 = 0 at all times, and Linux
** has the hardware check it on sp-relative accesses): 160 is a multiple of 16 and sm_ctx_make
** builds frames at aligned addresses.
** The CFI describes every save slot relative to the CFA (sp + 160 while the frame is up), and
** because the frame on the stack being resumed has the same layout, it stays true across the
** `mov sp` that changes stacks: an unwinder stopped anywhere in here sees one coherent stack.
*/

/* Branch Target Identification: when the C code is built with -mbranch-protection=bti|standard,
** mark this object as BTI-ready (else the linker silently drops BTI for the whole program) and
** give the callable entry a landing pad (a call through a PLT or pointer needs one).
** sm_ctx_entry is only reached by `ret`, which BTI does not check. The saved x30 is not
** PAC-signed (the first frame comes from sm_ctx_make in C), so no PAC property is claimed. */
#if defined(__ARM_FEATURE_BTI_DEFAULT) && __ARM_FEATURE_BTI_DEFAULT
#define BTI_C hint 34 /* bti c */
#define SMARM_FEATURE_BTI 1
#else
#define BTI_C
#define SMARM_FEATURE_BTI 0
#endif

        .text
        .globl  sm_ctx_switch
        .hidden sm_ctx_switch
        .type   sm_ctx_switch, %function
        .p2align 4
sm_ctx_switch:                       /* x0 = from ctx, x1 = to ctx */
        .cfi_startproc
        BTI_C
        sub     sp, sp, #160
        .cfi_adjust_cfa_offset 160
        stp     x19, x20, [sp, #0]
        .cfi_rel_offset x19, 0
        .cfi_rel_offset x20, 8
        stp     x21, x22, [sp, #16]
        .cfi_rel_offset x21, 16
        .cfi_rel_offset x22, 24
        stp     x23, x24, [sp, #32]
        .cfi_rel_offset x23, 32
        .cfi_rel_offset x24, 40
        stp     x25, x26, [sp, #48]
        .cfi_rel_offset x25, 48
        .cfi_rel_offset x26, 56
        stp     x27, x28, [sp, #64]
        .cfi_rel_offset x27, 64
        .cfi_rel_offset x28, 72
        stp     x29, x30, [sp, #80]
        .cfi_rel_offset x29, 80
        .cfi_rel_offset x30, 88
        stp     d8, d9, [sp, #96]
        .cfi_rel_offset d8, 96
        .cfi_rel_offset d9, 104
        stp     d10, d11, [sp, #112]
        .cfi_rel_offset d10, 112
        .cfi_rel_offset d11, 120
        stp     d12, d13, [sp, #128]
        .cfi_rel_offset d12, 128
        .cfi_rel_offset d13, 136
        stp     d14, d15, [sp, #144]
        .cfi_rel_offset d14, 144
        .cfi_rel_offset d15, 152
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
        .cfi_adjust_cfa_offset -160
        .cfi_restore x19
        .cfi_restore x20
        .cfi_restore x21
        .cfi_restore x22
        .cfi_restore x23
        .cfi_restore x24
        .cfi_restore x25
        .cfi_restore x26
        .cfi_restore x27
        .cfi_restore x28
        .cfi_restore x29
        .cfi_restore x30
        .cfi_restore d8
        .cfi_restore d9
        .cfi_restore d10
        .cfi_restore d11
        .cfi_restore d12
        .cfi_restore d13
        .cfi_restore d14
        .cfi_restore d15
        ret
        .cfi_endproc
        .size   sm_ctx_switch, .-sm_ctx_switch

/*
** First code run on a new stack: sm_ctx_make left fn in x19, arg in x20 and x29 = 0. The link
** register is marked undefined so unwinders stop here, at the stack's base.
**
** sm_ctx_make's first frame resumes at sm_ctx_entry_resume, one instruction into the function
** and its FDE, not at sm_ctx_entry itself. Unwinders look a return address up at
** address - 1; a backtrace taken inside the first switch to a new stack (after the stack
** change, before ret) would otherwise land outside this FDE and this symbol, in the padding
** after sm_ctx_switch. The label has no type or size, so debuggers and profilers still
** name the code sm_ctx_entry.
*/
        .globl  sm_ctx_entry
        .hidden sm_ctx_entry
        .type   sm_ctx_entry, %function
        .p2align 4
sm_ctx_entry:
        .cfi_startproc
        .cfi_undefined x30
        nop
        .globl  sm_ctx_entry_resume
        .hidden sm_ctx_entry_resume
sm_ctx_entry_resume:
        mov     x29, #0
        mov     x0, x20
        blr     x19
        brk     #0                      /* fn must not return */
        .cfi_endproc
        .size   sm_ctx_entry, .-sm_ctx_entry

        .section .note.GNU-stack,"",%progbits

#if SMARM_FEATURE_BTI
/* GNU property note (ELF gABI, NT_GNU_PROPERTY_TYPE_0): GNU_PROPERTY_AARCH64_FEATURE_1_AND. */
        .pushsection .note.gnu.property, "a"
        .p2align 3
        .long   4                       /* n_namesz */
        .long   16                      /* n_descsz */
        .long   5                       /* n_type: NT_GNU_PROPERTY_TYPE_0 */
        .asciz  "GNU"
        .long   0xc0000000              /* pr_type: GNU_PROPERTY_AARCH64_FEATURE_1_AND */
        .long   4                       /* pr_datasz */
        .long   1                       /* GNU_PROPERTY_AARCH64_FEATURE_1_BTI */
        .long   0                       /* padding to 8 bytes */
        .popsection
#endif
