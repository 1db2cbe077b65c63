// Learning the eval loop's code from the stack (see eval_loop.h and shim/python/frames.h).
//
// The entry frame CPython 3.12+ links below each eval-loop run's first frame is a local variable of that
// run's native frame (Python/ceval.c). The native frame that holds its address is therefore the eval
// loop's, whatever the code's symbols say; its return address is the one read from the highest slot
// below that address (a frame's locals lie between its return address's slot and the next one out).
// The code range of the unwind entry around that return address is the loop's, or the part of it that
// the compiler split off. A few captures suffice (the loop's dispatch is one part); each walks the
// stack without the walk memo, so only the first kAnswers captures that reach that frame do it.
#include "shim/stacks/eval_loop.h"

#include <atomic>
#include <cstdint>

#include "shim/base/profile.h"
#include "shim/python/frames.h"
#include "shim/stacks/cfi_walker.h"

namespace gg::stacks {
namespace {

constexpr int kAnswers = 32;     // captures whose walk reached the eval loop's frame
constexpr int kAttempts = 1024;  // captures that tried, answered or not: a stack the walker cannot read
                                 // to that frame (or CPython 3.11's, with no entry frame on the C stack)
                                 // must not cost every capture a walk
constexpr int kMaxFrames = 128;  // the walker's most; PyTorch's stacks are deep
std::atomic<int> g_answers{0}, g_attempts{0};
std::atomic<bool> g_done{false};  // set once either count is reached: then nothing more is touched

}  // namespace

uintptr_t return_address_into_frame_holding(uintptr_t address) {
    void *ips[kMaxFrames];
    uintptr_t slots[kMaxFrames];
    int n = cfi::walk_with_slots(ips, slots, kMaxFrames);
    for (int i = 0; i + 1 < n; i++)
        if (slots[i] < address && address < slots[i + 1]) return reinterpret_cast<uintptr_t>(ips[i]);
    return 0;
}

void learn_eval_loop() {
    if (g_done.load(std::memory_order_relaxed)) return;
    if (g_attempts.fetch_add(1, std::memory_order_relaxed) + 1 >= kAttempts)
        g_done.store(true, std::memory_order_relaxed);
    GG_PROFILE_STEP(kCaptureLearnEvalLoop);
    uintptr_t entry = py::innermost_entry_frame();
    if (!entry) return;
    uintptr_t ip = return_address_into_frame_holding(entry);
    if (!ip) return;
    if (g_answers.fetch_add(1, std::memory_order_relaxed) + 1 >= kAnswers)
        g_done.store(true, std::memory_order_relaxed);
    if (py::is_eval_loop(ip)) return;
    uintptr_t lo = 0, hi = 0;
    if (cfi::function_range(ip - 1, &lo, &hi)) py::add_eval_loop_part(lo, hi);  // ip - 1: inside the call
}

}  // namespace gg::stacks
