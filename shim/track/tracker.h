// This process's live device allocations: what each holds, on which device, through which API,
// from which stack; plus the counters and history a report needs (per-API counts, bytes by stack,
// the peak with its bytes by stack, a bounded usage timeline).
//
// The hot path takes one shard lock (the live table is split 16 ways by key), for one lookup in the
// shard's open-addressing table (shim/track/live_table.h) and a few counters; no I/O, no symbolization, no
// driver calls, no allocation but a rare doubling of the table under it.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "shim/api/api.h"
#include "shim/base/futex_lock.h"
#include "shim/stacks/stacks.h"
#include "shim/track/allocation.h"
#include "shim/track/held_by_stack.h"
#include "shim/track/live_table.h"
#include "shim/track/timeline.h"

namespace gg {

struct ApiCounts {
    uint64_t allocs = 0, frees = 0, failures = 0, live_bytes = 0, live_count = 0;
};

struct StackBytes {
    stacks::StackId stack;
    uint64_t bytes, count;
};

class Tracker {
public:
    // False only when the live table is full and host memory too short to grow it.
    bool insert(KeyKind kind, uint64_t key, const Allocation &a);
    // Removes and returns the allocation; false when the key is unknown (a pointer allocated before
    // the shim was loaded, or not device memory of ours). now_ns: mono_ns() of the call.
    bool take(KeyKind kind, uint64_t key, Allocation *out, uint64_t now_ns);
    // Puts back an allocation whose free failed in the driver.
    void restore(KeyKind kind, uint64_t key, const Allocation &a);
    void count_failure(Api api);
    // Starts loading the slot where key's entry lies or would go, ahead of insert() or take(). Reads
    // the shard's table without its lock: only for a caller that excludes every writer (the tensor
    // view's batches, shim/torch/view.cpp); a hint, never a fault, whatever it reads.
    void prefetch(KeyKind kind, uint64_t key) const { shard_of(Key{key, kind}).live.prefetch(key, kind); }
    // Starts loading the bytes a stack holds, ahead of an insert() of a block from it.
    void prefetch_stack(stacks::StackId id) const { held_.prefetch(id); }
    // The same for the stack of the block key holds, ahead of its take(): reads the key's slot, which
    // prefetch() should have started loading some time before. The same rule as prefetch().
    void prefetch_holder(KeyKind kind, uint64_t key) const {
        if (const Allocation *a = shard_of(Key{key, kind}).live.find(key, kind)) held_.prefetch(a->stack);
    }

    uint64_t live_bytes() const { return live_bytes_.load(std::memory_order_relaxed); }

    struct Snapshot {
        uint64_t live_bytes = 0, live_count = 0, peak_bytes = 0, peak_t_ns = 0;
        std::vector<std::pair<uint64_t, Allocation>> top;     // the largest, largest first
        std::vector<StackBytes> by_stack, peak_by_stack;      // largest first
        std::vector<std::pair<uint64_t, uint64_t>> timeline;  // (t_ns, bytes)
        std::vector<std::pair<Api, ApiCounts>> counts;
    };
    // A consistent copy for a report, taken under the locks; everything slow happens after.
    Snapshot snapshot(size_t top_n) const;

    // fork() while another thread holds a lock would leave it held forever in the child: the locks
    // are taken before fork and released on both sides (pthread_atfork, see shim/start/start.cpp).
    void lock_for_fork();
    void unlock_after_fork();
    void clear_after_fork();  // in the child, after unlock: device memory does not cross fork
    // Forgets everything, under the locks: the tensor view switched back on (shim/torch/view.h).
    void clear();

private:
    struct Key {
        uint64_t key;
        KeyKind kind;
        bool operator==(const Key &o) const { return key == o.key && kind == o.kind; }
    };
    struct KeyHash {
        size_t operator()(const Key &k) const {
            return std::hash<uint64_t>()(k.key * 0x9E3779B97F4A7C15ull ^ (uint64_t)k.kind);
        }
    };
    struct Held {
        uint64_t bytes = 0, count = 0;
    };
    using ByStack = std::unordered_map<stacks::StackId, Held>;

    // Everything an allocation touches lives in its shard, under the shard's one lock: the hot path
    // takes exactly one lock, and threads working on different shards never meet. Process-wide
    // totals are atomics; per-API counts and bytes by stack are summed over shards at report time.
    static constexpr int kShards = 16;
    struct alignas(64) Shard {
        mutable FutexLock mu;
        LiveTable live;
        Held unstacked;  // allocations without a stack (id 0), or whose id the table below cannot hold
        ApiCounts counts[(int)Api::kCount];
    };
    Shard shards_[kShards];
    Shard &shard_of(const Key &k) { return shards_[KeyHash()(k) >> 60 & (kShards - 1)]; }
    const Shard &shard_of(const Key &k) const { return shards_[KeyHash()(k) >> 60 & (kShards - 1)]; }

    std::atomic<uint64_t> live_bytes_{0}, live_count_{0}, peak_bytes_{0}, peak_t_ns_{0};

    // Bytes by stack at the peak: copied when the peak has grown by 1/64 since the last copy.
    mutable FutexLock peak_mu_;
    std::atomic<uint64_t> peak_snapshot_bytes_{0};
    ByStack peak_by_stack_;

    Timeline<1> timeline_;  // live bytes

    HeldByStack held_;  // bytes by stack, changed under the shard lock of the block's key

    void after_change(uint64_t live, uint64_t now);
    void copy_peak_breakdown(uint64_t peak);
    ByStack merged_by_stack() const;  // with every shard locked by the caller
    // One block of `bytes` more (or less) for its stack, under shard s's lock.
    void hold(Shard &s, stacks::StackId id, uint64_t bytes);
    void release(Shard &s, stacks::StackId id, uint64_t bytes);
};

Tracker &tracker();

}  // namespace gg
