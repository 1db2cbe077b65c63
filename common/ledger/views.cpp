// What `gpuguard top`, `doctor` and reports read of a ledger: its devices, its processes, its limit,
// with every text field bounded and stripped of control bytes.
#include "common/ledger/ledger.h"

#include <cstdio>

#include "common/base/saturating.h"

#include "common/ledger/internal.h"

namespace gg::ledger {

using namespace internal;

std::string uuid_string(const uint8_t u[16]) {
    char buf[48];
    snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    return buf;
}

// Bounded by the field, not by the terminator validate() saw: another process may have written over
// it since.
std::string Ledger::limit_spec() const {
    if (!header_) return "";
    return field_text(header_->limit_spec);
}

// `used` is what the processes alive now hold: a process that exited without freeing (its driver
// gave the memory back) or exec'd counts nothing here, though admission still counts its slot until
// a process of the ledger reclaims it.
std::vector<Ledger::DeviceView> Ledger::devices() const {
    std::vector<bool> alive(kMaxSlots, false);
    uint32_t high = header_->slot_high.load();
    for (uint32_t i = 0; i < high && i < (uint32_t)kMaxSlots; i++) {
        uint32_t st = header_->slots[i].state.load();
        alive[i] = st != kSlotFree && st != kSlotReclaimed && owner_alive((int)i);
    }
    std::vector<DeviceView> out;
    for (int i = 0; i < kMaxDevices; i++) {
        const DeviceEntry &d = header_->devices[i];
        if (d.state.load() != kDeviceReady) continue;
        DeviceView v{i,
                     uuid_string(d.uuid),
                     field_text(d.name),
                     d.limit.load(),
                     0,
                     d.peak.load(),
                     d.physical_total.load(),
                     {},
                     0,
                     kCostUnknown,
                     header_->counters.refusals[i].load()};
        for (uint32_t k = 0; k < high && k < (uint32_t)kMaxSlots; k++) {
            if (!alive[k]) continue;
            v.used = sat_add(v.used, header_->slots[k].bytes[i].load());
            for (int j = 0; j < kKinds; j++) v.kinds[j] += header_->kinds[k].bytes[i][j].load();
        }
        v.context_cost = context_cost(i, &v.context_source);
        out.push_back(std::move(v));
    }
    return out;
}

void Ledger::count_refusal(int dev) {
    if (!read_only_ && dev >= 0 && dev < kMaxDevices) header_->counters.refusals[dev].fetch_add(1);
}

void Ledger::count_report() {
    if (!read_only_) header_->counters.reports_written.fetch_add(1);
}

Ledger::Counters Ledger::counters() const {
    return {header_->counters.reports_written.load(), header_->reclaimed_processes.load()};
}

std::vector<Ledger::ProcessView> Ledger::processes() const {
    std::vector<ProcessView> out;
    uint64_t ns = pid_namespace();
    uint32_t high = header_->slot_high.load();
    for (uint32_t i = 0; i < high && i < (uint32_t)kMaxSlots; i++) {
        const Slot &s = header_->slots[i];
        uint32_t st = s.state.load();
        if (st == kSlotFree) continue;
        ProcessView v;
        v.slot = (int)i;
        v.generation = s.generation.load();
        v.pid = s.pid.load();
        v.command = field_text(s.command);
        for (int d = 0; d < kMaxDevices; d++) {
            v.bytes.push_back(s.bytes[d].load());
            v.peak.push_back(s.peak[d].load());
            std::array<uint64_t, kKinds> k{};
            for (int j = 0; j < kKinds; j++) k[j] = header_->kinds[i].bytes[d][j].load();
            v.kinds.push_back(k);
        }
        // Claiming, live or reclaiming: alive while its owner holds the slot's lock, else dead (killed
        // in any of these states) until a process of the ledger reclaims it.
        v.reclaimed = st == kSlotReclaimed;
        v.alive = !v.reclaimed && owner_alive((int)i);
        v.self = &s == slot_.load();
        uint64_t theirs = s.pid_ns.load();
        v.other_namespace = theirs && ns && theirs != ns;
        out.push_back(std::move(v));
    }
    return out;
}

}  // namespace gg::ledger
