#include "shim/quota/guard.h"

#include <atomic>
#include <mutex>

#include "common/base/hot.h"
#include "common/base/log.h"
#include "common/base/saturating.h"
#include "common/units/size_spec.h"
#include "shim/base/profile.h"
#include "shim/core/state.h"
#include "shim/quota/episode.h"
#include "shim/report/warn_at.h"
#include "shim/resolve/real.h"
#include "shim/torch/view.h"
#include "shim/usage/pools.h"
#include "shim/usage/usage.h"

namespace gg::guard {
namespace {

// initial-exec, as everywhere in the shim (shim/base/per_thread.h): each hooked call reads these several times,
// and the default model made each read a call into the loader's __tls_get_addr.
__attribute__((tls_model("initial-exec"))) thread_local int t_depth = 0;
__attribute__((tls_model("initial-exec"))) thread_local Api t_runtime_api = Api::kNone;
__attribute__((tls_model("initial-exec"))) thread_local bool t_workspace = false;

// Native frames of the shim itself at the top of every captured stack: capture, admit, the hook.
constexpr int kShimFrames = 3;

void maybe_warn(const DeviceInfo &dev, uint64_t before, uint64_t after);

// An async allocation: holds the pools' readings off (shim/usage/pools.h), serves what it can from
// the reserve the ledger holds, and returns what is left to charge: the rest, rounded up to the
// chunk the pool grows by (charged now, as reserve, before the driver takes it; the pool's own
// figure corrects it after the call).
__attribute__((noinline)) uint64_t hold_pools(Ticket *t, uint64_t bytes) {
    usage::pools::enter(t->dev->ordinal);
    t->pools_held = true;
    uint64_t ask = bytes - (t->drawn = usage::pools::draw(*t->dev, bytes));
    t->growth = usage::chunk_rest(ask);
    // A request within a chunk of 2^64 (SIZE_MAX, say): rounded up, it wrapped to a few bytes or none,
    // which the ledger admitted and the driver was asked for the rest. Left as it is, it is refused.
    if (ask > UINT64_MAX - t->growth) t->growth = 0;
    return ask + t->growth;
}

// Undoes hold_pools (nothing was charged).
void let_go_pools(Ticket *t) {
    usage::pools::undraw(*t->dev, t->drawn);
    t->drawn = t->growth = 0;
    usage::pools::leave(t->dev->ordinal);
    t->pools_held = false;
}

// The first refusal reclaims the bytes of dead processes, then trims this process's own pools and
// graph memory (held, unused), trying once more after each, before it becomes an out-of-memory for
// the program. Making room reads the pools: an async allocation lets go of its hold on them
// meanwhile, and what it drew from their reserve goes back to it. Sets t->charged when it charged
// and returns what it charged. Out of line, and `ask` by value: admit's common way stays as short
// as it was.
__attribute__((noinline, cold)) uint64_t charge_after_refusal(Ticket *t, bool counting, uint64_t ask, uint64_t *used) {
    ledger::Ledger &l = *state().ledger;
    int d = t->dev->ledger_index;
    bool async = t->pools_held;
    if (async) let_go_pools(t);
    auto again = [&] {
        if (async) ask = hold_pools(t, t->bytes);
        if (!ask || l.try_charge(d, ask, used)) return true;
        if (async) let_go_pools(t);
        return false;
    };
    t->charged = (l.reclaim_dead(false) > 0 && again()) || (counting && usage::make_room(*t->dev) && again());
    return ask;
}

}  // namespace

GG_HOT DriverCall::DriverCall() : outermost_(t_depth++ == 0) {
    if (outermost_) (void)state();  // first hooked call: read the configuration, open the ledger
}
GG_HOT DriverCall::~DriverCall() { t_depth--; }

RuntimeCall::RuntimeCall(Api api) : saved_(t_runtime_api) {
    if (saved_ == Api::kNone) t_runtime_api = api;  // the outermost API is what the program called
}
RuntimeCall::~RuntimeCall() { t_runtime_api = saved_; }

WorkspaceScope::WorkspaceScope() : saved_(t_workspace) { t_workspace = true; }
WorkspaceScope::~WorkspaceScope() { t_workspace = saved_; }
bool in_workspace_scope() { return t_workspace; }

GG_HOT CUresult admit(Api driver_api, int ordinal, uint64_t bytes, Ticket *t) {
    State &s = state();
    t->driver_api = driver_api;
    t->api = t_runtime_api != Api::kNone ? t_runtime_api : driver_api;
    t->bytes = bytes;
    {
        GG_PROFILE_STEP(kAdmitOrdinal);
        if (ordinal < 0) ordinal = current_ordinal();
    }
    {
        GG_PROFILE_STEP(kAdmitDevice);
        t->dev = device_info(ordinal);
    }
    if (!t->dev || t->dev->ledger_index < 0) return CUDA_SUCCESS;  // no context or unknown device: the driver decides
    ledger::Ledger &l = *s.ledger;
    int d = t->dev->ledger_index;
    uint64_t used = 0, ask = bytes;
    bool counting = s.cfg->count_all();
    // What a pool already holds for this process serves the allocation first: no more of the GPU is taken.
    // The pools' readings wait, from the draw until the driver call is over (shim/usage/pools.h).
    if (counting && usage::pools::is_async(driver_api)) ask = hold_pools(t, bytes);
    bool charged;
    {
        GG_PROFILE_STEP(kAdmitCharge);
        charged = !ask || l.try_charge(d, ask, &used);
    }
    if (!charged) {
        ask = charge_after_refusal(t, counting, ask, &used);
        if (t->charged) {
            // charged after all
        } else if (!has_limit(*t->dev)) {
            // No limit to keep: a request the ledger cannot count (one that would wrap its count)
            // goes to the driver uncharged, and the driver decides.
            return CUDA_SUCCESS;
        } else {
            tracker().count_failure(t->api);
            l.count_refusal(d);
            // A process without a slot (every one held by a live process) is refused whatever it asks:
            // its refusal says so, rather than the bytes, which are not the reason.
            episode::Cause cause = l.slots_all_held() ? episode::Cause::kNoSlot : episode::Cause::kQuota;
            episode::Request r{t->api, driver_api, bytes,        ordinal, CUDA_ERROR_OUT_OF_MEMORY,
                               cause,  used,       t->dev->limit};
            episode::failed(r, kShimFrames);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else {
        t->charged = true;
        GG_PROFILE_STEP(kAdmitReclaim);
        l.reclaim_dead(true);  // the periodic check: dead processes' bytes come back within a second
    }
    if (t->growth) l.allocations_to_kind(d, ledger::kPools, t->growth);
    if (has_limit(*t->dev) && ask) maybe_warn(*t->dev, sat_sub(used, ask), used);
    return CUDA_SUCCESS;
}

GG_HOT void commit(Ticket &t, KeyKind kind, uint64_t key, uint64_t actual_bytes) {
    bool counted = t.charged;
    if (counted && actual_bytes < t.bytes) {
        // Smaller than admitted (a pitch the driver chose narrower than the estimate): the difference
        // goes back now, since the free takes back what the allocation holds and would leave it behind.
        state().ledger->release(t.dev->ledger_index, t.bytes - actual_bytes);
    } else if (counted && actual_bytes > t.bytes &&
               !state().ledger->charge(t.dev->ledger_index, actual_bytes - t.bytes)) {
        // More than the ledger can count (the driver's pitch times height would wrap it): the
        // allocation is left out of the ledger, so that its free takes back nothing it did not charge.
        state().ledger->release(t.dev->ledger_index, t.bytes);
        counted = false;
    }
    Allocation a;
    a.bytes = actual_bytes;
    a.t_ns = mono_ns();
    a.thread = thread_id();
    a.ordinal = t.dev ? (int16_t)t.dev->ordinal : -1;
    a.ledger_dev = t.dev && counted ? (int16_t)t.dev->ledger_index : -1;
    a.api = t.api;
    a.driver_api = t.driver_api;
    a.workspace = t_workspace;
    const Config &c = *state().cfg;
    if (c.stack_depth > 0 && actual_bytes >= c.stack_min_bytes) a.stack = stacks::capture(kShimFrames - 1);
    if (tracker().insert(kind, key, a)) {
        // A segment of PyTorch's caching allocator, most likely: the tensor view's history keeps it.
        if (__builtin_expect(torch::active(), 0) && kind != KeyKind::kArray && kind != KeyKind::kMipmap)
            torch::on_segment(true, kind == KeyKind::kPointer ? key : 0, actual_bytes, a.ordinal);
        if (a.ledger_dev >= 0 && c.count_all()) {
            if (usage::pools::is_async(t.driver_api))
                usage::pools::allocated(*t.dev, t.pool, actual_bytes, t.drawn == t.bytes);
            usage::tick(*t.dev, a.t_ns);
        }
        return;
    }
    // The live table could not grow (no host memory): the program keeps its allocation, and the
    // ledger forgets it too, so that its free cannot release bytes that were never counted.
    if (a.ledger_dev >= 0) state().ledger->release(a.ledger_dev, a.bytes);
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
        log_error(
            "out of host memory for the table of live allocations: an allocation of %llu bytes, and any "
            "other while this lasts, is neither tracked nor counted against the limit",
            (unsigned long long)a.bytes);
}

void failed(Ticket &t, CUresult result) {
    if (t.charged) {
        state().ledger->release(t.dev->ledger_index, t.bytes - t.drawn);
        if (t.growth) state().ledger->release_kind(t.dev->ledger_index, ledger::kPools, t.growth);
    }
    t.charged = false;
    if (t.pools_held) let_go_pools(&t);  // the ledger is as before the call: the pools may be read (an episode does)
    if (result != CUDA_ERROR_OUT_OF_MEMORY) return;
    tracker().count_failure(t.api);
    int ordinal = t.dev ? t.dev->ordinal : -1;
    uint64_t used = t.dev && t.dev->ledger_index >= 0 ? state().ledger->container_used(t.dev->ledger_index) : 0;
    uint64_t limit = t.dev ? t.dev->limit : UINT64_MAX;
    episode::Request r{t.api, t.driver_api, t.bytes, ordinal, result, episode::Cause::kDriver, used, limit};
    episode::failed(r, kShimFrames - 1);
}

void release_pools(Ticket &t) {
    if (!t.pools_held) return;
    usage::pools::leave(t.dev->ordinal);
    t.pools_held = false;
}

bool hold_pools_for_free(const Allocation &a) {
    if (a.ledger_dev < 0 || !usage::pools::is_async(a.driver_api) || !state().cfg->count_all()) return false;
    usage::pools::enter(a.ordinal);
    return true;
}

void settle_async_free(Allocation *a, CUresult result) {
    if (result == CUDA_SUCCESS) {
        usage::pools::freed(a->ordinal, a->ledger_dev, a->bytes);
        a->ledger_dev = -1;  // done: finish_free leaves the ledger alone
    }
    usage::pools::leave(a->ordinal);
}

GG_HOT bool take(KeyKind kind, uint64_t key, Allocation *a) { return tracker().take(kind, key, a, mono_ns()); }

GG_HOT void finish_free(bool found, KeyKind kind, uint64_t key, const Allocation &a, CUresult result) {
    if (!found) return;
    if (result != CUDA_SUCCESS) {
        tracker().restore(kind, key, a);
        return;
    }
    if (a.ledger_dev >= 0) {
        // A stream-ordered allocation's bytes stay in its pool, which the quota counts (shim/usage/pools.h).
        if (usage::pools::is_async(a.driver_api) && state().cfg->count_all())
            usage::pools::freed(a.ordinal, a.ledger_dev, a.bytes);
        else state().ledger->release(a.ledger_dev, a.bytes);
    }
    if (__builtin_expect(torch::active(), 0) && kind != KeyKind::kArray && kind != KeyKind::kMipmap)
        torch::on_segment(false, kind == KeyKind::kPointer ? key : 0, a.bytes, a.ordinal);
}

QuotaView quota_of(int ordinal) {
    QuotaView v;
    const DeviceInfo *d = device_info(ordinal);
    if (!d || d->ledger_index < 0 || !has_limit(*d)) return v;
    // Not hot (frameworks ask once per step at most): a full check for dead processes, so the
    // answer never counts a process that is gone, and the driver's own figures of what this process
    // holds beside its allocations read again (shim/usage/usage.h).
    state().ledger->reclaim_dead(false);
    usage::reconcile(*d, true);
    v.limited = true;
    v.limit = d->limit;
    v.container_used = state().ledger->container_used(d->ledger_index);
    return v;
}

namespace {

// One report each time the container's usage crosses GPUGUARD_WARN_AT of the limit going up.
void maybe_warn(const DeviceInfo &dev, uint64_t before, uint64_t after) {
    double f = state().cfg->warn_at;
    if (f <= 0) return;
    uint64_t mark = (uint64_t)((long double)dev.limit * f);
    if (before < mark && after >= mark) report::warn_at_crossed(dev.ordinal, after, dev.limit);
}

}  // namespace

}  // namespace gg::guard
