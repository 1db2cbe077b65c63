// The tensor view's pending log (shim/torch/pending.h): events are applied in the order they were
// appended, in batches, and nothing stays pending once the tables are read; in the background mode
// the shim uses, full batches are applied by the log's own thread.
#include <doctest/doctest.h>

#include <chrono>
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

// What the log applied, in order, and on which threads. The log's apply is a plain function (the
// shim's is view.cpp's), so the record is global; each case clears it first.
struct Applied {
    std::mutex mu;  // the applier thread and the test's thread both read and write it
    std::vector<uint64_t> times;
    std::vector<int> batches;
    std::vector<std::thread::id> threads;
    void clear() {
        std::lock_guard<std::mutex> lock(mu);
        times.clear();
        batches.clear();
        threads.clear();
    }
    size_t count() {
        std::lock_guard<std::mutex> lock(mu);
        return times.size();
    }
} g_applied;

// A gate that holds the log's thread inside a batch, as a descheduled applier would be: while closed,
// any thread but the test's own waits at the start of record(), and says so.
std::atomic<bool> g_gate_closed{false};
std::atomic<bool> g_held{false};
std::thread::id g_test_thread;

void wait_at_gate() {
    if (!g_gate_closed.load() || std::this_thread::get_id() == g_test_thread) return;
    g_held = true;
    while (g_gate_closed.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    g_held = false;
}

void record(const BlockEvent *events, int n) {
    wait_at_gate();
    std::lock_guard<std::mutex> lock(g_applied.mu);
    g_applied.batches.push_back(n);
    g_applied.threads.push_back(std::this_thread::get_id());
    for (int i = 0; i < n; i++) g_applied.times.push_back(events[i].t_ns);
}

// Waits (up to a minute: a loaded machine, a sanitizer) until `done` holds.
template <class Done>
bool wait_until(Done done) {
    for (int i = 0; i < 60000 && !done(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return done();
}
bool wait_applied(size_t n) {
    return wait_until([n] { return g_applied.count() >= n; });
}

// Closes the gate and appends one batch and one event: the batch goes to the log's thread, which
// stops at the gate, holding it.
void hold_first_batch(PendingLog &log) {
    g_applied.clear();
    g_test_thread = std::this_thread::get_id();
    g_gate_closed = true;
    for (uint64_t i = 0; i <= uint64_t(PendingLog::kBatch); i++) log.append(event_at(i));
    REQUIRE(wait_until([] { return g_held.load(); }));
}

void check_in_order(uint64_t n) {
    std::lock_guard<std::mutex> lock(g_applied.mu);
    REQUIRE(g_applied.times.size() == n);
    for (uint64_t i = 0; i < n; i++) CHECK(g_applied.times[i] == i);
}

}  // namespace

TEST_CASE("pending log: appended events are applied in order, a batch at a time, and settle applies the rest") {
    g_applied.clear();
    static PendingLog log(record, /*background=*/false);
    const uint64_t kEvents = 3 * PendingLog::kBatch + 17;
    for (uint64_t i = 0; i < kEvents; i++) log.append(event_at(i));
    // Full batches went as the log filled, on this thread; the last 17 wait for a reader.
    CHECK(g_applied.count() == 3 * PendingLog::kBatch);
    for (int n : g_applied.batches) CHECK(n == PendingLog::kBatch);
    log.settle();
    REQUIRE(g_applied.count() == kEvents);
    for (uint64_t i = 0; i < kEvents; i++) CHECK(g_applied.times[i] == i);
    for (std::thread::id t : g_applied.threads) CHECK(bool(t == std::this_thread::get_id()));
    // Nothing pending: settling again applies nothing.
    g_applied.batches.clear();
    log.settle();
    CHECK(g_applied.batches.empty());
    CHECK_FALSE(log.applier_running());
}

TEST_CASE("pending log: in the background, a full batch is applied by the log's thread, and settle takes the rest") {
    g_applied.clear();
    static PendingLog log(record, /*background=*/true);
    // One batch full and handed off, one event more: the hand-off happens at the append after the
    // batch fills.
    for (uint64_t i = 0; i <= uint64_t(PendingLog::kBatch); i++) log.append(event_at(i));
    CHECK(log.applier_running());
    REQUIRE(wait_applied(PendingLog::kBatch));
    {
        std::lock_guard<std::mutex> lock(g_applied.mu);
        REQUIRE(g_applied.batches.size() == 1);
        CHECK(g_applied.batches[0] == PendingLog::kBatch);
        CHECK(bool(g_applied.threads[0] != std::this_thread::get_id()));
    }
    // The one event appended after it stays pending until a reader settles the log.
    CHECK(g_applied.count() == size_t(PendingLog::kBatch));
    log.settle();
    REQUIRE(g_applied.count() == size_t(PendingLog::kBatch) + 1);
    for (uint64_t i = 0; i <= uint64_t(PendingLog::kBatch); i++) CHECK(g_applied.times[i] == i);
}

TEST_CASE("pending log: a reader settles while the log's thread is held inside a batch, more handed meanwhile") {
    static PendingLog log(record, /*background=*/true);
    const int kB = PendingLog::kBatch;
    hold_first_batch(log);
    // Two more batches are handed off behind it: appending does not wait for it.
    uint64_t appended = kB + 1;
    for (; appended < uint64_t(3 * kB + 5); appended++) log.append(event_at(appended));
    CHECK(g_applied.count() == 0);
    // A reader settles meanwhile: it waits for the held batch, then applies the two handed after it
    // and the five filling, in order.
    std::thread reader([] { log.settle(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the reader reaches the batch lock
    g_gate_closed = false;
    reader.join();
    check_in_order(appended);
}

TEST_CASE("pending log: when every buffer waits on a held log thread, the appender waits for them, in order") {
    static PendingLog log(record, /*background=*/true);
    const int kB = PendingLog::kBatch;
    hold_first_batch(log);
    // The gate opens a little later, from another thread. Until then the log's thread holds the
    // first batch; the rest but one are handed behind it, and the append that would hand off the
    // last finds no free buffer: it waits until those handed are applied (by the log's thread, or by
    // itself), rather than overwrite one.
    std::thread opener([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        g_gate_closed = false;
    });
    uint64_t appended = kB + 1;
    for (; appended < uint64_t(PendingLog::kBuffers * kB); appended++) log.append(event_at(appended));
    CHECK(g_applied.count() == 0);  // every buffer but one handed, none applied: appending never waited
    log.append(event_at(appended++));
    CHECK(g_applied.count() >= size_t((PendingLog::kBuffers - 1) * kB));
    opener.join();
    log.settle();
    check_in_order(appended);
}

TEST_CASE("pending log: events appended from two threads are applied once each, in one order both saw") {
    for (bool background : {false, true}) {
        CAPTURE(background);
        g_applied.clear();
        // Static: the background log's thread sleeps on it for the rest of the process.
        static PendingLog deterministic(record, /*background=*/false), in_background(record, /*background=*/true);
        PendingLog *log = background ? &in_background : &deterministic;
        // Each thread appends its own numbers, in order; the log must keep each thread's order and lose
        // none, whichever thread applies a batch (the log's, or an appender when the log's lags).
        const uint64_t kEach = 5000;
        auto run = [&](uint64_t base) {
            for (uint64_t i = 0; i < kEach; i++) log->append(event_at(base + i));
        };
        std::thread a(run, 0), b(run, 1u << 20);
        a.join();
        b.join();
        log->settle();
        REQUIRE(g_applied.count() == 2 * kEach);
        uint64_t next[2] = {0, 1u << 20};
        for (uint64_t t : g_applied.times) {
            int who = t >= (1u << 20);
            CHECK(t == next[who]);
            next[who] = t + 1;
        }
    }
}

TEST_CASE("flush judge: the applier stops flushing when even the cheapest of the first flushes is dear") {
    using gg::torch::FlushJudge;
    SUBCASE("Intel Xeon's 185 ns a line: off after the trials, and never timed again") {
        FlushJudge judge;
        for (int i = 0; i < FlushJudge::kTrials - 1; i++) {
            judge.timed(256 * 185, 256);
            CHECK(judge.flushing());
        }
        judge.timed(256 * 185, 256);
        CHECK_FALSE(judge.flushing());
        CHECK_FALSE(judge.timing());
    }
    SUBCASE("AMD's 4 ns a line: kept, and the judgement is over") {
        FlushJudge judge;
        for (int i = 0; i < FlushJudge::kTrials; i++) judge.timed(256 * 4, 256);
        CHECK(judge.flushing());
        CHECK_FALSE(judge.timing());
        judge.timed(256 * 1000, 256);  // later flushes are not timed: one slow batch changes nothing
        CHECK(judge.flushing());
    }
    SUBCASE("one cheap flush among preempted ones: kept") {
        FlushJudge judge;
        for (int i = 0; i < FlushJudge::kTrials; i++) judge.timed(i == 3 ? 256 * 4 : 256 * 5000, 256);
        CHECK(judge.flushing());
    }
    SUBCASE("a flush of no lines is not a trial") {
        FlushJudge judge;
        for (int i = 0; i < 2 * FlushJudge::kTrials; i++) judge.timed(1000, 0);
        CHECK(judge.timing());
        CHECK(judge.flushing());
    }
}

TEST_CASE("pending log: the log's thread is woken when half the buffers wait, not at every batch") {
    static PendingLog log(record, /*background=*/true);
    const uint64_t kB = PendingLog::kBatch;
    // The first batch wakes the thread it starts, which is then held inside it: nothing is applied
    // meanwhile, so the batches waiting are exactly those handed behind it.
    hold_first_batch(log);
    CHECK(log.wakes() == 1);
    uint64_t appended = kB + 1;
    // Batches handed behind it until kWakeAt - 1 wait (batch k is handed at the append after it fills,
    // event (k + 1) * kB): no wake-up, no system call.
    for (; appended < kB * PendingLog::kWakeAt; appended++) log.append(event_at(appended));
    CHECK(log.wakes() == 1);
    // The batch that makes kWakeAt wait wakes it; the next ones do not wake it again.
    log.append(event_at(appended++));
    CHECK(log.wakes() == 2);
    for (; appended <= kB * (PendingLog::kWakeAt + 1); appended++) log.append(event_at(appended));
    CHECK(log.wakes() == 2);
    g_gate_closed = false;
    REQUIRE(wait_applied(kB * (PendingLog::kWakeAt + 1)));  // the thread, let go, takes them all
    log.settle();
    check_in_order(appended);
}
