// One schema for the writer and the reader: a report built by the shim's writer (shim/report/) is
// read back by the command's reader (tools/report/model.h) with every field the writer filled. A key
// renamed on one side only (common/report/schema.h prevents it) or a value written in another shape
// than the reader expects fails here.
#include <doctest/doctest.h>

#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/report/environment.h"
#include "core_fixture.h"
#include "shim/quota/guard.h"
#include "shim/report/report.h"
#include "shim/torch/events.h"
#include "shim/torch/view.h"
#include "tools/report/model.h"

using namespace gg;
using gg::testing::Core;
using gg::testing::kMiB;

namespace {

__attribute__((noinline)) void allocate(uint64_t key, uint64_t bytes, Api api) {
    guard::Ticket t;
    REQUIRE(guard::admit(api, -1, bytes, &t) == CUDA_SUCCESS);
    guard::commit(t, KeyKind::kPointer, key, bytes);
}

}  // namespace

TEST_CASE("a report the shim writes reads back in the command with every field") {
    Core core("1GiB", /*stack_depth=*/16);
    guard::DriverCall scope;
    allocate(0x10000, 300 * kMiB, Api::cuMemAlloc_v2);
    allocate(0x20000, 200 * kMiB, Api::cuMemAllocAsync);
    stacks::StackId failed_stack = stacks::capture(0);
    report::Failure f{Api::cuMemAlloc_v2,
                      Api::cuMemAlloc_v2,
                      900 * kMiB,
                      0,
                      CUDA_ERROR_OUT_OF_MEMORY,
                      failed_stack,
                      7,
                      1700000000000000000ull,
                      42};
    std::string text = report::build(report::Reason::kQuota, "refused", &f, 0).dump();

    gg::report::Report r;
    gg::report::LoadError err;
    REQUIRE_MESSAGE(gg::report::parse(text, "round-trip", r, err), err.message);
    CHECK(r.reason == "quota");
    CHECK(r.message == "refused");
    CHECK(r.pid == (int64_t)getpid());
    CHECK_FALSE(r.command.empty());
    CHECK(r.device_ordinal == 0);
    CHECK(r.device_uuid == core.device().uuid);
    CHECK(r.device_name == "Unit GPU");
    CHECK(r.limit_bytes == 1024 * kMiB);
    CHECK(r.limit_spec == "1GiB");
    CHECK(r.limit_scope == "process");
    CHECK(r.process_bytes == 500 * kMiB);
    CHECK(r.container_bytes == 500 * kMiB);
    CHECK(r.live_allocations == 2u);
    REQUIRE(r.failed);
    CHECK(r.failed->api == "cuMemAlloc_v2");
    CHECK(r.failed->bytes == 900 * kMiB);
    CHECK(r.failed->device == 0);
    CHECK(r.failed->thread == 42);
    CHECK(r.failed->driver_result == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(r.episode_id == 7);
    REQUIRE(r.top_allocations.size() == 2);
    CHECK(r.top_allocations[0].bytes == 300 * kMiB);
    CHECK(r.top_allocations[0].api == "cuMemAlloc_v2");
    CHECK(r.top_allocations[0].address == "0x10000");
    CHECK(r.top_allocations[1].api == "cuMemAllocAsync");
    CHECK(r.top_allocations[1].device == 0);
    uint64_t by_stack = 0;
    for (const auto &s : r.by_stack) by_stack += s.bytes;
    CHECK(by_stack == 500 * kMiB);
    CHECK(r.peak() == 500 * kMiB);
    CHECK_FALSE(r.timeline.empty());
    bool counted = false;
    for (const auto &c : r.counts_by_api)
        if (c.api == "cuMemAlloc_v2") counted = c.allocs == 1 && c.live_bytes == 300 * kMiB;
    CHECK(counted);
    // Stacks: the allocations' and the failed request's, with native frames the reader understands.
    REQUIRE_FALSE(r.failed->stack.empty());
    const gg::report::Stack *s = r.stack(r.failed->stack);
    REQUIRE(s);
    REQUIRE_FALSE(s->frames.empty());
    CHECK_FALSE(s->frames[0].python);
    CHECK_FALSE(s->frames[0].ip.empty());
    CHECK(r.stack(r.top_allocations[0].stack));
}

// Issue 18, defect 11: exact names, and a secret-looking name's value hidden.
TEST_CASE("report environment: exact names only, secret-looking values hidden") {
    using namespace gg::report_env;
    for (const char *yes : {"GPUGUARD_MEM_LIMIT", "GPUGUARD_LEDGER", "CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF",
                            "NCCL_DEBUG", "LOCAL_RANK", "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_7",
                            "CUDA_DEVICE_MEMORY_LIMIT_63", "LD_PRELOAD"})
        CHECK_MESSAGE(allowed(yes), yes);
    for (const char *no : {"NVIDIA_API_KEY", "CUDA_TOKEN", "NCCL_PASSWORD", "PYTORCH_SECRET", "GPUGUARD_API_TOKEN",
                           "GPUGUARD_", "CUDA_", "CUDA_DEVICE_MEMORY_LIMIT_64", "CUDA_DEVICE_MEMORY_LIMIT_x", "PATH",
                           "HOME", "AWS_SECRET_ACCESS_KEY", "cuda_visible_devices"})
        CHECK_MESSAGE(!allowed(no), no);
    std::string v;
    CHECK(carried("CUDA_VISIBLE_DEVICES", "0,1", &v));
    CHECK(v == "0,1");
    CHECK_FALSE(carried("HF_TOKEN", "x", &v));
    for (const char *secret :
         {"X_API_KEY", "my_token", "DB_PASSWORD", "PASSWD", "A_SECRET", "AUTH_HEADER", "SESSION_ID"})
        CHECK_FALSE_MESSAGE(shown(secret), secret);
    CHECK(shown("NCCL_IB_DISABLE"));
}

TEST_CASE("the tensor view: c10's blocks, totals and events read back in the command") {
    Core core("1GiB", /*stack_depth=*/8);
    torch::reset_after_fork();  // no block of an earlier test
    torch::configure(true, 1024);
    torch::register_section();
    guard::DriverCall scope;
    // c10 grows a 20 MiB segment, hands out two blocks from it and takes one back.
    allocate(0x7f0000000000, 20 * kMiB, Api::cuMemAlloc_v2);
    torch::on_block(0x7f0000000000, 4 * kMiB, 4 * kMiB, 20 * kMiB, 0);
    torch::on_block(0x7f0000400000, 8 * kMiB, 12 * kMiB, 20 * kMiB, 0);
    torch::on_block(0x7f0000000000, -int64_t(4 * kMiB), 8 * kMiB, 20 * kMiB, 0);
    // Once c10 has reported a block, the segments it grows are in the history too (the first one, made
    // before c10's first report, is not: the driver hooks do not look for PyTorch until it speaks).
    allocate(0x7f0002000000, 2 * kMiB, Api::cuMemAlloc_v2);
    std::string text = report::build(report::Reason::kRequest, "asked", nullptr, 0).dump();

    // The rows as the file spells them (docs/report-schema.md): the columns of common/report/schema.h
    // in the order readers of earlier versions read by position.
    nlohmann::json tv = nlohmann::json::parse(text)["tensor_view"];
    CHECK(tv["events"]["columns"].dump() == R"(["t_ns","action","address","bytes","allocated","reserved","device"])");
    nlohmann::json event = tv["events"]["rows"][1];
    CHECK(event.size() == 7);
    CHECK(event[1] == "a");
    CHECK(event[2] == 0x7f0000400000);
    CHECK(event[3] == 8 * kMiB);
    CHECK(event[4] == 12 * kMiB);
    CHECK(event[5] == 20 * kMiB);
    CHECK(event[6] == 0);
    CHECK(tv["events"]["rows"][2][1] == "f");
    CHECK(tv["events"]["rows"][3][1] == "S");
    nlohmann::json block = tv["blocks"]["list"][0];
    CHECK(block.size() == 4);
    CHECK(block[0] == 0x7f0000400000);
    CHECK(block[1] == 8 * kMiB);
    CHECK(block[2].is_string());
    CHECK(block[3].is_number_unsigned());
    nlohmann::json segment = tv["segments"][0];
    CHECK(segment.size() == 4);
    CHECK(segment[0] == 0x7f0000000000);
    CHECK(segment[1] == 20 * kMiB);
    CHECK(segment[3] == "cuMemAlloc_v2");
    nlohmann::json point = tv["timeline"]["points"][0];
    CHECK(point.size() == 3);
    CHECK(point[1].is_number_unsigned());
    CHECK(point[2] == 20 * kMiB);

    gg::report::Report r;
    gg::report::LoadError err;
    REQUIRE_MESSAGE(gg::report::parse(text, "tensor", r, err), err.message);
    REQUIRE(r.tensor);
    const gg::report::TensorView &t = *r.tensor;
    CHECK(t.from_blocks());
    CHECK(t.allocated == 8 * kMiB);
    CHECK(t.reserved == 20 * kMiB);
    CHECK(t.peak_allocated == 12 * kMiB);
    REQUIRE(t.blocks.size() == 1);
    CHECK(t.blocks[0].address == 0x7f0000400000);
    CHECK(t.blocks[0].bytes == 8 * kMiB);
    CHECK(r.stack(t.blocks[0].stack));  // the block's stack is in the report's stacks
    REQUIRE(t.segments.size() == 2);
    CHECK(t.segments[0].address == 0x7f0000000000);
    CHECK(t.segments[0].bytes == 20 * kMiB);
    CHECK(t.segments[0].api == "cuMemAlloc_v2");
    CHECK_FALSE(t.oom);
    // The history: the three block events with the totals after each, then the second segment.
    REQUIRE(t.events.size() == 4);
    CHECK(t.events[0].action == gg::report::TensorEvent::kAlloc);
    CHECK(t.events[1].allocated == 12 * kMiB);
    CHECK(t.events[2].action == gg::report::TensorEvent::kFree);
    CHECK(t.events[2].bytes == 4 * kMiB);
    CHECK(t.events[3].action == gg::report::TensorEvent::kSegmentAlloc);
    CHECK(t.events[3].bytes == 2 * kMiB);
    CHECK(t.events_recorded == 4);
    CHECK_FALSE(t.timeline.empty());
    torch::reset_after_fork();
}

// The view's events wait in a pending log and are applied in batches (shim/torch/pending.h): blocks
// made on one thread and freed on another, as PyTorch's forward and autograd threads do, under one
// lock as c10's allocator mutex; a report read between batches sees every event so far.
TEST_CASE("the tensor view: blocks freed on another thread, across batches, leave the table and totals exact") {
    Core core("1GiB", /*stack_depth=*/0);
    torch::reset_after_fork();
    torch::configure(true, 4096);
    guard::DriverCall scope;
    std::mutex c10_mutex;
    const int kBlocks = 1000;  // about four batches
    uint64_t allocated = 0;
    std::vector<uint64_t> made;
    for (int i = 0; i < kBlocks; i++) {
        std::lock_guard<std::mutex> lock(c10_mutex);
        allocated += kMiB;
        torch::on_block(0x7f0000000000 + uint64_t(i) * kMiB, int64_t(kMiB), allocated, 2048 * kMiB, 0);
        made.push_back(0x7f0000000000 + uint64_t(i) * kMiB);
    }
    // Read now, with the last events still pending: the report's reader sees them all.
    CHECK(torch::blocks().snapshot(0).live_count == uint64_t(kBlocks));
    CHECK(torch::totals(0).allocated == kBlocks * kMiB);
    // The other thread frees all but the last.
    std::thread autograd([&] {
        guard::DriverCall inner;
        for (int i = 0; i + 1 < kBlocks; i++) {
            std::lock_guard<std::mutex> lock(c10_mutex);
            allocated -= kMiB;
            torch::on_block(made[size_t(i)], -int64_t(kMiB), allocated, 2048 * kMiB, 0);
        }
    });
    autograd.join();
    Tracker::Snapshot b = torch::blocks().snapshot(10);
    CHECK(b.live_count == 1);
    CHECK(b.live_bytes == kMiB);
    REQUIRE(b.top.size() == 1);
    CHECK(b.top[0].first == made.back());
    torch::Totals t = torch::totals(0);
    CHECK(t.allocated == kMiB);
    CHECK(t.peak_allocated == kBlocks * kMiB);
    CHECK(torch::events().copy().recorded == uint64_t(2 * kBlocks - 1));
    torch::reset_after_fork();
}

// A segment is device memory at an address, by the driver call that made it: through cudart, the
// program's API (cudaMallocArray) does not tell an array from linear memory, the driver's does.
TEST_CASE("the tensor view's segments: cudart's linear memory is one, its arrays are not") {
    Core core("1GiB", /*stack_depth=*/8);
    torch::reset_after_fork();
    torch::configure(true, 1024);
    torch::register_section();
    guard::DriverCall scope;
    {
        guard::RuntimeCall tag(Api::cudaMalloc);
        allocate(0x7f0000000000, 20 * kMiB, Api::cuMemAlloc_v2);
    }
    {
        guard::RuntimeCall tag(Api::cudaMallocArray);
        allocate(0x7f0002000000, 4 * kMiB, Api::cuArrayCreate_v2);
    }
    torch::on_block(0x7f0000000000, 4 * kMiB, 4 * kMiB, 20 * kMiB, 0);
    std::string text = report::build(report::Reason::kRequest, "asked", nullptr, 0).dump();

    gg::report::Report r;
    gg::report::LoadError err;
    REQUIRE_MESSAGE(gg::report::parse(text, "segments", r, err), err.message);
    REQUIRE(r.tensor);
    REQUIRE(r.tensor->segments.size() == 1);
    CHECK(r.tensor->segments[0].address == 0x7f0000000000);
    CHECK(r.tensor->segments[0].api == "cudaMalloc");
    torch::reset_after_fork();
}

// Issue 18, defect 10: the tensor view's rows (a block's or a segment's stack, a segment's API) are
// strings of the file like any other, made printable as they are read.
TEST_CASE("report reader: the tensor view's strings come out without C0 or C1 controls") {
    nlohmann::json d = {{"schema", "gpuguard.report"},
                        {"version", 1},
                        {"reason", "request"},
                        {"tensor_view",
                         {{"source", "c10"},
                          {"blocks", {{"count", 1}, {"list", {{4096, 512, "s\x1b]0;t\x07"}}}}},
                          {"segments", {{4096, 2097152, "s\u009b2J", "cuMemAlloc\x1b[2J\x9b"}}}}}};
    gg::report::Report r;
    gg::report::LoadError err;
    REQUIRE_MESSAGE(gg::report::parse(d.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "t", r, err),
                    err.message);
    REQUIRE(r.tensor);
    REQUIRE(r.tensor->blocks.size() == 1);
    REQUIRE(r.tensor->segments.size() == 1);
    CHECK(r.tensor->blocks[0].stack == "s?]0;t?");
    CHECK(r.tensor->segments[0].stack == "s??2J");  // each byte of U+009B
    CHECK(r.tensor->segments[0].api.rfind("cuMemAlloc?[2J", 0) == 0);
    CHECK(r.tensor->segments[0].api.find('\x1b') == std::string::npos);
}
