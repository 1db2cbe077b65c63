// The caching walker's per-thread table of rules by return address (shim/stacks/cfi_walker.cpp). Internal to the
// stacks module (and its tests).
//
// Two ways per set, 4096 sets. A thread of a PyTorch program walks 2,000 to 3,000 distinct return
// addresses. In the direct-mapped table of 4,096 entries this replaced, 38% to 52% of them shared
// their entry with another (random addresses in a process's loaded code, 20 trials), and where two
// that take turns do, every walk learns both again. Which ones do depends on where the libraries
// were loaded, so it changed from process to process: on the GPU machine one training run learned
// 2,221 rules in 15,585 walks and the next 26,366 in 14,779 (tests/bench/gpu_profile.sh,
// BENCHMARKS.md). With two ways and twice the entries, 3% to 6% of the addresses find their set full.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gg::stacks::cfi {

template <class Rule>
class RuleTable {
public:
    static constexpr int kSetBits = 12;
    static constexpr size_t kSets = size_t(1) << kSetBits;

    // The rule stored for pc, or null. (pc 0 marks a free entry and is never stored.)
    const Rule *find(uintptr_t pc) const {
        const Entry *set = &entries_[2 * set_of(pc)];
        if (set[0].pc == pc && pc) return &set[0].rule;
        if (set[1].pc == pc && pc) return &set[1].rule;
        return nullptr;
    }

    // Stores pc's rule as the newest of its set; the set's older entry makes room.
    const Rule &store(uintptr_t pc, const Rule &rule) {
        Entry *set = &entries_[2 * set_of(pc)];
        set[1] = set[0];
        set[0] = Entry{pc, rule};
        return set[0].rule;
    }

    // Forgets the entries whose rule `stale` answers true for.
    template <class Pred>
    void forget_if(Pred stale) {
        for (Entry &e : entries_)
            if (e.pc && stale(e.rule)) e = Entry{};
    }
    void forget_all() {
        for (Entry &e : entries_) e = Entry{};
    }

    // Multiplicative hashing: the top bits of pc times an odd constant mix every bit of the address,
    // so functions 4 KiB or 1 MiB apart do not share sets any more often than others.
    static size_t set_of(uintptr_t pc) { return size_t((uint64_t(pc) * 0x9E3779B97F4A7C15ull) >> (64 - kSetBits)); }

private:
    struct Entry {
        uintptr_t pc = 0;
        Rule rule{};
    };
    Entry entries_[2 * kSets];
};

}  // namespace gg::stacks::cfi
