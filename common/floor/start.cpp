// The OWN_EXE row of common/floor/glibc.def, for executables: __libc_start_main. Since glibc 2.34 the
// startup code linked into every program (Scrt1.o) passes no init function and leaves the program's
// constructors to libc, under a new version of __libc_start_main. The old version (still in every
// glibc) runs only the init function it is given, so a program bound to it without one would start
// with no constructor run. This passes what the startup code of older glibc passed: a function that
// runs the program's _init and its .init_array, as __libc_csu_init did (the .preinit_array is the
// loader's, in every version).
typedef int (*MainFn)(int, char **, char **);
typedef void (*InitFn)(int, char **, char **);

extern "C" {
extern InitFn __init_array_start[] __attribute__((visibility("hidden")));
extern InitFn __init_array_end[] __attribute__((visibility("hidden")));
void _init(void);
int gg_glibc___libc_start_main(MainFn, int, char **, InitFn, void (*)(void), void (*)(void), void *);
}
__asm__(".symver gg_glibc___libc_start_main, __libc_start_main@GLIBC_2.2.5");

namespace {

void run_constructors(int argc, char **argv, char **envp) {
    _init();
    for (InitFn *f = __init_array_start; f < __init_array_end; ++f) (*f)(argc, argv, envp);
}

}  // namespace

extern "C" __attribute__((visibility("hidden"))) int __wrap___libc_start_main(MainFn main, int argc, char **argv,
                                                                              InitFn init, void (*fini)(void),
                                                                              void (*rtld_fini)(void),
                                                                              void *stack_end) {
    return gg_glibc___libc_start_main(main, argc, argv, init ? init : run_constructors, fini, rtld_fini, stack_end);
}
