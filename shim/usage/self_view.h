// NVML's figure of this process's own device memory: the number nvidia-smi --query-compute-apps
// shows, the driver's own per-process truth, which counts everything (context, modules, code loaded
// lazily, local memory, allocations, pools, graphs). The shim loads NVML itself (the program may not)
// on its first context.
//
// In a container NVML may list nothing, or list processes by their pid in the host's PID namespace,
// where one of them may carry this process's pid number. So the view is trusted only when this
// process's pid is NOT listed before its first context (a listed namesake means the list's pids are
// another namespace's) and IS listed after. Otherwise the view is off and the measured costs stand
// (docs/architecture.md says what that misses).
#pragma once
#include <cstdint>

#include "shim/device/device.h"

namespace gg::usage::self_view {

enum class Own { kFound, kNotListed, kUnavailable };

// This process's bytes on the device, as NVML lists them.
Own own_bytes(const DeviceInfo &d, uint64_t *bytes);
// Every process's bytes on the device (NVML's device-wide used), for measuring a context where the
// process cannot see itself.
bool device_used(const DeviceInfo &d, uint64_t *bytes);

// Called before this process makes its first context on the device; see above.
void check_before_first_context(const DeviceInfo &d);
// Whether the view can be used (NVML loaded, the process found itself, GPUGUARD_COUNT_CONTEXT is 1).
bool usable();
// For reports: nvml | not_listed | unavailable | off.
const char *state_name();

void reset_after_fork();

}  // namespace gg::usage::self_view
