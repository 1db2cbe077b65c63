#include "shim/quota/episode.h"

#include <mutex>
#include <string>

#include "common/base/log.h"
#include "common/base/saturating.h"
#include "common/units/human.h"
#include "common/units/size_spec.h"
#include "shim/core/state.h"
#include "shim/quota/device.h"
#include "shim/report/report.h"
#include "shim/stacks/stacks.h"
#include "shim/track/tracker.h"

namespace gg::episode {
namespace {

constexpr uint64_t kEpisodeGapNs = 1000000000ull;

std::mutex g_mu;
uint64_t g_last_failure_ns = 0;
int g_id = 0;

std::string describe(const Request &r, const DeviceInfo *dev) {
    std::string what =
        std::string(api_name(r.api)) + " of " + human_bytes(r.bytes) + " on device " + std::to_string(r.ordinal);
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
                   " (the container holds " + human_bytes(r.container_used) + ", this process " +
                   human_bytes(tracker().live_bytes()) + ")";
        return "refused " + what + ": the container would hold " + human_bytes(sat_add(r.container_used, r.bytes)) +
               " of its " + human_bytes(r.limit) + " limit (this process holds " + human_bytes(tracker().live_bytes()) +
               ")";
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
    std::string path = report::write(r.cause != Cause::kDriver ? report::Reason::kQuota : report::Reason::kDriverOom,
                                     message, &f, r.ordinal);
    log_error("%s%s%s", message.c_str(), path.empty() ? "" : "; report: ", path.c_str());
}

void lock_for_fork() { g_mu.lock(); }
void unlock_after_fork() { g_mu.unlock(); }
void reset_after_fork() {
    // The child is a process of its own: its first failure starts its own episode and report.
    g_id = 0;
    g_last_failure_ns = 0;
}

void warn(int ordinal, uint64_t used, uint64_t limit) {
    std::string message = "device " + std::to_string(ordinal) +
                          " usage crossed GPUGUARD_WARN_AT: the container holds " + human_bytes(used) + " of its " +
                          human_bytes(limit) + " limit";
    std::string path = report::write(report::Reason::kWarnAt, message, nullptr, ordinal);
    log_error("%s%s%s", message.c_str(), path.empty() ? "" : "; report: ", path.c_str());
}

}  // namespace gg::episode
