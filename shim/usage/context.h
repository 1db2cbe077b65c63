// What a CUDA context costs (docs/architecture.md, "What the quota counts"). A context takes device
// memory of its own (518 MiB on the H200 with CUDA 13, docs/platform-facts.md) that no allocation
// call returns. The cost is measured when a process makes a context: NVML's figure of the process
// itself where it can see itself (self_view.h), else the device's used memory before and after
// (less what the container's other processes charged meanwhile), and kept in the ledger per device
// (the best measurement wins), so that a process that cannot measure charges what another measured.
//
// A context whose known cost no longer fits the quota is refused with CUDA_ERROR_OUT_OF_MEMORY, one
// line and a report, as a full GPU refuses it. While the cost is not known, one process of the ledger
// at a time makes its context and measures it; the others wait for the figure (at most 10 s), so that
// ranks started together (torchrun) are admitted with it, and the device-wide measurement sees one
// context only. The measuring context is made and charged after; if that passes the limit, one line
// and a warning report say so.
#pragma once
#include <cstdint>

#include "shim/api/api.h"
#include "shim/api/cuda_api.h"
#include "shim/api/refusal.h"
#include "shim/device/device.h"

namespace gg::usage::context {

struct Ticket {
    int ordinal = -1;                 // set when contexts are counted
    const DeviceInfo *dev = nullptr;  // set when this call makes a context on an accounted device
    bool creates = false;  // this call makes a context: the first retain of the primary one, or a cuCtxCreate
    bool primary = false;
    uint64_t charged = 0;    // admitted before the call: the cost the ledger knew
    bool alone = false;      // the process held nothing on the device before: the context can be measured
    bool measuring = false;  // this process holds the ledger's claim to measure the cost (ledger.h)
    bool own_before_ok = false, device_before_ok = false;
    uint64_t own_before = 0, device_before = 0, container_before = 0;
    Refusal refused{};  // when admit() refused: what the hook reports (shim/quota/episode.h)
};

// Before the driver makes (or retains) a context on `ordinal`. CUDA_ERROR_OUT_OF_MEMORY: refused, as
// t->refused says; the hook reports it and returns it without calling the driver.
CUresult admit(Api api, int ordinal, bool primary, Ticket *t);
// After it: `made` is cuCtxCreate's new context (null for the primary one).
void done(Ticket &t, CUresult result, CUcontext made);

// Contexts this process made while no cost was known (it could not measure its own: its other threads
// allocated meanwhile, or the device's figure moved) are charged the cost once the ledger knows one:
// from the reconciliation (the allocation path's once-a-second tick, memory queries, refusals).
void settle_uncounted(const DeviceInfo &d);

// What this process's contexts on `ordinal` are charged, by their measured cost: a floor for the
// NVML reconciliation (usage.cpp).
uint64_t charged_on(int ordinal);

// After cuDevicePrimaryCtxRelease (the last release destroys the context), cuDevicePrimaryCtxReset,
// cuCtxDestroy.
void released(int ordinal, CUresult result);
void reset(int ordinal, CUresult result);
void destroyed(CUcontext ctx, CUresult result);

// What is known of the context cost on the device (the ledger's, or a device of the same model's).
uint64_t known_cost(const DeviceInfo &d);

void lock_for_fork();
void unlock_after_fork();
void reset_after_fork();

}  // namespace gg::usage::context
