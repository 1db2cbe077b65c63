// Bytes and blocks held per stack id, in a table indexed by the id itself.
//
// Why not a hash map: the stack table's ids are dense (1-based, below 2^20: shim/stacks/table.cpp), so
// an id is its own slot, found in one load that a batch can start early (prefetch) where a hash map's
// bucket and node are two loads, one after the other, both cold on the GPU machine between two of
// PyTorch's block events. The table grows by chunks of ids on first use and never moves an entry, so a
// reader needs no lock against a chunk being added.
//
// Counters are atomics because the tracker's shards (split by address, not by stack) may add to one
// stack at once; the tracker still changes them under a shard's lock, so a reader holding every
// shard's lock sees them agree with the live table.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "shim/stacks/stacks.h"

namespace gg {

class HeldByStack {
public:
    struct Held {
        std::atomic<uint64_t> bytes{0}, count{0};
    };
    static constexpr uint32_t kIdsPerChunk = 4096;                               // 64 KiB a chunk
    static constexpr uint32_t kChunks = (uint32_t(1) << 20) / kIdsPerChunk + 1;  // the stack table's bound

    HeldByStack() = default;
    HeldByStack(const HeldByStack &) = delete;
    HeldByStack &operator=(const HeldByStack &) = delete;
    ~HeldByStack() {  // the shim's trackers are never destroyed (frees arrive during exit); tests' are
        for (auto &slot : chunks_) free(slot.load(std::memory_order_relaxed));
    }

    // The entry of id, its chunk made on first use; null for an id past the bound or when host memory
    // is short (the caller counts the bytes without a stack).
    Held *at(stacks::StackId id) {
        uint32_t c = id / kIdsPerChunk;
        if (c >= kChunks) return nullptr;
        Held *chunk = chunks_[c].load(std::memory_order_acquire);
        if (!chunk) chunk = make_chunk(c);
        return chunk ? &chunk[id % kIdsPerChunk] : nullptr;
    }
    // Starts loading id's entry ahead of at(); a hint that reads no entry.
    void prefetch(stacks::StackId id) const {
        uint32_t c = id / kIdsPerChunk;
        if (c >= kChunks) return;
        if (const Held *chunk = chunks_[c].load(std::memory_order_acquire))
            __builtin_prefetch(&chunk[id % kIdsPerChunk], 1);
    }
    // Calls f(id, bytes, count) for every id that holds bytes.
    template <class F>
    void for_each(F f) const {
        for (uint32_t c = 0; c < kChunks; c++) {
            const Held *chunk = chunks_[c].load(std::memory_order_acquire);
            for (uint32_t i = 0; chunk && i < kIdsPerChunk; i++)
                if (uint64_t bytes = chunk[i].bytes.load(std::memory_order_relaxed))
                    f(stacks::StackId(c * kIdsPerChunk + i), bytes, chunk[i].count.load(std::memory_order_relaxed));
        }
    }
    // Zero for every id; the chunks stay for the ids to come.
    void clear() {
        for (auto &slot : chunks_)
            if (Held *chunk = slot.load(std::memory_order_acquire))
                for (uint32_t i = 0; i < kIdsPerChunk; i++) {
                    chunk[i].bytes.store(0, std::memory_order_relaxed);
                    chunk[i].count.store(0, std::memory_order_relaxed);
                }
    }

private:
    std::atomic<Held *> chunks_[kChunks] = {};

    // Two shards may need one chunk at once: the first to publish it wins, the other frees its own.
    Held *make_chunk(uint32_t c) {
        // calloc's zeros are the atomics' zeros (lock-free 64-bit atomics are plain words).
        static_assert(std::atomic<uint64_t>::is_always_lock_free);
        Held *made = static_cast<Held *>(calloc(kIdsPerChunk, sizeof(Held)));
        if (!made) return nullptr;
        Held *expected = nullptr;
        if (chunks_[c].compare_exchange_strong(expected, made, std::memory_order_acq_rel)) return made;
        free(made);
        return expected;
    }
};

}  // namespace gg
