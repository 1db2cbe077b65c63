// The C half of our dlsym (the assembly stub is shim/hooks/dlsym.S): called before the stub jumps to
// glibc's dlsym, it returns our answer, or null to let glibc answer the caller itself. Jumping (not
// calling) keeps the caller's return address, so RTLD_NEXT keeps meaning "next after the caller",
// not "next after gpuguard": a peer's dlsym interposer that changed it broke OpenMP's tool loading.
#include "shim/hooks/hook_table.h"
#include "shim/resolve/real.h"

// Not instrumented: the sanitizer runtimes call dlsym while they initialise (shim/resolve/real.cpp).
#define GG_DLSYM_PATH __attribute__((no_sanitize("address", "thread", "undefined")))

extern "C" {
__attribute__((visibility("hidden"))) void *gg_glibc_dlsym = nullptr;
}

extern "C" __attribute__((visibility("hidden"))) GG_DLSYM_PATH void *gg_dlsym_answer(void *handle, const char *symbol) {
    // Found on the first call (not a C++ static, whose guard would be held across dlvsym and the
    // loader's lock: shim/base/race_once.h); every caller finds the same function.
    if (!__atomic_load_n(&gg_glibc_dlsym, __ATOMIC_ACQUIRE))
        __atomic_store_n(&gg_glibc_dlsym, reinterpret_cast<void *>(gg::find_real_dlsym_fn()), __ATOMIC_RELEASE);
    if (!symbol || !gg::is_hooked_name(gg::hook_table(), symbol)) return nullptr;
    // Only for the few names we hook do we look the symbol up ourselves, then put our hook in place
    // of the real function; anything else glibc answers.
    void *answer = gg::real_dlsym(handle, symbol);
    void *ours = gg::dlsym_answer(gg::hook_table(), symbol, answer);
    return ours != answer ? ours : nullptr;
}
