#include "shim/resolve/real.h"

#include <dlfcn.h>
#include <link.h>
#include <atomic>
#include <cstring>

#include "common/base/hot.h"
#include "common/base/log.h"
#include "common/nvidia/driver_check.h"
#include "shim/base/race_once.h"
#include "shim/core/config.h"

// The sanitizer runtimes resolve the functions they intercept with dlsym while they initialise,
// before ASan's shadow memory (or TSan's state) exists; preloaded after them, the shim answers those
// calls, so the code on that path must not be instrumented or it faults on its first memory access
// (any program under `LD_PRELOAD=libasan.so libgpuguard.so` died at start: found by the soak test).
#define GG_DLSYM_PATH __attribute__((no_sanitize("address", "thread", "undefined")))

namespace gg {
namespace {

typedef void *(*DlsymFn)(void *, const char *);

GG_DLSYM_PATH DlsymFn find_real_dlsym() {
    // glibc 2.34 moved dlsym into libc under a new version; older glibc has only GLIBC_2.2.5.
    // dlvsym is not interposed by us, so this finds glibc's dlsym and not our own.
    void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    return reinterpret_cast<DlsymFn>(p);
}

// A library that is not the driver is never used as it: the shim itself (GPUGUARD_REAL_LIBCUDA naming
// libgpuguard.so, or a libcuda.so.1 that is a copy of it) would have each hook call itself until the
// stack ran out, and a library without the driver's functions (libc) would fail every call with
// CUDA_ERROR_NOT_FOUND, silently. Each is one line, and the next candidate is tried.
void *load_checked(const char *path, const char *what) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        log_error("%s%s cannot be loaded (%s)%s", what, path, dlerror(),
                  *what ? "; trying libcuda.so.1" : "; every driver call fails");
        return nullptr;
    }
    std::string problem = nvidia::driver_problem([h](const char *s) { return real_dlsym(h, s); });
    if (problem.empty()) return h;
    log_error("%s%s %s; %s", what, path, problem.c_str(),
              *what ? "trying libcuda.so.1" : "every driver call fails with CUDA_ERROR_NOT_FOUND");
    dlclose(h);
    return nullptr;
}

RealDriver load_driver() {
    RealDriver d;
    const std::string &path = config().real_libcuda;
    if (!path.empty()) d.handle = load_checked(path.c_str(), "GPUGUARD_REAL_LIBCUDA=");
    if (!d.handle) d.handle = load_checked("libcuda.so.1", "");
    if (!d.handle) return d;
#define GG_LOAD(symbol) d.symbol = reinterpret_cast<decltype(d.symbol)>(real_dlsym(d.handle, #symbol));
#define DRIVER_HOOK(symbol, family, since, pts, kind) GG_LOAD(symbol)
#include "shim/api/hooks.def"
    GG_LOAD(cuCtxGetDevice)
    GG_LOAD(cuDeviceGetUuid_v2)
    GG_LOAD(cuDeviceGetName)
    GG_LOAD(cuDeviceGet)
    GG_LOAD(cuDeviceGetCount)
    GG_LOAD(cuDriverGetVersion)
    GG_LOAD(cuStreamIsCapturing)
    GG_LOAD(cuStreamIsCapturing_ptsz)
    GG_LOAD(cuDeviceGetGraphMemAttribute)
    GG_LOAD(cuGraphGetNodes)
    GG_LOAD(cuGraphNodeGetType)
    GG_LOAD(cuGraphMemAllocNodeGetParams)
    GG_LOAD(cuMemPoolGetAttribute)
    GG_LOAD(cuDeviceGetMemPool)
    GG_LOAD(cuCtxGetCurrent)
#undef GG_LOAD
    if (!d.cuDeviceGetUuid_v2)
        d.cuDeviceGetUuid_v2 =
            reinterpret_cast<decltype(d.cuDeviceGetUuid_v2)>(real_dlsym(d.handle, "cuDeviceGetUuid"));
    return d;
}

std::atomic<const RealDriver *> g_driver{nullptr};

}  // namespace

// Constant-initialised tables (shim/resolve/real.h, Lazy): usable by a hook before any constructor.
RealRuntime g_real_runtime;
RealNvml g_real_nvml;
RealTorch g_real_torch;

GG_DLSYM_PATH void *(*find_real_dlsym_fn())(void *, const char *) { return find_real_dlsym(); }

// Neither is a C++ static: both take the loader's lock while they are found (shim/base/race_once.h).
void *real_dlsym(void *handle, const char *symbol) {
    static std::atomic<DlsymFn> fn{nullptr};
    DlsymFn f = fn.load(std::memory_order_acquire);
    if (!f) fn.store(f = find_real_dlsym(), std::memory_order_release);
    return f ? f(handle, symbol) : nullptr;
}

GG_HOT const RealDriver &real_driver() { return race_once(g_driver, load_driver); }

void install_real_driver_for_test(const RealDriver *d) { g_driver.store(d, std::memory_order_release); }

unsigned long long loader_additions() {
    unsigned long long adds = 0;
    dl_iterate_phdr(
        [](struct dl_phdr_info *info, size_t, void *data) -> int {
            *static_cast<unsigned long long *>(data) = info->dlpi_adds;
            return 1;  // every object carries the same counter: the first is enough
        },
        &adds);
    return adds;
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

void *real_torch_fn(const char *symbol) {
    // Python loads torch's libraries RTLD_LOCAL, out of RTLD_NEXT's sight in some builds.
    void *p = real_dlsym(RTLD_NEXT, symbol);
    return p ? p : find_in_loaded("libc10.so", symbol);
}

void *real_nvml_fn(const char *symbol) {
    void *p = real_dlsym(RTLD_NEXT, symbol);
    return p ? p : find_in_loaded("libnvidia-ml", symbol);
}

}  // namespace gg
