#include "shim/stacks/table.h"

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>

#include "common/base/log.h"
#include "shim/base/race_once.h"

namespace gg::stacks::table {
namespace {

// Lock striping: a stack's hash picks one of kShards independent tables, so threads capturing
// different stacks rarely meet on a lock, and a lock is held only for a probe (and, for a new stack,
// a copy), never while unwinding. An id encodes its shard: id - 1 = local * kShards + shard.
constexpr uint32_t kShards = 32;
// Bounds: 1<<20 stacks and 64 MiB of frame words in all. A program with more distinct allocation
// stacks than that is pathological (recursion of every depth); new stacks then get id 0.
constexpr uint32_t kMaxPerShard = (1u << 20) / kShards;
constexpr uint32_t kChunkWords = 4096;  // 32 KiB: a stack never straddles chunks (kMaxWords < this)
constexpr uint32_t kMaxChunksPerShard = (64u << 20) / 8 / kChunkWords / kShards;
static_assert(kMaxWords <= kChunkWords, "a stack must fit in one chunk");

struct Entry {
    uint64_t hash;
    uint32_t chunk, off, n, tag;
};

struct Slot {
    uint32_t hash_lo;  // checked before touching the entry: most probes end here
    uint32_t index;    // local index + 1; 0 = empty
};

struct alignas(64) Shard {
    std::mutex mu;
    std::vector<Slot> slots;  // open addressing, linear probing, at most half full
    std::vector<Entry> entries;
    std::vector<std::unique_ptr<uintptr_t[]>> chunks;
    uint32_t chunk_used = kChunkWords;  // words used in the last chunk; "full" before the first
};

// Never destroyed (shim/base/race_once.h): captures and reports may run while exit() runs static destructors.
std::atomic<std::array<Shard, kShards> *> g_shards_made{nullptr};
std::array<Shard, kShards> &shards() { return never_destroyed(g_shards_made); }
std::atomic<size_t> g_count{0};
std::atomic<bool> g_full_logged{false};

uint64_t hash_words(const uintptr_t *w, uint32_t n, uint32_t tag) {
    // Multiply-xor per word and a final avalanche (murmur3's fmix64): return addresses differ in low
    // bits, and both the shard (top bits) and the slot (low bits) need them spread.
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(n) << 32 | tag);
    for (uint32_t i = 0; i < n; ++i) h = (h ^ w[i]) * 0xBF58476D1CE4E5B9ull, h ^= h >> 29;
    h ^= h >> 33, h *= 0xFF51AFD7ED558CCDull, h ^= h >> 33, h *= 0xC4CEB9FE1A85EC53ull, h ^= h >> 33;
    return h;
}

void log_full_once(const char *what) {
    if (!g_full_logged.exchange(true))
        log_error("stack table full (%s): new allocation stacks are recorded without a stack", what);
}

void grow(Shard &s) {
    std::vector<Slot> bigger(s.slots.empty() ? 64 : s.slots.size() * 2);
    size_t mask = bigger.size() - 1;
    for (uint32_t i = 0; i < s.entries.size(); ++i) {
        size_t k = s.entries[i].hash & mask;
        while (bigger[k].index) k = (k + 1) & mask;
        bigger[k] = {uint32_t(s.entries[i].hash), i + 1};
    }
    s.slots.swap(bigger);
}

// The entry of an id, with its shard's lock held by the caller; null when there is none.
const Entry *entry_of(Shard &s, uint32_t local) { return local < s.entries.size() ? &s.entries[local] : nullptr; }

}  // namespace

uint32_t intern(const uintptr_t *words, uint32_t n, uint32_t tag) {
    if (n == 0 || n > kMaxWords) return 0;
    uint64_t h = hash_words(words, n, tag);
    uint32_t shard = uint32_t(h >> 59) % kShards;
    Shard &s = shards()[shard];
    std::lock_guard<std::mutex> lock(s.mu);

    if (!s.slots.empty()) {
        size_t mask = s.slots.size() - 1;
        for (size_t k = h & mask; s.slots[k].index; k = (k + 1) & mask) {
            if (s.slots[k].hash_lo != uint32_t(h)) continue;
            const Entry &e = s.entries[s.slots[k].index - 1];
            if (e.hash == h && e.n == n && e.tag == tag &&
                memcmp(s.chunks[e.chunk].get() + e.off, words, n * sizeof(uintptr_t)) == 0)
                return (s.slots[k].index - 1) * kShards + shard + 1;
        }
    }

    // New stack.
    if (s.entries.size() >= kMaxPerShard) return log_full_once("too many stacks"), 0;
    if (s.chunk_used + n > kChunkWords) {
        if (s.chunks.size() >= kMaxChunksPerShard) return log_full_once("frame memory"), 0;
        s.chunks.emplace_back(new uintptr_t[kChunkWords]);
        s.chunk_used = 0;
    }
    if ((s.entries.size() + 1) * 2 > s.slots.size()) grow(s);
    uint32_t chunk = uint32_t(s.chunks.size() - 1), off = s.chunk_used;
    memcpy(s.chunks[chunk].get() + off, words, n * sizeof(uintptr_t));
    s.chunk_used += n;
    s.entries.push_back({h, chunk, off, n, tag});
    uint32_t local = uint32_t(s.entries.size());
    size_t mask = s.slots.size() - 1, k = h & mask;
    while (s.slots[k].index) k = (k + 1) & mask;
    s.slots[k] = {uint32_t(h), local};
    g_count.fetch_add(1, std::memory_order_relaxed);
    return (local - 1) * kShards + shard + 1;
}

bool get(uint32_t id, std::vector<uintptr_t> *words, uint32_t *tag) {
    if (id == 0) return false;
    Shard &s = shards()[(id - 1) % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    const Entry *e = entry_of(s, (id - 1) / kShards);
    if (!e) return false;
    const uintptr_t *w = s.chunks[e->chunk].get() + e->off;
    words->assign(w, w + e->n);
    *tag = e->tag;
    return true;
}

uint32_t copy(uint32_t id, uintptr_t *out, uint32_t max, uint32_t *tag) {
    if (id == 0) return 0;
    Shard &s = shards()[(id - 1) % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    const Entry *e = entry_of(s, (id - 1) / kShards);
    if (!e) return 0;
    memcpy(out, s.chunks[e->chunk].get() + e->off, sizeof(uintptr_t) * (e->n < max ? e->n : max));
    *tag = e->tag;
    return e->n;
}

size_t count() { return g_count.load(std::memory_order_relaxed); }

void lock_for_fork() {
    for (Shard &s : shards()) s.mu.lock();
}
void unlock_after_fork() {
    for (int i = int(kShards) - 1; i >= 0; i--) shards()[i].mu.unlock();
}

}  // namespace gg::stacks::table
