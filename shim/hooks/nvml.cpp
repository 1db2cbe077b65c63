// NVML hooks: nvidia-smi-style queries inside the program (nvitop, pynvml, frameworks that size
// themselves from NVML) must agree with cuMemGetInfo: they see the container's quota and usage.
#include <atomic>
#include <cstring>

#include "shim/api/export.h"
#include "shim/core/state.h"
#include "shim/resolve/real.h"

using namespace gg;

namespace {

struct QuotaOfUuid {
    bool limited = false;
    uint64_t limit = 0, used = 0;
    uint64_t contexts = 0;  // of used: the container's contexts and modules (shim/usage/)
};

// NVML numbers devices physically, CUDA by CUDA_VISIBLE_DEVICES: the UUID is the common key.
QuotaOfUuid quota_of_uuid(nvmlDevice_t device) {
    QuotaOfUuid q;
    auto fn = real_nvml().nvmlDeviceGetUUID.get(real_nvml_fn);
    char uuid[96] = {};
    if (!fn || fn(device, uuid, sizeof uuid - 1) != NVML_SUCCESS) return q;
    State &s = state();
    for (const auto &d : s.ledger->devices()) {
        if (d.uuid != uuid) continue;
        if (d.limit == UINT64_MAX) return q;
        q.limited = true;
        q.limit = d.limit;
        q.used = d.used;
        q.contexts = d.kinds[ledger::kContext];
        return q;
    }
    // A device this container has not touched through CUDA yet: the limit still applies.
    Limit l = s.spec.for_device(-1, uuid);
    if (s.fail_closed) l = Limit{Limit::kBytes, 0, 0};
    if (l.kind == Limit::kNone) return q;
    q.limited = true;
    q.limit = l.kind == Limit::kBytes ? l.bytes : 0;  // a percentage needs the total: set by the caller
    return q;
}

// nvmlMemory_v2_t says apart what the driver holds for itself ("reserved"): there, the container's
// contexts and modules, so that total = reserved + used + free as NVML means it.
void split(nvmlMemory_t *, const QuotaOfUuid &) {}
void split(nvmlMemory_v2_t *m, const QuotaOfUuid &q) {
    uint64_t ctx = q.contexts < m->used ? q.contexts : m->used;
    m->reserved = ctx;
    m->used -= ctx;
}

template <typename Mem>
void apply(nvmlDevice_t device, Mem *m) {
    QuotaOfUuid q = quota_of_uuid(device);
    if (!q.limited) return;
    uint64_t limit = q.limit ? q.limit : m->total;
    if (!q.limit) {
        Limit l = state().spec.for_device(-1, "");
        limit = l.resolve(m->total);
    }
    if (m->total > limit) m->total = limit;
    m->used = q.used;
    uint64_t room = limit > q.used ? limit - q.used : 0;
    if (m->free > room) m->free = room;
    split(m, q);
}

}  // namespace

GG_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    auto fn = real_nvml().nvmlDeviceGetMemoryInfo.get(real_nvml_fn);
    if (!fn) return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = fn(device, memory);
    if (r == NVML_SUCCESS && memory) apply(device, memory);
    return r;
}

GG_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    auto fn = real_nvml().nvmlDeviceGetMemoryInfo_v2.get(real_nvml_fn);
    if (!fn) return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = fn(device, memory);
    if (r == NVML_SUCCESS && memory) apply(device, memory);
    return r;
}
