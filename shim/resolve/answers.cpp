#include "shim/resolve/answers.h"

#include <cstring>

#include "common/base/log.h"

// On the dlsym interposer's path, which the sanitizer runtimes reach while they initialise
// (shim/resolve/real.cpp says why it must not be instrumented).
#define GG_DLSYM_PATH __attribute__((no_sanitize("address", "thread", "undefined")))

namespace gg {

GG_DLSYM_PATH bool is_hooked_name(const HookTable &t, const char *symbol) {
    if (symbol[0] != 'c' && symbol[0] != 'n') return false;  // the common case, decided at once
    for (size_t i = 0; i < t.other_count; i++)
        if (!strcmp(t.other[i].symbol, symbol)) return true;
    for (size_t i = 0; i < t.driver_count; i++)
        if (!strcmp(t.driver[i].symbol, symbol)) return true;
    return false;
}

void *dlsym_answer(const HookTable &t, const char *symbol, void *answer) {
    if (!symbol || !answer) return answer;
    for (size_t i = 0; i < t.driver_count; i++) {
        const DriverRow &row = t.driver[i];
        if (!strcmp(row.symbol, symbol)) return answer == row.real(row) ? row.hook : answer;
    }
    for (size_t i = 0; i < t.other_count; i++) {
        const OtherRow &row = t.other[i];
        if (!strcmp(row.symbol, symbol)) return answer == row.find_real(symbol) ? row.hook : answer;
    }
    return answer;
}

void *procaddress_answer(const HookTable &t, const char *symbol, int cuda_version, cuuint64_t flags, void *answer) {
    if (!symbol || !answer) return answer;
    // First by identity: the driver's answer is the very function we resolved for one of our rows,
    // whatever name it was asked under (the driver answers "cuGraphInstantiate" with
    // cuGraphInstantiateWithFlags, a family of its own in our table).
    bool want_pts = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    bool family_has_pts = false;
    for (size_t i = 0; i < t.driver_count; i++) {
        const DriverRow &row = t.driver[i];
        if (answer == row.real(row)) return row.hook;
        if (strcmp(row.family, symbol) == 0) family_has_pts |= row.per_thread_stream;
    }
    // Else by the driver's own rule (a driver may hand out internal aliases): the newest variant
    // whose version the caller asked for, per-thread-stream when the flags say so and one exists.
    const DriverRow *fallback = nullptr;
    for (size_t i = 0; i < t.driver_count; i++) {
        const DriverRow &row = t.driver[i];
        if (strcmp(row.family, symbol) != 0 || row.since > cuda_version) continue;
        if (row.per_thread_stream != (want_pts && family_has_pts)) continue;
        if (!fallback || row.since > fallback->since) fallback = &row;
    }
    if (fallback) {
        // Versions below `since` of families we hook (the 32-bit cuMemAlloc of CUDA 3.1, say) are
        // returned as the driver gave them: no program of this decade asks for them.
        log_debug("cuGetProcAddress(%s, %d, %llu): driver answered an unknown pointer; using %s", symbol, cuda_version,
                  (unsigned long long)flags, fallback->symbol);
        return fallback->hook;
    }
    return answer;
}

}  // namespace gg
