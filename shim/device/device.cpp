#include "shim/device/device.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "common/base/hot.h"
#include "common/base/log.h"
#include "common/ledger/ledger.h"
#include "common/units/size_spec.h"
#include "shim/core/state.h"
#include "shim/resolve/real.h"

namespace gg {
namespace {

struct Cached {
    std::atomic<bool> ready{false};
    std::mutex init;
    DeviceInfo info;
};
Cached g_devices[kMaxOrdinals];

// How many devices this process sees; -1 until the driver has said (it cannot before cuInit). The
// number cannot change while the process lives: the driver reads CUDA_VISIBLE_DEVICES at cuInit.
std::atomic<int> g_device_count{-1};

// A per-device entry of the limit that selects none of this process's devices ("7=8GiB" with one
// device, a UUID prefix of no GPU here) limits nothing: said once per process, at the first device
// lookup, one line per entry. (CUDA_VISIBLE_DEVICES may hide a device from one process and not from
// another: the line says what this one sees.)
std::atomic<bool> g_selectors_checked{false};
void check_selectors() {
    if (g_selectors_checked.exchange(true)) return;
    State &s = state();
    const RealDriver &r = real_driver();
    int count = 0;
    if (s.fail_closed || s.spec.per_device.empty() || !r.cuDeviceGetCount || r.cuDeviceGetCount(&count) != CUDA_SUCCESS)
        return;
    std::vector<std::string> uuids;
    for (int i = 0; i < count && i < kMaxOrdinals; i++) {
        CUdevice dev = i;
        if (r.cuDeviceGet) r.cuDeviceGet(&dev, i);
        CUuuid u{};
        bool known = r.cuDeviceGetUuid_v2 && r.cuDeviceGetUuid_v2(&u, dev) == CUDA_SUCCESS;
        uuids.push_back(known ? ledger::uuid_string(reinterpret_cast<const uint8_t *>(u.bytes)) : "");
    }
    for (const std::string &e : unmatched_entries(s.spec, uuids))
        log_error(
            "the limit's entry '%s' selects no device this process sees (%d device%s: ordinals from 0, or UUIDs "
            "starting GPU-%.8s...); it limits nothing here",
            e.c_str(), count, count == 1 ? "" : "s", uuids.empty() ? "" : uuids[0].c_str() + 4);
}

void describe(int ordinal, DeviceInfo &d) {
    check_selectors();
    const RealDriver &r = real_driver();
    d.ordinal = ordinal;
    CUdevice dev = ordinal;
    if (r.cuDeviceGet) r.cuDeviceGet(&dev, ordinal);
    CUuuid uuid{};
    if (r.cuDeviceGetUuid_v2 && r.cuDeviceGetUuid_v2(&uuid, dev) == CUDA_SUCCESS) {
        snprintf(d.uuid, sizeof d.uuid, "%s",
                 ledger::uuid_string(reinterpret_cast<const uint8_t *>(uuid.bytes)).c_str());
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
    // This process's wish, which the ledger's limit replaces: the first process to register the
    // device set it.
    d.limit = s.limit_for(ordinal, d.uuid, d.physical_total);
    d.ledger_index = s.ledger->device_index(reinterpret_cast<const uint8_t *>(uuid.bytes), d.limit, d.physical_total,
                                            d.name, &d.limit);
    if (d.ledger_index < 0)
        log_error("the ledger's device table is full; device %d (%s) is not accounted", ordinal, d.uuid);
}

}  // namespace

GG_HOT int current_ordinal() {
    // With one device, every context is on it: the driver need not be asked which. That call is
    // made before every allocation, just after the previous call into the driver evicted what it
    // touches, and costs 90 ns to half a microsecond on the GPU. (Without a current context the
    // allocation is then charged to device 0 before the driver refuses it, and released when it
    // does: the program sees the driver's error, unless the quota refuses first.)
    int count = g_device_count.load(std::memory_order_relaxed);
    if (count == 1) return 0;
    const RealDriver &r = real_driver();
    CUdevice dev;
    if (!r.cuCtxGetDevice || r.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return -1;
    if (count < 0 && r.cuDeviceGetCount && r.cuDeviceGetCount(&count) == CUDA_SUCCESS)
        g_device_count.store(count, std::memory_order_relaxed);
    return (int)dev;
}

GG_HOT const DeviceInfo *device_info(int ordinal) {
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

void preset_device_for_test(const DeviceInfo &info, int device_count) {
    Cached &c = g_devices[info.ordinal];
    c.info = info;
    c.ready.store(true, std::memory_order_release);
    g_device_count.store(device_count, std::memory_order_relaxed);
}

void reset_device_lookups_after_fork() {
    for (Cached &c : g_devices)
        if (!c.ready.load(std::memory_order_relaxed)) new (&c.init) std::mutex();
}

}  // namespace gg
