#include "shim/usage/self_view.h"

#include <dlfcn.h>
#include <unistd.h>
#include <atomic>
#include <vector>

#include "common/base/log.h"
#include "common/nvidia/nvml_min.h"
#include "shim/base/race_once.h"
#include "shim/core/state.h"
#include "shim/resolve/real.h"

namespace gg::usage::self_view {
namespace {

struct Nvml {
    bool ok = false;
    decltype(&::nvmlDeviceGetHandleByUUID) handle_by_uuid = nullptr;
    decltype(&::nvmlDeviceGetComputeRunningProcesses_v3) processes = nullptr;
    decltype(&::nvmlDeviceGetMemoryInfo) memory = nullptr;
};

// Found with the real dlsym on NVML's own handle: the shim's exported NVML hooks (which show the
// quota) must not answer its own questions.
Nvml load() {
    Nvml n;
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return n;
    auto init = reinterpret_cast<decltype(&::nvmlInit_v2)>(real_dlsym(h, "nvmlInit_v2"));
    n.handle_by_uuid = reinterpret_cast<decltype(n.handle_by_uuid)>(real_dlsym(h, "nvmlDeviceGetHandleByUUID"));
    // _v2 fills the same structure as _v3 (older drivers have only it).
    n.processes = reinterpret_cast<decltype(n.processes)>(real_dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3"));
    if (!n.processes)
        n.processes = reinterpret_cast<decltype(n.processes)>(real_dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v2"));
    n.memory = reinterpret_cast<decltype(n.memory)>(real_dlsym(h, "nvmlDeviceGetMemoryInfo"));
    n.ok = init && n.handle_by_uuid && n.memory && init() == NVML_SUCCESS;
    return n;
}
std::atomic<const Nvml *> g_nvml{nullptr};
const Nvml &nvml() { return race_once(g_nvml, load); }

// Looked up once per ordinal; a null handle is a device NVML does not know (a MIG instance, say).
std::atomic<bool> g_looked[kMaxOrdinals];
std::atomic<nvmlDevice_t> g_handle[kMaxOrdinals];

nvmlDevice_t handle_of(const DeviceInfo &d) {
    if (d.ordinal < 0 || d.ordinal >= kMaxOrdinals) return nullptr;
    if (g_looked[d.ordinal].load(std::memory_order_acquire)) return g_handle[d.ordinal].load();
    const Nvml &n = nvml();
    nvmlDevice_t h = nullptr;
    if (n.ok && n.handle_by_uuid(d.uuid, &h) != NVML_SUCCESS) h = nullptr;
    g_handle[d.ordinal].store(h);
    g_looked[d.ordinal].store(true, std::memory_order_release);
    return h;
}

enum State : int { kUnchecked, kPending, kTrusted, kNamesake, kUnavailable, kOff };
std::atomic<int> g_state{kUnchecked};

// This process's entry in NVML's list: 1 found (*bytes set), 0 not listed, -1 no list.
int find_self(const DeviceInfo &d, uint64_t *bytes) {
    const Nvml &n = nvml();
    nvmlDevice_t h = n.ok && n.processes ? handle_of(d) : nullptr;
    if (!h) return -1;
    std::vector<nvmlProcessInfo_t> list(64);
    unsigned count = (unsigned)list.size();
    nvmlReturn_t r = n.processes(h, &count, list.data());
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
        list.resize(count + 16);
        count = (unsigned)list.size();
        r = n.processes(h, &count, list.data());
    }
    if (r != NVML_SUCCESS) return -1;
    unsigned pid = (unsigned)getpid();
    for (unsigned i = 0; i < count && i < list.size(); i++) {
        if (list[i].pid != pid) continue;
        if (list[i].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE) return -1;
        *bytes = list[i].usedGpuMemory;
        return 1;
    }
    return 0;
}

}  // namespace

void check_before_first_context(const DeviceInfo &d) {
    if (state().cfg->count_mode != settings::CountMode::kEverything) {
        g_state.store(kOff);
        return;
    }
    int s = g_state.load();
    if (s != kUnchecked) return;
    uint64_t bytes = 0;
    int found = find_self(d, &bytes);
    if (found < 0) {
        g_state.store(kUnavailable);
    } else if (found > 0) {
        // Listed before it has a context: a namesake in another PID namespace (docs/architecture.md).
        log_debug(
            "NVML lists a process with this pid before its first context: its pids are another PID "
            "namespace's; the measured costs stand");
        g_state.store(kNamesake);
    } else {
        g_state.store(kPending);
    }
}

Own own_bytes(const DeviceInfo &d, uint64_t *bytes) {
    int s = g_state.load();
    if (s != kPending && s != kTrusted) return Own::kUnavailable;
    int found = find_self(d, bytes);
    if (found < 0) return Own::kUnavailable;
    if (found == 0) return Own::kNotListed;
    if (s == kPending) g_state.store(kTrusted);
    return Own::kFound;
}

bool device_used(const DeviceInfo &d, uint64_t *bytes) {
    nvmlDevice_t h = handle_of(d);
    nvmlMemory_t m{};
    if (!h || nvml().memory(h, &m) != NVML_SUCCESS) return false;
    *bytes = m.used;
    return true;
}

bool usable() {
    int s = g_state.load();
    return s == kPending || s == kTrusted;
}

const char *state_name() {
    switch (g_state.load()) {
        case kTrusted: return "nvml";
        case kPending:
        case kNamesake: return "not_listed";
        case kUnavailable: return "unavailable";
        default: return "off";
    }
}

void reset_after_fork() { g_state.store(kUnchecked); }

}  // namespace gg::usage::self_view
