/* The BIND rows of glibc.def: __wrap_NAME jumps to NAME at the row's old version, with the caller's
 * arguments and return address untouched (dlsym and dlopen read the return address to know their
 * caller, and a jump works for any signature). */
#define OWN(name)
#define OWN_EXE(name)
#define BIND(name, version)                  \
    .globl __wrap_##name;                    \
    .hidden __wrap_##name;                   \
    .type __wrap_##name, @function;          \
    __wrap_##name:                           \
    jmp *gg_glibc_##name@GOTPCREL(%rip);     \
    .size __wrap_##name, .-__wrap_##name;    \
    .symver gg_glibc_##name, name@version;

#if defined(__x86_64__)
    .text
#include "common/floor/glibc.def"
#else
#error "common/floor/bind.S: the glibc floor is written for x86-64"
#endif
    .section .note.GNU-stack,"",%progbits
