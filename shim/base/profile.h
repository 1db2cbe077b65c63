// Step timers for finding where a hooked call's time goes, on a machine without perf (the GPU
// machine): `make PROFILE=1` builds the shim into build-profile/ with GG_PROFILE defined, and each
// timed step adds its duration to a histogram printed to stderr at exit (count, mean, median, p90).
// In every other build GG_PROFILE_STEP is empty: the hot path carries nothing.
//
//   { GG_PROFILE_STEP(kAllocDriver); r = call(...); }   // times the rest of the enclosing block
#pragma once

namespace gg::profile {

enum Step {
    kAllocTotal,
    kAdmit,
    kAdmitOrdinal,
    kAdmitDevice,
    kAdmitCharge,
    kAdmitReclaim,
    kAllocDriver,
    kCommit,
    kCaptureNative,
    kCaptureNativeKey,
    kCapturePythonKey,
    kCapturePython,
    kCaptureLearnEvalLoop,  // inside kCapturePython: the eval loop's code looked for (shim/stacks/eval_loop.h)
    kCaptureIntern,
    kCaptureCheck,     // a reuse's check, by the native frames up to the eval loop
    kCaptureLookup,    // a Python site's key looked up in the thread's site cache
    kCaptureWholeKey,  // a deep site's key of every Python frame (or a miss's, stored with its stack)
    kMemoRecall,       // the walk memo's recall (shim/stacks/walk_memo.h), whole
    kMemoSet,          // its set: the stack's words at the start's forks read, the set chosen
    kMemoCompare,      // the ways' words compared with the stack's
    kMemoCopy,         // a recalled walk's return addresses copied out
    kFreeTotal,
    kFreeTake,
    kFreeDriver,
    kFreeFinish,
    kTorchBlock,
    kTorchStack,
    kTorchLog,    // appended to the pending log (shim/torch/pending.h)
    kTorchApply,  // a batch of pending events applied
    kSteps
};

}  // namespace gg::profile

#ifdef GG_PROFILE
#include <cstdint>

namespace gg::profile {

uint64_t now();
void add(Step step, uint64_t ns);

class Timer {
public:
    explicit Timer(Step step) : step_(step), start_(now()) {}
    ~Timer() { add(step_, now() - start_); }
    Timer(const Timer &) = delete;
    Timer &operator=(const Timer &) = delete;

private:
    Step step_;
    uint64_t start_;
};

}  // namespace gg::profile

#define GG_PROFILE_CAT2(a, b) a##b
#define GG_PROFILE_CAT(a, b) GG_PROFILE_CAT2(a, b)
#define GG_PROFILE_STEP(step) ::gg::profile::Timer GG_PROFILE_CAT(gg_profile_timer_, __LINE__)(::gg::profile::step)
#else
#define GG_PROFILE_STEP(step) ((void)0)
#endif
