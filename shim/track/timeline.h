// A usage timeline of N series (the tracker's live bytes; the tensor view's allocated and reserved
// bytes), bounded in size: one point per step holding each series' highest value in the step, so that
// no peak is lost from the chart; at kMaxPoints it keeps the higher of each pair of points and doubles
// the step (1 ms to start with). Most calls update the current step with atomics and no lock.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "common/base/atomic_max.h"
#include "common/base/hot.h"
#include "shim/base/futex_lock.h"

namespace gg {

template <int N>
class Timeline {
public:
    static constexpr size_t kMaxPoints = 4096;
    using Values = std::array<uint64_t, N>;
    using Point = std::pair<uint64_t, Values>;  // (mono_ns of the step's start, the step's highest values)

    GG_HOT void note(uint64_t now, const Values &v) {
        uint64_t start = step_start_ns_.load(std::memory_order_relaxed);
        if (start && now - start < step_ns_.load(std::memory_order_relaxed)) {
            raise(v);
            return;
        }
        std::lock_guard<FutexLock> lock(mu_);
        start = step_start_ns_.load(std::memory_order_relaxed);
        if (start && now - start < step_ns_.load(std::memory_order_relaxed)) {
            raise(v);
            return;
        }
        if (start) points_.push_back({start, current()});
        step_start_ns_.store(now, std::memory_order_relaxed);
        for (int i = 0; i < N; i++) step_max_[i].store(v[i], std::memory_order_relaxed);
        if (points_.size() >= kMaxPoints) thin();
    }

    // The points so far, the current step's last.
    std::vector<Point> points() const {
        std::lock_guard<FutexLock> lock(mu_);
        std::vector<Point> out = points_;
        if (uint64_t start = step_start_ns_.load()) out.push_back({start, current()});
        return out;
    }

    void clear() {
        points_.clear();
        step_start_ns_ = 0;
        for (auto &m : step_max_) m = 0;
        step_ns_ = 1000000;
    }
    void lock_for_fork() { mu_.lock(); }
    void unlock_after_fork() { mu_.unlock(); }

private:
    void raise(const Values &v) {
        for (int i = 0; i < N; i++) raise_to(step_max_[i], v[i]);
    }
    Values current() const {
        Values v;
        for (int i = 0; i < N; i++) v[i] = step_max_[i].load(std::memory_order_relaxed);
        return v;
    }
    // Keeps the higher of each pair of points (by the first series), and doubles the step.
    void thin() {
        std::vector<Point> kept;
        kept.reserve(kMaxPoints / 2 + 1);
        for (size_t i = 0; i + 1 < points_.size(); i += 2)
            kept.push_back(points_[i].second[0] >= points_[i + 1].second[0] ? points_[i] : points_[i + 1]);
        if (points_.size() % 2) kept.push_back(points_.back());
        points_.swap(kept);
        step_ns_.store(step_ns_.load(std::memory_order_relaxed) * 2, std::memory_order_relaxed);
    }

    mutable FutexLock mu_;
    std::vector<Point> points_;  // completed steps, under mu_
    // The current step: read without the lock on the fast path.
    std::atomic<uint64_t> step_ns_{1000000};
    std::atomic<uint64_t> step_start_ns_{0};
    std::array<std::atomic<uint64_t>, N> step_max_{};
};

}  // namespace gg
