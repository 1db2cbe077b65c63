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
// Near the limit (the container holding more than 3/4 of it) the allocation path reads NVML's view
// this often: code loaded lazily since the last reading is what admission then counts on.
constexpr uint64_t kNearTickEveryNs = 10000000ull;
constexpr uint64_t kAgreeAfterNs = 200000000ull;
constexpr uint64_t kSlack = 2 * kMiB;  // NVML's figures move in pages; a difference below this is none

// Per ordinal: when NVML's view was last read, and the last reading below the kind, waiting for a
// second one.
struct View {
    std::atomic<uint64_t> last_ns{0}, tick_ns{0}, near_ns{0};  // near_ns: the last look at the limit
    std::atomic<uint64_t> pending_bytes{0}, pending_ns{0};
    // One reading at a time: two threads' rises would both add the same bytes (Ledger::set_kind reads
    // the kind, then adds the difference).
    std::atomic<bool> reading{false};
};
View g_view[kMaxOrdinals];

uint64_t differ(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

// NVML's figure of this process, against what the ledger charges it: what no hook saw (code loaded
// lazily, local memory grown, the driver's rounding of small allocations) is the context's kind.
// The two figures are read at different moments, and threads allocate and free meanwhile. A reading
// is used only when the ledger did not move around it. What the shim has in flight makes a reading
// low, not high: an allocation is charged before the driver has it, a free released after, a pool's
// growth and a graph's mapping charged before the call. A reading above the kind is then what the
// driver holds uncounted, or memory the driver takes and gives back within a call (the soak's test
// driver: a figure 57 MB high, normal again a read later). So a rise counts at once when a second
// reading straight after still shows it, to the lower of the two: PyTorch's DDP loaded 264 MiB of
// NCCL's and cuBLAS's code lazily within a second and allocated on top, and the old rule (two
// readings 200 ms apart, taken about once a second) counted none of it before the container was
// 108 MiB over its limit. A module load is charged after its call: a rise read during it is not
// counted twice, as its measurement subtracts what the container charged meanwhile. A fall moves
// the kind when a second reading at least kAgreeAfterNs later shows one too, to the higher of the
// two (the lower holds more of the in-flight error). It used to wait for two readings within kSlack
// of each other: under steady traffic they rarely agree, and with rises counted at once the kind
// would have stayed at the highest figure it ever reached.
void from_self_view(const DeviceInfo &d, View &v, uint64_t now) {
    ledger::Ledger &l = *state().ledger;
    int li = d.ledger_index;
    uint64_t own = 0, total = l.own_bytes(li);
    if (self_view::own_bytes(d, &own) != self_view::Own::kFound || l.own_bytes(li) != total) return;
    uint64_t ctx = l.own_kind(li, ledger::kContext);
    uint64_t others = total > ctx ? total - ctx : 0;  // allocations, graphs and pools as charged
    uint64_t overhead = own > others ? own - others : 0;
    if (overhead > ctx + kSlack) {  // a rise: at once, if a second reading agrees
        uint64_t again = 0;
        if (self_view::own_bytes(d, &again) != self_view::Own::kFound || l.own_bytes(li) != total) return;
        uint64_t rise = again > others ? again - others : 0;
        if (rise > overhead) rise = overhead;
        if (rise <= ctx + kSlack) return;  // a moment's figure
        v.pending_ns.store(0);
        l.set_kind(li, ledger::kContext, rise);
        return;
    }
    uint64_t since = v.pending_ns.load(), pending = v.pending_bytes.load();
    if (since && now - since < kAgreeAfterNs) return;  // the first of the two stands
    v.pending_bytes.store(overhead);
    v.pending_ns.store(now);
    if (!since) return;
    uint64_t target = pending > overhead ? pending : overhead;
    // Never below what this process's contexts measured to cost: a reading taken while an allocation
    // of its was charged and not yet in the driver (or a free the reverse) is low by those bytes, and
    // two such readings can both be (a large allocation takes long); the kind then fell below the
    // contexts themselves and the truth passed the limit by the difference (the soak: 10 MiB).
    uint64_t floor = context::charged_on(d.ordinal);
    if (target < floor) target = floor;
    if (differ(target, ctx) > kSlack) l.set_kind(li, ledger::kContext, target);
}

// NVML's figure of the process, at most every kSelfViewEveryNs unless `now`, one thread at a time.
void read_self_view(const DeviceInfo &d, bool now) {
    if (!self_view::usable()) return;
    View &v = g_view[d.ordinal];
    uint64_t t = mono_ns(), last = v.last_ns.load();
    if (!now && t - last < kSelfViewEveryNs) return;
    if (!v.last_ns.compare_exchange_strong(last, t) && !now) return;  // another thread reads it
    if (v.reading.exchange(true)) return;
    from_self_view(d, v, t);
    v.reading.store(false);
}

}  // namespace

bool on() { return state().cfg->count_all(); }

void reconcile(const DeviceInfo &d, bool self, bool now) {
    if (!on() || d.ledger_index < 0 || d.ordinal < 0 || d.ordinal >= kMaxOrdinals) return;
    pools::observe(d);
    graphs::observe(d);
    context::settle_uncounted(d);
    if (self) read_self_view(d, now);
}

void tick(const DeviceInfo &d, uint64_t now_ns) {
    if (d.ordinal < 0 || d.ordinal >= kMaxOrdinals) return;
    View &v = g_view[d.ordinal];
    // The allocation path's cost: one load and a compare, until 10 ms have passed.
    uint64_t looked = v.near_ns.load(std::memory_order_relaxed);
    if (now_ns - looked < kNearTickEveryNs || !v.near_ns.compare_exchange_strong(looked, now_ns)) return;
    uint64_t last = v.tick_ns.load(std::memory_order_relaxed);
    bool near = false;
    if (now_ns - last < kTickEveryNs) {
        near = has_limit(d) && state().ledger->container_used(d.ledger_index) > d.limit - d.limit / 4;
        if (!near) return;
    }
    if (!v.tick_ns.compare_exchange_strong(last, now_ns)) return;
    // Near the limit, NVML's figure alone: the pools' and the graph pool's readings take locks that
    // stall other threads' stream-ordered calls, and their figures are settled after each call anyway.
    if (near) read_self_view(d, true);
    else reconcile(d, true);
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
    for (View &v : g_view) {
        v.last_ns = v.tick_ns = v.near_ns = v.pending_bytes = v.pending_ns = 0;
        v.reading = false;
    }
}

}  // namespace gg::usage
