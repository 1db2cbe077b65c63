#include "device.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

#include "ledger.h"
#include "log.h"
#include "resolve.h"
#include "state.h"

namespace gg {
namespace {

struct Cached {
    std::atomic<bool> ready{false};
    std::mutex init;
    DeviceInfo info;
};
Cached g_devices[kMaxOrdinals];

void describe(int ordinal, DeviceInfo &d) {
    const RealDriver &r = real_driver();
    d.ordinal = ordinal;
    CUdevice dev = ordinal;
    if (r.cuDeviceGet) r.cuDeviceGet(&dev, ordinal);
    CUuuid uuid{};
    if (r.cuDeviceGetUuid_v2 && r.cuDeviceGetUuid_v2(&uuid, dev) == CUDA_SUCCESS) {
        snprintf(d.uuid, sizeof d.uuid, "%s", ledger::uuid_string(reinterpret_cast<const uint8_t *>(uuid.bytes)).c_str());
    } else {
        // Without a UUID the ordinal stands in: processes with different CUDA_VISIBLE_DEVICES would
        // then not share accounting, so say so.
        memset(&uuid, 0, sizeof uuid);
        uuid.bytes[0] = (char)ordinal;
        uuid.bytes[15] = (char)0xff;
        log_error("cannot read the UUID of device %d; it is keyed by ordinal in the ledger", ordinal);
        snprintf(d.uuid, sizeof d.uuid, "ordinal-%d", ordinal);
    }
    // Every failed query is said once, here (the result is cached): the device is still accounted.
    CUresult rc = r.cuDeviceGetName ? r.cuDeviceGetName(d.name, sizeof d.name - 1, dev) : CUDA_ERROR_NOT_FOUND;
    if (rc != CUDA_SUCCESS) {
        d.name[0] = '\0';
        log_error("cannot read the name of device %d (CUDA error %d); reports show it without one", ordinal, (int)rc);
    }
    size_t total = 0;
    rc = r.cuDeviceTotalMem_v2 ? r.cuDeviceTotalMem_v2(&total, dev) : CUDA_ERROR_NOT_FOUND;
    State &s = state();
    if (rc == CUDA_SUCCESS) {
        d.physical_total = total;
    } else {
        // A limit given as a share of the device cannot be computed: it resolves to 0, and every
        // allocation on the device is refused (fail closed, as for a malformed limit).
        bool share = !s.fail_closed && s.spec.for_device(ordinal, d.uuid).kind == Limit::kPercent;
        log_error("cannot read the memory size of device %d (CUDA error %d)%s", ordinal, (int)rc,
                  share ? "; its limit is a share of that size, so every allocation on it is refused" : "");
    }
    d.limit = s.limit_for(ordinal, d.uuid, d.physical_total);
    d.ledger_index = s.ledger->device_index(reinterpret_cast<const uint8_t *>(uuid.bytes), d.limit, d.physical_total, d.name);
    if (d.ledger_index < 0) {
        log_error("the ledger's device table is full; device %d (%s) is not accounted", ordinal, d.uuid);
    } else {
        // The ledger's limit stands: the first process to register the device set it.
        d.limit = s.ledger->limit(d.ledger_index);
    }
}

}  // namespace

int current_ordinal() {
    const RealDriver &r = real_driver();
    CUdevice dev;
    if (!r.cuCtxGetDevice || r.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return -1;
    return (int)dev;
}

const DeviceInfo *device_info(int ordinal) {
    if (ordinal < 0 || ordinal >= kMaxOrdinals) return nullptr;
    Cached &c = g_devices[ordinal];
    if (!c.ready.load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> lock(c.init);
        if (!c.ready.load(std::memory_order_relaxed)) {
            describe(ordinal, c.info);
            c.ready.store(true, std::memory_order_release);
        }
    }
    return &c.info;
}

void reset_device_lookups_after_fork() {
    for (Cached &c : g_devices)
        if (!c.ready.load(std::memory_order_relaxed)) new (&c.init) std::mutex();
}

}  // namespace gg
