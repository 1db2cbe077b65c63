// What the driver takes for a process beside its allocations (issue 19; docs/architecture.md, "What
// the quota counts"): contexts and the modules loaded into them, CUDA graphs' memory, and the memory
// stream-ordered pools keep beyond their live allocations. Each is charged to the ledger as a kind of
// its own (common/ledger/layout.h, Kind), so that the one total admission sums is what the GPU gives.
//
//   context.h    a context's cost, measured when the process makes its first one; refusal when it
//                no longer fits
//   modules.h    module and library loads, measured around the load
//   pools.h      the reserve of stream-ordered pools, read from the pools themselves
//   graphs.h     graph memory, read from the device's graph pool; admission of a launch
//   self_view.h  NVML's per-process figure of this process, where NVML shows it
// This file: what ties them together (when the driver's numbers are read again, making room before a
// refusal) and what a report says of them.
#pragma once
#include <cstdint>
#include <string>

#include "common/ledger/layout.h"
#include "shim/device/device.h"

namespace gg::usage {

// Whether the quota counts more than allocations (GPUGUARD_COUNT_CONTEXT, 1 or estimate).
bool on();

// Reads the pools' and the graph pool's reserve from the driver again and settles the ledger's kinds;
// with `self_view`, also NVML's figure of this process (at most every 100 ms unless `now`).
void reconcile(const DeviceInfo &d, bool self_view, bool now = false);

// From the allocation path (guard::commit, which has just read the coarse clock): a reconcile with
// NVML's view about once a second, and every 10 ms once the container holds more than 3/4 of its
// limit, so that what no hook sees (code the driver loads lazily at a kernel's first launch, local
// memory it grows) is counted while a program allocates, before admission counts on it.
void tick(const DeviceInfo &d, uint64_t now_ns);

// Before a refusal: trims this process's own pools and graph memory (memory it holds but does not
// use) and reads everything again. True when that released something, so admission is worth a retry.
bool make_room(const DeviceInfo &d);

// For reports: this process's and the container's bytes by kind, and how they were found.
struct Summary {
    const char *mode = "allocations";  // everything | allocations | estimate
    uint64_t own[ledger::kKinds] = {}, own_total = 0;
    uint64_t container[ledger::kKinds] = {}, container_total = 0;
    uint64_t context_cost = 0;
    const char *context_cost_source = "unknown";  // own_process | device_delta | unknown
    const char *self_view = "off";                // nvml | not_listed | unavailable | off
};
Summary summary(const DeviceInfo &d);
// Adds the summary to every report's "usage" (shim/usage/section.cpp); the wiring registers it once.
void register_section();

// fork(): every lock of the usage modules (shim/start/fork_locks.def), and the child's fresh start (it
// has no context, pool or graph of its parent's).
void lock_for_fork();
void unlock_after_fork();
void reset_after_fork();

}  // namespace gg::usage
