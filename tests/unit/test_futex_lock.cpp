#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "shim/base/futex_lock.h"

using namespace gg;

TEST_CASE("FutexLock: try_lock fails while held and succeeds once released") {
    FutexLock l;
    CHECK(l.try_lock());
    CHECK_FALSE(l.try_lock());
    l.unlock();
    CHECK(l.try_lock());
    l.unlock();
}

TEST_CASE("FutexLock: threads hammering one lock never overlap and lose no increment") {
    FutexLock l;
    uint64_t counter = 0;  // plain: only the lock orders the threads' writes (ThreadSanitizer checks it)
    std::atomic<int> inside{0}, overlaps{0};
    constexpr int kThreads = 8, kRounds = 20000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; t++)
        threads.emplace_back([&] {
            for (int i = 0; i < kRounds; i++) {
                std::lock_guard<FutexLock> g(l);
                if (inside.fetch_add(1) != 0) overlaps++;
                counter++;
                inside.fetch_sub(1);
            }
        });
    for (auto &t : threads) t.join();
    CHECK(overlaps.load() == 0);
    CHECK(counter == uint64_t(kThreads) * kRounds);
}

TEST_CASE("FutexLock: a thread asleep on the lock wakes when the holder releases it") {
    FutexLock l;
    l.lock();
    std::atomic<bool> got{false};
    std::thread waiter([&] {
        l.lock();  // sleeps in the kernel: the holder keeps it well past any spinning
        got = true;
        l.unlock();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK_FALSE(got.load());
    l.unlock();
    waiter.join();
    CHECK(got.load());
    CHECK(l.try_lock());  // left free, with no waiter mark that would make the next unlock wake anyone
    l.unlock();
}
