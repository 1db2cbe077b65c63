// hooks.def's kind column against the hooks' names: the rooms that treat kinds apart (the pools'
// reserve, an episode's wording, the tensor view's segments) ask hook_kind(), so a hook given a wrong
// kind, or none, would be mis-charged or mis-reported without a line of theirs changing. The names
// follow the driver's own convention, which this reads independently of the column.
#include <doctest/doctest.h>

#include <string>

#include "shim/api/api.h"
#include "shim/usage/pools.h"

using namespace gg;

namespace {

bool starts_with(const std::string &s, const char *prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string &s, const std::string &suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The kind a driver family's name says, where it says one: cuMemAlloc* is device memory (from a
// stream-ordered pool when it ends in Async), *Array*Create an array, cuCtxCreate and the primary
// context's retain a context.
bool kind_by_name(const std::string &family, HookKind *kind) {
    if (starts_with(family, "cuMemAlloc")) *kind = ends_with(family, "Async") ? HookKind::kAsync : HookKind::kLinear;
    else if (family.find("Array") != std::string::npos && ends_with(family, "Create")) *kind = HookKind::kArray;
    else if (family == "cuCtxCreate" || family == "cuDevicePrimaryCtxRetain") *kind = HookKind::kContext;
    else if (family == "cuMemCreate") *kind = HookKind::kPhysical;
    else return false;
    return true;
}

struct Row {
    Api api;
    const char *symbol, *family;
};
constexpr Row kDriverRows[] = {
#define DRIVER_HOOK(symbol, family, since, pts, kind) {Api::symbol, #symbol, #family},
#include "shim/api/hooks.def"
};

}  // namespace

TEST_CASE("each driver hook's kind is the one its name says: allocations, arrays, contexts") {
    int named = 0;
    for (const Row &row : kDriverRows) {
        HookKind expected;
        if (!kind_by_name(row.family, &expected)) continue;
        named++;
        INFO(row.symbol);
        CHECK(hook_kind(row.api) == expected);
        CHECK(usage::pools::is_async(row.api) == (expected == HookKind::kAsync));
    }
    CHECK(named == 15);  // the rows of hooks.def the names above cover (its allocation APIs and contexts)
}

TEST_CASE("hooks that take no memory of their own have no kind, nor does any runtime, NVML or c10 hook") {
    CHECK(hook_kind(Api::cuMemFree_v2) == HookKind::kNone);
    CHECK(hook_kind(Api::cuMemFreeAsync_ptsz) == HookKind::kNone);
    CHECK(hook_kind(Api::cuMemGetInfo_v2) == HookKind::kNone);
    CHECK(hook_kind(Api::cudaMallocAsync) == HookKind::kNone);  // cudart reaches the driver's hook
    CHECK(hook_kind(Api::nvmlDeviceGetMemoryInfo) == HookKind::kNone);
    CHECK(hook_kind(Api::_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE) == HookKind::kNone);
    CHECK(hook_kind(Api::kNone) == HookKind::kNone);
    CHECK(hook_kind(Api::kCount) == HookKind::kNone);
}
