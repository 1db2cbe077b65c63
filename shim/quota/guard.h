// The decision core, on the way of every allocation (docs/architecture.md):
//   hook -> admit (charge the ledger or refuse) -> real driver call (no lock of ours held)
//        -> commit (track) | failed (un-charge; an out-of-memory starts or joins an episode)
//   free -> take (untrack) -> real free -> release (un-charge) | restore when the free failed
#pragma once
#include <cstdint>

#include "shim/api/api.h"
#include "shim/api/cuda_api.h"
#include "shim/device/device.h"
#include "shim/track/tracker.h"

namespace gg::guard {

// Marks a driver hook's activity on this thread. The driver or cudart may call exported driver
// functions from inside one of ours; only the outermost call on a thread is accounted, so nothing
// is counted twice. It also starts the shim on the first hooked call.
class DriverCall {
public:
    DriverCall();
    ~DriverCall();
    bool outermost() const { return outermost_; }
    DriverCall(const DriverCall &) = delete;
    DriverCall &operator=(const DriverCall &) = delete;

private:
    bool outermost_;
};

// Set by the runtime hooks (cudaMalloc, ...) for the duration of the call, so that the driver call
// it makes is reported under the API the program called.
class RuntimeCall {
public:
    explicit RuntimeCall(Api api);
    ~RuntimeCall();

private:
    Api saved_;
};

// Set by cuDNN hooks: allocations made inside are tagged as workspace.
class WorkspaceScope {
public:
    WorkspaceScope();
    ~WorkspaceScope();

private:
    bool saved_;
};
bool in_workspace_scope();

struct Ticket {
    Api api = Api::kNone;         // the program's API
    Api driver_api = Api::kNone;  // ours
    const DeviceInfo *dev = nullptr;
    uint64_t bytes = 0;
    bool charged = false;     // bytes (less `drawn`) were charged to the ledger
    bool pools_held = false;  // holds the pools' readings off until the driver call is over
    // A stream-ordered allocation (shim/usage/pools.h): its pool (null: the device's current one),
    // and how much of it the pools' reserve in the ledger covered, which is not charged again.
    CUmemoryPool pool = nullptr;
    uint64_t drawn = 0;
    uint64_t growth = 0;  // charged beside the allocation as pool reserve: its rounding up to a chunk
};

// Decides a request of `bytes` on `ordinal` (-1: the current context's device). CUDA_SUCCESS: go
// ahead and call the driver. CUDA_ERROR_OUT_OF_MEMORY: refused by the quota (already reported);
// the hook returns it without calling the driver.
CUresult admit(Api driver_api, int ordinal, uint64_t bytes, Ticket *t);
// After the driver succeeded. `actual_bytes` may exceed the admitted bytes (a pitch); the
// difference is charged.
void commit(Ticket &t, KeyKind kind, uint64_t key, uint64_t actual_bytes);
// After the driver failed: un-charge; an out-of-memory is an episode (reported once).
void failed(Ticket &t, CUresult result);

// An async allocation's hold on the pools' readings (shim/usage/pools.h), taken by admit: let go
// after the driver call, before commit (failed lets go itself). Nothing when none is held.
void release_pools(Ticket &t);
// An async free's: held across the driver call (when the allocation was counted), then
// settle_async_free moves its bytes to the pools' reserve (the driver succeeded) and lets go;
// finish_free does the rest.
bool hold_pools_for_free(const Allocation &a);
void settle_async_free(Allocation *a, CUresult result);

// Frees: take before the real free (so that a concurrent allocation that gets the same address
// cannot be confused with it), then finish with the driver's result.
bool take(KeyKind kind, uint64_t key, Allocation *a);
void finish_free(bool found, KeyKind kind, uint64_t key, const Allocation &a, CUresult result);

// Numbers the memory queries answer with: the quota's view of a device, clamped at 0.
struct QuotaView {
    bool limited = false;
    uint64_t limit = 0, container_used = 0;
};
QuotaView quota_of(int ordinal);

}  // namespace gg::guard
