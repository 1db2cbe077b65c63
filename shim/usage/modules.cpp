#include "shim/usage/modules.h"

#include <mutex>
#include <unordered_map>

#include "common/base/log.h"
#include "shim/base/race_once.h"
#include "shim/core/state.h"
#include "shim/resolve/real.h"
#include "shim/usage/usage.h"

namespace gg::usage::modules {
namespace {

// More than this for one load is another process's allocation landing in the window, not a module.
constexpr uint64_t kMostForOneLoad = 1ull << 30;

struct Loaded {
    int ledger_dev;
    uint64_t bytes;
};
std::mutex g_mu;
std::atomic<std::unordered_map<uint64_t, Loaded> *> g_loaded{nullptr};
std::unordered_map<uint64_t, Loaded> &loaded() { return never_destroyed(g_loaded); }

}  // namespace

void before(Ticket *t) {
    if (!on()) return;
    const DeviceInfo *d = device_info(current_ordinal());
    if (!d || d->ledger_index < 0) return;
    size_t free_bytes = 0, total = 0;
    const RealDriver &r = real_driver();
    // Without a current context (a library loaded before any) there is nothing to measure against.
    if (!r.cuMemGetInfo_v2 || r.cuMemGetInfo_v2(&free_bytes, &total) != CUDA_SUCCESS) return;
    t->dev = d;
    t->free_before = free_bytes;
    t->container_before = state().ledger->container_used(d->ledger_index);
}

void after(const Ticket &t, CUresult result, uint64_t key) {
    if (!t.dev || result != CUDA_SUCCESS || !key) return;
    size_t free_bytes = 0, total = 0;
    if (real_driver().cuMemGetInfo_v2(&free_bytes, &total) != CUDA_SUCCESS || free_bytes >= t.free_before) return;
    ledger::Ledger &l = *state().ledger;
    int li = t.dev->ledger_index;
    uint64_t took = t.free_before - free_bytes, now = l.container_used(li);
    uint64_t others = now > t.container_before ? now - t.container_before : 0;  // the container's, meanwhile
    took = took > others ? took - others : 0;
    if (!took || took > kMostForOneLoad) return;
    l.charge_kind(li, ledger::kContext, took);
    std::lock_guard<std::mutex> lock(g_mu);
    loaded()[key] = Loaded{li, took};
}

void unloaded(uint64_t key, CUresult result) {
    if (result != CUDA_SUCCESS || !key || !on()) return;
    Loaded gone{-1, 0};
    {
        std::lock_guard<std::mutex> lock(g_mu);
        auto it = loaded().find(key);
        if (it == loaded().end()) return;
        gone = it->second;
        loaded().erase(it);
    }
    state().ledger->release_kind(gone.ledger_dev, ledger::kContext, gone.bytes);
}

void lock_for_fork() { g_mu.lock(); }
void unlock_after_fork() { g_mu.unlock(); }
void reset_after_fork() { loaded().clear(); }

}  // namespace gg::usage::modules
