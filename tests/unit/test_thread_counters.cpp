// The hot path's per-thread counters (shim/base/thread_counters.h): exact totals from many threads,
// after they exit, and past the last slot, where threads share one.
#include <doctest/doctest.h>

#include <atomic>
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
    on_threads(kThreads, [] {
        for (int i = 0; i < kAdds; i++) {
            counts.add(kA);
            counts.add(kB, 3);
        }
    });
    CHECK(counts.total(kA) == uint64_t(kThreads) * kAdds);
    CHECK(counts.total(kB) == uint64_t(kThreads) * kAdds * 3);
    counts.add(kA);  // this thread's own slot too
    CHECK(counts.total(kA) == uint64_t(kThreads) * kAdds + 1);
}

TEST_CASE("ThreadCounters: threads past the last slot share one, and still lose nothing") {
    static ThreadCounters<kCount> counts;
    // New threads until one is past the last slot (the slots are the whole binary's: earlier tests
    // used some).
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
}
