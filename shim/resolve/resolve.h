// Finding the real driver, runtime, NVML and cuDNN functions, and the answers of our dlsym and
// cuGetProcAddress interposers.
//
// The shim never links these libraries: libcuda is dlopen'ed on first use (GPUGUARD_REAL_LIBCUDA
// or "libcuda.so.1", so LD_LIBRARY_PATH is honoured); cudart and NVML are found where the program
// loaded them. The shim's own calls into the driver always go through these tables, never back
// through the exported hooks.
#pragma once
#include "shim/hooks/cuda_api.h"

namespace gg {

struct RealDriver {
#define DRIVER_HOOK(symbol, family, since, pts) decltype(&::symbol) symbol = nullptr;
#include "shim/hooks/hooks.def"
    // Functions the shim calls but does not hook.
    decltype(&::cuCtxGetDevice) cuCtxGetDevice = nullptr;
    decltype(&::cuDeviceGetUuid_v2) cuDeviceGetUuid_v2 = nullptr;
    decltype(&::cuDeviceGetName) cuDeviceGetName = nullptr;
    decltype(&::cuDeviceGet) cuDeviceGet = nullptr;
    decltype(&::cuDeviceGetCount) cuDeviceGetCount = nullptr;
    decltype(&::cuDriverGetVersion) cuDriverGetVersion = nullptr;
    void *handle = nullptr;
};

struct RealRuntime {
#define RUNTIME_HOOK(symbol) decltype(&::symbol) symbol = nullptr;
#include "shim/hooks/hooks.def"
};

struct RealNvml {
#define NVML_HOOK(symbol) decltype(&::symbol) symbol = nullptr;
#include "shim/hooks/hooks.def"
    decltype(&::nvmlDeviceGetUUID) nvmlDeviceGetUUID = nullptr;
};

// Loaded once, on first use; entries the library lacks stay null.
const RealDriver &real_driver();
// The runtime and NVML are looked up lazily, entry by entry, where the program loaded them: a
// program may load cudart long after our first hooked call.
void *real_runtime_fn(const char *symbol);
void *real_nvml_fn(const char *symbol);

// cuDNN's entry point for `symbol` where the program loaded it (shim/cudnn/resolve.h says why not
// RTLD_NEXT alone); the hooks themselves call the sub-library's definition.
void *real_cudnn_fn(const char *symbol);

// Whether a name is one of our hooks (any library).
bool is_hooked_name(const char *symbol);
void *(*find_real_dlsym_fn())(void *, const char *);

// The definition of `symbol` in a loaded library whose path contains `library_stem`, also one
// loaded with RTLD_LOCAL; null when none.
void *find_in_loaded(const char *library_stem, const char *symbol);

// The real dlsym (glibc's), for the shim's own lookups.
void *real_dlsym(void *handle, const char *symbol);

// Our replacement for a dlsym result: the hook when `answer` is the real function we stand in front
// of, else `answer` unchanged.
void *dlsym_answer(const char *symbol, void *answer);

// Our replacement for a cuGetProcAddress result, honouring cudaVersion and flags (per-thread-stream
// variants): the hook for the variant the driver chose, else `answer` unchanged.
void *procaddress_answer(const char *symbol, int cuda_version, cuuint64_t flags, void *answer);

}  // namespace gg
