// The hot path's per-thread counters (shim/base/thread_counters.h): exact totals from many threads,
// after they exit, and past the last slot, where threads share one.
#include <doctest/doctest.h>

#include <atomic>
#include <limits>
#include <thread>
#include <vector>

#include "shim/base/thread_counters.h"

using namespace gg;

namespace {

enum Counter { kA, kB, kCount };

// Runs `fn` on `n` threads at once and waits for them all.
template <class F>
void on_threads(int n, F fn) {
    std::vector<std::thread> threads;
    for (int t = 0; t < n; t++) threads.emplace_back(fn);
    for (std::thread &t : threads) t.join();
}

}  // namespace

TEST_CASE("ThreadCounters: threads adding at once lose nothing, and their counts outlive them") {
    static ThreadCounters<kCount> counts;
    constexpr int kThreads = 8, kAdds = 50000;
    REQUIRE(counter_slots_claimed() + kThreads < kCounterSlots);  // this test runs before the next one
    static std::atomic<uint64_t> slots_seen[kThreads];
    static std::atomic<int> next{0};
    on_threads(kThreads, [] {
        for (int i = 0; i < kAdds; i++) {
            counts.add(kA);
            counts.add(kB, 3);
        }
        slots_seen[next++] = uint64_t(counter_slot());
    });
    // Each thread had a slot of its own (not the one shared past the last).
    for (int i = 0; i < kThreads; i++) {
        CHECK(slots_seen[i].load() < uint64_t(kCounterSlots));
        for (int j = 0; j < i; j++) CHECK(slots_seen[i].load() != slots_seen[j].load());
    }
    CHECK(counts.total(kA) == uint64_t(kThreads) * kAdds);
    CHECK(counts.total(kB) == uint64_t(kThreads) * kAdds * 3);
    counts.add(kA);  // this thread's own slot too
    CHECK(counts.total(kA) == uint64_t(kThreads) * kAdds + 1);
}

TEST_CASE("ThreadCounters: threads past the last slot share one, and still lose nothing") {
    static ThreadCounters<kCount> counts;
    // New threads until one is past the last slot (the slots are the whole binary's: earlier tests
    // used some, and every thread of the tests after this one shares the last slot).
    std::atomic<bool> past{false};
    uint64_t threads = 0;
    while (!past.load() && threads <= uint64_t(kCounterSlots) + 1) {
        std::thread([&] {
            counts.add(kA);
            if (counter_slot() == kCounterSlots) past = true;
        }).join();
        threads++;
    }
    REQUIRE(past.load());
    CHECK(counts.total(kA) == threads);
    // From here every new thread shares the last slot: its adds are atomic.
    constexpr int kThreads = 8, kAdds = 20000;
    on_threads(kThreads, [] {
        CHECK(counter_slot() == kCounterSlots);
        for (int i = 0; i < kAdds; i++) counts.add(kB);
    });
    CHECK(counts.total(kB) == uint64_t(kThreads) * kAdds);
    CHECK(counts.total(kA) == threads);

    // A count of every thread ever started would wrap after 2^31 of them: it stops at the last slot.
    // (The private slots are all taken by now, so nothing else in this binary changes.)
    detail::g_next_counter_slot = std::numeric_limits<int>::max() - 2;
    on_threads(kThreads, [] {
        CHECK(counter_slot() == kCounterSlots);
        counts.add(kA);
    });
    CHECK(counter_slots_claimed() == kCounterSlots);
    CHECK(counts.total(kA) == threads + kThreads);
}
