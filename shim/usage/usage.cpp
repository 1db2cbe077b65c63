#include "shim/usage/usage.h"

#include <atomic>

#include "common/base/log.h"
#include "shim/base/clock.h"
#include "shim/core/state.h"
#include "shim/usage/context.h"
#include "shim/usage/graphs.h"
#include "shim/usage/modules.h"
#include "shim/usage/pools.h"
#include "shim/usage/self_view.h"

namespace gg::usage {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kSelfViewEveryNs = 100000000ull;  // NVML's list costs about a system call's worth
constexpr uint64_t kTickEveryNs = 1000000000ull;
constexpr uint64_t kAgreeAfterNs = 200000000ull;
constexpr uint64_t kSlack = 2 * kMiB;  // NVML's figures move in pages; a difference below this is none

// Per ordinal: when NVML's view was last read, and the last reading, waiting for one that agrees.
struct View {
    std::atomic<uint64_t> last_ns{0}, tick_ns{0};
    std::atomic<uint64_t> pending_bytes{0}, pending_ns{0};
};
View g_view[kMaxOrdinals];

uint64_t differ(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

// NVML's figure of this process, against what the ledger charges it: what no hook saw (code loaded
// lazily, local memory grown, the driver's rounding of small allocations) is the context's kind.
// The two figures are read at different moments, and threads allocate and free meanwhile (an
// allocation is charged before the driver has it, a free released after; a pool grows before it is
// read again). So a reading is used only when the ledger did not move around it, and it moves the
// kind only when a second reading at least kAgreeAfterNs later agrees with it (within kSlack): rises
// and falls alike, to the lower of the two. A one-sided rule ratchets: under steady traffic each
// transient excess was kept. Under steady traffic the kind stays as it is; a quiet moment (a memory
// query, a refusal, a report, the once-a-second tick) settles it.
void from_self_view(const DeviceInfo &d, View &v, uint64_t now) {
    ledger::Ledger &l = *state().ledger;
    int li = d.ledger_index;
    uint64_t own = 0, total = l.own_bytes(li);
    if (self_view::own_bytes(d, &own) != self_view::Own::kFound || l.own_bytes(li) != total) return;
    uint64_t ctx = l.own_kind(li, ledger::kContext);
    uint64_t others = total > ctx ? total - ctx : 0;  // allocations, graphs and pools as charged
    uint64_t overhead = own > others ? own - others : 0;
    uint64_t since = v.pending_ns.load(), pending = v.pending_bytes.load();
    if (since && now - since < kAgreeAfterNs && differ(pending, overhead) <= kSlack) return;  // wait for it
    v.pending_bytes.store(overhead);
    v.pending_ns.store(now);
    if (!since || differ(pending, overhead) > kSlack) return;  // a first reading, or one that disagrees
    uint64_t target = pending < overhead ? pending : overhead;
    // Never below what this process's contexts measured to cost: a reading taken while an allocation
    // of its was charged and not yet in the driver (or a free the reverse) is low by those bytes, and
    // two such readings can agree (a large allocation takes long); the kind then fell below the
    // contexts themselves and the truth passed the limit by the difference (the soak: 10 MiB).
    uint64_t floor = context::charged_on(d.ordinal);
    if (target < floor) target = floor;
    if (differ(target, ctx) > kSlack) l.set_kind(li, ledger::kContext, target);
}

}  // namespace

bool on() { return state().cfg->count_all(); }

void reconcile(const DeviceInfo &d, bool self, bool now) {
    if (!on() || d.ledger_index < 0 || d.ordinal < 0 || d.ordinal >= kMaxOrdinals) return;
    pools::observe(d);
    graphs::observe(d);
    context::settle_uncounted(d);
    if (!self || !self_view::usable()) return;
    View &v = g_view[d.ordinal];
    uint64_t t = mono_ns(), last = v.last_ns.load();
    if (!now && t - last < kSelfViewEveryNs) return;
    if (!v.last_ns.compare_exchange_strong(last, t) && !now) return;  // another thread reads it
    from_self_view(d, v, t);
}

void tick(const DeviceInfo &d, uint64_t now_ns) {
    if (d.ordinal < 0 || d.ordinal >= kMaxOrdinals) return;
    View &v = g_view[d.ordinal];
    uint64_t last = v.tick_ns.load(std::memory_order_relaxed);
    if (now_ns - last < kTickEveryNs || !v.tick_ns.compare_exchange_strong(last, now_ns)) return;
    reconcile(d, true);
}

bool make_room(const DeviceInfo &d) {
    if (!on() || d.ledger_index < 0) return false;
    ledger::Ledger &l = *state().ledger;
    uint64_t before = l.own_bytes(d.ledger_index);
    pools::trim(d);
    graphs::trim(d);
    reconcile(d, true, true);
    return l.own_bytes(d.ledger_index) < before;
}

Summary summary(const DeviceInfo &d) {
    Summary s;
    const Config &c = *state().cfg;
    s.mode = c.count_mode == settings::CountMode::kAllocations ? "allocations"
             : c.count_mode == settings::CountMode::kEstimate  ? "estimate"
                                                               : "everything";
    s.self_view = self_view::state_name();
    if (d.ledger_index < 0) return s;
    ledger::Ledger &l = *state().ledger;
    int li = d.ledger_index;
    s.own_total = l.own_bytes(li);
    for (int k = 0; k < ledger::kKinds; k++) s.own[k] = l.own_kind(li, (ledger::Kind)k);
    for (const auto &v : l.devices()) {
        if (v.index != li) continue;
        s.container_total = v.used;
        for (int k = 0; k < ledger::kKinds; k++) s.container[k] = v.kinds[k];
    }
    ledger::CostSource source = ledger::kCostUnknown;
    s.context_cost = l.context_cost(li, &source);
    s.context_cost_source = source == ledger::kCostOwnProcess    ? "own_process"
                            : source == ledger::kCostDeviceDelta ? "device_delta"
                                                                 : "unknown";
    return s;
}

void lock_for_fork() {
    context::lock_for_fork();
    modules::lock_for_fork();
    pools::lock_for_fork();
    graphs::lock_for_fork();
}
void unlock_after_fork() {
    graphs::unlock_after_fork();
    pools::unlock_after_fork();
    modules::unlock_after_fork();
    context::unlock_after_fork();
}
void reset_after_fork() {
    context::reset_after_fork();
    modules::reset_after_fork();
    pools::reset_after_fork();
    graphs::reset_after_fork();
    self_view::reset_after_fork();
    for (View &v : g_view) v.last_ns = v.tick_ns = v.pending_bytes = v.pending_ns = 0;
}

}  // namespace gg::usage
