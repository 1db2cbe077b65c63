// Device identity: which device an allocation lands on, and what the shim knows of it.
//
// Ordinals are this process's view (CUDA_VISIBLE_DEVICES reorders them); the ledger keys devices by
// UUID so that processes with different views charge the same physical GPU. Each ordinal is looked
// up once (UUID, name, physical size, limit, ledger index) and cached.
#pragma once
#include <cstdint>

namespace gg {

struct DeviceInfo {
    int ordinal = -1;
    int ledger_index = -1;  // -1: unknown device, not accounted
    uint64_t limit = UINT64_MAX;
    uint64_t physical_total = 0;
    char uuid[48] = {};
    char name[96] = {};
};

constexpr int kMaxOrdinals = 64;

// The device of the calling thread's current context, or -1 when it has none (when the process
// sees one device: 0, without asking the driver).
int current_ordinal();

// The cached description of an ordinal (looked up on first use); null for an invalid ordinal.
const DeviceInfo *device_info(int ordinal);

// In the child of fork(): a lookup that another thread of the parent had under way is done again.
// (Its lock is held across a driver call, so it is re-made in the child rather than taken before
// fork: a driver that takes its own locks in a fork handler would otherwise deadlock against us.)
void reset_device_lookups_after_fork();

// For unit tests of the core (tests/unit): `info` is the description of its ordinal from now on, and
// the process sees `device_count` devices (1: no driver call to ask which device is current).
void preset_device_for_test(const DeviceInfo &info, int device_count);

// Whether the device has a quota.
inline bool has_limit(const DeviceInfo &d) { return d.limit != UINT64_MAX; }

}  // namespace gg
