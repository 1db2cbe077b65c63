// Finding the real driver, runtime, NVML and cuDNN functions.
//
// The shim never links these libraries: libcuda is dlopen'ed on first use (GPUGUARD_REAL_LIBCUDA
// or "libcuda.so.1", so LD_LIBRARY_PATH is honoured); cudart and NVML are found where the program
// loaded them, entry by entry on first use (a program may load cudart long after our first hooked
// call). Every table is generated from shim/api/hooks.def and typed with decltype from the
// declarations in shim/api/cuda_api.h, so a wrong signature does not compile. The shim's own calls
// into these libraries always go through these tables, never back through the exported hooks.
#pragma once
#include <atomic>

#include "shim/api/cuda_api.h"

namespace gg {

struct RealDriver {
#define DRIVER_HOOK(symbol, family, since, pts, kind) decltype(&::symbol) symbol = nullptr;
#include "shim/api/hooks.def"
    // Functions the shim calls but does not hook.
    decltype(&::cuCtxGetDevice) cuCtxGetDevice = nullptr;
    decltype(&::cuDeviceGetUuid_v2) cuDeviceGetUuid_v2 = nullptr;
    decltype(&::cuDeviceGetName) cuDeviceGetName = nullptr;
    decltype(&::cuDeviceGet) cuDeviceGet = nullptr;
    decltype(&::cuDeviceGetCount) cuDeviceGetCount = nullptr;
    decltype(&::cuDriverGetVersion) cuDriverGetVersion = nullptr;
    // What the driver takes beside allocations (shim/usage/).
    decltype(&::cuStreamIsCapturing) cuStreamIsCapturing = nullptr;
    decltype(&::cuStreamIsCapturing_ptsz) cuStreamIsCapturing_ptsz = nullptr;
    decltype(&::cuDeviceGetGraphMemAttribute) cuDeviceGetGraphMemAttribute = nullptr;
    decltype(&::cuGraphGetNodes) cuGraphGetNodes = nullptr;
    decltype(&::cuGraphNodeGetType) cuGraphNodeGetType = nullptr;
    decltype(&::cuGraphMemAllocNodeGetParams) cuGraphMemAllocNodeGetParams = nullptr;
    decltype(&::cuMemPoolGetAttribute) cuMemPoolGetAttribute = nullptr;
    decltype(&::cuDeviceGetMemPool) cuDeviceGetMemPool = nullptr;
    decltype(&::cuCtxGetCurrent) cuCtxGetCurrent = nullptr;
    void *handle = nullptr;
};

// Loaded once, on first use; entries the library lacks stay null.
const RealDriver &real_driver();

// How many objects the dynamic loader has added since the process began (glibc's dlpi_adds): a
// lookup that failed is only worth repeating once this has moved.
unsigned long long loader_additions();

// One function of a library found lazily: looked up on first use by `find`, kept once found. While
// it is missing the lookup is repeated only after the loader has added an object (the library may
// be loaded later): a hook called without its library (a test double, a program that defines the
// symbol itself) does not pay a dlsym walk per call. Constant-initialised, so a table of these needs
// no constructor to run before a hook can use it.
template <typename Fn>
class Lazy {
public:
    constexpr explicit Lazy(const char *name) : name_(name) {}
    Fn get(void *(*find)(const char *)) {
        Fn fn = fn_.load(std::memory_order_acquire);
        if (fn) return fn;
        unsigned long long now = loader_additions();
        if (now == missed_at_.load(std::memory_order_relaxed)) return nullptr;
        fn = reinterpret_cast<Fn>(find(name_));
        if (fn) fn_.store(fn, std::memory_order_release);
        else missed_at_.store(now, std::memory_order_relaxed);
        return fn;
    }
    const char *name() const { return name_; }

private:
    const char *name_;
    std::atomic<Fn> fn_{nullptr};
    std::atomic<unsigned long long> missed_at_{0};  // 0: never missed (the loader has added the program)
};

// cudart's functions where the program loaded cudart.
struct RealRuntime {
#define RUNTIME_HOOK(symbol) Lazy<decltype(&::symbol)> symbol{#symbol};
#include "shim/api/hooks.def"
};
extern RealRuntime g_real_runtime;  // constant-initialised (Lazy)
inline RealRuntime &real_runtime() { return g_real_runtime; }

// NVML's functions where the program loaded NVML.
struct RealNvml {
#define NVML_HOOK(symbol) Lazy<decltype(&::symbol)> symbol{#symbol};
#include "shim/api/hooks.def"
    Lazy<decltype(&::nvmlDeviceGetUUID)> nvmlDeviceGetUUID{"nvmlDeviceGetUUID"};
};
extern RealNvml g_real_nvml;
inline RealNvml &real_nvml() { return g_real_nvml; }

// c10's functions where the program loaded libc10.so.
struct RealTorch {
#define TORCH_HOOK(symbol, name) Lazy<decltype(&::symbol)> symbol{#symbol};
#include "shim/api/hooks.def"
};
extern RealTorch g_real_torch;
inline RealTorch &real_torch() { return g_real_torch; }

// The finders the Lazy tables use: the next definition after the shim (RTLD_NEXT), else one in a
// loaded library whose path contains "libcudart" / "libnvidia-ml".
void *real_runtime_fn(const char *symbol);
void *real_nvml_fn(const char *symbol);
void *real_torch_fn(const char *symbol);

// cuDNN's entry point for `symbol` where the program loaded it (shim/cudnn/resolve.h says why not
// RTLD_NEXT alone); the hooks themselves call the sub-library's definition.
void *real_cudnn_fn(const char *symbol);

// The definition of `symbol` in a loaded library whose path contains `library_stem`, also one
// loaded with RTLD_LOCAL; null when none.
void *find_in_loaded(const char *library_stem, const char *symbol);

// The real dlsym (glibc's), for the shim's own lookups.
void *real_dlsym(void *handle, const char *symbol);
void *(*find_real_dlsym_fn())(void *, const char *);

// For unit tests of the core (tests/unit): `d` is the driver from now on, instead of the one
// real_driver() would load. A test driver of null entries makes every driver call "not found".
void install_real_driver_for_test(const RealDriver *d);

}  // namespace gg
