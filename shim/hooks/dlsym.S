/* Our dlsym: asks gg_dlsym_answer (shim/hooks/dlsym.cpp) whether the symbol is one we stand in front of; if
 * not, it JUMPS to glibc's dlsym with the caller's arguments and return address intact. glibc reads
 * the return address to decide what RTLD_NEXT means, so a plain C wrapper would make every
 * dlsym(RTLD_NEXT, ...) in the program mean "next after gpuguard" (a known bug of peer shims that
 * broke OpenMP's tool loading). */
#if defined(__x86_64__)
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    push %rdi
    .cfi_adjust_cfa_offset 8
    push %rsi
    .cfi_adjust_cfa_offset 8
    sub $8, %rsp                 /* 16-byte alignment for the call */
    .cfi_adjust_cfa_offset 8
    call gg_dlsym_answer
    add $8, %rsp
    .cfi_adjust_cfa_offset -8
    pop %rsi
    .cfi_adjust_cfa_offset -8
    pop %rdi
    .cfi_adjust_cfa_offset -8
    test %rax, %rax
    jz 1f
    ret
1:
    jmp *gg_glibc_dlsym(%rip)
    .cfi_endproc
    .size dlsym, .-dlsym
#elif defined(__aarch64__)
    .text
    .globl dlsym
    .type dlsym, %function
dlsym:
    .cfi_startproc
    stp x29, x30, [sp, #-32]!
    .cfi_def_cfa_offset 32
    .cfi_offset 29, -32
    .cfi_offset 30, -24
    mov x29, sp
    stp x0, x1, [sp, #16]
    bl gg_dlsym_answer
    mov x2, x0
    ldp x0, x1, [sp, #16]
    ldp x29, x30, [sp], #32
    .cfi_def_cfa_offset 0
    cbz x2, 1f
    mov x0, x2
    ret
1:
    adrp x16, gg_glibc_dlsym
    ldr x16, [x16, :lo12:gg_glibc_dlsym]
    br x16
    .cfi_endproc
    .size dlsym, .-dlsym
#else
#error "shim/hooks/dlsym.S: add the stub for this architecture"
#endif
    .section .note.GNU-stack,"",%progbits
