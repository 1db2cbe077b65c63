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
// differs makes it walk anew and remember that walk. A recall that compares is exact: it answers only
// for stacks whose every word the walk would read is the one it read (a trusted recall, below, is not).
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
// The choice of set only says where to look: a compared recall still answers only when every word matches.
//
// Trusted recalls: even so, a recall waits on the words it compares (on the GPU machine, half of an
// autograd allocation's stack: BENCHMARKS.md), and a thread without Python frames asks for nothing but
// the walk's tag (its stack id). A walk recalled kComparedHits times with every word compared is
// trusted: a recall that wants only its tag, where it is the one walk under its key (its start and
// its words at the forks) and not contested, gives the tag without comparing, except at one hit in each window of
// kCheckWindow (shim/stacks/check_window.h), compared as before. This is the site cache's bargain
// (shim/stacks/reuse.h), keyed by the start and the fork words: a new path at a trusted walk's start
// that agrees with it at every known fork takes its stack until a check lands on one of its own
// allocations. That check's miss contests the key and the walk (no longer trusted); the walker keeps
// the new walk, contested too, and where the start can learn one more fork the two part there, their
// new keys are not contested, and both are compared again until trusted. Where no fork can tell them
// apart (the start has all its forks, or the new walk is not kept), the key stays contested, and so
// does any walk kept under it later: compared at every recall, as before. The set's
// heads (start, tag, hits) lie apart from the walks' words, on two cache lines a set, so a trusted
// recall reads those and the fork words only.
#pragma once
#include <cstdint>
#include <cstring>

#include "shim/base/profile.h"
#include "shim/stacks/census.h"
#include "shim/stacks/check_window.h"

namespace gg::stacks::cfi {

class WalkMemo {
public:
    // A whole capture's walk, the default 48 frames and the shim's own and c10's above them, through
    // code built with frame pointers: there each frame's rule reads the saved rbp as well as the return
    // address (Ubuntu 24.04's and Fedora's packages, programs built for profilers). At 72, a stack of
    // such frames was never kept and was walked anew at every allocation.
    static constexpr int kMaxLoads = 128;
    // 512 walks of 32 + 1,312 bytes: 672 KiB a thread that walks (680 with the forks and contested keys)
    static constexpr int kSets = 128;
    static_assert(kMaxLoads % 64 == 0 && kMaxLoads <= 255, "loads: bits of is_return_address, a uint8_t count");
    static constexpr int kWays = 4;
    static constexpr int kForks = 256;    // starts whose forks are known (6 KiB)
    static constexpr int kForkWays = 4;   // in sets of 4: two busy starts of one slot took it from each other
    static constexpr int kForkWords = 4;  // forks a start learns at most
    // Trusted recalls (see the header): a walk's first kComparedHits recalls compare every word, and
    // one in each window of kCheckWindow after them.
    static constexpr uint32_t kComparedHits = 64;
    static constexpr uint32_t kCheckWindow = 32;
    static bool compares(uint32_t hit) { return hit <= kComparedHits || once_a_window(hit, kCheckWindow); }

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
    // Whether the last recall was trusted (answered without comparing the words).
    bool trusted() const { return trusted_; }
    // How many forks the start has learned (tests).
    int forks(const Start &s) {
        const Fork *f = find_fork(hash_of(s));
        return f ? f->count : 0;
    }
    enum class Evicted { kNone, kSameStart, kOtherStart };
    Evicted last_eviction() const { return last_eviction_; }

    // The return addresses of a remembered walk from `s` whose every word is as it was, into ips;
    // -1 when none is. `load(at)` reads a stack word. None are copied (0) when the walk has a value
    // under the salt `tag_only` (>= 0): its caller wants only that (last()); such a recall of a trusted
    // walk compares no word but at its checks (see the header).
    template <class Load>
    int recall(const Start &s, uint32_t generation, void **ips, Load load, int tag_only = -1) {
        GG_PROFILE_STEP(kMemoRecall);
        last_ = nullptr;
        trusted_ = false;
        if (generation != generation_) return forget(generation), -1;
        Set set;
        {
            GG_PROFILE_STEP(kMemoSet);
            set = set_of(s, load);
        }
        missed_with_start_ = false;
        if (tag_only >= 0 && !s.stop) {
            Head *h = trusted_way(set, s, tag_only);
            if (h) {
                h->used = ++clock_;
                last_ = &h->tag;
                trusted_ = true;
#ifdef GG_TRUST_AUDIT  // a profiling build's audit of the bargain: how often trust answered wrong (BENCHMARKS.md)
                if (!same_words(bodies_[h - heads_], h->loads, s.sp, load)) census::memo(census::Memo::kTrustedWrong);
#endif
                return 0;
            }
        }
        int found = -1;
        {
            GG_PROFILE_STEP(kMemoCompare);
            for (int w = 0; w < kWays && found < 0; w++) {
                int i = set.first + w;
                if (!same_start(i, s)) continue;
                missed_with_start_ = true;
                if (heads_[i].read_fp() && bodies_[i].fp != s.fp) continue;
                census::memo(census::Memo::kComparedInFull);
                if (same_words(bodies_[i], heads_[i].loads, s.sp, load)) found = i;
            }
        }
        if (found < 0) return contest(set, s), -1;
        Head &h = heads_[found];
        const Body &b = bodies_[found];
        h.used = ++clock_;
        h.hits++;
        last_ = &h.tag;
        if (h.tag.value && h.tag.salt == tag_only) return 0;
        GG_PROFILE_STEP(kMemoCopy);
        int n = 0;
        for (int i = 0; i < h.loads; i++)  // a zero return address ended the walk without being one of its
            if ((b.is_return_address[i / 64] >> (i % 64) & 1) && b.word[i])
                ips[n++] = reinterpret_cast<void *>(b.word[i]);
        return n;
    }

    // Keeps a walk from `s` that returned n >= 0 addresses, in place of the least recent of its set.
    template <class Load>
    void remember(const Start &s, uint32_t generation, const Recording &r, Load load) {
        last_ = nullptr;
        if (r.overflow || r.loads == 0 || generation != generation_) return;
        Set set = set_of(s, load);
        if (learn_fork(s, set, r)) set = set_of(s, load);
        int victim = least_recent(set.first);
        last_eviction_ = !heads_[victim].loads   ? Evicted::kNone
                         : same_start(victim, s) ? Evicted::kSameStart
                                                 : Evicted::kOtherStart;
        Head &h = heads_[victim];
        Body &b = bodies_[victim];
        h = Head();
        h.depth = s.depth;
        h.max = int16_t(s.max);
        h.flags =
            uint8_t((r.read_fp ? kReadFp : 0) | (s.stop ? kHasStop : 0) | (key_contested(set.hash) ? kContested : 0));
        h.fp_low = uint32_t(s.fp);
        h.set_check = set.check;
        h.loads = uint8_t(r.loads);
        h.used = ++clock_;
        h.tag.whole = r.whole;
        b.stop = s.stop;
        b.fp = s.fp;
        memcpy(b.is_return_address, r.is_return_address, sizeof r.is_return_address);
        memcpy(b.offset, r.offset, sizeof(uint16_t) * r.loads);
        memcpy(b.word, r.word, sizeof(uintptr_t) * r.loads);
        last_ = &h.tag;
    }

private:
    // What a recall looks at first, for each way of a set: which start the walk is from, and its tag.
    // Four to a set on two cache lines, apart from the walks' words (Body).
    // kContested: a compared recall under the walk's key (its start and fork words) found another path
    // there, which no fork told apart (see trusted_way): the walk is not trusted while it is kept.
    enum : uint8_t { kReadFp = 1, kHasStop = 2, kContested = 4 };
    struct Head {
        uint32_t depth = 0;
        int16_t max = 0;
        uint8_t loads = 0;       // 0: empty
        uint8_t flags = 0;       // kReadFp, kHasStop (a stop function: in Body), kContested
        uint32_t fp_low = 0;     // the start's frame pointer's low half (the whole one is in Body)
        uint32_t set_check = 0;  // the set's hash by the start and its fork words, as Set::check
        uint32_t used = 0;       // the memo's clock at its last recall: the least recent gives way
        uint32_t hits = 0;       // recalls of this walk (compares() says which compare its words)
        Tag tag;
        bool read_fp() const { return flags & kReadFp; }
    };
    static_assert(sizeof(Head) == 32, "a set's heads on two cache lines");
    struct Body {
        const void *stop = nullptr;
        uintptr_t fp = 0;
        uint64_t is_return_address[kMaxLoads / 64] = {};
        uint16_t offset[kMaxLoads];  // in words from the start (a walk within 512 KiB of stack)
        uintptr_t word[kMaxLoads];
    };
    // A set: its first way's index, and a check of the hash that chose it (set_at: many hashes, one set).
    struct Set {
        int first;
        uint32_t check;
        uint64_t hash;  // the start's and its fork words' (set_at)
    };
    alignas(128) Head heads_[kSets * kWays];
    Body bodies_[kSets * kWays];
    Tag *last_ = nullptr;
    uint32_t generation_ = 0, clock_ = 0;
    bool missed_with_start_ = false, trusted_ = false;
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

    // Keys (Set::hash) a compared recall found another path under (contest): a walk kept under one, or
    // moved to one, starts contested, so that the contest outlives the walks it marked (one pushed out
    // of its set while the other path's walk stays). Direct-mapped: a key that loses its slot to another
    // only lets a walk kept under it later start uncontested (2 KiB).
    static constexpr int kContestedKeys = 256;
    uint64_t contested_[kContestedKeys] = {};
    uint64_t &contested_slot(uint64_t hash) { return contested_[(hash >> 24) % kContestedKeys]; }
    bool key_contested(uint64_t hash) { return contested_slot(hash) == (hash | 1); }

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
    static Set set_at(uint64_t h) { return {int((h >> 40) % kSets * kWays), uint32_t(h ^ h >> 32), h}; }

    // The start's set: by the start alone until a fork is known, then by the start and the stack's words
    // at its forks (they lie within the caller's frames, which no walk's own frames overwrite). The words
    // are independent loads, in flight at once.
    template <class Load>
    Set set_of(const Start &s, Load load) {
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
    // The set a kept walk belongs in, by the words it read at the forks; false when it read none at one
    // (it ended before), and no set can be told from its own words.
    bool set_of_kept(int i, uint64_t h, const Fork &f, Set *set) const {
        const Body &b = bodies_[i];
        for (int k = 0; k < f.count; k++) {
            int at = 0;
            while (at < heads_[i].loads && b.offset[at] != f.offset[k]) at++;
            if (at == heads_[i].loads) return false;
            h = with_fork_word(h, b.word[at]);
        }
        *set = set_at(h);
        return true;
    }
    // An empty way first (one a move emptied keeps its clock), else the least recently used.
    int least_recent(int first) const {
        int victim = first;
        for (int i = first; i < first + kWays; i++) {
            if (!heads_[i].loads) return i;
            if (heads_[i].used < heads_[victim].used) victim = i;
        }
        return victim;
    }
    // The head's start is s's, up to the stop function, which only the body keeps.
    static bool same_start_by_head(const Head &h, const Start &s) {
        return h.loads && h.depth == s.depth && h.max == s.max && bool(h.flags & kHasStop) == bool(s.stop);
    }
    bool same_start(int i, const Start &s) const {
        return same_start_by_head(heads_[i], s) && (!s.stop || bodies_[i].stop == s.stop);
    }
    // The walks a recall of `s` under `set` could trust: of its start, its fork words (the set's hash:
    // other words can choose the same set; a 32-bit check, so two hashes in 2^32 pass it) and its frame
    // pointer where a rule read it (its low half, which within one thread's stack, under 4 GiB, decides it).
    static bool under_key(const Head &h, const Set &set, const Start &s) {
        return same_start_by_head(h, s) && h.set_check == set.check && (!h.read_fp() || h.fp_low == uint32_t(s.fp));
    }
    // The way a recall may answer without comparing its words (see the header): the one walk under the
    // key (s.stop null), not contested, with a tag under the salt asked for, past its compared hits and not
    // at its window's check. Counts the hit. Null when the words must be compared.
    Head *trusted_way(const Set &set, const Start &s, int salt) {
        Head *only = nullptr;
        for (int i = set.first; i < set.first + kWays; i++) {
            Head &h = heads_[i];
            if (!under_key(h, set, s)) continue;
            if (only) return nullptr;  // two walks under one key: only their words tell
            only = &h;
        }
        if (!only || (only->flags & kContested) || !only->tag.value || only->tag.salt != salt) return nullptr;
        if (compares(only->hits + 1)) return nullptr;
        only->hits++;
        return only;
    }
    // A compared recall found no walk with the stack's words: the key is contested, and every walk under
    // it. The walker keeps the new walk next (remember), contested too, and where the start can learn one
    // more fork, the word where the two part becomes one and the start's walks are sorted again
    // (move_to_forked_sets: a walk whose new key is not contested is no longer). Where it cannot (the
    // start has all its forks, or the walk is not kept: a rule handed to the fallback, more words than
    // kMaxLoads), the walks under the key stay contested: trusted, either would give its tag to the
    // other path at every recall but the checks, for as long as both run.
    void contest(const Set &set, const Start &s) {
        for (int i = set.first; i < set.first + kWays; i++) {
            if (!under_key(heads_[i], set, s)) continue;
            heads_[i].flags |= kContested;
            contested_slot(set.hash) = set.hash | 1;  // a key with a walk under it: a first sight contests nothing
        }
    }
    // When the new walk meets a walk of its start in its set, the first word where the two differ (the
    // same start and the same words before it put both loads at one offset) is a new fork, unless it
    // is a fork already known: the sets are few, and walks told apart by a fork still meet in one by the
    // hash of their words (the set's LRU decides between those). Autograd's paths part at one frame,
    // then again further out, each part with more paths than a set has ways. True when a fork was
    // learned, and the set must be chosen again.
    bool learn_fork(const Start &s, const Set &set, const Recording &r) {
        uint64_t h = hash_of(s);
        const Fork *known = find_fork(h);
        if (known && known->count == kForkWords) return false;  // as told apart as it gets: the set's LRU decides
        for (int w = set.first; w < set.first + kWays; w++) {
            if (!same_start(w, s)) continue;
            const Body &e = bodies_[w];
            const int loads = heads_[w].loads;
            int i = 0;
            while (i < loads && i < r.loads && e.offset[i] == r.offset[i] && e.word[i] == r.word[i]) i++;
            if (i == loads || i == r.loads || e.offset[i] != r.offset[i] || is_fork(known, r.offset[i])) continue;
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
    // will look for it (a walk that ended before a fork is let go). Each is compared again until trusted
    // anew, and contested only where its new key is: the fork was learned because two paths at the start
    // were not told apart before. (A fork learned from another pair may leave a contested walk's other
    // path under its new key, uncontested: that path's next miss contests it again.) Rare: at most
    // kForkWords times a start while it keeps its fork slot, so a pass over the whole memo is affordable.
    void move_to_forked_sets(const Start &s, uint64_t h, const Fork &f) {
        for (int i = 0; i < kSets * kWays; i++) {
            if (!same_start(i, s)) continue;
            heads_[i].hits = 0;
            heads_[i].flags &= uint8_t(~kContested);
            Set to;
            bool kept = set_of_kept(i, h, f, &to);
            if (kept) heads_[i].set_check = to.check;
            if (kept && key_contested(to.hash)) heads_[i].flags |= kContested;
            if (kept && to.first == i / kWays * kWays) continue;
            if (kept) {
                int j = least_recent(to.first);
                heads_[j] = heads_[i];
                bodies_[j] = bodies_[i];
            }
            heads_[i].loads = 0;
        }
    }
    // Every word compared, with no early exit between the loads: they are independent, so the processor
    // has them all in flight at once.
    template <class Load>
    static bool same_words(const Body &e, int loads, uintptr_t sp, Load load) {
        uintptr_t differ = 0;
        for (int i = 0; i < loads; i++) differ |= load(sp + sizeof(uintptr_t) * e.offset[i]) ^ e.word[i];
        return differ == 0;
    }
    int forget(uint32_t generation) {
        for (Head &h : heads_) h.loads = 0;
        for (Fork &f : forks_) f = Fork();
        for (uint64_t &k : contested_) k = 0;
        last_ = nullptr;
        generation_ = generation;
        return -1;
    }
};

}  // namespace gg::stacks::cfi
