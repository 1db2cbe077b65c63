#include "shim/base/futex_lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace gg {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "the futex word is the atomic itself");

// Out of line and rarely run: only when another thread holds the lock.
void FutexLock::lock_contended(uint32_t seen) {
    // Mark the lock waited-for (2) before sleeping, so that its holder's unlock wakes someone; a
    // thread that takes it this way keeps the 2, since others may still sleep.
    if (seen != 2) seen = state_.exchange(2, std::memory_order_acquire);
    while (seen != 0) {
        // Sleeps only while the word is still 2; a spurious or interrupted wake just looks again.
        syscall(SYS_futex, reinterpret_cast<uint32_t *>(&state_), FUTEX_WAIT_PRIVATE, 2u, nullptr, nullptr, 0);
        seen = state_.exchange(2, std::memory_order_acquire);
    }
}

void FutexLock::wake_one() {
    syscall(SYS_futex, reinterpret_cast<uint32_t *>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace gg
