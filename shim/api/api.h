// The hooked APIs as an enum, generated from shim/api/hooks.def, for counters and report names.
#pragma once
#include <cstdint>

namespace gg {

enum class Api : uint8_t {
    kNone = 0,
#define DRIVER_HOOK(symbol, family, since, pts) symbol,
#define RUNTIME_HOOK(symbol) symbol,
#define NVML_HOOK(symbol) symbol,
#define CUDNN_HOOK(symbol) symbol,
#define TORCH_HOOK(symbol, name) symbol,
#include "shim/api/hooks.def"
    kCount
};

// The API's name as the program calls it ("cuMemAlloc_v2", "cudaMalloc"), for reports.
inline const char *api_name(Api api) {
    static constexpr const char *kNames[] = {
        "none",
#define DRIVER_HOOK(symbol, family, since, pts) #symbol,
#define RUNTIME_HOOK(symbol) #symbol,
#define NVML_HOOK(symbol) #symbol,
#define CUDNN_HOOK(symbol) #symbol,
#define TORCH_HOOK(symbol, name) #name,
#include "shim/api/hooks.def"
    };
    unsigned i = (unsigned)api;
    return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

}  // namespace gg
