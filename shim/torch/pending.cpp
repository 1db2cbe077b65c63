#include "shim/torch/pending.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include "common/base/log.h"
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
    // The applier has not finished the batch before (it lags a whole batch behind, or was not yet
    // woken): this thread applies it, in order, and the buffer is free again.
    if (handed_n_.load(std::memory_order_acquire) != 0) {
        std::lock_guard<FutexLock> applying(apply_mu_);
        apply_handed();
    }
    handed_ = filling_;
    handed_n_.store(n_, std::memory_order_release);
    filling_ ^= 1;
    n_ = 0;
    handoffs_.fetch_add(1, std::memory_order_release);
    futex_wake(handoffs_, 1);
}

void PendingLog::apply_handed() {
    int n = handed_n_.load(std::memory_order_acquire);
    if (n == 0) return;
    apply_guarded(apply_, events_[handed_], n);
    handed_n_.store(0, std::memory_order_release);  // after: the buffer is read until apply returns
}

void PendingLog::apply_pending() {
    apply_handed();
    int n = n_;
    n_ = 0;
    if (n) apply_guarded(apply_, events_[filling_], n);
}

void *PendingLog::applier_main(void *arg) {
    auto *log = static_cast<PendingLog *>(arg);
    prctl(PR_SET_NAME, "gpuguard-apply", 0, 0, 0);
    for (;;) {
        uint32_t seen = log->handoffs_.load(std::memory_order_acquire);
        {
            std::lock_guard<FutexLock> applying(log->apply_mu_);
            log->apply_handed();
        }
        futex_wait(log->handoffs_, seen);  // returns at once if a batch came meanwhile
    }
    return nullptr;
}

bool PendingLog::applier_started() {
    uint32_t state = applier_.load(std::memory_order_relaxed);
    if (state != kNotStarted) return state == kRunning;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);  // a batch's calls are shallow
    // Every signal blocked in it, so that the program's signals keep going where they went.
    sigset_t all, old;
    sigfillset(&all);
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
    return true;
}

void PendingLog::clear_after_fork() {
    std::lock_guard<FutexLock> lock(mu_);
    std::lock_guard<FutexLock> applying(apply_mu_);
    n_ = 0;
    handed_n_.store(0, std::memory_order_relaxed);
    // Threads do not cross fork: a child starts an applier of its own at its first full batch (a
    // failure to start stays a failure). In the process that started it (the unit tests clear the
    // view between cases), the applier it has keeps going.
    if (applier_.load(std::memory_order_relaxed) == kRunning && applier_pid_ != getpid())
        applier_.store(kNotStarted, std::memory_order_relaxed);
}

}  // namespace gg::torch
