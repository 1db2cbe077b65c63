// `gpuguard doctor --truth`: the ledger's count of each process against the driver's own, NVML's
// per-process figure (what nvidia-smi --query-compute-apps shows), and the container's total against
// the quota with the tolerance the GPU checks use (tests/gpu/truth.sh): max(64 MiB, 2% of the limit).
// Where NVML lists none of the ledger's processes (a container whose pids it shows as the host's, or
// not at all) it says so and compares the totals only.
#include <unistd.h>

#include <map>
#include <memory>
#include <vector>

#include "common/ledger/ledger.h"
#include "common/nvidia/nvml_min.h"
#include "common/units/human.h"
#include "tools/commands/doctor/checks.h"

namespace gg::doctor {
namespace {

struct Nvml {
    void *lib = nullptr;
    decltype(&::nvmlDeviceGetHandleByUUID) handle = nullptr;
    decltype(&::nvmlDeviceGetComputeRunningProcesses_v3) processes = nullptr;
    decltype(&::nvmlDeviceGetMemoryInfo) memory = nullptr;
};

bool load(Nvml &n, std::string *why) {
    n.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!n.lib) {
        *why = "libnvidia-ml.so.1 not found";
        return false;
    }
    auto init = sym<decltype(&::nvmlInit_v2)>(n.lib, "nvmlInit_v2");
    n.handle = sym<decltype(n.handle)>(n.lib, "nvmlDeviceGetHandleByUUID");
    n.processes = sym<decltype(n.processes)>(n.lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!n.processes) n.processes = sym<decltype(n.processes)>(n.lib, "nvmlDeviceGetComputeRunningProcesses_v2");
    n.memory = sym<decltype(n.memory)>(n.lib, "nvmlDeviceGetMemoryInfo");
    if (!init || !n.handle || !n.processes || !n.memory) {
        *why = where(n.lib) + " lacks the per-process functions";
        return false;
    }
    if (init() != NVML_SUCCESS) {
        *why = where(n.lib) + ": nvmlInit failed";
        return false;
    }
    return true;
}

// pid -> bytes on the device, as NVML lists them; false when it cannot.
bool listed(const Nvml &n, nvmlDevice_t dev, std::map<unsigned, uint64_t> *out) {
    std::vector<nvmlProcessInfo_t> list(256);
    unsigned count = (unsigned)list.size();
    nvmlReturn_t r = n.processes(dev, &count, list.data());
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
        list.resize(count + 16);
        count = (unsigned)list.size();
        r = n.processes(dev, &count, list.data());
    }
    if (r != NVML_SUCCESS) return false;
    for (unsigned i = 0; i < count && i < list.size(); i++)
        if (list[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) (*out)[list[i].pid] = list[i].usedGpuMemory;
    return true;
}

std::string signed_bytes(uint64_t a, uint64_t b) {  // a - b, with its sign
    return a >= b ? "+" + human_bytes(a - b) : "-" + human_bytes(b - a);
}

// The ledger's processes on one device beside NVML's figure of each, one row a process; what NVML
// lists is taken out of `driver`, leaving the processes outside the ledger.
struct Matched {
    uint64_t ledger_sum = 0, driver_sum = 0;
    int count = 0;
};
Matched print_processes(const gg::ledger::Ledger::DeviceView &d,
                        const std::vector<gg::ledger::Ledger::ProcessView> &procs,
                        std::map<unsigned, uint64_t> &driver) {
    Matched m;
    printf("    %8s %-9s %12s %12s %12s  %s\n", "PID", "STATE", "LEDGER", "DRIVER", "DIFFERENCE", "COMMAND");
    for (const auto &p : procs) {
        uint64_t mine = (size_t)d.index < p.bytes.size() ? p.bytes[(size_t)d.index] : 0;
        if (p.reclaimed || (!mine && !driver.count((unsigned)p.pid))) continue;
        auto it = driver.find((unsigned)p.pid);
        std::string theirs = it == driver.end() ? "(not listed)" : human_bytes(it->second);
        std::string diff = it == driver.end() ? "" : signed_bytes(it->second, mine);
        printf("    %8d %-9s %12s %12s %12s  %s\n", p.pid, p.alive ? "alive" : "dead", human_bytes(mine).c_str(),
               theirs.c_str(), diff.c_str(), p.command.substr(0, 60).c_str());
        m.ledger_sum += mine;
        if (it != driver.end()) {
            m.driver_sum += it->second;
            m.count++;
            driver.erase(it);
        }
    }
    return m;
}

// One device: its processes, the totals against each other and against the limit, and the others.
void compare_device(Checks &c, const Nvml &n, const gg::ledger::Ledger::DeviceView &d,
                    const std::vector<gg::ledger::Ledger::ProcessView> &procs) {
    c.section(("device #" + std::to_string(d.index) + " " + d.name + " " + d.uuid).c_str());
    nvmlDevice_t dev = nullptr;
    std::map<unsigned, uint64_t> driver;
    if (n.handle(d.uuid.c_str(), &dev) != NVML_SUCCESS || !listed(n, dev, &driver)) {
        c.line(kWarn, "nvml", "NVML does not list this device's processes");
        return;
    }
    Matched matched = print_processes(d, procs, driver);
    uint64_t ledger_sum = matched.ledger_sum, driver_sum = matched.driver_sum;
    uint64_t others = 0;
    for (const auto &[pid, bytes] : driver) others += bytes;
    nvmlMemory_t m{};
    n.memory(dev, &m);
    uint64_t tolerance = d.limit == gg::ledger::kNoLimit ? 64ull << 20 : std::max<uint64_t>(64ull << 20, d.limit / 50);
    if (!matched.count) {
        c.line(kWarn, "processes",
               "NVML lists none of the ledger's processes (in a container NVML may show the host's pids, or none): "
               "the device holds " +
                   human_bytes(m.used) + " in all, the ledger counts " + human_bytes(d.used));
        return;
    }
    std::string line = "ledger " + human_bytes(ledger_sum) + ", driver " + human_bytes(driver_sum) + " (" +
                       signed_bytes(driver_sum, ledger_sum) + ") for the " + std::to_string(matched.count) +
                       " process(es) NVML lists";
    bool under = driver_sum > ledger_sum + tolerance;
    c.line(
        under ? kWarn : kOk, "difference",
        line + (under ? "; the ledger counts less than the driver holds by more than " + human_bytes(tolerance) : ""));
    if (d.limit != gg::ledger::kNoLimit) {
        bool over = driver_sum > d.limit + tolerance;
        c.line(
            over ? kFail : kOk, "quota",
            "the driver holds " + human_bytes(driver_sum) + " for the ledger's processes against a limit of " +
                human_bytes(d.limit) + " (tolerance " + human_bytes(tolerance) + ")",
            over ? "the quota does not bound what the GPU gives: see docs/architecture.md, what the quota counts" : "");
    }
    if (!driver.empty())
        c.line(kInfo, "others",
               std::to_string(driver.size()) + " process(es) outside the ledger hold " + human_bytes(others) +
                   " of the device (other containers, or programs without the shim)");
}

}  // namespace

int check_truth(const std::string &path) {
    Checks c;
    printf("gpuguard doctor --truth: the ledger against the driver's own view of each process (NVML)\n");
    gg::ledger::OpenOptions o;
    o.path = path;
    o.read_only = true;
    std::string error, notice, why;
    std::unique_ptr<gg::ledger::Ledger> l(path.empty() ? nullptr : gg::ledger::Ledger::open(o, &error, &notice));
    c.section("ledger");
    if (!l) {
        c.line(kFail, "ledger", path.empty() ? "none (GPUGUARD_LEDGER=none): nothing to compare" : error,
               "name the ledger with --ledger PATH or GPUGUARD_LEDGER");
        return 1;
    }
    c.line(kOk, "ledger", path + ", limit " + (l->limit_spec().empty() ? "none" : l->limit_spec()));
    Nvml n;
    if (!load(n, &why)) {
        c.line(kFail, "nvml", why + ": the driver's view cannot be read", "run where the NVIDIA driver is installed");
        return 1;
    }
    std::vector<gg::ledger::Ledger::ProcessView> procs = l->processes();
    for (const auto &d : l->devices()) compare_device(c, n, d, procs);
    return c.failed() ? 1 : 0;
}

}  // namespace gg::doctor
