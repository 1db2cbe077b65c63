#include "shim/quota/episode.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "common/base/hot.h"
#include "common/base/log.h"
#include "common/base/saturating.h"
#include "common/units/human.h"
#include "common/units/size_spec.h"
#include "shim/api/api.h"
#include "shim/core/state.h"
#include "shim/device/device.h"
#include "shim/report/report.h"
#include "shim/stacks/stacks.h"
#include "shim/torch/view.h"
#include "shim/track/tracker.h"
#include "shim/usage/usage.h"

namespace gg::episode {
namespace {

constexpr uint64_t kEpisodeGapNs = 1000000000ull;

std::mutex g_mu;
uint64_t g_last_failure_ns = 0;
int g_id = 0;

// The current episode's report, so that PyTorch's own view of the out-of-memory, which comes after
// the failed driver calls (shim/torch/view.h), can be written into it.
struct Written {
    int id = 0;
    std::string path, message;
    report::Reason reason = report::Reason::kQuota;
    report::Failure failure{};
};
Written g_written;

// A refusal inside PyTorch's caching allocator, whose report waits for PyTorch's verdict: its
// allocator frees its cache and retries after a failed driver call, so a refusal it recovers from is
// no out-of-memory of the program (a generate() loop recovered from dozens, and their reports hid the
// one that mattered behind GPUGUARD_MAX_REPORTS: seen on the H200). c10's out-of-memory report writes
// it (allocator_out_of_memory), c10's next block drops it (allocator_recovered), and an exit before
// either writes it.
struct Pending {
    int id = 0;
    report::Reason reason = report::Reason::kQuota;
    std::string message;
    report::Failure failure{};
};
Pending g_pending;
std::atomic<bool> g_has_pending{false};

void write_pending_at_exit();

// What a request takes memory for, when it is not an allocation (shim/usage/).
const char *purpose(Api api) {
    switch (hook_kind(api)) {
        case HookKind::kContext: return "a CUDA context: ";
        case HookKind::kGraphMemory: return "a CUDA graph's memory: ";
        default: return "";
    }
}

// "1.2 GiB", or with the quota counting more than allocations, "1.7 GiB: 1.2 GiB allocated, 518 MiB
// context and modules, ..." (the kinds that hold anything).
std::string held_by_process(const DeviceInfo *dev) {
    if (!dev || !usage::on()) return human_bytes(tracker().live_bytes());
    usage::Summary u = usage::summary(*dev);
    static const char *const kNames[ledger::kKinds] = {"context and modules", "graphs", "pool reserve"};
    uint64_t kinds = 0;
    for (uint64_t k : u.own) kinds += k;
    std::string s =
        human_bytes(u.own_total) + ": " + human_bytes(u.own_total > kinds ? u.own_total - kinds : 0) + " allocated";
    for (int k = 0; k < ledger::kKinds; k++)
        if (u.own[k]) s += ", " + human_bytes(u.own[k]) + " " + kNames[k];
    return s;
}

std::string describe(const Request &r, const DeviceInfo *dev) {
    std::string what = std::string(purpose(r.api)) + api_name(r.api) + " of " + human_bytes(r.bytes) + " on device " +
                       std::to_string(r.ordinal);
    if (dev && dev->name[0]) what += std::string(" (") + dev->name + ")";
    if (r.cause == Cause::kNoSlot)
        return "refused " + what + ": this process has no slot in the ledger " + state().ledger->path() + " (all " +
               std::to_string(ledger::kMaxSlots) +
               " are held by live processes), so its bytes cannot be counted against the limit; refused until a "
               "slot is free";
    if (r.cause == Cause::kQuota) {
        if (r.limit == 0)
            return "refused " + what + ": the limit is malformed (" + state().cfg->limit_source +
                   "), every allocation is refused";
        if (r.bytes > r.limit)
            return "refused " + what + ": more than the container's whole limit of " + human_bytes(r.limit) +
                   " (the container holds " + human_bytes(r.container_used) + ", this process " + held_by_process(dev) +
                   ")";
        // Rounded to two decimals, the sum can read the same as the limit ("2.00 GiB of its 2.00 GiB"),
        // which hides that it went over: then both are also given in bytes.
        uint64_t would = sat_add(r.container_used, r.bytes);
        std::string held = human_bytes(would), limit = human_bytes(r.limit);
        if (held == limit) {
            held += " (" + std::to_string(would) + " bytes)";
            limit += " (" + std::to_string(r.limit) + " bytes)";
        }
        return "refused " + what + ": the container would hold " + held + " of its " + limit +
               " limit (this process holds " + held_by_process(dev) + ")";
    }
    return "the driver could not allocate " + what + " (out of physical memory; the container holds " +
           human_bytes(r.container_used) +
           (r.limit != UINT64_MAX ? " of its " + human_bytes(r.limit) + " limit)" : ")");
}

}  // namespace

void failed(const Request &r, int skip_frames) {
    // The stack of the request is taken before any lock: it is this thread's own.
    stacks::StackId stack = state().cfg->stack_depth > 0 ? stacks::capture(skip_frames) : 0;
    int id;
    uint64_t first_unix_ns;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        // The clock is read under the lock: a time taken before it could be older than the last
        // failure another thread recorded meanwhile, and the unsigned gap would then look huge (each
        // thread of a storm of failures started an episode of its own).
        uint64_t now = mono_ns();
        bool fresh = g_id == 0 || now - g_last_failure_ns > kEpisodeGapNs;
        g_last_failure_ns = now;
        if (!fresh) {
            report::note_failed_call();
            return;
        }
        id = ++g_id;
        first_unix_ns = unix_ns();
        report::begin_episode(id, first_unix_ns);
    }
    // The report is written outside the lock. Writing it symbolizes stacks (dladdr takes the
    // loader's lock) and asks the driver for free memory; a thread that fails an allocation while
    // it holds the loader's lock (a library constructor inside dlopen) must never wait for us here,
    // or the two threads would wait for each other forever.
    const DeviceInfo *dev = device_info(r.ordinal);
    std::string message = describe(r, dev);
    report::Failure f{r.api, r.driver_api, r.bytes, r.ordinal, (int)r.result, stack, id, first_unix_ns, thread_id()};
    report::Reason reason = r.cause != Cause::kDriver ? report::Reason::kQuota : report::Reason::kDriverOom;
    if (torch::inside_allocator(stack)) {
        std::lock_guard<std::mutex> lock(g_mu);
        if (id != g_id) return;  // another episode began meanwhile
        static std::atomic<bool> exit_handler{false};
        if (!exit_handler.exchange(true)) atexit(write_pending_at_exit);
        g_pending = {id, reason, message, f};
        g_has_pending.store(true, std::memory_order_release);
        return;
    }
    std::string path = report::write(reason, message, &f, r.ordinal);
    log_error("%s%s%s", message.c_str(), path.empty() ? "" : "; report: ", path.c_str());
    std::lock_guard<std::mutex> lock(g_mu);
    if (!path.empty() && id == g_id) g_written = {id, path, message, reason, f};
}

void allocator_out_of_memory(int ordinal, uint64_t requested) {
    Written w;
    Pending p;
    bool rewrite = false;
    int id = 0;
    uint64_t first_unix_ns = 0;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        uint64_t now = mono_ns();
        bool within = g_id != 0 && now - g_last_failure_ns <= kEpisodeGapNs;
        g_last_failure_ns = now;
        if (g_has_pending.load(std::memory_order_relaxed) && g_pending.id == g_id) {
            // The refusal PyTorch did not recover from: its report, with PyTorch's view.
            p = g_pending;
            g_pending = Pending();
            g_has_pending.store(false, std::memory_order_relaxed);
        } else if (within) {
            // The driver failures of this out-of-memory wrote the episode's report: it gets PyTorch's
            // view too (nothing when no report was written: GPUGUARD_MAX_REPORTS).
            if (g_written.id != g_id || g_written.path.empty()) return;
            w = g_written;
            rewrite = true;
        } else {
            id = ++g_id;
            first_unix_ns = unix_ns();
            report::begin_episode(id, first_unix_ns);
        }
    }
    const DeviceInfo *dev = device_info(ordinal);
    std::string name = dev && dev->name[0] ? std::string(" (") + dev->name + ")" : "";
    std::string asked = "; PyTorch then raised OutOfMemoryError for a request of " + human_bytes(requested);
    if (p.id) {
        std::string message = p.message + asked;
        std::string path = report::write(p.reason, message, &p.failure, p.failure.ordinal);
        log_error("%s%s%s", message.c_str(), path.empty() ? "" : "; report: ", path.c_str());
        std::lock_guard<std::mutex> lock(g_mu);
        if (!path.empty() && p.id == g_id) g_written = {p.id, path, message, p.reason, p.failure};
        return;
    }
    if (rewrite) {
        std::string message =
            w.message + "; PyTorch then raised OutOfMemoryError for a request of " + human_bytes(requested);
        report::rewrite(w.path, w.reason, message, &w.failure, w.failure.ordinal);
        return;
    }
    // c10 refused without a driver call failing: its own limit (a memory fraction).
    stacks::StackId stack = state().cfg->stack_depth > 0 ? stacks::capture(1) : 0;
    std::string message = "PyTorch's caching allocator refused " + human_bytes(requested) + " on device " +
                          std::to_string(ordinal) + name +
                          " without asking the driver (its own limit: torch.cuda.set_per_process_memory_fraction)";
    Api api = Api::_ZN3c1027reportOutOfMemoryToProfilerElmmNS_6DeviceE;
    report::Failure f{api,   api, requested,     ordinal,    (int)CUDA_ERROR_OUT_OF_MEMORY,
                      stack, id,  first_unix_ns, thread_id()};
    std::string path = report::write(report::Reason::kAllocatorOom, message, &f, ordinal);
    log_error("%s%s%s", message.c_str(), path.empty() ? "" : "; report: ", path.c_str());
    std::lock_guard<std::mutex> lock(g_mu);
    if (!path.empty() && id == g_id) g_written = {id, path, message, report::Reason::kAllocatorOom, f};
}

GG_HOT bool allocator_recovered() {
    if (!g_has_pending.load(std::memory_order_acquire)) return false;  // the common case: one load
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_has_pending.load(std::memory_order_relaxed)) return false;
    g_pending = Pending();
    g_has_pending.store(false, std::memory_order_relaxed);
    g_last_failure_ns = 0;  // the episode is over: a refusal after this one is news
    return true;
}

namespace {

void write_pending_at_exit() {
    Pending p;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (!g_has_pending.load(std::memory_order_relaxed)) return;
        p = g_pending;
        g_pending = Pending();
        g_has_pending.store(false, std::memory_order_relaxed);
    }
    std::string path = report::write(p.reason, p.message, &p.failure, p.failure.ordinal);
    log_error("%s%s%s", p.message.c_str(), path.empty() ? "" : "; report: ", path.c_str());
}

}  // namespace

void lock_for_fork() { g_mu.lock(); }
void unlock_after_fork() { g_mu.unlock(); }
void reset_after_fork() {
    // The child is a process of its own: its first failure starts its own episode and report.
    g_id = 0;
    g_last_failure_ns = 0;
    g_written = Written();
    g_pending = Pending();
    g_has_pending = false;
}

}  // namespace gg::episode
