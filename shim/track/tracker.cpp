#include "shim/track/tracker.h"

#include <algorithm>

#include "common/base/atomic_max.h"
#include "common/base/hot.h"
#include "shim/base/race_once.h"
#include "shim/core/state.h"

namespace gg {
namespace {

std::atomic<Tracker *> g_tracker{nullptr};

}  // namespace

GG_HOT Tracker &tracker() {
    // Never destroyed: frees can arrive during exit. Not a C++ static: a fork() in another thread
    // while it is made would leave the child waiting on its guard forever (shim/base/race_once.h).
    Tracker *p = g_tracker.load(std::memory_order_acquire);
    return p ? *p : never_destroyed(g_tracker);
}

GG_HOT bool Tracker::insert(KeyKind kind, uint64_t key, const Allocation &a) {
    Key k{key, kind};
    Shard &s = shard_of(k);
    uint64_t replaced = 0, live = 0;
    bool had_stale = false;
    {
        std::lock_guard<FutexLock> lock(s.mu);
        Allocation old;
        if (!s.live.put(key, kind, a, &old, &had_stale)) return false;
        if (had_stale) {
            // The driver handed out a key we still hold: our entry is stale (its free escaped us,
            // e.g. a context destroyed with its memory). The new allocation replaced it.
            release(s, old.stack, old.bytes);
            ApiCounts &oc = s.counts[(int)old.api];
            oc.live_bytes -= std::min(oc.live_bytes, old.bytes);
            oc.live_count -= oc.live_count ? 1 : 0;
            replaced = old.bytes;
        }
        hold(s, a.stack, a.bytes);
        ApiCounts &c = s.counts[(int)a.api];
        c.allocs++;
        c.live_bytes += a.bytes;
        c.live_count++;
        // The totals move under the shard's lock with the table, so that clear() (which holds every
        // shard's) never falls between the two: after it, a decrement would wrap them past 2^64.
        if (had_stale) {
            live_bytes_.fetch_sub(replaced, std::memory_order_relaxed);
            live_count_.fetch_sub(1, std::memory_order_relaxed);
        }
        live_count_.fetch_add(1, std::memory_order_relaxed);
        live = live_bytes_.fetch_add(a.bytes, std::memory_order_relaxed) + a.bytes;
    }
    after_change(live, a.t_ns);
    return true;
}

GG_HOT bool Tracker::take(KeyKind kind, uint64_t key, Allocation *out, uint64_t now_ns) {
    Key k{key, kind};
    Shard &s = shard_of(k);
    uint64_t live = 0;
    {
        std::lock_guard<FutexLock> lock(s.mu);
        if (!s.live.take(key, kind, out)) return false;
        release(s, out->stack, out->bytes);
        ApiCounts &c = s.counts[(int)out->api];
        c.frees++;
        c.live_bytes -= std::min(c.live_bytes, out->bytes);
        c.live_count -= c.live_count ? 1 : 0;
        live_count_.fetch_sub(1, std::memory_order_relaxed);  // under the lock, as in insert()
        live = live_bytes_.fetch_sub(out->bytes, std::memory_order_relaxed) - out->bytes;
    }
    after_change(live, now_ns);
    return true;
}

GG_HOT void Tracker::hold(Shard &s, stacks::StackId id, uint64_t bytes) {
    if (HeldByStack::Held *h = id ? held_.at(id) : nullptr) {
        h->bytes.fetch_add(bytes, std::memory_order_relaxed);
        h->count.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    s.unstacked.bytes += bytes;
    s.unstacked.count++;
}

// Never below zero: a decrement past it gives back what it took too much, which leaves the same sum
// whatever other shards added between the two.
GG_HOT void Tracker::release(Shard &s, stacks::StackId id, uint64_t bytes) {
    auto take_away = [](std::atomic<uint64_t> &v, uint64_t n) {
        uint64_t was = v.fetch_sub(n, std::memory_order_relaxed);
        if (was < n) v.fetch_add(n - was, std::memory_order_relaxed);
    };
    // The block was held by at(id) when it was inserted, so at(id) finds its chunk again; a block
    // counted without a stack (no room for its id then) finds no chunk now only if there still is none.
    if (HeldByStack::Held *h = id ? held_.at(id) : nullptr) {
        take_away(h->bytes, bytes);
        take_away(h->count, 1);
        return;
    }
    s.unstacked.bytes -= std::min(s.unstacked.bytes, bytes);
    s.unstacked.count -= s.unstacked.count ? 1 : 0;
}

void Tracker::restore(KeyKind kind, uint64_t key, const Allocation &a) {
    if (!insert(kind, key, a)) return;  // cannot happen: take() just made room
    Key k{key, kind};
    Shard &s = shard_of(k);
    std::lock_guard<FutexLock> lock(s.mu);
    // The free never happened: undo the counts insert() and take() made.
    s.counts[(int)a.api].allocs--;
    s.counts[(int)a.api].frees--;
}

void Tracker::count_failure(Api api) {
    std::lock_guard<FutexLock> lock(shards_[0].mu);
    shards_[0].counts[(int)api].failures++;
}

GG_HOT void Tracker::after_change(uint64_t live, uint64_t now) {
    uint64_t peak = peak_bytes_.load(std::memory_order_relaxed);
    if (live > peak) {
        raise_to(peak_bytes_, live);
        peak_t_ns_.store(now, std::memory_order_relaxed);
        // Copying bytes-by-stack at every new peak would cost O(stacks) per allocation while usage
        // climbs; copy when the peak has grown by 1/64 since the last copy (and at report time when
        // usage is at its peak), so the peak's breakdown is within 1.6% of the true one.
        uint64_t copied = peak_snapshot_bytes_.load(std::memory_order_relaxed);
        if (live - copied > copied / 64) copy_peak_breakdown(live);
    }
    timeline_.note(now, {live});
}

void Tracker::copy_peak_breakdown(uint64_t peak) {
    std::unique_lock<FutexLock> guard(peak_mu_, std::try_to_lock);
    if (!guard.owns_lock() || peak <= peak_snapshot_bytes_.load(std::memory_order_relaxed))
        return;  // another thread is copying
    // Every shard locked at once, as snapshot() does: the bytes by stack are one table now, and a
    // shard's lock no longer covers a part of it.
    for (Shard &s : shards_) s.mu.lock();
    ByStack merged = merged_by_stack();
    for (int i = kShards - 1; i >= 0; i--) shards_[i].mu.unlock();
    peak_by_stack_.swap(merged);
    peak_snapshot_bytes_.store(peak, std::memory_order_relaxed);
}

Tracker::ByStack Tracker::merged_by_stack() const {
    ByStack merged;
    Held none;
    for (const Shard &s : shards_) none.bytes += s.unstacked.bytes, none.count += s.unstacked.count;
    if (none.bytes) merged[0] = none;
    held_.for_each([&merged](stacks::StackId id, uint64_t bytes, uint64_t count) { merged[id] = {bytes, count}; });
    return merged;
}

Tracker::Snapshot Tracker::snapshot(size_t top_n) const {
    Snapshot s;
    auto flatten = [](const ByStack &m) {
        std::vector<StackBytes> v;
        v.reserve(m.size());
        for (const auto &[id, h] : m)
            if (h.bytes) v.push_back({id, h.bytes, h.count});
        std::sort(v.begin(), v.end(), [](const StackBytes &a, const StackBytes &b) { return a.bytes > b.bytes; });
        return v;
    };
    // The largest allocations: a bounded min-heap over all shards, taken with every shard locked so
    // that the totals, the table and bytes by stack agree with each other.
    auto smaller = [](const std::pair<uint64_t, Allocation> &a, const std::pair<uint64_t, Allocation> &b) {
        return a.second.bytes > b.second.bytes;
    };
    std::vector<std::pair<uint64_t, Allocation>> heap;
    ApiCounts counts[(int)Api::kCount];
    {
        std::lock_guard<FutexLock> peak_lock(peak_mu_);
        for (const Shard &sh : shards_) sh.mu.lock();
        for (const Shard &sh : shards_) {
            if (top_n > 0)
                sh.live.for_each([&](uint64_t key, KeyKind, const Allocation &a) {
                    if (heap.size() < top_n) {
                        heap.push_back({key, a});
                        std::push_heap(heap.begin(), heap.end(), smaller);
                    } else if (a.bytes > heap.front().second.bytes) {
                        std::pop_heap(heap.begin(), heap.end(), smaller);
                        heap.back() = {key, a};
                        std::push_heap(heap.begin(), heap.end(), smaller);
                    }
                });
            for (int i = 0; i < (int)Api::kCount; i++) {
                counts[i].allocs += sh.counts[i].allocs;
                counts[i].frees += sh.counts[i].frees;
                counts[i].failures += sh.counts[i].failures;
                counts[i].live_bytes += sh.counts[i].live_bytes;
                counts[i].live_count += sh.counts[i].live_count;
            }
        }
        s.by_stack = flatten(merged_by_stack());
        s.live_bytes = live_bytes_.load();
        s.live_count = live_count_.load();
        s.peak_bytes = peak_bytes_.load();
        s.peak_t_ns = peak_t_ns_.load();
        s.peak_by_stack = s.live_bytes == s.peak_bytes ? s.by_stack : flatten(peak_by_stack_);
        for (int i = kShards - 1; i >= 0; i--) shards_[i].mu.unlock();
    }
    std::sort(heap.begin(), heap.end(), [](const auto &a, const auto &b) { return a.second.bytes > b.second.bytes; });
    s.top = std::move(heap);
    {
        for (const auto &[t, v] : timeline_.points()) s.timeline.push_back({t, v[0]});
    }
    for (int i = 1; i < (int)Api::kCount; i++)
        if (counts[i].allocs || counts[i].frees || counts[i].failures) s.counts.push_back({(Api)i, counts[i]});
    return s;
}

void Tracker::lock_for_fork() {
    peak_mu_.lock();
    timeline_.lock_for_fork();
    for (Shard &sh : shards_) sh.mu.lock();
}

void Tracker::unlock_after_fork() {
    for (int i = kShards - 1; i >= 0; i--) shards_[i].mu.unlock();
    timeline_.unlock_after_fork();
    peak_mu_.unlock();
}

void Tracker::clear_after_fork() {
    // Device memory does not cross fork: the child starts with nothing.
    for (Shard &sh : shards_) {
        sh.live.clear();
        sh.unstacked = Held();
        for (auto &c : sh.counts) c = ApiCounts();
    }
    held_.clear();
    peak_by_stack_.clear();
    timeline_.clear();
    live_bytes_ = live_count_ = peak_bytes_ = peak_t_ns_ = 0;
    peak_snapshot_bytes_ = 0;
}

void Tracker::clear() {
    lock_for_fork();
    clear_after_fork();
    unlock_after_fork();
}

}  // namespace gg
