// A reader-writer lock whose shared side is one atomic instruction to take and one to release when
// no writer is about, with no call into libc: the stream-ordered allocation hooks take it shared on
// every call (shim/usage/pools.h says why), pthread_rwlock_rdlock and unlock would be about 100
// instructions of libc's code each. Writers (a reading of the pools, about once a second) are rare
// and short, and preferred: a writer that waits stops new readers, so that steady traffic cannot
// keep it out. Waiters sleep in the kernel (futex). Neither side is recursive: a thread that holds
// it shared must not take it again, shared or exclusive, while a writer may be waiting.
#pragma once
#include <atomic>
#include <cstdint>
#include <new>

#include "shim/base/futex_lock.h"

namespace gg {

class SharedLock {
public:
    void lock_shared() {
        if (__builtin_expect(!(state_.fetch_add(1, std::memory_order_acquire) & kWriter), 1)) return;
        lock_shared_contended();
    }
    void unlock_shared() {
        if (__builtin_expect(state_.fetch_sub(1, std::memory_order_release) & kWriter, 0)) wake_all();
    }
    void lock();
    void unlock();
    // In a child after fork(): the threads that held it are not there.
    void reset() {
        state_.store(0);
        writers_.~FutexLock();
        new (&writers_) FutexLock();
    }

private:
    static constexpr uint32_t kWriter = 1u << 31;  // below it: the readers in (or backing out)
    void lock_shared_contended();
    void wake_all();

    std::atomic<uint32_t> state_{0};
    FutexLock writers_;  // one writer at a time
};

}  // namespace gg
