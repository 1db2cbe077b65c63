// Stream-ordered pools (cuMemAllocAsync): a pool keeps freed memory for reuse, up to its release
// threshold (PyTorch's cudaMallocAsync backend sets it to the maximum: a pool that never gives
// memory back), and grows in chunks. What a process holds in its pools is what the pools reserve
// (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), which the ledger charges as its live async allocations
// plus the reserve beyond them (kind kPools):
//   - an async allocation is served from the reserve the ledger holds before it charges anything
//     new (the pool reuses that memory: no more of the GPU is taken);
//   - an async free gives its bytes to the reserve, not back to the quota: the pool keeps them;
//   - the reserve is read from the pools again when an allocation was not served from it (the pool
//     may have grown), on a refusal (after trimming the pools: cuMemPoolTrimTo), on memory queries,
//     after the program trims or destroys a pool, and about once a second while it allocates. A pool
//     that gave memory back at a synchronization is seen then: until then the quota counts it (the
//     safe side).
// A pool that gives memory back (a trim, a synchronization above its release threshold) while an
// allocation in flight counts on it makes that allocation grow the pool again: within what the
// ledger charges, since the reserve given back stays charged until the next reading, and the ledger's
// share of a pool (live bytes plus reserve) is a whole number of chunks after each reading and stays
// one (a draw or a free moves bytes between the two, a growth adds whole chunks). Only this process's
// own pools serve its allocations, and a device's reserve is one figure over them: with several pools
// on a device, a draw may count on another pool's reserve (docs/architecture.md, "Pools").
// A reading must not fall between an async call's driver call and its ledger update: the driver's
// figures then already show a free the ledger has not moved yet (which the move then counts twice),
// or do not yet show the chunk an allocation charged beforehand (which the reading drops, while the
// pool grows by it: the truth over the limit). So each async allocation and free of the process holds
// its device's `settle` lock shared from its first change of the ledger to its last, its driver call
// in between, and a reading holds it exclusive across the pools' figures and the setting of kPools.
// Shared costs two atomic instructions and no libc (shim/base/shared_lock.h); the readings are
// rare (once a second, queries, refusals), brief (attribute reads) and wait only for the calls in
// flight. A thread that holds it shared never reads the pools (guard::admit lets go before it makes
// room), and a nested hooked call inside the driver's takes nothing (not outermost). It is not a
// fork lock: it is held across driver calls, which fork_locks.def keeps out of the prepare handler;
// the child resets it instead (reset_after_fork), its holders being threads the child does not have.
#pragma once
#include <cstdint>

#include "shim/api/api.h"
#include "shim/api/cuda_api.h"
#include "shim/device/device.h"
#include "shim/usage/chunk.h"

namespace gg::usage::pools {

// Inline: the quota's admission, commit and free ask it of every allocation (hooks.def's kind column).
inline bool is_async(Api driver_api) { return hook_kind(driver_api) == HookKind::kAsync; }

// An async allocation's or free's hold on the device's readings: shared, from before its first change
// of the ledger to after its last (ordinal out of range: nothing).
void enter(int ordinal);
void leave(int ordinal);

// Admission of an async allocation: moves up to `bytes` of the ledger's reserve to allocations and
// returns how much; undraw() puts it back when the driver then failed.
uint64_t draw(const DeviceInfo &d, uint64_t bytes);
void undraw(const DeviceInfo &d, uint64_t drawn);
// After the driver succeeded (`pool` null: the device's current pool).
void allocated(const DeviceInfo &d, CUmemoryPool pool, uint64_t bytes, bool served_from_reserve);
// After an async allocation was freed.
void freed(int ordinal, int ledger_dev, uint64_t bytes);

// Reads the reserve of this process's pools on the device and settles the ledger's kind.
void observe(const DeviceInfo &d);
// Trims this process's pools on the device to their live allocations (before a refusal).
void trim(const DeviceInfo &d);
// The program destroys a pool (before the driver does) or trimmed one (after).
void forget(CUmemoryPool pool);
void trimmed(CUmemoryPool pool);

void lock_for_fork();
void unlock_after_fork();
void reset_after_fork();

}  // namespace gg::usage::pools
