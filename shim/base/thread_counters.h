// Counters that the allocation path adds to at every call, kept per thread.
//
// Why: an atomic add is a locked instruction. It waits for every store the thread still has buffered
// (a block event's slot, the stack words just compared) and takes the counter's line from whichever
// core added last: on the CPU machine the walker's count of walks alone held 18% of a recalled walk's
// samples (BENCHMARKS.md, the seventh session). Here each thread adds to a slot of its own with a plain
// load and store; a reader (a report, a test: rare) adds the slots up.
//
// A slot is its thread's for good, so what a thread counted outlives it (and a forked child keeps its
// parent's counts, as with one shared atomic). Slots are not handed back: threads past kCounterSlots
// (counting every thread that ever added) share one slot with atomic adds, so the totals stay exact
// and those threads only pay what every thread paid before.
//
// An add is a load and a store: one that interrupted them on the same thread (a signal handler's)
// would be lost. Every caller adds inside capture() (shim/stacks/capture.cpp), whose per-thread guard
// turns such a nested capture away before it counts.
#pragma once
#include <atomic>
#include <cstdint>

namespace gg {

namespace detail {
inline std::atomic<int> g_next_counter_slot{0};
// initial-exec: the shim is preloaded, so its TLS is in the static block (no call into the loader).
__attribute__((tls_model("initial-exec"))) inline thread_local int t_counter_slot = -1;
}  // namespace detail

constexpr int kCounterSlots = 256;

// This thread's slot in every ThreadCounters (and its stripe of the unwinders' count, shim/stacks/unwind.cpp):
// claimed at its first use, kCounterSlots when past the last.
inline int counter_slot() {
    int s = detail::t_counter_slot;
    if (__builtin_expect(s >= 0, 1)) return s;
    // Claimed only while some are left: a count of every thread ever started could wrap.
    s = detail::g_next_counter_slot.load(std::memory_order_relaxed);
    if (s < kCounterSlots) s = detail::g_next_counter_slot.fetch_add(1, std::memory_order_relaxed);
    if (s >= kCounterSlots) s = kCounterSlots;
    return detail::t_counter_slot = s;
}

// How many slots have been claimed (at most kCounterSlots).
inline int counter_slots_claimed() {
    int used = detail::g_next_counter_slot.load(std::memory_order_relaxed);
    return used < kCounterSlots ? used : kCounterSlots;
}

// N counters, numbered 0 to N-1 (an enum's values, usually).
template <int N>
class ThreadCounters {
public:
    void add(int counter, uint64_t n = 1) {
        int s = counter_slot();
        std::atomic<uint64_t> &c = slots_[s].c[counter];
        if (s == kCounterSlots) {
            c.fetch_add(n, std::memory_order_relaxed);  // the slot threads past the last share
            return;
        }
        c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);  // only this thread writes it
    }

    uint64_t total(int counter) const {
        int used = counter_slots_claimed();
        uint64_t sum = slots_[kCounterSlots].c[counter].load(std::memory_order_relaxed);
        for (int s = 0; s < used; s++) sum += slots_[s].c[counter].load(std::memory_order_relaxed);
        return sum;
    }

private:
    struct alignas(64) Slot {  // a line of its own: no two threads write one line
        std::atomic<uint64_t> c[N] = {};
    };
    Slot slots_[kCounterSlots + 1];  // zero-initialised, in .bss: pages no thread used cost nothing
};

}  // namespace gg
