// The tensor view: what PyTorch's caching allocator hands out, block by block, next to the segments
// it gets from the driver. c10 reports every block through c10::reportMemoryUsageToProfiler
// (shim/hooks/torch.cpp forwards it here), under its allocator mutex: nothing here takes the GIL,
// calls into PyTorch, allocates device memory or waits for anything but a short lock of its own.
//
// Kept: the live blocks in a tracker of their own (pointer, size, stack, bytes by stack, peak),
// PyTorch's own allocated and reserved totals per device with their peaks and a timeline, the
// request of the last out-of-memory, the address ranges of expandable segments (cuMemMap), and a
// ring of recent events (shim/torch/events.h). The report's "tensor_view" section (section.cpp)
// is made from them.
#pragma once
#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "shim/track/timeline.h"
#include "shim/track/tracker.h"

namespace gg::torch {

// From the configuration, when the shim starts: GPUGUARD_TENSOR_VIEW and GPUGUARD_TENSOR_EVENTS.
void configure(bool on, size_t events);
bool enabled();

// Switched at run time (gpuguard_set_tensor_view, gpuguard.tensor_view()): off, a block event costs
// what it costs with GPUGUARD_TENSOR_VIEW=0 (c10's own call, one check). Switched back on, the
// blocks made while it was off are unknown and frees seen while off were missed: the live-block
// table is emptied and the view is *partial* until every byte PyTorch says is allocated is listed
// again (Coverage). Returns whether it was on.
bool set_enabled(bool on);

// What the live-block table covers of PyTorch's allocated bytes (the report's "coverage").
struct Coverage {
    uint64_t switched_off = 0;     // times the view was switched off at run time
    uint64_t listed_since_ns = 0;  // mono_ns() of the last switch back on (0: listed from the start)
    uint64_t missed_off_ns = 0;    // how long it was off in all, so far
    bool off = false;              // off now
};
Coverage coverage();

// Whether c10 has reported a block in this process (the tensor view has something to show). Inline:
// the driver hooks ask it on every allocation.
namespace detail {
extern std::atomic<bool> g_active;
}
inline bool active() { return detail::g_active.load(std::memory_order_relaxed); }

// c10's reports. `size` > 0: a block handed out; < 0: taken back. Totals as c10 gives them.
// The c10 hooks tell the out-of-memory episodes (shim/quota/episode.h, a floor above) themselves,
// once active(), whether the view is switched on or not.
void on_block(uint64_t ptr, int64_t size, uint64_t allocated, uint64_t reserved, int device);
void on_out_of_memory(int64_t size, uint64_t allocated, uint64_t reserved, int device);
// A refusal inside c10's allocator that PyTorch recovered from (the episodes drop its report):
// counted for the report's tensor section.
void note_refusal_recovered();
uint64_t refusals_recovered();

// From the driver hooks once active(): device memory the process got (made) or gave back.
void on_segment(bool made, uint64_t address, uint64_t bytes, int device);
// cuMemMap / cuMemUnmap: an expandable segment's page mapped or unmapped at `address`.
void on_mapping(bool mapped, uint64_t address, uint64_t bytes);

// Whether a stack was captured inside PyTorch's caching allocator (a frame in libc10_cuda.so): a
// failure there is retried by PyTorch before it becomes an out-of-memory (shim/quota/episode.cpp).
bool inside_allocator(stacks::StackId stack);

struct Totals {
    bool seen = false;
    uint64_t allocated = 0, reserved = 0, peak_allocated = 0, peak_reserved = 0;
};
Totals totals(int device);

struct OutOfMemory {
    bool seen = false;
    uint64_t requested = 0, allocated = 0, reserved = 0;
    int device = -1;
    uint64_t t_ns = 0;  // mono_ns()
};
OutOfMemory last_out_of_memory();

Tracker &blocks();
// (mono_ns, {allocated, reserved}) summed over devices.
std::vector<Timeline<2>::Point> timeline();
// Mapped ranges (address, bytes), by address.
std::vector<std::pair<uint64_t, uint64_t>> mappings();

// Registers the report's "tensor_view" section (section.cpp); once, when the shim starts.
void register_section();

// fork(): the locks here are taken before fork and released on both sides (shim/start/fork_locks.def);
// the child starts with nothing (its parent's tensors are not its own).
void lock_for_fork();
void unlock_after_fork();
void reset_after_fork();

}  // namespace gg::torch
