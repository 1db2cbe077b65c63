// The tensor view's pending log (shim/torch/pending.h): events are applied in the order they were
// appended, in batches, and nothing stays pending once the tables are read.
#include <doctest/doctest.h>

#include <mutex>
#include <thread>
#include <vector>

#include "shim/torch/pending.h"

using gg::torch::Action;
using gg::torch::BlockEvent;
using gg::torch::PendingLog;

namespace {

BlockEvent event_at(uint64_t i) {
    BlockEvent e{};
    e.t_ns = i;
    e.address = 0x1000 + i;
    e.bytes = 512;
    e.action = Action::kAlloc;
    return e;
}

}  // namespace

TEST_CASE("pending log: appended events are applied in order, a batch at a time, and settle applies the rest") {
    PendingLog log;
    std::vector<uint64_t> applied;
    std::vector<int> batches;
    auto apply = [&](const BlockEvent *events, int n) {
        batches.push_back(n);
        for (int i = 0; i < n; i++) applied.push_back(events[i].t_ns);
    };
    const uint64_t kEvents = 3 * PendingLog::kBatch + 17;
    for (uint64_t i = 0; i < kEvents; i++) log.append(event_at(i), apply);
    // Full batches went as the log filled; the last 17 wait for a reader.
    CHECK(applied.size() == 3 * PendingLog::kBatch);
    for (int n : batches) CHECK(n == PendingLog::kBatch);
    log.settle(apply);
    REQUIRE(applied.size() == kEvents);
    for (uint64_t i = 0; i < kEvents; i++) CHECK(applied[i] == i);
    // Nothing pending: settling again applies nothing.
    batches.clear();
    log.settle(apply);
    CHECK(batches.empty());
}

TEST_CASE("pending log: events appended from two threads are applied once each, in one order both saw") {
    PendingLog log;
    std::mutex applied_mu;  // taken inside apply, which runs under the log's lock: never contended
    std::vector<uint64_t> applied;
    auto apply = [&](const BlockEvent *events, int n) {
        std::lock_guard<std::mutex> lock(applied_mu);
        for (int i = 0; i < n; i++) applied.push_back(events[i].t_ns);
    };
    // Each thread appends its own numbers, in order; the log must keep each thread's order and lose none.
    const uint64_t kEach = 5000;
    auto run = [&](uint64_t base) {
        for (uint64_t i = 0; i < kEach; i++) log.append(event_at(base + i), apply);
    };
    std::thread a(run, 0), b(run, 1u << 20);
    a.join();
    b.join();
    log.settle(apply);
    REQUIRE(applied.size() == 2 * kEach);
    uint64_t next[2] = {0, 1u << 20};
    for (uint64_t t : applied) {
        int who = t >= (1u << 20);
        CHECK(t == next[who]);
        next[who] = t + 1;
    }
}
