// Fuzz target: the size and limit parsers (common/size_spec.*), which read GPUGUARD_MEM_LIMIT,
// HAMi-core's CUDA_DEVICE_MEMORY_LIMIT*, GPUGUARD_CUDNN_WORKSPACE_LIMIT, GPUGUARD_STACK_MIN_BYTES
// and `gpuguard run --limit`. Beyond "no crash, no undefined behaviour", it checks the promises the
// header makes: a refusal always says why, an accepted limit is usable as it stands (a positive byte
// count or a percentage in (0, 100]), and a parsed spec resolves for any device.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/units/human.h"
#include "common/units/size_spec.h"
#include "fuzz_require.h"

namespace {

void check_limit(const gg::Limit &l) {
    FUZZ_REQUIRE(l.kind == gg::Limit::kBytes || l.kind == gg::Limit::kPercent);
    if (l.kind == gg::Limit::kBytes) FUZZ_REQUIRE(l.bytes > 0);
    if (l.kind == gg::Limit::kPercent) FUZZ_REQUIRE(l.percent > 0 && l.percent <= 100);
    // A percentage resolves to at most the device's memory, whatever its size.
    for (uint64_t total : {uint64_t(0), uint64_t(1), uint64_t(80) << 30, UINT64_MAX}) {
        uint64_t r = l.resolve(total);
        if (l.kind == gg::Limit::kPercent) FUZZ_REQUIRE(r <= total);
    }
    FUZZ_REQUIRE(!l.str().empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::string text(reinterpret_cast<const char *>(data), size);
    std::string why;

    uint64_t bytes = 0;
    if (gg::parse_size(text, &bytes, &why)) {
        FUZZ_REQUIRE(!gg::human_bytes(bytes).empty());
    } else {
        FUZZ_REQUIRE(!why.empty());
    }

    why.clear();
    gg::Limit limit;
    if (gg::parse_limit(text, &limit, &why)) check_limit(limit);
    else FUZZ_REQUIRE(!why.empty() && limit.kind == gg::Limit::kNone);

    why.clear();
    gg::LimitSpec spec;
    if (gg::parse_limit_spec(text, &spec, &why)) {
        FUZZ_REQUIRE(!spec.empty());
        if (spec.all.kind != gg::Limit::kNone) check_limit(spec.all);
        for (const auto &e : spec.per_device) {
            FUZZ_REQUIRE(!e.key.empty());
            check_limit(e.limit);
        }
        for (int ordinal : {0, 1, 7, 63}) {
            gg::Limit l = spec.for_device(ordinal, "GPU-5e1d2c3b-0000-1111-2222-333344445555");
            if (l.kind != gg::Limit::kNone) check_limit(l);
            l = spec.for_device(ordinal, "");
            if (l.kind != gg::Limit::kNone) check_limit(l);
        }
    } else {
        FUZZ_REQUIRE(!why.empty() && spec.empty());
    }
    return 0;
}
