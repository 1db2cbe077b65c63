// The hooked APIs as an enum, generated from shim/hooks/hooks.def, for counters and report names.
#pragma once
#include <cstdint>

namespace gg {

enum class Api : uint8_t {
    kNone = 0,
#define DRIVER_HOOK(symbol, family, since, pts) symbol,
#define RUNTIME_HOOK(symbol) symbol,
#define NVML_HOOK(symbol) symbol,
#define CUDNN_HOOK(symbol) symbol,
#include "shim/hooks/hooks.def"
    kCount
};

const char *api_name(Api api);

}  // namespace gg
