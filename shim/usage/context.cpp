#include "shim/usage/context.h"

#include <time.h>

#include <atomic>
#include <mutex>

#include "common/base/log.h"
#include "common/units/human.h"
#include "shim/core/state.h"
#include "shim/report/warn_at.h"
#include "shim/usage/self_view.h"
#include "shim/usage/usage.h"

namespace gg::usage::context {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr int kMaxCreated = 64;

// This process's contexts: the primary one's retains per ordinal, and the contexts it created, each
// with what it charged.
struct Primary {
    int refs = 0;
    uint64_t charged = 0;   // 0 while its cost is unknown: settle_uncounted() charges it once known
    bool creating = false;  // a retain that makes it is under way: the others wait for it (admit), and
                            // its charge is not settled yet (done)
};
struct Created {
    CUcontext ctx = nullptr;
    int ordinal = -1;
    uint64_t charged = 0;
};
std::mutex g_mu;
Primary g_primary[kMaxOrdinals];
Created g_created[kMaxCreated];

// Calls visit(charged) for each context of this process on `ordinal` whose charge is settled: the
// primary one while retained (not while the retain that makes it is under way), and those it created.
// Under g_mu.
template <class Visit>
void each_context(int ordinal, Visit visit) {
    Primary &p = g_primary[ordinal];
    if (p.refs > 0 && !p.creating) visit(p.charged);
    for (Created &c : g_created)
        if (c.ctx && c.ordinal == ordinal) visit(c.charged);
}

bool has_context(int ordinal) {
    if (g_primary[ordinal].refs > 0) return true;
    for (const Created &c : g_created)
        if (c.ctx && c.ordinal == ordinal) return true;
    return false;
}

// A device-wide measurement is believed when it is a plausible context: NVML's used memory also
// moves with other containers' allocations. The same bounds keep a namesake's figure out.
bool plausible(uint64_t bytes, const DeviceInfo &d) {
    uint64_t most = d.physical_total / 8 > (4ull << 30) ? d.physical_total / 8 : (4ull << 30);
    return bytes >= kMiB && bytes <= most;
}

// What this context measured to cost, and how; 0 when it could not be measured. Only a context made
// while this process holds nothing else on the device is measured: its other threads' allocations
// would land in the window (admission charges them before the driver has them, so no correction
// can take them out).
uint64_t measure(const Ticket &t, ledger::CostSource *source) {
    const DeviceInfo &d = *t.dev;
    uint64_t mine = state().ledger->own_bytes(d.ledger_index);
    if (!t.alone || mine != t.charged) return 0;
    uint64_t own = 0;
    if (t.own_before_ok && self_view::own_bytes(d, &own) == self_view::Own::kFound) {
        // The process's own figure is the truth for it: a context that took next to nothing (the test
        // driver's) is not measured on the device instead, where siblings' traffic would land.
        if (own <= t.own_before || !plausible(own - t.own_before, d)) return 0;
        *source = ledger::kCostOwnProcess;
        return own - t.own_before;
    }
    uint64_t used = 0;
    if (!t.device_before_ok || !self_view::device_used(d, &used) || used <= t.device_before) return 0;
    // The device's figure moves with every process on it: believed only when the rest of the
    // container held nothing before and charged nothing meanwhile. A sibling's allocation is charged
    // before the driver makes it, so one admitted before the first reading could land in the window
    // with the ledger standing still; a sibling that holds nothing has nothing in flight (a free
    // reaches the driver before the ledger). Otherwise the next context made tries again: in a
    // container, the first process's first context is made before the rest allocate.
    uint64_t now = state().ledger->container_used(d.ledger_index), before = t.container_before + t.charged;
    if (t.container_before != 0 || now != before) return 0;
    uint64_t delta = used - t.device_before;
    if (!plausible(delta, d)) return 0;
    *source = ledger::kCostDeviceDelta;
    return delta;
}

void charge_after(const Ticket &t, uint64_t cost) {
    ledger::Ledger &l = *state().ledger;
    int li = t.dev->ledger_index;
    if (cost > t.charged) l.charge_kind(li, ledger::kContext, cost - t.charged);
    else if (cost < t.charged) l.release_kind(li, ledger::kContext, t.charged - cost);
    // Made before its cost was known (the ledger's first context on this device): it is not taken
    // back, but it is said, and reported, when it passed the limit.
    uint64_t used = l.container_used(li);
    if (has_limit(*t.dev) && cost > t.charged && used > t.dev->limit) {
        log_error(
            "a CUDA context on device %d costs %s, which the quota had not known: the container now holds %s of "
            "its %s limit",
            t.dev->ordinal, human_bytes(cost).c_str(), human_bytes(used).c_str(), human_bytes(t.dev->limit).c_str());
        report::warn_at_crossed(t.dev->ordinal, used, t.dev->limit);
    }
}

// While the cost is unknown: claims the measurement (0 back, t->measuring set), or waits for the
// process that measures and returns its figure. A measurer that died frees the claim; one that takes
// longer than kWaitNs (a context takes well under a second) is not waited for further.
constexpr uint64_t kWaitNs = 10000000000ull;
uint64_t claim_or_wait(const DeviceInfo &d, Ticket *t) {
    ledger::Ledger &l = *state().ledger;
    int li = d.ledger_index;
    timespec start{};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (uint64_t cost = known_cost(d)) return cost;
        if (l.claim_context_measurement(li)) {
            t->measuring = true;
            return 0;
        }
        timespec now{};
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((uint64_t)(now.tv_sec - start.tv_sec) * 1000000000ull + (uint64_t)(now.tv_nsec - start.tv_nsec) > kWaitNs) {
            log_error("waited 10 s for process %d to measure a CUDA context on device %d; going on without its figure",
                      l.context_measurer(li), d.ordinal);
            return 0;
        }
        timespec nap{0, 5000000};
        nanosleep(&nap, nullptr);
    }
}

}  // namespace

uint64_t known_cost(const DeviceInfo &d) {
    ledger::Ledger &l = *state().ledger;
    uint64_t cost = l.context_cost(d.ledger_index, nullptr);
    if (cost) return cost;
    // Another device of the same model (a context costs the same on each): its measurement stands.
    for (const auto &v : l.devices())
        if (v.context_cost && v.name == d.name) return v.context_cost;
    return 0;
}

CUresult admit(Api api, int ordinal, bool primary, Ticket *t) {
    t->primary = primary;
    if (!on() || ordinal < 0 || ordinal >= kMaxOrdinals) return CUDA_SUCCESS;
    t->ordinal = ordinal;
    const DeviceInfo *d = device_info(ordinal);
    if (!d || d->ledger_index < 0) return CUDA_SUCCESS;
    bool first_in_process;
    {
        std::unique_lock<std::mutex> lock(g_mu);
        Primary &p = g_primary[ordinal];
        // Another thread's retain is making the primary context: this one waits for it, as the driver
        // makes it wait. Else its own call could reach the driver first and make the context before the
        // measuring thread's first reading, which then saw no cost (several threads retaining at start).
        for (int waited_ms = 0; primary && p.creating && waited_ms < 10000; waited_ms++) {
            lock.unlock();
            timespec ms{0, 1000000};
            nanosleep(&ms, nullptr);
            lock.lock();
        }
        t->creates = !primary || (p.refs == 0 && !p.creating);
        if (primary && t->creates) p.creating = true;
        first_in_process = !has_context(ordinal);
    }
    if (!t->creates) return CUDA_SUCCESS;
    t->dev = d;
    uint64_t cost = claim_or_wait(*d, t), used = 0;  // before the readings: another's context lands meanwhile
    if (first_in_process) self_view::check_before_first_context(*d);
    // What this process and the device hold before, to measure the context by.
    uint64_t own = 0;
    self_view::Own o = self_view::own_bytes(*d, &own);
    t->own_before_ok = o != self_view::Own::kUnavailable;
    t->own_before = o == self_view::Own::kFound ? own : 0;
    ledger::Ledger &l = *state().ledger;
    int li = d->ledger_index;
    t->alone = l.own_bytes(li) == 0;
    t->container_before = l.container_used(li);
    t->device_before_ok = self_view::device_used(*d, &t->device_before);

    if (!cost) return CUDA_SUCCESS;  // measured and charged after the call
    if (!l.try_charge_kind(li, ledger::kContext, cost, &used) &&
        !(l.reclaim_dead(false) > 0 && l.try_charge_kind(li, ledger::kContext, cost, &used)) &&
        !(make_room(*d) && l.try_charge_kind(li, ledger::kContext, cost, &used))) {
        t->refused = {api, api, cost, ordinal, CUDA_ERROR_OUT_OF_MEMORY, RefusalCause::kQuota, used, d->limit};
        if (primary) {
            std::lock_guard<std::mutex> lock(g_mu);
            g_primary[ordinal].creating = false;
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    t->charged = cost;
    return CUDA_SUCCESS;
}

// The primary context's retain that made it is over: the threads waiting in admit() go on. Only
// after its measurement: their allocations would land in the window and void it.
void creation_over(const Ticket &t) {
    if (!t.primary || !t.creates || t.ordinal < 0) return;
    std::lock_guard<std::mutex> lock(g_mu);
    g_primary[t.ordinal].creating = false;
}

void done(Ticket &t, CUresult result, CUcontext made) {
    if (t.primary && t.ordinal >= 0 && result == CUDA_SUCCESS) {
        std::lock_guard<std::mutex> lock(g_mu);
        g_primary[t.ordinal].refs++;  // every retain: each release takes one back
    }
    if (!t.dev) return creation_over(t);  // no context made, or the device is not accounted
    ledger::Ledger &l = *state().ledger;
    int li = t.dev->ledger_index;
    if (result != CUDA_SUCCESS) {
        if (t.charged) l.release_kind(li, ledger::kContext, t.charged);
        if (t.measuring) l.drop_context_claim(li);
        return creation_over(t);
    }
    ledger::CostSource source = ledger::kCostUnknown;
    uint64_t measured = measure(t, &source);
    if (measured) l.offer_context_cost(li, measured, source);
    if (t.measuring) l.drop_context_claim(li);  // when the offer did not replace it
    uint64_t cost = measured ? measured : t.charged;
    if (!cost && !t.device_before_ok && !t.own_before_ok) {
        static std::atomic<bool> said{false};
        if (!said.exchange(true))
            log_error(
                "cannot measure what a CUDA context costs on device %d (no NVML figure); until a process of the "
                "ledger does, contexts are not counted",
                t.dev->ordinal);
    }
    charge_after(t, cost);
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (t.primary) {
            g_primary[t.dev->ordinal].charged = cost;
        } else {
            for (Created &c : g_created)
                if (!c.ctx) {
                    c = Created{made, t.dev->ordinal, cost};
                    break;
                }
        }
    }
    creation_over(t);
}

uint64_t charged_on(int ordinal) {
    if (ordinal < 0 || ordinal >= kMaxOrdinals) return 0;
    std::lock_guard<std::mutex> lock(g_mu);
    uint64_t sum = 0;
    each_context(ordinal, [&](uint64_t &charged) { sum += charged; });
    return sum;
}

void settle_uncounted(const DeviceInfo &d) {
    if (d.ordinal < 0 || d.ordinal >= kMaxOrdinals || d.ledger_index < 0) return;
    bool uncounted = false;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        each_context(d.ordinal, [&](uint64_t &charged) { uncounted |= charged == 0; });
    }
    uint64_t cost = uncounted ? known_cost(d) : 0, charge = 0;
    if (!cost) return;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        each_context(d.ordinal, [&](uint64_t &charged) {
            if (!charged) charged = cost, charge += cost;
        });
    }
    if (!charge) return;
    // The contexts exist: the GPU gave them. Counted as they are, and said when that passes the limit.
    Ticket t;
    t.dev = &d;
    charge_after(t, charge);
}

void released(int ordinal, CUresult result) {
    if (result != CUDA_SUCCESS || ordinal < 0 || ordinal >= kMaxOrdinals) return;
    uint64_t release = 0;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        Primary &p = g_primary[ordinal];
        if (p.refs > 0 && --p.refs == 0) release = p.charged, p.charged = 0;
    }
    const DeviceInfo *d = release ? device_info(ordinal) : nullptr;
    if (d && d->ledger_index >= 0) state().ledger->release_kind(d->ledger_index, ledger::kContext, release);
}

void reset(int ordinal, CUresult result) {
    if (result != CUDA_SUCCESS || ordinal < 0 || ordinal >= kMaxOrdinals) return;
    uint64_t release = 0;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        Primary &p = g_primary[ordinal];
        if (p.refs > 0) release = p.charged;
        p = Primary{};
    }
    const DeviceInfo *d = release ? device_info(ordinal) : nullptr;
    if (d && d->ledger_index >= 0) state().ledger->release_kind(d->ledger_index, ledger::kContext, release);
}

void destroyed(CUcontext ctx, CUresult result) {
    if (result != CUDA_SUCCESS || !ctx) return;
    Created gone;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        for (Created &c : g_created)
            if (c.ctx == ctx) {
                gone = c;
                c = Created{};
                break;
            }
    }
    const DeviceInfo *d = gone.ctx ? device_info(gone.ordinal) : nullptr;
    if (d && d->ledger_index >= 0) state().ledger->release_kind(d->ledger_index, ledger::kContext, gone.charged);
}

void lock_for_fork() { g_mu.lock(); }
void unlock_after_fork() { g_mu.unlock(); }
void reset_after_fork() {
    for (Primary &p : g_primary) p = Primary{};
    for (Created &c : g_created) c = Created{};
}

}  // namespace gg::usage::context
