// Reuse of a stack already captured at the same call site. Internal to the stacks module.
//
// Why: in a PyTorch program every allocation's native stack runs through libtorch, and unwinding it
// costs about 10 µs on the GPU machine (DWARF lookups in large libraries, caches cold after the
// driver call: tests/bench/gpu_profile.sh), while a training loop makes the same few hundred
// allocations, from the same sites, every step. So a Python thread's stack is unwound once per site
// and then reused.
//
// The site's key is what identifies it without unwinding: for a thread running Python, its 12 innermost
// Python frames (each frame's code object and instruction address, read from the frames alone:
// shim/python/frames.h, site_key) and the number of frames skipped (not the stack pointer: the C
// stack's depth under one Python stack changes as CPython specialises calls, shim/stacks/capture.cpp).
// The whole Python stack's key is stored beside the stack and compared at the 1st, 2nd, 4th ... 64th
// reuse and then once in every 32, at a place that moves (deep_due); a site found reached from
// elsewhere further out is deep (so at most 62 reuses in a row between two of those checks can take an
// earlier stack). A deep site is keyed next by where its Python stack stands under the innermost frames
// (the address of the first frame left out, which the frames further out decide), so that its callers
// are told apart without a walk of every frame; that key is checked against the whole key on the same
// schedule: a check that finds another whole stack gives the key that stack (a caller's line that
// changed for good), and at the third such change that height of the site is keyed by its whole
// Python stack from then on.
// Two native paths under one Python instruction share a key: each reuse at the 1st, 2nd, 4th, 8th ... 1024th hit, then
// one in every 512 (due), is checked by the native frames between the allocation and the innermost eval loop (the only
// part that can differ under one key; a walk the walk memo recalls), and only a check that finds other frames unwinds
// in full (shim/stacks/capture.cpp, confirmed_by_native_frames). A check that finds another stack replaces the cached
// one and starts the schedule again (a library takes another path once it has warmed up, and keeps to
// it); the third time a site's stack changes, the site is unstable (one Python line whose calls take
// several native paths: a generate() step's first token and the next ones). An unstable site's key
// is then extended with where the thread's stack stands (the paths almost always differ in depth; such
// a key is checked as any other), and where that is unstable too, with the native return addresses
// between the allocation and the innermost eval
// loop (a walk that stops there, recalled from the stack words it read before where they are the
// same: shim/stacks/walk_memo.h), which is all that can differ under one Python key; only a site
// unstable under that key too unwinds every time. (Stacks that differ only in where inside the interpreter's eval loop
// a frame stood are the same site: CPython specialises its instructions as a program warms up, which moves those return
// addresses.) Threads without Python frames (PyTorch's autograd threads, C++ programs) need no key:
// their walk itself is recalled, with the stack it gave (capture_native in shim/stacks/capture.cpp).
// GPUGUARD_STACK_REUSE=0 turns reuse off.
//
// The cache is per thread (no lock), kWays-way set-associative (a training step's few hundred sites
// would collide in a direct-mapped table: two sites sharing a slot evict each other at every step and
// both unwind every time), and never holds more than kSets * kWays sites.
#pragma once
#include <atomic>
#include <cstdint>

#include "common/base/hash_mix.h"
#include "shim/base/thread_counters.h"
#include "shim/stacks/check_window.h"

namespace gg::stacks::reuse {

using StackId = uint32_t;

class SiteCache {
public:
    static constexpr int kSets = 1024;
    static constexpr int kWays = 4;

    enum class Verdict {
        kMiss,       // unwind, then store()
        kReuse,      // *id is the site's stack
        kCheck,      // a reuse due for its check: unwind, then checked(); and the deep check below
        kUnstable,   // the site's stack changed kMaxChanges times under this key: extend the key, or unwind
        kCheckDeep,  // a reuse due for its deep check only: the whole Python key against *whole
        kDeep,       // a key that covered two whole stacks: extend it by where the Python stack stands, or use
                     // the whole key (shim/stacks/capture.cpp, settle_deep)
    };
    // *whole (when asked): the whole Python stack's key stored with the site's stack, 0 when the site's
    // key already covers every frame; a site with one is due for a deep check on deep_due()'s schedule.
    Verdict lookup(uint64_t key, StackId *id, uint64_t *whole = nullptr);
    void store(uint64_t key, StackId id, uint64_t whole = 0);
    // After a deep check found another whole stack under `key`: from now on kDeep.
    void mark_deep(uint64_t key);
    // After a deep check found another whole stack under a key extended by where the Python stack stands:
    // whether the key may take the new stack (stored as a miss's, its history kept), as a caller that
    // warmed up from one line and runs from another leaves it for good; false at the kMaxChanges-th such
    // change (the caller then marks it deep: two callers at one height that take turns).
    bool may_change_whole(uint64_t key);
    // Whether a key is still worth extending by where the thread's stack stands (an unstable site's by the
    // C stack's depth, a deep site's by where its Python stack stands: shim/stacks/capture.cpp), and a miss
    // of such a key, counted against it. Where it moves on one path (alloca or a sanitizer's fake stacks
    // under C frames; a generator's frame, which lives in the generator, under Python ones) nearly every
    // allocation would be a new key, unwound in full: after kMaxExtensionMisses the site goes on as if
    // it had no such key (native frames for the unstable, every Python frame for the deep).
    bool extensions_help(uint64_t key);
    void missed_extension(uint64_t key);
    static constexpr int kMaxExtensionMisses = 16;
    // After a check: `same` says whether the fresh stack is the cached one (shim/stacks/capture.cpp
    // decides, ignoring where exactly in the eval loop the interpreter was). A different one replaces
    // it and restarts the checks; the kMaxChanges-th change makes the site unstable.
    void checked(uint64_t key, bool same, StackId fresh);
    static constexpr int kMaxChanges = 3;

    SiteCache();

    // Whether the hit number `n` (1-based) is checked: powers of two up to 1024, then one hit in each
    // window of 512, at a place that moves (check_window.h; so never more than 1,022 unchecked in a row).
    static bool due(uint32_t n) { return n <= 1024 ? (n & (n - 1)) == 0 : once_a_window(n, 512); }
    // Whether it gets the deep check: powers of two up to 64, then one hit in each window of 32 (never
    // more than 62 unchecked in a row; a whole Python key costs a walk of every frame, a few hundred ns,
    // against a native check's unwind).
    static bool deep_due(uint32_t n) { return n <= 64 ? (n & (n - 1)) == 0 : once_a_window(n, 32); }
    // The set a key lies in.
    static int set_index(uint64_t key) { return int((key ^ key >> 29) % kSets); }

private:
    struct Slot {
        Slot() : extension_misses(0), whole_changes(0) {}  // (C++17: a bit-field has no default member initializer)
        uint64_t key = 0;                                  // 0: empty
        uint64_t whole = 0;  // the whole Python key under which id was captured (0: key covers it all)
        StackId id = 0;
        uint32_t hits = 0;
        uint32_t used = 0;  // the cache's clock at the last lookup or store: the least recent is evicted
        uint8_t changes = 0;
        uint8_t extension_misses : 5;  // keys extended by where the stack stands, not found (up to 16)
        uint8_t whole_changes : 3;     // deep checks that found another whole stack (may_change_whole)
        bool unstable = false;
        bool deep = false;
    };
    static_assert(kMaxExtensionMisses < 32 && kMaxChanges < 8, "the counts fit their bit-fields");
    static_assert(sizeof(Slot) == 32, "two slots a cache line");
    Slot slots_[kSets * kWays];
    uint32_t clock_ = 0;
    Slot *set_of(uint64_t key) { return &slots_[set_index(key) * kWays]; }
    Slot *find(uint64_t key);
};

// Process-wide counts, for the report's "capture" section.
struct Counts {
    // Counted at captures, many a block event: per thread (shim/base/thread_counters.h).
    // kWholeKeys: keys of every Python frame (a miss's, a deep check's, a deep site's), each a walk of them all
    enum PerCapture { kReused, kUnwound, kChecks, kDeepChecks, kWholeKeys, kPerCapture };
    ThreadCounters<kPerCapture> per_capture;
    void add(PerCapture c) { per_capture.add(c); }
    uint64_t total(PerCapture c) const { return per_capture.total(c); }
    // Counted when a site changes: rare.
    std::atomic<uint64_t> changes{0}, unstable_sites{0};
    // sites dropped from a full set for a newer one: many means more sites than the cache holds
    std::atomic<uint64_t> evicted{0};
    // keys marked deep: a key of the innermost Python frames whose deep check found another whole stack,
    // or one extended by the Python stack's height at its third such change; kDeepChecks counts the whole
    // Python keys compared with the one stored
    std::atomic<uint64_t> deep_sites{0};
    // caches made: one per thread that captured a stack (a new thread starts with an empty cache)
    std::atomic<uint64_t> threads{0};
};
Counts &counts();

// Mixes one word into a key.
inline uint64_t mix(uint64_t h, uint64_t word) { return hash_mix(h, word); }

}  // namespace gg::stacks::reuse
