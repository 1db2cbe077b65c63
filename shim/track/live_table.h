// One shard's live allocations: key -> Allocation, an open-addressing table (linear probing,
// backward-shift deletion), used under the shard's lock (shim/track/tracker.h).
//
// Why not std::unordered_map: every allocation was a node from malloc and every free gave it back,
// and a lookup went bucket -> node (-> the node before it, to unlink). On the GPU the driver's call
// evicts all of that between two hooked calls, so each of those lines is a cache miss paid per pair
// (BENCHMARKS.md). Here an entry is one line-sized record found in one or two adjacent slots, and
// nothing is allocated per pair: the table only grows, by doubling, when three quarters are used.
//
// Running out of host memory never throws: put() answers false when the table is full and cannot
// grow, and the caller leaves that allocation untracked.
#pragma once

#include <cstdint>
#include <cstdlib>

#include "shim/track/allocation.h"

namespace gg {

class LiveTable {
public:
    LiveTable() = default;
    ~LiveTable() { std::free(slots_); }
    LiveTable(const LiveTable &) = delete;
    LiveTable &operator=(const LiveTable &) = delete;

    // Inserts key -> a. When the key was already there, replaces its allocation, copies the old one
    // to *old and sets *replaced. False only when the table is full and cannot grow.
    bool put(uint64_t key, KeyKind kind, const Allocation &a, Allocation *old, bool *replaced) {
        *replaced = false;
        if ((size_ + 1) * 4 > cap_ * 3 && !grow() && size_ + 1 > cap_) return false;
        uint64_t i = home(key, kind);
        for (;; i = (i + 1) & mask()) {
            Slot &s = slots_[i];
            if (!s.used) break;
            if (s.key == key && s.kind == kind) {
                *old = s.a;
                *replaced = true;
                s.a = a;
                return true;
            }
        }
        slots_[i] = Slot{key, a, kind, true};
        size_++;
        return true;
    }

    // Removes the key and copies its allocation to *out; false when it is not there.
    bool take(uint64_t key, KeyKind kind, Allocation *out) {
        uint64_t i = slot_of(key, kind);
        if (i == kNone) return false;
        *out = slots_[i].a;
        erase_at(i);
        return true;
    }

    // The allocation of key, or null; the pointer holds until the table next changes.
    const Allocation *find(uint64_t key, KeyKind kind) const {
        uint64_t i = slot_of(key, kind);
        return i == kNone ? nullptr : &slots_[i].a;
    }

    // f(key, kind, allocation) for every entry, in no particular order.
    template <typename F>
    void for_each(F &&f) const {
        for (uint64_t i = 0; i < cap_; i++)
            if (slots_[i].used) f(slots_[i].key, slots_[i].kind, slots_[i].a);
    }

    void clear() {
        std::free(slots_);
        slots_ = nullptr;
        cap_ = size_ = 0;
    }

    // Starts loading the slot where key's probe begins (Tracker::prefetch).
    void prefetch(uint64_t key, KeyKind kind) const {
        if (cap_) __builtin_prefetch(&slots_[home(key, kind)], 1);
    }
    uint64_t size() const { return size_; }
    uint64_t capacity() const { return cap_; }

    // Where a key's probe starts (exposed for the unit tests, which need keys that collide).
    uint64_t home(uint64_t key, KeyKind kind) const {
        // A finalizer that mixes every bit into the low ones: the shard was chosen from the high
        // bits of another hash of the same key, so those must not decide the slot as well.
        uint64_t x = key ^ (uint64_t(kind) << 56);
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 33;
        x *= 0xc4ceb9fe1a85ec53ull;
        x ^= x >> 33;
        return x & mask();
    }

private:
    struct Slot {
        uint64_t key;
        Allocation a;
        KeyKind kind;
        bool used;
    };
    static constexpr uint64_t kFirstCapacity = 64;

    Slot *slots_ = nullptr;
    uint64_t cap_ = 0, size_ = 0;  // cap_ is 0 or a power of two

    uint64_t mask() const { return cap_ - 1; }

    static constexpr uint64_t kNone = ~uint64_t(0);
    // The slot holding key, or kNone: its probe from home() to the first unused slot.
    uint64_t slot_of(uint64_t key, KeyKind kind) const {
        if (!size_) return kNone;
        for (uint64_t i = home(key, kind);; i = (i + 1) & mask()) {
            const Slot &s = slots_[i];
            if (!s.used) return kNone;
            if (s.key == key && s.kind == kind) return i;
        }
    }

    bool grow() {
        uint64_t cap = cap_ ? cap_ * 2 : kFirstCapacity;
        auto *fresh = static_cast<Slot *>(std::calloc(cap, sizeof(Slot)));  // zeroed: every slot unused
        if (!fresh) return false;
        Slot *old = slots_;
        uint64_t old_cap = cap_;
        slots_ = fresh;
        cap_ = cap;
        for (uint64_t i = 0; i < old_cap; i++) {
            if (!old[i].used) continue;
            uint64_t j = home(old[i].key, old[i].kind);
            while (slots_[j].used) j = (j + 1) & mask();
            slots_[j] = old[i];
        }
        std::free(old);
        return true;
    }

    // Empties slot i, then moves back every later entry of the run whose probe would otherwise
    // cross the new hole, so that no lookup stops early and no tombstone is ever needed.
    void erase_at(uint64_t i) {
        for (uint64_t j = (i + 1) & mask(); slots_[j].used; j = (j + 1) & mask()) {
            uint64_t h = home(slots_[j].key, slots_[j].kind);
            // The entry at j may stay if its home lies cyclically in (i, j].
            bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
            if (stays) continue;
            slots_[i] = slots_[j];
            i = j;
        }
        slots_[i].used = false;
        size_--;
    }
};

}  // namespace gg
