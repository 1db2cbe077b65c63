// A mutex that takes and releases itself inline when nobody waits: one atomic instruction each,
// with no call into libc. The tracker's shard locks are taken twice in every allocate+free pair,
// right after the driver's call has evicted the caller's caches: pthread_mutex_lock and unlock are
// about 160 instructions on two pages of libc's code and two of its data, each a likely miss then
// (tests/bench/footprint.py). Waiters sleep in the kernel (futex), as with std::mutex.
//
// The classic three-state futex mutex: 0 free, 1 held, 2 held and maybe waited for. Meets the
// standard's Lockable, so std::lock_guard and std::unique_lock work with it. Not recursive.
#pragma once
#include <atomic>
#include <cstdint>

namespace gg {

class FutexLock {
public:
    void lock() {
        uint32_t expected = 0;
        if (__builtin_expect(state_.compare_exchange_strong(expected, 1, std::memory_order_acquire), 1)) return;
        lock_contended(expected);
    }
    bool try_lock() {
        uint32_t expected = 0;
        return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire);
    }
    void unlock() {
        if (__builtin_expect(state_.exchange(0, std::memory_order_release) == 2, 0)) wake_one();
    }

private:
    void lock_contended(uint32_t seen);
    void wake_one();

    std::atomic<uint32_t> state_{0};
};

}  // namespace gg
