// Walks remembered by what they read: the caching walker's per-thread memo (shim/stacks/cfi_walker.cpp).
// Internal to the stacks module (and its tests).
//
// Why: a walk is a chain of dependent lookups, each frame's rule found by the return address the frame
// before gave, so a 19-frame walk costs 19 lookups of the rule table one after another. On the GPU
// machine, between two of PyTorch's block events the table drops out of the nearer caches and each
// lookup waits for memory: 600 to 700 ns a walk of the autograd thread's allocation sites
// (BENCHMARKS.md). Yet the walk is a pure function of where it starts (the stack pointer, which for one
// thread is the depth of the call path), the frame pointer when a rule reads it before any frame
// restores it, and the stack words it loads: the same start and the same words give the same walk,
// return addresses and end included, as long as the rules are the same (the memo is emptied whenever
// the walker forgets rules). So a walk is remembered as the list of (offset from its start, word) it
// loaded, and a later walk from the same depth first compares those words: they can all be loaded at
// once, from the thread's own stack, where the walk would have waited on each in turn. A word that
// differs makes it walk anew and remember that walk. Exact: a memo answers only for stacks whose
// every word the walk would read is the one it read.
//
// One start, many walks: autograd's thread allocates from many call paths at one stack depth (the
// H200's census counted more walks at one depth than a set's ways, each keeping pushed out the next;
// BENCHMARKS.md). Walks from one start read the same words until the first return address where their
// call paths part, and that word's offset (a fork) is learned when two of them meet in a set; from then
// on the set is chosen by the start and the stack's word at the fork. Paths that agree there may part
// further out (autograd's backward functions share at::empty's frames, then part at the function), so
// two walks that meet in a set chosen by the forks known teach the start one more, up to kForkWords:
// each path has its set. (With one fork, the walks of every operator through at::empty shared one set
// and pushed each other out: an H100 census counted 3,166 walks anew in 40 llama steps, BENCHMARKS.md.)
// The choice of set only says where to look: a walk is still recalled only when every word matches.
#pragma once
#include <cstdint>
#include <cstring>

#include "shim/base/profile.h"
#include "shim/stacks/census.h"

namespace gg::stacks::cfi {

class WalkMemo {
public:
    // A whole capture's walk, the default 48 frames and the shim's own and c10's above them, through
    // code built with frame pointers: there each frame's rule reads the saved rbp as well as the return
    // address (Ubuntu 24.04's and Fedora's packages, programs built for profilers). At 72, a stack of
    // such frames was never kept and was walked anew at every allocation.
    static constexpr int kMaxLoads = 128;
    static constexpr int kSets = 128;  // 512 walks of 1,336 bytes: 668 KiB (674 with the forks) a thread that walks
    static_assert(kMaxLoads % 64 == 0 && kMaxLoads <= 255, "loads: bits of is_return_address, a uint8_t count");
    static constexpr int kWays = 4;
    static constexpr int kForks = 256;    // starts whose forks are known (6 KiB)
    static constexpr int kForkWays = 4;   // in sets of 4: two busy starts of one slot took it from each other
    static constexpr int kForkWords = 4;  // forks a start learns at most

    // What a walk read, recorded as it goes (a walk that reads more than kMaxLoads words is not kept).
    struct Recording {
        int loads = 0;
        bool overflow = false;
        bool read_fp = false;  // a rule read the frame pointer the walk started with
        // It ended at the thread's outermost frame: not cut short, nor at code without unwind information.
        bool whole = false;
        uint16_t offset[kMaxLoads];
        uintptr_t word[kMaxLoads];
        uint64_t is_return_address[kMaxLoads / 64] = {};  // bit i: load i was a return address (an output)
        void load(uintptr_t sp0, uintptr_t at, uintptr_t value, bool return_address) {
            uintptr_t words = (at - sp0) / sizeof(uintptr_t);
            if (loads == kMaxLoads || words > UINT16_MAX || (at - sp0) % sizeof(uintptr_t)) {
                overflow = true;
                return;
            }
            offset[loads] = uint16_t(words);
            word[loads] = value;
            if (return_address) is_return_address[loads / 64] |= uint64_t(1) << (loads % 64);
            loads++;
        }
    };

    // The walk's start: the thread's stack depth at it, its frame pointer, and what the walk was asked.
    struct Start {
        uintptr_t sp, fp;
        uint32_t depth;  // stack high - sp
        int max;
        const void *stop;
    };

    // The walk a caller may attach a value to (its tag: the capture's stack id): the one recalled or
    // remembered last; null after a walk that was neither.
    struct Tag {
        uint32_t value = 0;  // 0: none yet
        uint16_t salt = 0;   // what else the value depends on (the frames the capture skipped)
        bool whole = false;  // the walk's Recording::whole, set when it was remembered (tags keep it)
    };
    Tag *last() { return last_; }
    void clear_last() { last_ = nullptr; }

    // For the profiling build's census: whether the last recall that failed had a walk from the same
    // start, and whether the last walk kept pushed one out (and from the same start).
    bool missed_with_start() const { return missed_with_start_; }
    // How many forks the start has learned (tests).
    int forks(const Start &s) {
        const Fork *f = find_fork(hash_of(s));
        return f ? f->count : 0;
    }
    enum class Evicted { kNone, kSameStart, kOtherStart };
    Evicted last_eviction() const { return last_eviction_; }

    // The return addresses of a remembered walk from `s` whose every word is as it was, into ips;
    // -1 when none is. `load(at)` reads a stack word. None are copied (0) when the walk has a value
    // under the salt `tag_only` (>= 0): its caller wants only that (last()).
    template <class Load>
    int recall(const Start &s, uint32_t generation, void **ips, Load load, int tag_only = -1) {
        GG_PROFILE_STEP(kMemoRecall);
        last_ = nullptr;
        if (generation != generation_) return forget(generation), -1;
        Entry *set;
        {
            GG_PROFILE_STEP(kMemoSet);
            set = set_of(s, load);
        }
        missed_with_start_ = false;
        Entry *found = nullptr;
        {
            GG_PROFILE_STEP(kMemoCompare);
            for (int w = 0; w < kWays && !found; w++) {
                Entry &e = set[w];
                if (!same_start(e, s)) continue;
                missed_with_start_ = true;
                if (e.read_fp && e.fp != s.fp) continue;
                census::memo(census::Memo::kComparedInFull);
                if (same_words(e, s.sp, load)) found = &e;
            }
        }
        if (Entry *hit = found) {
            Entry &e = *hit;
            e.used = ++clock_;
            last_ = &e.tag;
            if (e.tag.value && e.tag.salt == tag_only) return 0;
            GG_PROFILE_STEP(kMemoCopy);
            int n = 0;
            for (int i = 0; i < e.loads; i++)  // a zero return address ended the walk without being one of its
                if ((e.is_return_address[i / 64] >> (i % 64) & 1) && e.word[i])
                    ips[n++] = reinterpret_cast<void *>(e.word[i]);
            return n;
        }
        return -1;
    }

    // Keeps a walk from `s` that returned n >= 0 addresses, in place of the least recent of its set.
    template <class Load>
    void remember(const Start &s, uint32_t generation, const Recording &r, Load load) {
        last_ = nullptr;
        if (r.overflow || r.loads == 0 || generation != generation_) return;
        Entry *set = set_of(s, load);
        if (learn_fork(s, set, r)) set = set_of(s, load);
        Entry *victim = least_recent(set);
        last_eviction_ = !victim->loads           ? Evicted::kNone
                         : same_start(*victim, s) ? Evicted::kSameStart
                                                  : Evicted::kOtherStart;
        victim->depth = s.depth;
        victim->max = s.max;
        victim->stop = s.stop;
        victim->read_fp = r.read_fp;
        victim->fp = s.fp;
        victim->loads = uint8_t(r.loads);
        memcpy(victim->is_return_address, r.is_return_address, sizeof r.is_return_address);
        memcpy(victim->offset, r.offset, sizeof(uint16_t) * r.loads);
        memcpy(victim->word, r.word, sizeof(uintptr_t) * r.loads);
        victim->used = ++clock_;
        victim->tag = Tag();
        victim->tag.whole = r.whole;
        last_ = &victim->tag;
    }

private:
    struct Entry {
        uint32_t depth = 0;
        int16_t max = 0;
        uint8_t loads = 0;  // 0: empty
        bool read_fp = false;
        const void *stop = nullptr;
        uintptr_t fp = 0;
        uint64_t is_return_address[kMaxLoads / 64] = {};
        uint32_t used = 0;
        Tag tag;
        uint16_t offset[kMaxLoads];  // in words from the start (a walk within 512 KiB of stack)
        uintptr_t word[kMaxLoads];
    };
    Entry entries_[kSets * kWays];
    Tag *last_ = nullptr;
    uint32_t generation_ = 0, clock_ = 0;
    bool missed_with_start_ = false;
    Evicted last_eviction_ = Evicted::kNone;

    // Where the walks from one start part (see the header): the offsets, in words from the start, of the
    // words that told two of them apart, in the order they were learned. A set of the start holds the
    // walks that agree on every one of those words.
    struct Fork {
        uint64_t start = 0;    // the start's hash; 0: no fork known
        uint32_t learned = 0;  // the memo's clock when it last learned one: the least recent gives way
        uint8_t count = 0;
        uint16_t offset[kForkWords] = {};
    };
    Fork forks_[kForks];

    static uint64_t hash_of(const Start &s) {
        uint64_t h =
            (uint64_t(s.depth) * 0x9E3779B97F4A7C15ull) ^ uint64_t(s.max) ^ reinterpret_cast<uintptr_t>(s.stop);
        return h | 1;  // never 0, which marks a fork slot unused
    }
    Fork *fork_set(uint64_t h) { return &forks_[(h >> 32) % (kForks / kForkWays) * kForkWays]; }
    const Fork *find_fork(uint64_t h) {
        Fork *set = fork_set(h);
        for (int w = 0; w < kForkWays; w++)
            if (set[w].start == h) return &set[w];
        return nullptr;
    }
    // The start's forks, to learn one more: its own, or the way of its set that learned least recently
    // (that start's walks then wait in sets its recall no longer looks in, and are walked anew).
    Fork &fork_to_learn(uint64_t h) {
        Fork *set = fork_set(h), *victim = &set[0];
        for (int w = 0; w < kForkWays; w++) {
            if (set[w].start == h) return set[w];
            if (set[w].learned < victim->learned) victim = &set[w];
        }
        *victim = Fork{h, 0, 0, {}};
        return *victim;
    }
    static uint64_t with_fork_word(uint64_t h, uintptr_t word) { return (h ^ word) * 0xC2B2AE3D27D4EB4Full; }
    Entry *set_at(uint64_t h) { return &entries_[(h >> 40) % kSets * kWays]; }

    // The start's set: by the start alone until a fork is known, then by the start and the stack's words
    // at its forks (they lie within the caller's frames, which no walk's own frames overwrite). The words
    // are independent loads, in flight at once.
    template <class Load>
    Entry *set_of(const Start &s, Load load) {
        uint64_t h = hash_of(s);
        const Fork *f = find_fork(h);
        if (!f) return set_at(h);
        for (int i = 0; i < f->count; i++) {
            // Within the stack even where another start's forks came with a hash equal to this one's.
            uintptr_t at = sizeof(uintptr_t) * f->offset[i];
            h = with_fork_word(h, at < s.depth ? load(s.sp + at) : 0);
        }
        return set_at(h);
    }
    // The set a kept walk belongs in, by the words it read at the forks; null when it read none at one
    // (it ended before), and no set can be told from its own words.
    Entry *set_of_entry(const Entry &e, uint64_t h, const Fork &f) {
        for (int i = 0; i < f.count; i++) {
            int at = 0;
            while (at < e.loads && e.offset[at] != f.offset[i]) at++;
            if (at == e.loads) return nullptr;
            h = with_fork_word(h, e.word[at]);
        }
        return set_at(h);
    }
    // An empty way first (one a move emptied keeps its clock), else the least recently used.
    Entry *least_recent(Entry *set) {
        Entry *victim = &set[0];
        for (int w = 0; w < kWays; w++) {
            if (!set[w].loads) return &set[w];
            if (set[w].used < victim->used) victim = &set[w];
        }
        return victim;
    }
    static bool same_start(const Entry &e, const Start &s) {
        return e.loads && e.depth == s.depth && e.max == s.max && e.stop == s.stop;
    }

    // When the new walk meets a walk of its start in its set, the first word where the two differ (the
    // same start and the same words before it put both loads at one offset) is a new fork, unless it
    // is a fork already known: the sets are few, and walks told apart by a fork still meet in one by the
    // hash of their words (the set's LRU decides between those). Autograd's paths part at one frame,
    // then again further out, each part with more paths than a set has ways. True when a fork was
    // learned, and the set must be chosen again.
    bool learn_fork(const Start &s, Entry *set, const Recording &r) {
        uint64_t h = hash_of(s);
        const Fork *known = find_fork(h);
        if (known && known->count == kForkWords) return false;  // as told apart as it gets: the set's LRU decides
        for (int w = 0; w < kWays; w++) {
            const Entry &e = set[w];
            if (!same_start(e, s)) continue;
            int i = 0;
            while (i < e.loads && i < r.loads && e.offset[i] == r.offset[i] && e.word[i] == r.word[i]) i++;
            if (i == e.loads || i == r.loads || e.offset[i] != r.offset[i] || is_fork(known, r.offset[i])) continue;
            Fork &f = fork_to_learn(h);
            f.offset[f.count++] = r.offset[i];
            f.learned = ++clock_;
            move_to_forked_sets(s, h, f);
            return true;
        }
        return false;
    }
    static bool is_fork(const Fork *f, uint16_t offset) {
        for (int i = 0; f && i < f->count; i++)
            if (f->offset[i] == offset) return true;
        return false;
    }
    // Every walk of the start kept so far, to the set its words at the forks now choose, as recall()
    // will look for it (a walk that ended before a fork is let go). Rare: at most kForkWords times a
    // start while it keeps its fork slot, so a pass over the whole memo is affordable.
    void move_to_forked_sets(const Start &s, uint64_t h, const Fork &f) {
        for (Entry &e : entries_) {
            if (!same_start(e, s)) continue;
            Entry *to = set_of_entry(e, h, f);
            Entry *from = &entries_[(&e - entries_) / kWays * kWays];
            if (to == from) continue;
            if (to) *least_recent(to) = e;
            e.loads = 0;
        }
    }
    // Every word compared, with no early exit between the loads: they are independent, so the processor
    // has them all in flight at once.
    template <class Load>
    static bool same_words(const Entry &e, uintptr_t sp, Load load) {
        uintptr_t differ = 0;
        for (int i = 0; i < e.loads; i++) differ |= load(sp + sizeof(uintptr_t) * e.offset[i]) ^ e.word[i];
        return differ == 0;
    }
    int forget(uint32_t generation) {
        for (Entry &e : entries_) e.loads = 0;
        for (Fork &f : forks_) f = Fork();
        last_ = nullptr;
        generation_ = generation;
        return -1;
    }
};

}  // namespace gg::stacks::cfi
