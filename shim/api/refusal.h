// A refused request for device memory: what the room that refused it hands up to be reported as an
// out-of-memory episode (shim/quota/episode.h). The quota's admission refuses allocations itself;
// the usage rooms (a context, a graph's memory) hand theirs back to their hook in its ticket.
#pragma once
#include <cstdint>

#include "shim/api/api.h"
#include "shim/api/cuda_api.h"

namespace gg {

// kNoSlot: refused by the quota because this process has no slot in the shared ledger to count its
// bytes in (a forked child that found every slot held by a live process).
enum class RefusalCause { kQuota, kNoSlot, kDriver };

struct Refusal {
    Api api, driver_api;
    uint64_t bytes;
    int ordinal;
    CUresult result;
    RefusalCause cause;
    uint64_t container_used;  // the ledger's usage on the device when it failed
    uint64_t limit;           // UINT64_MAX when none
};

}  // namespace gg
