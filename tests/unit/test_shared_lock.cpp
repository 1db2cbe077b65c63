#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "shim/base/shared_lock.h"

using namespace gg;

// Readers overlap one another, never a writer; a writer waits for the readers in, and gets in
// while readers keep coming (it is preferred), as the pools' readings must (shim/usage/pools.h).
TEST_CASE("SharedLock: readers share it, a writer excludes them and is not starved") {
    SharedLock l;
    std::atomic<int> readers{0}, writers{0}, overlap{0};
    std::atomic<bool> stop{false};
    std::atomic<long> writes{0};
    std::vector<std::thread> ts;
    for (int i = 0; i < 4; i++)
        ts.emplace_back([&] {
            while (!stop.load()) {
                l.lock_shared();
                readers.fetch_add(1);
                if (writers.load()) overlap.fetch_add(1);
                std::this_thread::yield();
                readers.fetch_sub(1);
                l.unlock_shared();
            }
        });
    for (int i = 0; i < 2; i++)
        ts.emplace_back([&] {
            for (int k = 0; k < 300; k++) {
                l.lock();
                if (writers.fetch_add(1) != 0 || readers.load() != 0) overlap.fetch_add(1);
                writes.fetch_add(1);
                writers.fetch_sub(1);
                l.unlock();
            }
        });
    ts[4].join();
    ts[5].join();
    stop = true;
    for (int i = 0; i < 4; i++) ts[i].join();
    CHECK(overlap.load() == 0);
    CHECK(writes.load() == 600);
}

TEST_CASE("SharedLock: reset frees a lock that threads gone in a fork held") {
    SharedLock l;
    l.lock_shared();
    l.reset();
    l.lock();
    l.unlock();
}
