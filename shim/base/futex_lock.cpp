#include "shim/base/futex_lock.h"

#include "shim/base/futex.h"

namespace gg {

// Out of line and rarely run: only when another thread holds the lock.
void FutexLock::lock_contended(uint32_t seen) {
    // Mark the lock waited-for (2) before sleeping, so that its holder's unlock wakes someone; a
    // thread that takes it this way keeps the 2, since others may still sleep.
    if (seen != 2) seen = state_.exchange(2, std::memory_order_acquire);
    while (seen != 0) {
        futex_wait(state_, 2);  // only while the word is still 2; a spurious wake just looks again
        seen = state_.exchange(2, std::memory_order_acquire);
    }
}

void FutexLock::wake_one() { futex_wake(state_, 1); }

}  // namespace gg
