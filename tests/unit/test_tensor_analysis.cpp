// The command's reading of a tensor view (tools/report/tensor.h, phases.h, analysis.h) on reports made
// up here: the holes and the largest free block, the segments live tensors pin and the tensors that
// pin them, fragmentation told from a limit that is simply too small, and phases told by the frames.
#include <doctest/doctest.h>

#include "report_frames.h"
#include "tools/report/analysis.h"

using namespace gg::report;
using gg::testing::py;

namespace {

constexpr uint64_t MiB = 1ull << 20;

// A quota report of the fragmentation case: 110 segments of 20 MiB, each with every other 4 MiB
// block live (two or three of five), allocated by one line; then a request of `request`.
Report fragmented(uint64_t limit, uint64_t request) {
    Report r;
    r.reason = "quota";
    r.limit_bytes = limit;
    r.limit_scope = "process";
    r.stacks["s1"] = {"s1", {py("/work/frag.py", "frag", 12)}};
    r.stacks["s2"] = {"s2", {py("/work/frag.py", "frag", 12)}};
    TensorView t;
    t.source = "c10";
    uint64_t base = 0x7f0000000000, allocated = 0;
    size_t i = 0;
    for (int s = 0; s < 110; s++) {
        uint64_t seg = base + s * 20 * MiB;
        t.segments.push_back({seg, 20 * MiB, "s2", "cuMemAlloc_v2"});
        for (int b = 0; b < 5; b++, i++)
            if (i % 2 == 0) {
                t.blocks.push_back({seg + b * 4 * MiB, 4 * MiB, "s1", std::nullopt});
                allocated += 4 * MiB;
            }
    }
    t.block_count = t.blocks.size();
    t.by_stack = {{"s1", allocated, t.blocks.size()}};
    t.oom = TensorOom{request, allocated, 110 * 20 * MiB, 0, std::nullopt};
    r.tensor = t;
    r.process_bytes = 110 * 20 * MiB;
    r.container_bytes = r.process_bytes;
    return r;
}

}  // namespace

TEST_CASE("tensor facts: holes, the largest free block and the tensors that pin their segments") {
    Report r = fragmented(2048 * MiB, 600 * MiB);
    TensorFacts f = tensor_facts(r);
    REQUIRE(f.present);
    CHECK(f.at_oom);
    CHECK(f.request == 600 * MiB);
    CHECK(f.reserved == 2200 * MiB);
    CHECK(f.allocated == 275 * 4 * MiB);
    CHECK(f.unallocated == 2200 * MiB - 1100 * MiB);
    CHECK(f.pinned_segments == 110);
    CHECK(f.largest_free == 4 * MiB);  // never two free neighbours: live, free, live, free, live
    CHECK(f.releasable == 0);
    REQUIRE(f.pins.size() == 1);
    CHECK(f.pins[0].stack == "s1");
    CHECK(f.pins[0].segments == 110);
    CHECK(f.pins[0].free_held == 1100 * MiB);
    CHECK(f.segment_creator.at("s1") == "s2");
}

TEST_CASE("fragmentation: the request fits beside the tensors, no free block is large enough") {
    Analysis a = analyze(fragmented(2048 * MiB, 600 * MiB));
    CHECK(a.fragmentation);
    bool advised = false;
    for (const Advice &x : a.advice) advised |= x.id == "fragmentation";
    CHECK(advised);
    // Never the generic advice that the numbers contradict.
    for (const Advice &x : a.advice) CHECK(x.id != "caching-allocator");
    // The diagnosis sets the tensors and the request against what the process may use (it once read
    // "fits in the 2.00 GiB left beside the 1.07 GiB of tensors", as if 2 GiB were left).
    bool said = false;
    for (const std::string &w : a.why)
        said |=
            w.find("the tensors (1.07 GiB) and the request (600.00 MiB) fit in the 2.00 GiB this process may use") !=
            std::string::npos;
    CHECK(said);
}

TEST_CASE("under a per-process limit, the container's other processes take nothing from this one's room") {
    // The same fragmented process, beside 1.5 GiB of a sibling's: each has its own 2 GiB, so the
    // request still fits beside the tensors (the diagnosis once took the sibling's bytes off the limit
    // and called it a limit too small, where the advice did not).
    Report r = fragmented(2048 * MiB, 600 * MiB);
    r.container_bytes = *r.process_bytes + 1536 * MiB;
    Analysis a = analyze(r);
    CHECK(a.fragmentation);
    r.limit_scope = "container";  // one limit for both: 512 MiB left, too little for the tensors
    CHECK_FALSE(analyze(r).fragmentation);
}

TEST_CASE("segments and blocks that overlap others are left out and counted, the rest read as before") {
    // An edited report: every segment again, shifted by a byte so that each overlaps its original, and
    // a block over the whole first segment. Read as they were, each copy walked every block it met.
    Report r = fragmented(2048 * MiB, 600 * MiB);
    TensorFacts before = tensor_facts(r);
    TensorView &t = *r.tensor;
    size_t n = t.segments.size();
    for (size_t i = 0; i < n; i++) {
        TensorSegment copy = t.segments[i];
        copy.address += 1;
        t.segments.push_back(copy);
    }
    t.blocks.push_back({t.segments[0].address + 1, 20 * MiB, "s1", std::nullopt});  // inside the first block
    TensorFacts f = tensor_facts(r);
    CHECK(f.overlapping_segments == n);
    CHECK(f.overlapping_blocks == 1);
    CHECK(f.segments.size() == n);
    CHECK(f.pinned_segments == before.pinned_segments);
    CHECK(f.holes == before.holes);
    CHECK(f.largest_free == before.largest_free);
    CHECK(before.overlapping_segments == 0);
    CHECK(before.overlapping_blocks == 0);
}

TEST_CASE("no fragmentation when the limit is too small for the tensors themselves") {
    // 1100 MiB of tensors + 1000 MiB asked > 2048 MiB: no allocator could have served it.
    Analysis a = analyze(fragmented(2048 * MiB, 1000 * MiB));
    CHECK_FALSE(a.fragmentation);
}

TEST_CASE("a free segment is releasable, not a hole, and counts as a free block of its pool") {
    Report r = fragmented(4096 * MiB, 16 * MiB);
    r.tensor->segments.push_back({0x7f0100000000, 20 * MiB, "s2", "cuMemAlloc_v2"});
    TensorFacts f = tensor_facts(r);
    CHECK(f.releasable == 20 * MiB);
    CHECK(f.largest_free == 20 * MiB);
    CHECK(f.pinned_segments == 110);
}

TEST_CASE("phases: inference told from training, weights, communication and a KV cache") {
    Stack forward{
        "f",
        {py("/venv/site-packages/torch/nn/modules/linear.py", "Linear.forward", 125), py("/work/run.py", "main", 9)}};
    Stack weights{"w",
                  {py("/venv/site-packages/torch/nn/modules/module.py", "_apply", 900),
                   py("/venv/site-packages/torch/nn/modules/module.py", "Module.to", 1340)}};
    Stack kv{"k",
             {py("/venv/site-packages/transformers/cache_utils.py", "DynamicLayer.update", 120),
              py("/venv/site-packages/transformers/generation/utils.py", "generate", 2300)}};
    Frame nccl;
    nccl.symbol = "c10d::ProcessGroupNCCL::allreduce";
    Stack comm{"c", {nccl}};
    Stack backward{"b", {py("/venv/site-packages/torch/autograd/__init__.py", "backward", 250)}};
    CHECK(classify(forward, Mode::Training) == Phase::Forward);
    CHECK(classify(forward, Mode::Inference) == Phase::Inference);
    CHECK(classify(weights, Mode::Inference) == Phase::Weights);
    CHECK(classify(kv, Mode::Inference) == Phase::KvCache);
    CHECK(classify(comm, Mode::Training) == Phase::Communication);
    CHECK(classify(backward, Mode::Training) == Phase::Backward);
    REQUIRE(kv_cache_frame(kv));
    CHECK(*kv_cache_frame(kv)->line == 120);

    Report inference;
    inference.stacks = {{"f", forward}, {"k", kv}};
    CHECK(mode_of(inference) == Mode::Inference);
    Report training = inference;
    training.stacks["b"] = backward;
    CHECK(mode_of(training) == Mode::Training);
}

TEST_CASE("inference is never advised activation checkpointing") {
    Report r;
    r.reason = "quota";
    r.stacks["k"] = {"k", {py("/venv/site-packages/transformers/cache_utils.py", "DynamicLayer.update", 120)}};
    r.stacks["f"] = {"f", {py("/venv/site-packages/torch/nn/modules/linear.py", "Linear.forward", 125)}};
    TensorView t;
    t.source = "c10";
    t.by_stack = {{"k", 1500 * MiB, 16}, {"f", 300 * MiB, 40}};
    r.tensor = t;
    Analysis a = analyze(r);
    CHECK(a.mode == Mode::Inference);
    bool kv = false;
    for (const Advice &x : a.advice) {
        CHECK(x.id != "forward");
        if (x.id == "kv-cache") kv = x.title.find("cache_utils.py:120") != std::string::npos;
    }
    CHECK(kv);
}
