// The kernel's futex on a word of our own: a thread sleeps while the word holds a value, and another
// wakes it after changing it. Private to the process (no shared mapping waits on these words).
#pragma once
#include <atomic>
#include <cstdint>

namespace gg {

// Sleeps while `word` still equals `expected`; returns at once otherwise. A wake for no reason (a
// signal, another waker) returns too: callers look at the word again.
void futex_wait(std::atomic<uint32_t> &word, uint32_t expected);
// Wakes up to `waiters` threads sleeping on `word`.
void futex_wake(std::atomic<uint32_t> &word, int waiters);

}  // namespace gg
