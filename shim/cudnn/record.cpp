#include "shim/cudnn/record.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/base/atomic_max.h"
#include "common/report/schema.h"
#include "shim/base/race_once.h"
#include "shim/core/config.h"
#include "shim/core/state.h"
#include "shim/report/report.h"
#include "shim/stacks/stacks.h"

namespace gg::cudnn {

namespace key = schema::key;
namespace value = schema::value;
namespace {

using nlohmann::json;

constexpr uint64_t kNoCap = UINT64_MAX;
// Call sites kept; frameworks have a handful. Past this, requests still count in the totals.
constexpr size_t kMaxSites = 512;
constexpr size_t kSitesInReport = 50;

struct Site {
    stacks::StackId stack = 0;
    uint64_t largest = 0, count = 0;
};

std::atomic<bool> g_present{false};
std::once_flag g_section_once;
std::mutex g_mu;  // guards the sites and the library path
// Never destroyed (shim/base/race_once.h): hooks and reports may run while exit() runs static destructors.
struct Record {
    std::unordered_map<const void *, Site> sites;
    std::string library;
};
std::atomic<Record *> g_record_made{nullptr};
Record &record() { return never_destroyed(g_record_made); }

std::atomic<uint64_t> g_largest{0}, g_in_use{0}, g_in_use_peak{0};
std::atomic<uint64_t> g_plans_rejected{0}, g_algorithms_rejected{0}, g_largest_rejected{0};
std::atomic<uint64_t> g_cap{kNoCap};

const char *cap_mode() {
    switch (state().cfg->cudnn_cap.mode) {
        case settings::CudnnCap::kOff: return "off";
        case settings::CudnnCap::kBytes: return "bytes";
        case settings::CudnnCap::kAuto: return "auto";
    }
    return "auto";
}

// The report's "cudnn" section. Stacks referred to here are added to the report's "stacks" under
// the same keys shim/report/report.cpp uses ("s" + id).
void section(json &r) {
    std::vector<Site> sites;
    json c;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        c[key::library] = record().library;
        for (const auto &kv : record().sites) sites.push_back(kv.second);
    }
    std::sort(sites.begin(), sites.end(), [](const Site &a, const Site &b) { return a.largest > b.largest; });
    uint64_t cap = g_cap.load();
    const Config &cfg = *state().cfg;
    if (cfg.cudnn_cap.mode == settings::CudnnCap::kBytes) cap = cfg.cudnn_cap.bytes;
    c[key::workspace_cap] = cap_mode();
    c[key::workspace_cap_bytes] = cap == kNoCap ? json(nullptr) : json(cap);
    c[key::largest_workspace_requested_bytes] = g_largest.load();
    c[key::workspace_in_use_bytes] = g_in_use.load();
    c[key::workspace_in_use_peak_bytes] = g_in_use_peak.load();
    c[key::plans_rejected] = g_plans_rejected.load();
    c[key::algorithms_rejected] = g_algorithms_rejected.load();
    c[key::largest_rejected_bytes] = g_largest_rejected.load();
    json by_stack = json::array();
    for (size_t i = 0; i < sites.size() && i < kSitesInReport; i++) {
        const Site &s = sites[i];
        by_stack.push_back({{key::stack, report::referenced_stack(r, s.stack)},
                            {key::largest_bytes, s.largest},
                            {key::count, s.count}});
    }
    c[key::requests_by_stack] = by_stack;
    r[key::cudnn] = c;
}

}  // namespace

void present(const char *library) {
    if (g_present.load(std::memory_order_acquire)) return;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (record().library.empty() && library) record().library = library;
    }
    std::call_once(g_section_once, [] { report::add_section(section); });
    g_present.store(true, std::memory_order_release);
}

// noinline: the captured stack starts at our caller's caller (the hook's caller, once the report
// drops the shim's own leading frames).
__attribute__((noinline)) void requested(uint64_t bytes, const void *site) {
    raise_to(g_largest, bytes);
    bool want_stack;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        auto &sites = record().sites;
        auto it = sites.find(site);
        if (it == sites.end() && sites.size() >= kMaxSites) return;
        Site &s = sites[site];
        s.count++;
        want_stack = s.count == 1 || bytes > s.largest;
        if (bytes > s.largest) s.largest = bytes;
    }
    // Unwinding is the costly part, so only for a site's first or larger request, outside the lock.
    if (!want_stack || state().cfg->stack_depth <= 0) return;
    stacks::StackId id = stacks::capture(1);
    std::lock_guard<std::mutex> lock(g_mu);
    Site &s = record().sites[site];
    if (bytes >= s.largest) s.stack = id;
}

void rejected_plan(uint64_t bytes) {
    g_plans_rejected.fetch_add(1, std::memory_order_relaxed);
    raise_to(g_largest_rejected, bytes);
}

void rejected_algorithms(int n, uint64_t largest_bytes) {
    if (n <= 0) return;
    g_algorithms_rejected.fetch_add((uint64_t)n, std::memory_order_relaxed);
    raise_to(g_largest_rejected, largest_bytes);
}

void cap_applied(uint64_t cap_bytes) { g_cap.store(cap_bytes, std::memory_order_relaxed); }

InUse::InUse(uint64_t bytes) : bytes_(bytes) {
    raise_to(g_in_use_peak, g_in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes);
}
InUse::~InUse() { g_in_use.fetch_sub(bytes_, std::memory_order_relaxed); }

void lock_for_fork() { g_mu.lock(); }
void unlock_after_fork() { g_mu.unlock(); }

}  // namespace gg::cudnn
