// The deduplicated stack table: a stack (a sequence of machine words) -> a small integer id, stored
// once however often it is seen. Internal to the stacks module; knows nothing of frames.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gg::stacks::table {

// Interns words[0..n), 1 <= n <= kMaxWords, with a caller-defined tag (shim/stacks/stacks.cpp: the number of
// native frames, so that the same words split differently are different stacks). Returns a 1-based id, or 0 when the
// table is full (then logs once) or n is out of range. Thread-safe; allocates only when the stack is new.
uint32_t intern(const uintptr_t *words, uint32_t n, uint32_t tag);

// Copies out the words and tag of an id; false for 0 or an id never returned by intern().
bool get(uint32_t id, std::vector<uintptr_t> *words, uint32_t *tag);

// Copies the first min(n, max) words of an id into out[] without allocating (a capture's hot path);
// returns n, the id's whole length, and sets its tag. 0 for 0 or an id never returned by intern().
uint32_t copy(uint32_t id, uintptr_t *out, uint32_t max, uint32_t *tag);

// Distinct stacks interned so far.
size_t count();

// Longest word sequence intern() accepts.
constexpr uint32_t kMaxWords = 1024;

// fork(): the lock(s) here are taken before fork and released on both sides (shim/start/start.cpp), so that the
// child never inherits one held by a thread that does not exist there.
void lock_for_fork();
void unlock_after_fork();

}  // namespace gg::stacks::table
