#include "shim/resolve/resolve.h"

#include <atomic>
#include <cstring>
#include <dlfcn.h>
#include <link.h>
#include <mutex>

#include "shim/hooks/api.h"
#include "shim/core/config.h"
#include "common/base/hot.h"
#include "common/base/log.h"
#include "shim/base/race_once.h"


// The sanitizer runtimes resolve the functions they intercept with dlsym while they initialise,
// before ASan's shadow memory (or TSan's state) exists; preloaded after them, the shim answers those
// calls, so the code on that path must not be instrumented or it faults on its first memory access
// (any program under `LD_PRELOAD=libasan.so libgpuguard.so` died at start: found by the soak test).
#define GG_DLSYM_PATH __attribute__((no_sanitize("address", "thread", "undefined")))

namespace gg {

const char *api_name(Api api) {
    static const char *const names[] = {
        "none",
#define DRIVER_HOOK(symbol, family, since, pts) #symbol,
#define RUNTIME_HOOK(symbol) #symbol,
#define NVML_HOOK(symbol) #symbol,
#define CUDNN_HOOK(symbol) #symbol,
#include "shim/hooks/hooks.def"
    };
    unsigned i = (unsigned)api;
    return i < sizeof(names) / sizeof(names[0]) ? names[i] : "unknown";
}

namespace {

typedef void *(*DlsymFn)(void *, const char *);

GG_DLSYM_PATH DlsymFn find_real_dlsym() {
    // glibc 2.34 moved dlsym into libc under a new version; older glibc has only GLIBC_2.2.5.
    // dlvsym is not interposed by us, so this finds glibc's dlsym and not our own.
    void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return reinterpret_cast<DlsymFn>(p);
}

RealDriver load_driver() {
    RealDriver d;
    const std::string &path = config().real_libcuda;
    if (!path.empty()) {
        d.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!d.handle) log_error("GPUGUARD_REAL_LIBCUDA=%s cannot be loaded (%s); trying libcuda.so.1", path.c_str(), dlerror());
    }
    if (!d.handle) d.handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d.handle) {
        log_error("cannot load the CUDA driver libcuda.so.1 (%s)", dlerror());
        return d;
    }
#define GG_LOAD(symbol) d.symbol = reinterpret_cast<decltype(d.symbol)>(real_dlsym(d.handle, #symbol));
#define DRIVER_HOOK(symbol, family, since, pts) GG_LOAD(symbol)
#include "shim/hooks/hooks.def"
    GG_LOAD(cuCtxGetDevice)
    GG_LOAD(cuDeviceGetUuid_v2)
    GG_LOAD(cuDeviceGetName)
    GG_LOAD(cuDeviceGet)
    GG_LOAD(cuDeviceGetCount)
    GG_LOAD(cuDriverGetVersion)
#undef GG_LOAD
    if (!d.cuDeviceGetUuid_v2) d.cuDeviceGetUuid_v2 = reinterpret_cast<decltype(d.cuDeviceGetUuid_v2)>(real_dlsym(d.handle, "cuDeviceGetUuid"));
    return d;
}

// One row per driver hook: what cuGetProcAddress and dlsym need to know.
struct DriverRow {
    const char *symbol;
    const char *family;
    int since;
    bool per_thread_stream;
    void *hook;
    size_t real_offset;  // where the real pointer sits in RealDriver
};

const DriverRow kDriverRows[] = {
#define DRIVER_HOOK(symbol, family, since, pts) \
    {#symbol, #family, since, pts != 0, reinterpret_cast<void *>(&::symbol), offsetof(RealDriver, symbol)},
#include "shim/hooks/hooks.def"
};

void *real_of(const DriverRow &row) {
    return *reinterpret_cast<void *const *>(reinterpret_cast<const char *>(&real_driver()) + row.real_offset);
}

// Runtime, NVML and cuDNN hooks: the real function is the next definition after ours (for cuDNN, the
// entry point of the loaded libcudnn.so, which our dlsym replaces; see shim/cudnn/resolve.h).
struct HookRow {
    const char *symbol;
    void *hook;
    void *(*find_real)(const char *);
};

const HookRow kOtherRows[] = {
#define RUNTIME_HOOK(symbol) {#symbol, reinterpret_cast<void *>(&::symbol), real_runtime_fn},
#define NVML_HOOK(symbol) {#symbol, reinterpret_cast<void *>(&::symbol), real_nvml_fn},
#define CUDNN_HOOK(symbol) {#symbol, reinterpret_cast<void *>(&::symbol), real_cudnn_fn},
#include "shim/hooks/hooks.def"
    {nullptr, nullptr, nullptr},
};

}  // namespace

GG_DLSYM_PATH void *(*find_real_dlsym_fn())(void *, const char *) { return find_real_dlsym(); }

// Neither is a C++ static: both take the loader's lock while they are found (shim/base/race_once.h).
void *real_dlsym(void *handle, const char *symbol) {
    static std::atomic<DlsymFn> fn{nullptr};
    DlsymFn f = fn.load(std::memory_order_acquire);
    if (!f) fn.store(f = find_real_dlsym(), std::memory_order_release);
    return f ? f(handle, symbol) : nullptr;
}

GG_HOT const RealDriver &real_driver() {
    static std::atomic<const RealDriver *> d{nullptr};
    return race_once(d, load_driver);
}

void *find_in_loaded(const char *library_stem, const char *symbol) {
    // A library loaded with RTLD_LOCAL (a Python extension's own cudart, say) is invisible to
    // RTLD_NEXT, yet its users' calls land in our exported hooks: look among the loaded objects.
    struct Search {
        const char *stem, *symbol;
        void *found;
    } search{library_stem, symbol, nullptr};
    dl_iterate_phdr(
        [](struct dl_phdr_info *info, size_t, void *data) -> int {
            Search *s = static_cast<Search *>(data);
            const char *name = info->dlpi_name;
            if (!name || !*name || !strstr(name, s->stem)) return 0;
            void *h = dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
            if (!h) return 0;
            s->found = real_dlsym(h, s->symbol);
            dlclose(h);
            return s->found ? 1 : 0;
        },
        &search);
    return search.found;
}

void *real_runtime_fn(const char *symbol) {
    // RTLD_NEXT from the shim: the next definition after ours in the program's lookup order, which
    // is the cudart the program loaded, whatever its version or path.
    void *p = real_dlsym(RTLD_NEXT, symbol);
    return p ? p : find_in_loaded("libcudart", symbol);
}

// real_cudnn_fn lives in shim/cudnn/resolve.cpp: cuDNN's dispatcher needs more than RTLD_NEXT.

void *real_nvml_fn(const char *symbol) {
    void *p = real_dlsym(RTLD_NEXT, symbol);
    if (p) return p;
    return find_in_loaded("libnvidia-ml", symbol);
}

GG_DLSYM_PATH bool is_hooked_name(const char *symbol) {
    if (symbol[0] != 'c' && symbol[0] != 'n') return false;  // the common case, decided at once
    for (const HookRow &row : kOtherRows)
        if (row.symbol && !strcmp(row.symbol, symbol)) return true;
    for (const DriverRow &row : kDriverRows)
        if (!strcmp(row.symbol, symbol)) return true;
    return false;
}

void *dlsym_answer(const char *symbol, void *answer) {
    if (!symbol || !answer) return answer;
    for (const DriverRow &row : kDriverRows)
        if (!strcmp(row.symbol, symbol)) return answer == real_of(row) ? row.hook : answer;
    for (const HookRow &row : kOtherRows)
        if (row.symbol && !strcmp(row.symbol, symbol)) return answer == row.find_real(symbol) ? row.hook : answer;
    return answer;
}

void *procaddress_answer(const char *symbol, int cuda_version, cuuint64_t flags, void *answer) {
    if (!symbol || !answer) return answer;
    // First by identity: the driver's answer is the very function we resolved for one of our rows.
    const DriverRow *fallback = nullptr;
    bool want_pts = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    bool family_has_pts = false;
    for (const DriverRow &row : kDriverRows) {
        if (strcmp(row.family, symbol) != 0) continue;
        if (answer == real_of(row)) return row.hook;
        family_has_pts |= row.per_thread_stream;
    }
    // Else by the driver's own rule (a driver may hand out internal aliases): the newest variant
    // whose version the caller asked for, per-thread-stream when the flags say so and one exists.
    for (const DriverRow &row : kDriverRows) {
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

// Called by the dlsym stub (shim/hooks/dlsym.S) before it jumps to glibc's dlsym: returns our answer,
// or null to let glibc answer the caller itself. Jumping (not calling) keeps the caller's return
// address, so RTLD_NEXT keeps meaning "next after the caller", not "next after gpuguard": a peer's
// dlsym interposer that changed it broke OpenMP's tool loading.
extern "C" {
__attribute__((visibility("hidden"))) void *gg_glibc_dlsym = nullptr;
}

extern "C" __attribute__((visibility("hidden"))) GG_DLSYM_PATH void *gg_dlsym_answer(void *handle, const char *symbol) {
    // Found on the first call (not a C++ static, whose guard would be held across dlvsym and the
    // loader's lock: shim/base/race_once.h); every caller finds the same function.
    if (!__atomic_load_n(&gg_glibc_dlsym, __ATOMIC_ACQUIRE))
        __atomic_store_n(&gg_glibc_dlsym, reinterpret_cast<void *>(gg::find_real_dlsym_fn()), __ATOMIC_RELEASE);
    if (!symbol || !gg::is_hooked_name(symbol)) return nullptr;
    // Only for the few names we hook do we look the symbol up ourselves, then put our hook in place
    // of the real function; anything else glibc answers.
    void *answer = gg::real_dlsym(handle, symbol);
    void *ours = gg::dlsym_answer(symbol, answer);
    return ours != answer ? ours : nullptr;
}
