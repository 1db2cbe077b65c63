// The c10 hooks: PyTorch's caching allocator reports every block it hands out or takes back, and
// every request it cannot serve, to its profiler through these two functions of libc10.so, which
// libc10_cuda.so calls through its PLT, so the preloaded shim's definitions win
// (docs/platform-facts.md). Each forwards to c10's own first (PyTorch's profiler keeps working),
// then tells the tensor view (shim/torch/view.h). Called under the allocator's mutex: nothing
// here takes the GIL, calls back into PyTorch or allocates device memory.
#include "shim/api/export.h"
#include "shim/base/profile.h"
#include "shim/quota/episode.h"
#include "shim/quota/guard.h"
#include "shim/resolve/real.h"
#include "shim/torch/view.h"

using namespace gg;

GG_EXPORT GG_HOT void _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE(void *ptr, int64_t alloc_size,
                                                                            size_t total_allocated,
                                                                            size_t total_reserved, C10Device device) {
    auto real = real_torch()._ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE.get(real_torch_fn);
    if (real) real(ptr, alloc_size, total_allocated, total_reserved, device);
    if (device.type != kC10DeviceCuda) return;
    guard::DriverCall scope;  // the shim's own driver calls meanwhile are not the program's
    if (!scope.outermost()) return;
    GG_PROFILE_STEP(kTorchBlock);
    torch::on_block(reinterpret_cast<uintptr_t>(ptr), alloc_size, total_allocated, total_reserved, device.index);
    // A block handed out: a refusal before it, inside c10's allocator, was not the program's OOM. Once
    // c10 was seen (torch::active(), which makes the episodes hold such refusals pending), whether or
    // not the view is switched on: switched off, it still settles them.
    if (alloc_size > 0 && torch::active() && episode::allocator_recovered()) torch::note_refusal_recovered();
}

GG_EXPORT void _ZN3c1027reportOutOfMemoryToProfilerElmmNS_6DeviceE(int64_t alloc_size, size_t total_allocated,
                                                                   size_t total_reserved, C10Device device) {
    auto real = real_torch()._ZN3c1027reportOutOfMemoryToProfilerElmmNS_6DeviceE.get(real_torch_fn);
    if (real) real(alloc_size, total_allocated, total_reserved, device);
    if (device.type != kC10DeviceCuda) return;
    guard::DriverCall scope;
    // The report of this out-of-memory: the one its driver failure wrote, rewritten with what c10
    // knows now, or a first one when c10 refused without asking the driver (a memory fraction).
    if (!scope.outermost()) return;
    torch::on_out_of_memory(alloc_size, total_allocated, total_reserved, device.index);
    if (torch::active()) episode::allocator_out_of_memory(device.index, alloc_size > 0 ? uint64_t(alloc_size) : 0);
}
