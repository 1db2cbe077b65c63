// Surviving the ledger's file being truncated under a running process: a private copy of what this
// process knew, swapped in by the SIGBUS handler (Ledger::rescue_fault in common/ledger/ledger.h).
#include "common/ledger/ledger.h"

#include <sys/mman.h>
#include <cstring>
#include <mutex>

#include "common/base/atomic_max.h"
#include "common/ledger/internal.h"

namespace gg::ledger {

using namespace internal;

namespace {

// What remember() keeps of a device entry (the copy is read field by field: other threads update
// the entries' atomics meanwhile).
struct DeviceCopy {
    uint32_t state;
    uint8_t uuid[16];
    uint64_t limit, peak, physical_total;
    char name[64];
};

}  // namespace

void Ledger::remember() {
    if (!remembered_ || read_only_) return;
    std::lock_guard<std::mutex> lock(join_mu_);
    // Read the shared file first (this may fault, and be rescued from the previous copy), then
    // write the copy in a window where this thread touches nothing shared.
    const Header *h = header_;
    char head[offsetof(Header, slot_high)];
    memcpy(head, h, sizeof head);  // magic .. limit_spec: plain fields, fixed at creation
    DeviceCopy devs[kMaxDevices];
    for (int i = 0; i < kMaxDevices; i++) {
        const DeviceEntry &d = h->devices[i];
        devs[i].state = d.state.load();
        if (devs[i].state != kDeviceReady) continue;
        memcpy(devs[i].uuid, d.uuid, sizeof devs[i].uuid);
        devs[i].limit = d.limit.load();
        devs[i].peak = d.peak.load();
        devs[i].physical_total = d.physical_total.load();
        memcpy(devs[i].name, d.name, sizeof devs[i].name);
    }
    int expected = kIntact;
    if (!rescue_.compare_exchange_strong(expected, kRemembering)) return;  // rescued meanwhile
    Header *r = remembered_;
    memcpy(static_cast<void *>(r), head, sizeof head);
    for (int i = 0; i < kMaxDevices; i++) {
        if (devs[i].state != kDeviceReady) continue;
        DeviceEntry &m = r->devices[i];
        memcpy(m.uuid, devs[i].uuid, sizeof m.uuid);
        m.limit.store(devs[i].limit);
        m.peak.store(devs[i].peak);
        m.physical_total.store(devs[i].physical_total);
        memcpy(m.name, devs[i].name, sizeof m.name);
        m.state.store(kDeviceReady);
    }
    rescue_.store(kIntact);
}

// Async-signal-safe: atomics, pointer arithmetic and one system call.
bool Ledger::rescue_fault(const void *addr) {
    const char *base = reinterpret_cast<const char *>(header_);
    const char *a = static_cast<const char *>(addr);
    if (!base || !remembered_ || a < base || a >= base + map_size_) return false;
    int state;
    for (;;) {
        state = kIntact;
        if (rescue_.compare_exchange_strong(state, kRescuing)) break;
        if (state == kRemembering || state == kRescuing) continue;  // another thread, for microseconds
        return state == kRescued || state == kRecovered;            // already replaced: the access can go again
    }
    Header *r = remembered_;
    if (Slot *mine = slot_.load()) {
        size_t i = (size_t)(mine - header_->slots);  // no access to the lost page: arithmetic only
        Slot &m = r->slots[i];
        m.pid.store(slot_pid_.load());
        m.state.store(kSlotLive);
        r->slot_high.store((uint32_t)i + 1);
    }
    void *p = mremap(r, sizeof(Header), map_size_, MREMAP_MAYMOVE | MREMAP_FIXED, header_);
    rescued_at_ns_.store(now_ns(CLOCK_MONOTONIC));
    rescue_.store(p == MAP_FAILED ? kFailed : kRescued);
    return p != MAP_FAILED;
}

bool Ledger::take_recovery() {
    if (rescue_.load(std::memory_order_relaxed) != kRescued) return false;
    int expected = kRescued;
    return rescue_.compare_exchange_strong(expected, kRecovered);
}

void Ledger::add_own_bytes(int dev, uint64_t bytes) {
    if (Slot *slot = slot_.load(); slot && bytes && add_without_wrap(slot->bytes[dev], bytes))
        raise_to(slot->peak[dev], slot->bytes[dev].load());
}

}  // namespace gg::ledger
