// The hooked APIs as an enum, generated from shim/api/hooks.def, for counters and report names.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gg {

enum class Api : uint8_t {
    kNone = 0,
#define DRIVER_HOOK(symbol, family, since, pts, kind) symbol,
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
#define DRIVER_HOOK(symbol, family, since, pts, kind) #symbol,
#define RUNTIME_HOOK(symbol) #symbol,
#define NVML_HOOK(symbol) #symbol,
#define CUDNN_HOOK(symbol) #symbol,
#define TORCH_HOOK(symbol, name) #name,
#include "shim/api/hooks.def"
    };
    unsigned i = (unsigned)api;
    return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "unknown";
}

// What memory a hooked call takes (hooks.def's kind column): the rooms that treat kinds apart (the
// pools' reserve, an episode's wording, the tensor view's segments) ask this, so that a hook added to
// hooks.def is one line and no hand list beside it can miss it. Only driver hooks carry a kind: the
// runtime's reach the driver's, and every other one is kNone.
enum class HookKind : uint8_t { kNone, kLinear, kAsync, kPhysical, kArray, kContext, kGraphMemory };

inline constexpr HookKind kHookKinds[] = {
    HookKind::kNone,
#define DRIVER_HOOK(symbol, family, since, pts, kind) HookKind::kind,
#define RUNTIME_HOOK(symbol) HookKind::kNone,
#define NVML_HOOK(symbol) HookKind::kNone,
#define CUDNN_HOOK(symbol) HookKind::kNone,
#define TORCH_HOOK(symbol, name) HookKind::kNone,
#include "shim/api/hooks.def"
};
static_assert(sizeof(kHookKinds) / sizeof(kHookKinds[0]) == (size_t)Api::kCount, "one kind per Api");

constexpr HookKind hook_kind(Api api) {
    return (unsigned)api < (unsigned)Api::kCount ? kHookKinds[(unsigned)api] : HookKind::kNone;
}

}  // namespace gg
