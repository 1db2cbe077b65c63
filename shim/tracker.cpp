#include "tracker.h"

#include <algorithm>

#include "state.h"

namespace gg {
namespace {
constexpr size_t kTimelinePoints = 4096;
}

Tracker &tracker() {
    static Tracker *t = new Tracker();  // never destroyed: frees can arrive during exit
    return *t;
}

void Tracker::insert(KeyKind kind, uint64_t key, const Allocation &a) {
    Key k{key, kind};
    Shard &s = shard_of(k);
    {
        std::lock_guard<std::mutex> lock(s.mu);
        auto [it, fresh] = s.live.emplace(k, a);
        if (!fresh) {
            // The driver handed out a key we still hold: our entry is stale (its free escaped us,
            // e.g. a context destroyed with its memory). The new allocation replaces it.
            Allocation old = it->second;
            it->second = a;
            std::lock_guard<std::mutex> stats(stats_mu_);
            on_change(old, false);
        }
    }
    std::lock_guard<std::mutex> stats(stats_mu_);
    ApiCounts &c = counts_[(int)a.api];
    c.allocs++;
    c.live_bytes += a.bytes;
    c.live_count++;
    on_change(a, true);
}

bool Tracker::take(KeyKind kind, uint64_t key, Allocation *out) {
    Key k{key, kind};
    Shard &s = shard_of(k);
    {
        std::lock_guard<std::mutex> lock(s.mu);
        auto it = s.live.find(k);
        if (it == s.live.end()) return false;
        *out = it->second;
        s.live.erase(it);
    }
    std::lock_guard<std::mutex> stats(stats_mu_);
    ApiCounts &c = counts_[(int)out->api];
    c.frees++;
    c.live_bytes -= std::min(c.live_bytes, out->bytes);
    c.live_count -= c.live_count ? 1 : 0;
    on_change(*out, false);
    return true;
}

void Tracker::restore(KeyKind kind, uint64_t key, const Allocation &a) {
    insert(kind, key, a);
    std::lock_guard<std::mutex> stats(stats_mu_);
    // The free never happened: undo the counts insert() and take() made.
    counts_[(int)a.api].allocs--;
    counts_[(int)a.api].frees--;
}

void Tracker::count_failure(Api api) {
    std::lock_guard<std::mutex> stats(stats_mu_);
    counts_[(int)api].failures++;
}

uint64_t Tracker::live_bytes() const {
    std::lock_guard<std::mutex> stats(stats_mu_);
    return live_bytes_;
}

// Called with stats_mu_ held.
void Tracker::on_change(const Allocation &a, bool added) {
    Held &h = by_stack_[a.stack];
    if (added) {
        h.bytes += a.bytes;
        h.count++;
        live_bytes_ += a.bytes;
        live_count_++;
    } else {
        h.bytes -= std::min(h.bytes, a.bytes);
        h.count -= h.count ? 1 : 0;
        if (h.count == 0) by_stack_.erase(a.stack);
        live_bytes_ -= std::min(live_bytes_, a.bytes);
        live_count_ -= live_count_ ? 1 : 0;
    }
    uint64_t now = mono_ns();
    if (live_bytes_ > peak_bytes_) {
        peak_bytes_ = live_bytes_;
        peak_t_ns_ = now;
        // Copying bytes-by-stack at every new peak would cost O(stacks) per allocation while usage
        // climbs; copy when the peak has grown by 1/64 since the last copy (and at report time when
        // usage is at its peak), so the peak's breakdown is within 1.6% of the true one.
        if (peak_bytes_ - peak_snapshot_bytes_ > peak_snapshot_bytes_ / 64 || peak_by_stack_.empty()) {
            peak_by_stack_ = by_stack_;
            peak_snapshot_bytes_ = peak_bytes_;
        }
    }
    add_timeline_point(now, live_bytes_);
}

void Tracker::add_timeline_point(uint64_t t, uint64_t bytes) {
    // One point per step, holding the step's highest usage, so that no peak is lost from the chart.
    if (!timeline_.empty() && t - timeline_.back().first < timeline_step_ns_) {
        timeline_.back().second = std::max(timeline_.back().second, bytes);
        return;
    }
    timeline_.push_back({t, bytes});
    if (timeline_.size() >= kTimelinePoints) {
        // Thin: keep every other point but never the extremes, and double the step.
        std::vector<std::pair<uint64_t, uint64_t>> kept;
        kept.reserve(kTimelinePoints / 2 + 1);
        for (size_t i = 0; i + 1 < timeline_.size(); i += 2)
            kept.push_back(timeline_[i].second >= timeline_[i + 1].second ? timeline_[i] : timeline_[i + 1]);
        kept.push_back(timeline_.back());
        timeline_.swap(kept);
        timeline_step_ns_ *= 2;
    }
}

Tracker::Snapshot Tracker::snapshot(size_t top_n) const {
    Snapshot s;
    // The largest allocations: a bounded min-heap per shard, merged.
    auto smaller = [](const std::pair<uint64_t, Allocation> &a, const std::pair<uint64_t, Allocation> &b) {
        return a.second.bytes > b.second.bytes;
    };
    std::vector<std::pair<uint64_t, Allocation>> heap;
    for (const Shard &sh : shards_) {
        std::lock_guard<std::mutex> lock(sh.mu);
        for (const auto &[k, a] : sh.live) {
            if (top_n == 0) break;
            if (heap.size() < top_n) {
                heap.push_back({k.key, a});
                std::push_heap(heap.begin(), heap.end(), smaller);
            } else if (a.bytes > heap.front().second.bytes) {
                std::pop_heap(heap.begin(), heap.end(), smaller);
                heap.back() = {k.key, a};
                std::push_heap(heap.begin(), heap.end(), smaller);
            }
        }
    }
    std::sort(heap.begin(), heap.end(), [](const auto &a, const auto &b) { return a.second.bytes > b.second.bytes; });
    s.top = std::move(heap);

    std::lock_guard<std::mutex> stats(stats_mu_);
    s.live_bytes = live_bytes_;
    s.live_count = live_count_;
    s.peak_bytes = peak_bytes_;
    s.peak_t_ns = peak_t_ns_;
    auto flatten = [](const std::unordered_map<stacks::StackId, Held> &m) {
        std::vector<StackBytes> v;
        v.reserve(m.size());
        for (const auto &[id, h] : m)
            if (h.bytes) v.push_back({id, h.bytes, h.count});
        std::sort(v.begin(), v.end(), [](const StackBytes &a, const StackBytes &b) { return a.bytes > b.bytes; });
        return v;
    };
    s.by_stack = flatten(by_stack_);
    s.peak_by_stack = live_bytes_ == peak_bytes_ ? s.by_stack : flatten(peak_by_stack_);
    s.timeline = timeline_;
    for (int i = 1; i < (int)Api::kCount; i++)
        if (counts_[i].allocs || counts_[i].frees || counts_[i].failures) s.counts.push_back({(Api)i, counts_[i]});
    return s;
}

void Tracker::lock_for_fork() {
    for (Shard &sh : shards_) sh.mu.lock();
    stats_mu_.lock();
}

void Tracker::unlock_after_fork() {
    stats_mu_.unlock();
    for (int i = kShards - 1; i >= 0; i--) shards_[i].mu.unlock();
}

void Tracker::clear_after_fork() {
    // Device memory does not cross fork: the child starts with nothing.
    for (Shard &sh : shards_) sh.live.clear();
    by_stack_.clear();
    peak_by_stack_.clear();
    timeline_.clear();
    live_bytes_ = live_count_ = peak_bytes_ = peak_snapshot_bytes_ = 0;
    for (auto &c : counts_) c = ApiCounts();
}

}  // namespace gg
