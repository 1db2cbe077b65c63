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
constexpr uint64_t kAgreeAfterNs = 1000000000ull;
constexpr uint64_t kSlack = 2 * kMiB;  // NVML's figures move in pages; a difference below this is none

// Per ordinal: when NVML's view was last read, and a reading below the ledger's waiting for a second.
struct View {
    std::atomic<uint64_t> last_ns{0}, tick_ns{0};
    std::atomic<uint64_t> low_bytes{0}, low_ns{0};
};
View g_view[kMaxOrdinals];

uint64_t differ(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

// NVML's figure of this process, against what the ledger charges it: what no hook saw (code loaded
// lazily, local memory grown, the driver's rounding of small allocations) is the context's kind.
// Readings above the ledger count at once; one below waits for a second that agrees a second later:
// an allocation in flight is charged before the driver has it, and shows as less for a moment.
// NVML's figure and the ledger's are read at different moments: a reading is used only when the
// ledger did not move around it (another thread's free released between the two reads would show
// its block as overhead). Under steady traffic readings are skipped; a quiet moment (a memory
// query, a refusal, a report) takes one.
void from_self_view(const DeviceInfo &d, View &v, uint64_t now) {
    ledger::Ledger &l = *state().ledger;
    int li = d.ledger_index;
    uint64_t own = 0, total = l.own_bytes(li);
    if (self_view::own_bytes(d, &own) != self_view::Own::kFound || l.own_bytes(li) != total) return;
    uint64_t ctx = l.own_kind(li, ledger::kContext);
    uint64_t others = total > ctx ? total - ctx : 0;  // allocations, graphs and pools as charged
    uint64_t overhead = own > others ? own - others : 0;
    if (overhead > ctx) {
        l.charge_kind(li, ledger::kContext, overhead - ctx);
        v.low_ns.store(0);
    } else if (ctx - overhead > kSlack) {
        uint64_t since = v.low_ns.load();
        if (since && now - since >= kAgreeAfterNs && differ(v.low_bytes.load(), overhead) <= kSlack) {
            l.release_kind(li, ledger::kContext, ctx - overhead);
            v.low_ns.store(0);
        } else if (!since || differ(v.low_bytes.load(), overhead) > kSlack) {
            v.low_bytes.store(overhead);
            v.low_ns.store(now);
        }
    } else {
        v.low_ns.store(0);
    }
}

}  // namespace

bool on() { return state().cfg->count_all(); }

void reconcile(const DeviceInfo &d, bool self, bool now) {
    if (!on() || d.ledger_index < 0 || d.ordinal < 0 || d.ordinal >= kMaxOrdinals) return;
    pools::observe(d);
    graphs::observe(d);
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
    for (View &v : g_view) v.last_ns = v.tick_ns = v.low_bytes = v.low_ns = 0;
}

}  // namespace gg::usage
