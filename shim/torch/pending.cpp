#include "shim/torch/pending.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/base/log.h"
#include "shim/base/clock.h"
#include "shim/base/futex.h"

namespace gg::torch {

namespace {

// A batch's tables throw nothing but bad_alloc (no host memory: the block goes untracked, as on the
// program's thread before); the applier must not die of it, nor let it end the process.
void apply_guarded(PendingLog::Apply apply, const BlockEvent *events, int n) {
    try {
        apply(events, n);
    } catch (...) {}
}

}  // namespace

void PendingLog::hand_off() {
    if (!background_ || !applier_started()) {
        std::lock_guard<FutexLock> applying(apply_mu_);
        apply_pending();
        return;
    }
    // Handed off before this batch and not yet applied. Exact while the applier sleeps (applied_ moves
    // only while it is awake), and never more than the truth.
    uint32_t waiting = filled_ - applied_.load(std::memory_order_acquire);
    // Every other buffer waits (the applier is descheduled, or was not yet woken): this thread applies
    // them, oldest first, and a buffer is free again.
    if (waiting == kBuffers - 1) {
        std::lock_guard<FutexLock> applying(apply_mu_);
        apply_handed();
        waiting = 0;
    }
    counts_[filled_ % kBuffers] = n_;
    filled_++;
    n_ = 0;
    handed_.store(filled_, std::memory_order_release);
    // A sleeping applier is woken when kWakeAt batches wait, not at every batch: a wake-up is a system
    // call on this thread, and where the applier's core sleeps, an interrupt to it, about 10 us on the
    // CPU machine's virtual cores (45 ns an event of a batch; BENCHMARKS.md, the thirteenth session).
    // An applier sleeps only once it has applied every batch handed, so the batches waiting then grow
    // one a hand-off and reach kWakeAt exactly; an applier that is awake takes each batch handed
    // meanwhile without being woken, so the count passing kWakeAt again wakes nobody (one call at most,
    // when it drops below and comes back). The batches that wait are applied by whoever reads the
    // tables first (settle).
    if (wake_first_ || waiting + 1 == kWakeAt) {
        wake_first_ = false;
        wakes_++;
        futex_wake(handed_, 1);
    }
}

void PendingLog::apply_handed(bool on_applier) {
    uint32_t handed = handed_.load(std::memory_order_acquire);
    for (uint32_t next = applied_.load(std::memory_order_relaxed); next != handed; next++) {
        apply_guarded(apply_, events_[next % kBuffers], counts_[next % kBuffers]);
        if (on_applier) let_go(events_[next % kBuffers], counts_[next % kBuffers]);
        applied_.store(next + 1, std::memory_order_release);  // after: the buffer is read until apply returns
    }
}

// The applier's copies of a batch's lines, dropped once applied where that is cheap (FlushJudge).
// Kept, each line of the buffer is shared with the applier's core when the program's thread next
// writes it, kBuffers batches later, and that store waits for the other core to let it go: a request for
// writing in advance (prefetchw) did not bring such a line on the CPU machine's AMD cores, where the
// wait was 150 ns an event, most of the append (BENCHMARKS.md, the seventh session). Flushed, the
// line is in memory alone and the store's request is answered from there, ahead of time
// (prefetch_for_write then has it in time). Coherent either way: a flush writes back what it drops,
// and the buffer is not written again until applied_ says so. Only on the applier's own thread: on
// the program's, it would drop its own lines.
void PendingLog::let_go(const BlockEvent *events, int n) {
#if defined(__x86_64__)
    if (!flush_.flushing()) return;
    // clflush, on every x86-64: a batch's 256 lines in under 1 us on AMD cores, where clflushopt
    // (unordered) took a fifth longer.
    bool timing = flush_.timing();
    // The clock read twice before the flushes: the second read's cost is taken off theirs (a few ns
    // from the vDSO, microseconds where the clock source needs a system call).
    uint64_t before = timing ? steady_ns() : 0, start = timing ? steady_ns() : 0;
    for (int i = 0; i < n; i++) _mm_clflush(events + i);
    if (timing) {
        _mm_mfence();  // the flushes done, so that the time is theirs
        uint64_t took = steady_ns() - start, reading = start - before;
        flush_.timed(took > reading ? took - reading : 0, n);
        if (!flush_.timing())
            log_debug("tensor view: the applier's flushes cost at least %llu ns a line: %s",
                      (unsigned long long)flush_.cheapest_ns_per_line(), flush_.flushing() ? "kept" : "stopped");
    }
#else
    (void)events, (void)n;
#endif
}

void PendingLog::apply_pending() {
    apply_handed();
    int n = n_;
    n_ = 0;
    if (n) apply_guarded(apply_, filling(), n);
}

void *PendingLog::applier_main(void *arg) {
    auto *log = static_cast<PendingLog *>(arg);
    prctl(PR_SET_NAME, "gpuguard-apply", 0, 0, 0);
    for (;;) {
        uint32_t seen = log->handed_.load(std::memory_order_acquire);
        {
            std::lock_guard<FutexLock> applying(log->apply_mu_);
            log->apply_handed(/*on_applier=*/true);
        }
        futex_wait(log->handed_, seen);  // returns at once if a batch came meanwhile
    }
    return nullptr;
}

bool PendingLog::applier_started() {
    uint32_t state = applier_.load(std::memory_order_relaxed);
    if (state != kNotStarted) return state == kRunning;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    // Every signal blocked in it, so that the program's signals keep going where they went; but a
    // fault of its own (SIGSEGV, SIGBUS...) still reaches the handlers, as on the program's thread.
    sigset_t all, old;
    sigfillset(&all);
    for (int fault : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS}) sigdelset(&all, fault);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    int rc = pthread_create(&t, &attr, applier_main, this);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        log_error(
            "cannot start the tensor view's applier thread (%s): its batches are applied on the program's "
            "threads",
            strerror(rc));
        applier_.store(kFailed, std::memory_order_relaxed);
        return false;
    }
    applier_pid_ = getpid();
    applier_.store(kRunning, std::memory_order_relaxed);
    wake_first_ = true;
    return true;
}

void PendingLog::clear_after_fork() {
    std::lock_guard<FutexLock> lock(mu_);
    std::lock_guard<FutexLock> applying(apply_mu_);
    n_ = 0;
    applied_.store(handed_.load(std::memory_order_relaxed), std::memory_order_relaxed);  // dropped, not applied
    // Threads do not cross fork: a child starts an applier of its own at its first full batch (a
    // failure to start stays a failure). In the process that started it (the unit tests clear the
    // view between cases), the applier it has keeps going. A child whose pid reads as its parent's
    // (another PID namespace) is taken for the parent: it has no applier, and applies the batches
    // itself each time every buffer waits, or at a settle.
    if (applier_.load(std::memory_order_relaxed) == kRunning && applier_pid_ != getpid())
        applier_.store(kNotStarted, std::memory_order_relaxed);
}

}  // namespace gg::torch
