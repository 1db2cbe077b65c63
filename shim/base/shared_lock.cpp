#include "shim/base/shared_lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace gg {

namespace {
void futex_wait(std::atomic<uint32_t> &word, uint32_t seen) {
    // Sleeps only while the word is still `seen`; a spurious or interrupted wake just looks again.
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
}
}  // namespace

// Out of line and rarely run: a writer holds it or waits for it.
void SharedLock::lock_shared_contended() {
    for (;;) {
        // Back out, so that the writer's wait for the readers to drain is not held up by this one.
        unlock_shared();
        uint32_t seen = state_.load(std::memory_order_relaxed);
        while (seen & kWriter) {
            futex_wait(state_, seen);
            seen = state_.load(std::memory_order_relaxed);
        }
        if (!(state_.fetch_add(1, std::memory_order_acquire) & kWriter)) return;
    }
}

void SharedLock::lock() {
    writers_.lock();
    uint32_t seen = state_.fetch_or(kWriter, std::memory_order_acquire) | kWriter;
    // Every change of the word (a reader leaving or backing out) wakes the wait or fails it.
    while (seen != kWriter) {
        futex_wait(state_, seen);
        seen = state_.load(std::memory_order_acquire);
    }
}

void SharedLock::unlock() {
    state_.fetch_and(~kWriter, std::memory_order_release);
    wake_all();
    writers_.unlock();
}

void SharedLock::wake_all() {
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(&state_), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace gg
