// Reuse of a stack already captured at the same call site. Internal to the stacks module.
//
// Why: in a PyTorch program every allocation's native stack runs through libtorch, and unwinding it
// costs about 10 µs on the GPU machine (DWARF lookups in large libraries, caches cold after the
// driver call: tests/bench/gpu_profile.sh), while a training loop makes the same few hundred
// allocations, from the same sites, every step. So a Python thread's stack is unwound once per site
// and then reused.
//
// The site's key is what identifies it without unwinding: the whole Python stack (every frame's file,
// function and line), the stack pointer at capture (the native path's depth below the interpreter)
// and the number of frames skipped. Two native paths under one Python line that end at the same depth
// would share a key: each reuse at the 1st, 2nd, 4th, 8th ... 1024th hit, then every 1024th, is
// checked by unwinding anyway. A check that finds another stack replaces the cached one and starts
// the schedule again (a library takes another path once it has warmed up, and keeps to it); the
// third time a site's stack changes, it is never reused again. Two paths that take turns are so
// caught within three allocations, each of which kept its own stack. (Stacks that differ only in
// where inside the interpreter's eval loop a frame stood are the same site: CPython specialises its
// instructions as a program warms up, which moves those return addresses.) Threads
// without Python frames (PyTorch's autograd threads, C++ programs) always unwind: their key would rest
// on the stack pointer alone. GPUGUARD_STACK_REUSE=0 turns reuse off.
//
// The cache is per thread (no lock), direct-mapped, and never holds more than kSlots sites.
#pragma once
#include <atomic>
#include <cstdint>

namespace gg::stacks::reuse {

using StackId = uint32_t;

class SiteCache {
public:
    static constexpr int kSlots = 256;

    enum class Verdict {
        kMiss,   // unwind, then store()
        kReuse,  // *id is the site's stack
        kCheck,  // a reuse due for its check: unwind, then checked()
    };
    Verdict lookup(uint64_t key, StackId *id);
    void store(uint64_t key, StackId id);
    // After a check: `same` says whether the fresh stack is the cached one (shim/stacks/stacks.cpp decides,
    // ignoring where exactly in the eval loop the interpreter was). A different one replaces it and
    // restarts the checks; the kMaxChanges-th change makes the site never reused again.
    void checked(uint64_t key, bool same, StackId fresh);
    static constexpr int kMaxChanges = 3;

    // Whether the hit number `n` (1-based) is checked: powers of two up to 1024, then every 1024th.
    static bool due(uint32_t n) { return n <= 1024 ? (n & (n - 1)) == 0 : n % 1024 == 0; }

private:
    struct Slot {
        uint64_t key = 0;
        StackId id = 0;
        uint32_t hits = 0;
        uint8_t changes = 0;
        bool unstable = false;
    };
    Slot slots_[kSlots];
    Slot &slot_of(uint64_t key) { return slots_[(key ^ key >> 29) % kSlots]; }
};

// Process-wide counts, for the report's "capture" section.
struct Counts {
    std::atomic<uint64_t> reused{0}, unwound{0}, checks{0}, changes{0}, unstable_sites{0};
};
Counts &counts();

// Mixes one word into a key (a 64-bit multiply-xorshift; collisions are as rare as in any 64-bit hash).
inline uint64_t mix(uint64_t h, uint64_t word) {
    h ^= word + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
}

}  // namespace gg::stacks::reuse
