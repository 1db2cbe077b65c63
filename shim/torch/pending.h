// The tensor view's events between c10's report and the tables they change: a short log, appended to
// on the hot path and applied in batches (shim/torch/view.cpp).
//
// Why: each event changes four structures (the live-block table, bytes by stack, PyTorch's totals
// with their timeline, the event ring), and on the GPU the driver's and PyTorch's own work between
// two events evicts every line of them: one event then waited on 30 to 40 cold cache lines, 0.5 us
// of a Llama step's 2,100 events each (BENCHMARKS.md). Appending touches the log's lock and one
// 64-byte slot; a batch of kBatch events is then applied in one pass, in which the structures'
// shared lines stay in the cache from one event to the next.
//
// Ordered: one lock, so the events are applied in the order c10 reported them (a block made on the
// forward thread and freed on the autograd thread is inserted before it is taken). Whoever reads
// the tables applies what is pending first (settle), so a report never misses an event.
#pragma once
#include <cstdint>
#include <mutex>

#include "shim/base/futex_lock.h"
#include "shim/stacks/stacks.h"
#include "shim/torch/events.h"

namespace gg::torch {

// One event as c10 (or the driver hooks, for segments) reported it: exactly one cache line.
struct alignas(64) BlockEvent {
    uint64_t t_ns;  // mono_ns()
    uint64_t address;
    int64_t bytes;                 // a magnitude: the action tells a free
    uint64_t allocated, reserved;  // PyTorch's totals after the event (segments: filled in when applied)
    stacks::StackId stack;
    int32_t thread;
    int8_t device;
    Action action;
};
static_assert(sizeof(BlockEvent) == 64, "an event is one cache line");

class PendingLog {
public:
    static constexpr int kBatch = 256;  // 16 KiB of events; a batch applies in a few tens of microseconds

    // Appends e; when the log is full, applies every pending event (apply(events, n)) first.
    template <class Apply>
    void append(const BlockEvent &e, Apply &&apply) {
        std::lock_guard<FutexLock> lock(mu_);
        if (n_ == kBatch) flush(apply);
        events_[n_++] = e;
    }

    // Applies what is pending: before the tables are read.
    template <class Apply>
    void settle(Apply &&apply) {
        std::lock_guard<FutexLock> lock(mu_);
        flush(apply);
    }

    // Runs f with the log locked and nothing pending: the tables then change only inside f.
    template <class Apply, class F>
    void settled(Apply &&apply, F &&f) {
        std::lock_guard<FutexLock> lock(mu_);
        flush(apply);
        f();
    }

    // fork(): taken before, released on both sides; the child drops its parent's events.
    void lock_for_fork() { mu_.lock(); }
    void unlock_after_fork() { mu_.unlock(); }
    void clear_after_fork() { n_ = 0; }

private:
    template <class Apply>
    void flush(Apply &apply) {
        int n = n_;
        n_ = 0;  // first: an apply that throws part-way (no host memory) must not apply them twice
        if (n) apply(static_cast<const BlockEvent *>(events_), n);
    }

    FutexLock mu_;  // with n_: the one line every append changes, beside the slot it writes
    int n_ = 0;
    BlockEvent events_[kBatch];
};

}  // namespace gg::torch
