// The advice on a KV cache (tools/report/analysis/advice.cpp) on reports made up here: its share of
// what is held, what shrinks it, and at what share of batch × tokens the run would have fit, worked
// out by hand below from the report's numbers, or said plainly that the report cannot tell.
#include <doctest/doctest.h>

#include "report_frames.h"
#include "tools/report/analysis.h"

using namespace gg::report;
using gg::testing::py;

namespace {

constexpr uint64_t MiB = 1ull << 20;

const Frame kCacheUpdate = py("/venv/site-packages/transformers/cache_utils.py", "DynamicLayer.update", 120);

// A generate() that PyTorch's allocator reports: a KV cache of `cache`, weights of `weights`, the
// request of `request` made by the cache (or by the weights' stack), all under a per-process limit.
Report generate_report(uint64_t limit, uint64_t cache, uint64_t weights, uint64_t request, bool cache_asked = true) {
    Report r;
    r.reason = "quota";
    r.limit_bytes = limit;
    r.limit_scope = "process";
    r.stacks["k"] = {"k", {kCacheUpdate, py("/venv/site-packages/transformers/generation/utils.py", "generate", 2300)}};
    r.stacks["w"] = {"w", {py("/venv/site-packages/torch/nn/modules/module.py", "_apply", 900)}};
    TensorView t;
    t.source = "c10";
    t.by_stack = {{"k", cache, 64}, {"w", weights, 200}};
    t.oom = TensorOom{request, cache + weights, cache + weights, 0, std::nullopt};
    r.tensor = t;
    r.process_bytes = cache + weights;
    r.container_bytes = r.process_bytes;
    r.failed = FailedRequest{"cudaMalloc", "cuMemAlloc_v2", cache_asked ? "k" : "w", request, 0, std::nullopt, 2};
    return r;
}

const Advice *find_advice(const Analysis &a, const std::string &id) {
    for (const Advice &x : a.advice)
        if (x.id == id) return &x;
    return nullptr;
}

bool has(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("kv cache advice: its share, what shrinks it, and the share of batch × tokens that fits") {
    // 2048 MiB may be used; beside the cache the weights hold 448 MiB, so 1600 MiB is left for the
    // cache, which needed 1600 + 400 = 2000 MiB with the failed request: 1600 / 2000 = 80%.
    Analysis a = analyze(generate_report(2048 * MiB, 1600 * MiB, 448 * MiB, 400 * MiB));
    const Advice *kv = find_advice(a, "kv-cache");
    REQUIRE(kv);
    CHECK(kv->title ==
          "The KV cache at DynamicLayer.update (transformers/cache_utils.py:120) holds 1.56 GiB (78% of the tensors)");
    CHECK(has(kv->detail, "batch size × (prompt length + max_new_tokens)"));
    CHECK(has(kv->detail, "cache_implementation=\"quantized\""));
    CHECK(has(kv->detail, "QuantizedCache"));
    CHECK(has(kv->detail, "cache_implementation=\"static\""));
    CHECK(has(kv->detail,
              "The run fits with at most 1.56 GiB of cache beside the other 448.00 MiB held, in the "
              "2.00 GiB this process may use: 80% of the 1.95 GiB the cache needed with the failed "
              "request, so batch × tokens within 80% of what they were when it failed (half the batch "
              "at the same length, say)."));
}

TEST_CASE("kv cache advice: the share that fits is rounded down, from the driver's allocations and free memory") {
    // No tensor view, no limit: the device had 100 MiB free beside the 900 MiB this process held, so
    // it may use 1000 MiB. The rest is 300 MiB, leaving 700 MiB for a cache that needed 600 + 300 MiB:
    // 700 / 900 = 77.8%, which must read 77% (a cache of 78% would not fit).
    Report r;
    r.reason = "driver_oom";
    r.stacks["k"] = {"k", {kCacheUpdate}};
    r.stacks["o"] = {"o", {py("/work/serve.py", "load_tables", 40)}};
    r.by_stack = {{"k", 600 * MiB, 30}, {"o", 300 * MiB, 1}};
    r.process_bytes = 900 * MiB;
    r.device_free = 100 * MiB;
    r.failed = FailedRequest{"cuMemAlloc_v2", "", "k", 300 * MiB, 0, std::nullopt, 2};
    Analysis a = analyze(r);
    const Advice *kv = find_advice(a, "kv-cache");
    REQUIRE(kv);
    CHECK(has(kv->title, "holds 600.00 MiB (67% of live memory)"));
    CHECK(has(kv->detail,
              "The run fits with at most 700.00 MiB of cache beside the other 300.00 MiB held, in the "
              "1000.00 MiB this process may use: 77% of the 900.00 MiB the cache needed"));
}

TEST_CASE("kv cache advice: without the limit that refused it or the device's free memory it says it cannot tell") {
    // Out of device memory with no free memory known: the gpuguard limit, not what refused the
    // request, is no measure.
    Report r = generate_report(2048 * MiB, 1600 * MiB, 448 * MiB, 400 * MiB);
    r.reason = "driver_oom";
    r.device_free.reset();
    // PyTorch's own limit (set_per_process_memory_fraction), which the report does not hold.
    Report allocator = generate_report(2048 * MiB, 1600 * MiB, 448 * MiB, 400 * MiB);
    allocator.reason = "allocator_oom";
    allocator.failed.reset();
    for (const Report &each : {r, allocator}) {
        Analysis a = analyze(each);
        REQUIRE(a.failure);
        const Advice *kv = find_advice(a, "kv-cache");
        REQUIRE(kv);
        CHECK(has(kv->detail,
                  "The report holds neither the limit that refused the request nor the device's free "
                  "memory, so it cannot say at what size the cache would fit."));
        CHECK_FALSE(has(kv->detail, "The run fits"));
    }
}

TEST_CASE("kv cache advice: a report that is not of a failure has no size to fit") {
    Report r = generate_report(2048 * MiB, 1600 * MiB, 448 * MiB, 400 * MiB);
    r.reason = "exit";
    r.failed.reset();
    r.tensor->oom.reset();
    Analysis a = analyze(r);
    const Advice *kv = find_advice(a, "kv-cache");
    REQUIRE(kv);
    CHECK(has(kv->detail, "No allocation failed in this report, so there is no size the cache had to fit under."));
}

TEST_CASE("kv cache advice: when the rest alone is over what the process may use, a smaller cache is not enough") {
    // The weights' stack asked: 1800 MiB of weights + 400 MiB asked = 2200 MiB > 2048 MiB.
    Analysis a = analyze(generate_report(2048 * MiB, 240 * MiB, 1800 * MiB, 400 * MiB, false));
    const Advice *kv = find_advice(a, "kv-cache");
    REQUIRE(kv);
    CHECK(has(kv->detail,
              "Even with no KV cache the rest (2.15 GiB) would not fit in the 2.00 GiB this process "
              "may use: a smaller cache alone does not make this run fit."));
}

TEST_CASE("kv cache advice: named beside a larger inference phase, and not for a cache under a tenth") {
    Report r = generate_report(4096 * MiB, 500 * MiB, 0, 100 * MiB);
    r.stacks["f"] = {"f", {py("/venv/site-packages/torch/nn/modules/linear.py", "Linear.forward", 125)}};
    r.tensor->by_stack = {{"f", 1500 * MiB, 10}, {"k", 500 * MiB, 64}};
    Analysis a = analyze(r);
    CHECK(find_advice(a, "inference"));
    REQUIRE(find_advice(a, "kv-cache"));
    CHECK(has(find_advice(a, "kv-cache")->title, "holds 500.00 MiB (25% of the tensors)"));

    r.tensor->by_stack = {{"f", 1500 * MiB, 10}, {"k", 100 * MiB, 64}};
    CHECK_FALSE(find_advice(analyze(r), "kv-cache"));
}
