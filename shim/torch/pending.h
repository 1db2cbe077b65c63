// The tensor view's events between c10's report and the tables they change: a short log, appended to
// on the hot path and applied in batches, by a thread of the shim's own (shim/torch/view.cpp).
//
// Why a log: each event changes four structures (the live-block table, bytes by stack, PyTorch's
// totals with their timeline, the event ring), and on the GPU the driver's and PyTorch's own work
// between two events evicts every line of them: one event then waited on 30 to 40 cold cache lines,
// 0.5 us of a Llama step's 2,100 events each (BENCHMARKS.md). Appending touches the log's lock and
// one 64-byte slot; a batch of kBatch events is then applied in one pass, in which the structures'
// shared lines stay in the cache from one event to the next.
//
// Why a thread: applied on the program's thread, a batch still cost 45 to 70 us on the GPU machine,
// about a quarter of a block event's time, paid by whichever thread filled the log, inside c10's
// allocator mutex. The applier thread takes full batches off the program's hands (the log has 16
// buffers: one filling, up to 15 handed off) and sleeps in between, woken when half of them wait (a
// wake-up costs the program a system call). The program's thread waits on it only when 15 batches
// wait (a descheduled applier on a machine with every core busy): it then applies them itself, in
// order. Why 16 (256 KiB), not the four of before: a sleeping applier's wake-up took longer than the
// program needs to fill three batches when blocks come back to back (on the CPU machine's virtual
// cores, 3 x 256 events at about 50 ns each), and the program then waited for it and applied the
// batches itself (BENCHMARKS.md, the thirteenth session). Where the thread cannot start (no memory, a
// limit on threads), batches are applied as before, on the thread that fills the log.
//
// Ordered: appends take one lock, and batches are applied one at a time in the order they filled,
// so the events are applied in the order c10 reported them (a block made on the forward thread and
// freed on the autograd thread is inserted before it is taken). Whoever reads the tables applies
// what is pending first (settle), so a report never misses an event.
#pragma once
#include <sys/types.h>

#include <atomic>
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

// Whether the applier flushes a batch's lines once applied (PendingLog::let_go), judged by what the
// first flushes cost. On the AMD cores of an earlier CPU machine a flush cost under 4 ns a line and
// spared the program's next store a 150 ns wait. On Intel Xeon cores (this CPU machine's; the GPU
// hosts are Intel too) each flush of a line the program wrote took about 185 ns, one after another:
// 47 us a batch, longer than the batch's own work, and the program's stores did not need it there
// (prefetchw brings the line; BENCHMARKS.md, the thirteenth session). The cheapest of the first
// kTrials flushes decides, once: a flush slowed by a preemption does not turn flushing off. It times
// only what a flush costs, not what it saves the program (the seventh session measured that on AMD),
// so in effect it tells the two kinds of core apart by their flushes.
class FlushJudge {
public:
    static constexpr int kTrials = 8;
    static constexpr uint64_t kCheapNsPerLine = 24;

    bool flushing() const { return flushing_; }
    bool timing() const { return flushing_ && timed_ < kTrials; }
    uint64_t cheapest_ns_per_line() const { return cheapest_; }
    // One flush of `lines` lines took `ns`, the flushes' completion included.
    void timed(uint64_t ns, int lines) {
        if (!timing() || lines <= 0) return;
        uint64_t per_line = ns / (uint64_t)lines;
        if (per_line < cheapest_) cheapest_ = per_line;
        if (++timed_ == kTrials && cheapest_ > kCheapNsPerLine) flushing_ = false;
    }

private:
    bool flushing_ = true;
    int timed_ = 0;
    uint64_t cheapest_ = UINT64_MAX;
};

class PendingLog {
public:
    static constexpr int kBatch = 256;            // 16 KiB of events; a batch applies in a few tens of microseconds
    static constexpr int kBuffers = 16;           // one filling, up to 15 handed off and waiting for the applier
    static constexpr int kWakeAt = kBuffers / 2;  // batches waiting when a sleeping applier is woken
    using Apply = void (*)(const BlockEvent *events, int n);

    // `background`: full batches go to the applier thread (started at the first); otherwise they are
    // applied on the thread that fills the log (the unit tests' deterministic mode).
    constexpr PendingLog(Apply apply, bool background) : apply_(apply), background_(background) {}

    // Appends e; when the log is full, hands the batch to the applier first.
    void append(const BlockEvent &e) {
        std::lock_guard<FutexLock> lock(mu_);
        if (n_ == kBatch) hand_off();
        BlockEvent *slot = filling() + n_++;
        *slot = e;
        // The next slot's line, asked for now for writing, is this core's when the next event comes,
        // and c10's unlock after this call does not wait for it (BENCHMARKS.md, the fifth session).
        // On AMD cores, where a line still shared with the applier's core was not brought this way
        // (the seventh session), the applier flushed it after reading it (let_go, FlushJudge).
        prefetch_for_write(n_ < kBatch ? slot + 1 : events_[(filled_ + 1) % kBuffers]);
    }

    // Applies what is pending, the batches handed off first: before the tables are read.
    void settle() {
        std::lock_guard<FutexLock> lock(mu_);
        std::lock_guard<FutexLock> applying(apply_mu_);
        apply_pending();
    }

    // Runs f with nothing pending and no batch being applied: the tables then change only inside f.
    template <class F>
    void settled(F &&f) {
        std::lock_guard<FutexLock> lock(mu_);
        std::lock_guard<FutexLock> applying(apply_mu_);
        apply_pending();
        f();
    }

    // Whether the applier thread runs, and how often it was woken (tests; wakes() on the appending thread).
    bool applier_running() const { return applier_.load(std::memory_order_relaxed) == kRunning; }
    uint32_t wakes() const { return wakes_; }

    // fork(): taken before, released on both sides; the child drops its parent's events
    // (clear_after_fork, also the unit tests' way to start afresh), and starts an applier of its own at
    // its first full batch.
    void lock_for_fork() {
        mu_.lock();
        apply_mu_.lock();
    }
    void unlock_after_fork() {
        apply_mu_.unlock();
        mu_.unlock();
    }
    void clear_after_fork();

private:
    enum ApplierState : uint32_t { kNotStarted, kRunning, kFailed };

    BlockEvent *filling() { return events_[filled_ % kBuffers]; }
    static void prefetch_for_write(const void *p) {
#if defined(__x86_64__)
        asm volatile("prefetchw %0" : : "m"(*static_cast<const char *>(p)));  // a no-op where the CPU lacks it
#else
        __builtin_prefetch(p, 1);
#endif
    }

    void hand_off();  // under mu_: the full batch to the applier, or applied here
    // under apply_mu_: every batch handed off and not yet applied, oldest first; `on_applier`: on the
    // applier thread, which then lets go of the batch's lines (let_go, pending.cpp)
    void apply_handed(bool on_applier = false);
    void let_go(const BlockEvent *events, int n);
    void apply_pending();    // under both: the batches handed off, then what is filling
    bool applier_started();  // under mu_
    static void *applier_main(void *log);

    const Apply apply_;
    const bool background_;

    // Appends: mu_ with n_ and filled_, the line every append changes.
    FutexLock mu_;
    int n_ = 0;            // events in the filling buffer, filled() = events_[filled_ % kBuffers]
    uint32_t filled_ = 0;  // batches handed off so far
    std::atomic<uint32_t> applier_{kNotStarted};
    pid_t applier_pid_ = 0;    // the process that started it (fork: a child has none)
    bool wake_first_ = false;  // the applier just started: its first batch wakes it, however few wait
    uint32_t wakes_ = 0;       // futex wakes made

    // The hand-off: handed_ counts the batches handed off (a release after the batch's count is
    // written; the word the applier sleeps on), applied_ those applied, both only ever growing;
    // apply_mu_ is held while any batch is applied, so batches never overlap and go oldest first.
    alignas(64) FutexLock apply_mu_;
    std::atomic<uint32_t> handed_{0};
    std::atomic<uint32_t> applied_{0};
    int counts_[kBuffers] = {};
    alignas(64) FlushJudge flush_;  // the applier's own (let_go), apart from the lines above

    BlockEvent events_[kBuffers][kBatch]{};
    static_assert((kBuffers & (kBuffers - 1)) == 0, "the batch counters wrap at 2^32: a power of two keeps the order");
};

}  // namespace gg::torch
