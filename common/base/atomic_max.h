// Raising an atomic high-water mark: the peaks of the ledger, the tracker and the cuDNN record.
#pragma once
#include <atomic>
#include <cstdint>

namespace gg {

// Sets `peak` to `v` when `v` is larger; concurrent raisers leave the largest. Relaxed: a peak
// orders nothing else.
inline void raise_to(std::atomic<uint64_t> &peak, uint64_t v) {
    uint64_t cur = peak.load(std::memory_order_relaxed);
    while (v > cur && !peak.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {}
}

}  // namespace gg
