// What a soak worker (soak_worker.cpp) shares with the supervisor (soak.cpp): one small file per
// worker, mapped by both, so that the supervisor still reads it after the worker was SIGKILLed.
//
// Why it exists: the test driver gives a process's device memory back when it exits, but not when it
// is SIGKILLed (a real driver does both). So after each kill the supervisor must know how many bytes
// the dead process left counted in the driver's ground truth (FAKE_CUDA_TRUTH), to compare the truth
// with the limit. Each thread says what it is about to do before each driver call, so a kill inside a
// call leaves an exact bound: the dead process left between `held` and `held` plus the sizes of the
// calls in flight.
#pragma once
#include <atomic>
#include <cstdint>

namespace soak {

constexpr int kMaxThreads = 64;
enum Phase : uint32_t { kIdle = 0, kAllocating = 1, kFreeing = 2 };

struct ThreadRecord {
    std::atomic<uint32_t> phase;
    std::atomic<uint64_t> size;  // of the call in flight
    // What an admission under way in a call that is not an allocation (a graph's upload or launch, a
    // context) may add to the ledger: the supervisor's reading of the ledger with every worker stopped
    // may catch it added and not yet taken back (soak.cpp, check_ledger).
    std::atomic<uint64_t> admitting;
};

struct Journal {
    std::atomic<uint64_t> held;    // bytes this worker holds in the driver, outside calls in flight
    std::atomic<uint64_t> ops;     // driver calls made: the supervisor's sign of progress
    std::atomic<uint64_t> allocs;  // successful allocations
    std::atomic<uint64_t> frees;
    std::atomic<uint64_t> oom;     // CUDA_ERROR_OUT_OF_MEMORY: the quota, or the driver's injected failures
    std::atomic<uint64_t> errors;  // any other error: a failure of the soak
    std::atomic<uint64_t> huge;    // requests of sizes no device holds (near SIZE_MAX): all refused
    // exec: a real driver frees an image's memory when it execs; the test driver's ground truth
    // keeps it, as after a SIGKILL. So the worker sets exec_left to what the truth's entry of its
    // process holds before it execs (all that its images left so far), and the supervisor takes that
    // off the truth while the worker runs, as it does for a killed worker.
    std::atomic<uint64_t> exec_left;
    std::atomic<uint64_t> execs;
    // 1 once this image has installed its SIGTERM handler and made a driver call (so the shim's report
    // signal handler is in place): the supervisor sends SIGTERM and SIGUSR2 only then.
    std::atomic<uint32_t> ready;
    // A worker in a PID namespace of its own: its pid as the supervisor's namespace sees it (the
    // supervisor's child is the namespace's parent, which writes it); 0 otherwise.
    std::atomic<int32_t> outer_pid;
    // Set by the supervisor before its SIGTERM: an image that execs after the signal was handled (or
    // in the instant between) sees it and stops at once instead of running on.
    std::atomic<uint32_t> term_requested;
    ThreadRecord thread[kMaxThreads];
    // The first error's call and result ("cuStreamCreate: error 2"), written once by the worker that
    // took first_error_claimed; the supervisor names it with the error count.
    std::atomic<uint32_t> first_error_claimed;
    char first_error[96];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the journal is shared with another process");

}  // namespace soak
