// `gpuguard doctor`: everything one checks when a program runs out of GPU memory, or when gpuguard
// seems not to act, in one list: the driver and GPUs, the CUDA libraries, PyTorch, the preload
// library and whether it really loads (into a given command, with `-- CMD`), the ledger, the report
// folder and the variables in effect. Each failed check is one line with its fix.
#include <cuda.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/commands/commands.h"
#include "common/ledger/ledger.h"
#include "common/nvidia/nvml_min.h"
#include "tools/cli/process.h"
#include "tools/cli/settings.h"
#include "common/units/size_spec.h"

extern char **environ;

namespace {

const char kUsage[] =
    "usage: gpuguard doctor [-- COMMAND [ARGS...]]\n"
    "\n"
    "Checks what matters when a program runs out of GPU memory or gpuguard seems not to act: the\n"
    "driver and GPUs, the CUDA runtime, cuDNN and PyTorch, the preload library and its libunwind,\n"
    "the limit, the ledger, the report folder and every GPUGUARD_* variable (a malformed one is\n"
    "flagged). With -- COMMAND it runs COMMAND with libgpuguard.so preloaded and says whether the\n"
    "library really is in the command's process (a static program or one that clears LD_PRELOAD\n"
    "escapes it). COMMAND must live long enough to be looked at (a second is plenty).\n"
    "\n"
    "Lines start with ok, info (not needed by gpuguard), warn or FAIL; a FAIL line ends with its fix.\n"
    "\n"
    "Exit status: 0 everything needed is in place; 1 a check failed; 2 bad usage.\n";

enum Level { kOk, kInfo, kWarn, kFail };

class Checks {
public:
    void section(const char *title) { printf("\n%s\n", title); }
    void line(Level level, const std::string &what, const std::string &text, const std::string &fix = "") {
        static const char *const tags[] = {"ok", "info", "warn", "FAIL"};
        std::string t = text;
        if (!fix.empty()) t += "; fix: " + fix;
        printf("  %-5s %-13s %s\n", tags[level], what.c_str(), t.c_str());
        fflush(stdout);
        if (level == kFail) failed_++;
        if (level == kWarn) warned_++;
    }
    int failed() const { return failed_; }
    int warned() const { return warned_; }

private:
    int failed_ = 0, warned_ = 0;
};

struct Gpu {
    int ordinal;
    std::string name, uuid;
    uint64_t total = 0;
    long long nvml_used = -1;
};

std::string version_text(int v) {  // 13000 -> "13.0"
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// Where a loaded library came from.
std::string where(void *handle) {
    struct link_map *map = nullptr;
    if (handle && dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
    return "?";
}

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
    return s;
}

std::string real_path(const std::string &p) {
    char buf[PATH_MAX];
    return realpath(p.c_str(), buf) ? std::string(buf) : p;
}

// ---- GPU and driver ------------------------------------------------------------------------------

template <typename F>
F sym(void *h, const char *name) {
    return reinterpret_cast<F>(dlsym(h, name));
}

void check_nvml(Checks &c, std::vector<Gpu> &gpus) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        c.line(kInfo, "nvml", "libnvidia-ml.so.1 not found (nvidia-smi and NVML-based tools will not work)");
        return;
    }
    auto init = sym<nvmlReturn_t (*)()>(h, "nvmlInit_v2");
    auto version = sym<nvmlReturn_t (*)(char *, unsigned)>(h, "nvmlSystemGetDriverVersion");
    auto count = sym<nvmlReturn_t (*)(unsigned *)>(h, "nvmlDeviceGetCount_v2");
    auto handle = sym<nvmlReturn_t (*)(unsigned, nvmlDevice_t *)>(h, "nvmlDeviceGetHandleByIndex_v2");
    auto uuid = sym<nvmlReturn_t (*)(nvmlDevice_t, char *, unsigned)>(h, "nvmlDeviceGetUUID");
    auto memory = sym<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t *)>(h, "nvmlDeviceGetMemoryInfo");
    auto shutdown = sym<nvmlReturn_t (*)()>(h, "nvmlShutdown");
    nvmlReturn_t r = init ? init() : NVML_ERROR_FUNCTION_NOT_FOUND;
    if (r != NVML_SUCCESS) {
        c.line(kWarn, "nvml", where(h) + ": nvmlInit failed (" + std::to_string((int)r) + ")");
        return;
    }
    char v[96] = "";
    if (version && version(v, sizeof v) == NVML_SUCCESS)
        c.line(kOk, "nvml", std::string("driver ") + v + " (" + where(h) + ")");
    else
        c.line(kWarn, "nvml", where(h) + ": no driver version");
    // The memory used on each GPU by every process, ours or not: what a quota cannot see.
    unsigned n = 0;
    if (count && handle && uuid && memory && count(&n) == NVML_SUCCESS) {
        for (unsigned i = 0; i < n; i++) {
            nvmlDevice_t d;
            char u[96] = "";
            nvmlMemory_t m{};
            if (handle(i, &d) != NVML_SUCCESS || uuid(d, u, sizeof u) != NVML_SUCCESS || memory(d, &m) != NVML_SUCCESS)
                continue;
            for (Gpu &g : gpus)
                if (g.uuid == u) g.nvml_used = (long long)m.used;
        }
    }
    if (shutdown) shutdown();
}

// Returns false when there is no usable driver or GPU.
bool check_driver(Checks &c, std::vector<Gpu> &gpus) {
    const char *real = getenv("GPUGUARD_REAL_LIBCUDA");
    std::string name = real && *real ? real : "libcuda.so.1";
    void *h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        c.line(kFail, "driver", "cannot load " + name + ": " + dlerror(),
               "give the container the GPU driver (docker run --gpus all, or a nvidia.com/gpu resource in Kubernetes)");
        return false;
    }
    auto cu_init = sym<decltype(&::cuInit)>(h, "cuInit");
    auto cu_version = sym<decltype(&::cuDriverGetVersion)>(h, "cuDriverGetVersion");
    auto cu_count = sym<decltype(&::cuDeviceGetCount)>(h, "cuDeviceGetCount");
    auto cu_get = sym<decltype(&::cuDeviceGet)>(h, "cuDeviceGet");
    auto cu_name = sym<decltype(&::cuDeviceGetName)>(h, "cuDeviceGetName");
    auto cu_total = sym<decltype(&::cuDeviceTotalMem_v2)>(h, "cuDeviceTotalMem_v2");
    auto cu_uuid = sym<decltype(&::cuDeviceGetUuid_v2)>(h, "cuDeviceGetUuid_v2");
    if (!cu_uuid) cu_uuid = sym<decltype(&::cuDeviceGetUuid_v2)>(h, "cuDeviceGetUuid");
    auto cu_error = sym<decltype(&::cuGetErrorName)>(h, "cuGetErrorName");
    if (!cu_init || !cu_count || !cu_get) {
        c.line(kFail, "driver", where(h) + " is not a CUDA driver (cuInit missing)", "install the NVIDIA driver's libcuda");
        return false;
    }
    int version = 0;
    if (cu_version) cu_version(&version);
    CUresult r = cu_init(0);
    if (r != CUDA_SUCCESS) {
        const char *e = nullptr;
        if (cu_error) cu_error(r, &e);
        std::string err = e ? e : "error " + std::to_string((int)r);
        c.line(kFail, "driver", where(h) + " (CUDA " + version_text(version) + "): cuInit failed: " + err,
               r == CUDA_ERROR_NO_DEVICE ? "no GPU is visible: check CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES"
                                         : "check that the driver in the container matches the host's (nvidia-smi)");
        return false;
    }
    c.line(kOk, "driver", "CUDA " + version_text(version) + " driver API, " + where(h));
    int n = 0;
    cu_count(&n);
    if (n == 0) {
        c.line(kFail, "gpus", "the driver sees no GPU", "check CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES");
        return false;
    }
    for (int i = 0; i < n; i++) {
        Gpu g;
        g.ordinal = i;
        CUdevice dev = i;
        cu_get(&dev, i);
        char nm[128] = "";
        if (cu_name) cu_name(nm, sizeof nm - 1, dev);
        g.name = nm;
        size_t total = 0;
        if (cu_total && cu_total(&total, dev) == CUDA_SUCCESS) g.total = total;
        CUuuid u{};
        if (cu_uuid && cu_uuid(&u, dev) == CUDA_SUCCESS) g.uuid = gg::ledger::uuid_string(reinterpret_cast<uint8_t *>(u.bytes));
        gpus.push_back(g);
    }
    check_nvml(c, gpus);
    for (const Gpu &g : gpus) {
        std::string t = g.name + ", " + gg::human_bytes(g.total) + ", " + (g.uuid.empty() ? "no UUID" : g.uuid);
        if (g.nvml_used >= 0) t += ", " + gg::human_bytes((uint64_t)g.nvml_used) + " in use on the GPU (NVML)";
        c.line(kOk, "gpu " + std::to_string(g.ordinal), t);
    }
    if (const char *v = getenv("CUDA_VISIBLE_DEVICES")) c.line(kInfo, "visible", std::string("CUDA_VISIBLE_DEVICES=") + v);
    return true;
}

// ---- CUDA libraries and PyTorch ------------------------------------------------------------------

void check_cudart(Checks &c) {
    for (const char *name : {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"}) {
        void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        auto get = sym<int (*)(int *)>(h, "cudaRuntimeGetVersion");
        int v = 0;
        std::string t = name;
        if (get && get(&v) == 0) t += " (CUDA " + version_text(v) + " runtime)";
        c.line(kOk, "cuda runtime", t + ", " + where(h));
        return;
    }
    c.line(kInfo, "cuda runtime",
           "libcudart not on the loader's path (programs may bring their own: PyTorch's is in site-packages/nvidia)");
}

std::string cudnn_version_text(size_t v) {
    size_t major = v >= 90000 ? v / 10000 : v / 1000, rest = v >= 90000 ? v % 10000 : v % 1000;
    return std::to_string(major) + "." + std::to_string(rest / 100) + "." + std::to_string(rest % 100);
}

void check_cudnn(Checks &c) {
    for (const char *name : {"libcudnn.so.9", "libcudnn.so.8"}) {
        void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        auto get = sym<size_t (*)()>(h, "cudnnGetVersion");
        std::string t = get ? "cuDNN " + cudnn_version_text(get()) : std::string(name) + " (no cudnnGetVersion)";
        c.line(kOk, "cudnn", t + ", " + where(h));
        return;
    }
    c.line(kInfo, "cudnn", "libcudnn.so.9 not on the loader's path (PyTorch loads its own; see below)");
}

const char kTorchProbe[] =
    "import json, sys\n"
    "r = {'python': sys.version.split()[0], 'executable': sys.executable}\n"
    "try:\n"
    "    import torch\n"
    "    r['torch'] = torch.__version__\n"
    "    r['cuda_build'] = torch.version.cuda\n"
    "    try:\n"
    "        r['cuda_available'] = bool(torch.cuda.is_available())\n"
    "        r['devices'] = torch.cuda.device_count() if r['cuda_available'] else 0\n"
    "    except Exception as e:\n"
    "        r['cuda_error'] = str(e)[:200]\n"
    "    try:\n"
    "        r['cudnn'] = torch.backends.cudnn.version()\n"
    "    except Exception:\n"
    "        pass\n"
    "except Exception as e:\n"
    "    r['torch_error'] = (type(e).__name__ + ': ' + str(e))[:200]\n"
    "print(json.dumps(r))\n";

void check_torch(Checks &c, bool driver_ok) {
    std::string path, why;
    if (gg::tool::locate_command("python3", &path, &why) != 0) {
        c.line(kInfo, "pytorch", "no python3 on PATH");
        return;
    }
    gg::tool::Finished f;
    if (!gg::tool::run_captured({"python3", "-c", kTorchProbe}, nullptr, 60, false, &f, &why)) {
        c.line(kWarn, "pytorch", why);
        return;
    }
    if (f.timed_out) {
        c.line(kWarn, "pytorch", "python3 did not answer within 60 s (import torch hung?)");
        return;
    }
    nlohmann::json r;
    std::string out = trim(f.out);
    size_t last = out.rfind('\n');
    try {
        r = nlohmann::json::parse(last == std::string::npos ? out : out.substr(last + 1));
    } catch (const std::exception &) {
        c.line(kWarn, "pytorch", "python3 " + gg::tool::describe_status(f.status) + " without answering");
        return;
    }
    std::string py = "python " + r.value("python", std::string("?"));
    if (!r.contains("torch")) {
        c.line(kInfo, "pytorch", "not installed for " + py + " (" + r.value("executable", path) + ")");
        return;
    }
    std::string t = "torch " + r.value("torch", std::string("?")) + " (" + py + ")";
    if (r.contains("cuda_build") && r["cuda_build"].is_string()) t += ", built for CUDA " + r["cuda_build"].get<std::string>();
    else t += ", a CPU-only build";
    if (r.contains("cudnn") && r["cudnn"].is_number()) t += ", cuDNN " + cudnn_version_text(r["cudnn"].get<size_t>());
    bool available = r.value("cuda_available", false);
    if (available) {
        c.line(kOk, "pytorch", t + ", torch.cuda available with " + std::to_string(r.value("devices", 0)) + " device(s)");
    } else if (driver_ok) {
        std::string why_not = r.contains("cuda_error") ? ": " + r["cuda_error"].get<std::string>() : "";
        c.line(kWarn, "pytorch", t + ", but torch.cuda is not available" + why_not);
    } else {
        c.line(kInfo, "pytorch", t + ", torch.cuda not available (no driver)");
    }
}

// ---- the library ---------------------------------------------------------------------------------

// Whether /proc/<pid>/maps holds `lib` (by its real path). *settled is true once the loader has
// finished with the process's libraries (libc is mapped), before which an absence means nothing.
bool maps_hold(int pid, const std::string &lib, bool *settled) {
    std::ifstream maps(pid ? "/proc/" + std::to_string(pid) + "/maps" : std::string("/proc/self/maps"));
    std::string line;
    bool found = false;
    *settled = false;
    while (std::getline(maps, line)) {
        size_t slash = line.find('/');
        if (slash == std::string::npos) continue;
        std::string path = line.substr(slash);
        if (path == lib) found = true;
        if (path.find("/libc.so") != std::string::npos || path.find("/libc-") != std::string::npos ||
            path.find("ld-musl") != std::string::npos)
            *settled = true;
    }
    return found;
}

// `gpuguard doctor --probe-library LIB`, started by doctor with LD_PRELOAD=LIB: says whether the
// loader preloaded LIB, why not (dlopen's reason), and which libunwind the shim would find.
int probe_library(const std::string &lib) {
    bool settled;
    printf("preloaded %d\n", maps_hold(0, real_path(lib), &settled) ? 1 : 0);
    void *h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    printf("dlopen %s\n", h ? "ok" : dlerror());
    std::string beside = lib.substr(0, lib.rfind('/') + 1) + "libunwind.so.8";
    if (access(beside.c_str(), F_OK) == 0) {
        void *u = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
        printf("unwind beside %s\n", u ? "ok" : dlerror());
    } else {
        void *u = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
        printf("unwind system %s\n", u ? where(u).c_str() : "none");
    }
    fflush(stdout);
    _exit(0);  // no destructors: the shim is in this process
}

std::string field(const std::string &out, const std::string &key) {
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line))
        if (line.compare(0, key.size() + 1, key + " ") == 0) return line.substr(key.size() + 1);
    return "";
}

// Returns the library's path when it loads, else "".
std::string check_library(Checks &c) {
    std::string why, lib = gg::tool::find_library(&why);
    if (lib.empty()) {
        c.line(kFail, "library", why, "install gpuguard (make install) or set GPUGUARD_LIBRARY");
        return "";
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        c.line(kWarn, "library", lib + ": cannot check that it loads (/proc/self/exe unreadable)");
        return lib;
    }
    self[n] = '\0';
    std::vector<std::string> env = gg::tool::environment_with("LD_PRELOAD", gg::tool::preload_with(lib, getenv("LD_PRELOAD")));
    gg::tool::Finished f;
    if (!gg::tool::run_captured({self, "doctor", "--probe-library", lib}, &env, 30, true, &f, &why)) {
        c.line(kFail, "library", lib + ": " + why, "check the system's process limits");
        return "";
    }
    if (!WIFEXITED(f.status) || WEXITSTATUS(f.status) != 0) {
        c.line(kFail, "library", lib + ": a program preloading it " + gg::tool::describe_status(f.status),
               "rebuild gpuguard for this system and report the crash");
        return "";
    }
    std::string dl = field(f.out, "dlopen");
    if (field(f.out, "preloaded") != "1" || dl != "ok") {
        c.line(kFail, "library", lib + " does not load: " + (dl.empty() || dl == "ok" ? trim(f.out) : dl),
               "install what it names, or rebuild gpuguard against this system's C library");
        return "";
    }
    c.line(kOk, "library", lib + " loads as a preload");
    std::string beside = field(f.out, "unwind beside"), system = field(f.out, "unwind system");
    if (beside == "ok")
        c.line(kOk, "libunwind", "libunwind.so.8 beside the library loads");
    else if (!beside.empty())
        c.line(kWarn, "libunwind", "libunwind.so.8 beside the library does not load (" + beside +
                                       "); the stacks the caching walker declines use libgcc's unwinder");
    else if (!system.empty() && system != "none")
        c.line(kOk, "libunwind", "not beside the library; the system's loads (" + system + ")");
    else
        c.line(kWarn, "libunwind", "libunwind.so.8 is neither beside the library nor installed: the stacks the caching "
                                   "walker declines use libgcc's unwinder (slower); install it beside libgpuguard.so");
    const char *pre = getenv("LD_PRELOAD");
    if (pre && *pre) {
        std::string first = std::string(pre).substr(0, std::string(pre).find_first_of(" :"));
        bool ours = first.size() >= 14 && first.compare(first.size() - 14, 14, "libgpuguard.so") == 0;
        c.line(kInfo, "LD_PRELOAD", std::string(pre) + (ours ? " (gpuguard first)" : " (gpuguard run puts the library first)"));
    } else {
        c.line(kInfo, "LD_PRELOAD", "not set in this shell: programs here run unguarded unless started by gpuguard run");
    }
    return lib;
}

// ---- quota, ledger, reports, variables -----------------------------------------------------------

void check_limit_and_ledger(Checks &c, const std::vector<Gpu> &gpus) {
    gg::tool::LimitSetting s = gg::tool::limit_from_env();
    gg::LimitSpec spec;
    std::string why;
    bool valid = !s.set_but_empty && (s.text.empty() || gg::parse_limit_spec(s.text, &spec, &why));
    if (!valid) {
        c.line(kFail, "limit", s.source + "=" + s.text + (s.set_but_empty ? " is empty" : " is not valid: " + why) +
                                   ": every device allocation is refused",
               "set it to a size like 8GiB or a share like 50%, or unset it for no limit");
    } else if (s.text.empty()) {
        c.line(kInfo, "limit", "none set: allocations are tracked and reported but not limited "
                               "(GPUGUARD_MEM_LIMIT or gpuguard run --limit sets one)");
    } else {
        std::string per;
        uint64_t smallest = UINT64_MAX;
        for (const Gpu &g : gpus) {
            gg::Limit l = spec.for_device(g.ordinal, g.uuid);
            uint64_t b = l.resolve(g.total);
            smallest = std::min(smallest, b);
            per += ", gpu " + std::to_string(g.ordinal) + ": " + (b == UINT64_MAX ? "none" : gg::human_bytes(b));
        }
        // A number without a unit is bytes: "8" is almost always a forgotten "GiB".
        if (smallest < (1u << 20))
            c.line(kWarn, "limit", s.text + " from " + s.source + per + ": under 1 MiB, nothing will fit (a unit missing? 8GiB)");
        else
            c.line(kOk, "limit", s.text + " from " + s.source + per);
    }

    std::string path = gg::tool::ledger_path_from_env();
    if (path.empty()) {
        c.line(kInfo, "ledger", "none (GPUGUARD_LEDGER=none): each process has its own quota");
        return;
    }
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) {
        std::string dir = path.substr(0, path.rfind('/') == std::string::npos ? 0 : path.rfind('/'));
        if (dir.empty()) dir = path.find('/') == 0 ? "/" : ".";
        if (gg::tool::dir_writable(dir, &why))
            c.line(kOk, "ledger", path + " not created yet (gpuguard run or the first guarded process creates it)");
        else
            c.line(kFail, "ledger", path + " cannot be created: " + why,
                   "set GPUGUARD_LEDGER to a path in a writable folder shared by the container's processes");
        return;
    }
    gg::ledger::OpenOptions o;
    o.path = path;
    o.read_only = true;
    std::string error, notice;
    std::unique_ptr<gg::ledger::Ledger> l(gg::ledger::Ledger::open(o, &error, &notice));
    if (!l) {
        c.line(kFail, "ledger", error, "remove " + path + " once no process uses it (rm " + path + ")");
        return;
    }
    if (access(path.c_str(), R_OK | W_OK) != 0)
        c.line(kFail, "ledger", path + " is not writable by this user (uid " + std::to_string(getuid()) + ")",
               "run as its owner, share it with GPUGUARD_LEDGER_GROUP, or use another GPUGUARD_LEDGER");
    int alive = 0, dead = 0, reclaimed = 0;
    for (const auto &p : l->processes()) (p.alive ? alive : p.reclaimed ? reclaimed : dead)++;
    std::string theirs = l->limit_spec();
    c.line(kOk, "ledger",
           path + ": limit " + (theirs.empty() ? "none" : theirs) + ", " + std::to_string(l->devices().size()) +
               " device(s), processes " + std::to_string(alive) + " alive, " + std::to_string(dead) + " dead not yet reclaimed, " +
               std::to_string(reclaimed) + " reclaimed (gpuguard top shows them)");
    for (const auto &d : l->devices())
        c.line(kInfo, "  #" + std::to_string(d.index),
               d.name + " " + d.uuid + ": " + gg::human_bytes(d.used) + " used of " +
                   (d.limit == gg::ledger::kNoLimit ? std::string("no limit") : gg::human_bytes(d.limit)) + ", peak " +
                   gg::human_bytes(d.peak));
    if (valid && theirs != s.text && alive > 0)
        c.line(kWarn, "ledger", "its limit '" + (theirs.empty() ? std::string("none") : theirs) + "' stands while " +
                                    std::to_string(alive) + " process(es) use it; this environment's '" +
                                    (s.text.empty() ? std::string("none") : s.text) + "' applies once they have exited");
}

void check_reports(Checks &c) {
    const char *v = getenv("GPUGUARD_REPORT_DIR");
    std::string dir = v && *v ? v : ".", why;
    std::string shown = v && *v ? dir : "the working directory (" + gg::tool::absolute_path(".") + " here)";
    if (gg::tool::dir_writable(dir, &why))
        c.line(kOk, "reports", shown + " is writable");
    else
        c.line(kFail, "reports", "reports cannot be written: " + why,
               "create it or mount a writable volume there (gpuguard run --report-dir creates it)");
}

void check_variables(Checks &c) {
    std::vector<gg::tool::Variable> vars = gg::tool::variables_in_effect();
    if (vars.empty()) {
        c.line(kInfo, "variables", "no GPUGUARD_* variable set: the defaults apply");
        return;
    }
    for (const auto &v : vars) {
        std::string t = v.name + "=" + v.value;
        if (v.problem.empty())
            c.line(kOk, "variable", t);
        else if (v.warning)
            c.line(kWarn, "variable", t + ": " + v.problem);
        else
            c.line(kFail, "variable", t + ": " + v.problem, "correct or unset " + v.name);
    }
}

// ---- a given command -----------------------------------------------------------------------------

// What kind of program `path` is: "" for a dynamically linked one of our class; else why LD_PRELOAD
// cannot reach it ("statically linked", "32-bit"), or "script:INTERPRETER" for a #! script.
std::string program_kind(const std::string &path) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "";
    unsigned char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n >= 2 && buf[0] == '#' && buf[1] == '!') {
        std::string line((const char *)buf + 2, (size_t)n - 2);
        line = line.substr(0, line.find('\n'));
        size_t b = line.find_first_not_of(" \t");
        if (b == std::string::npos) return "";
        line = line.substr(b);
        return "script:" + line.substr(0, line.find_first_of(" \t"));
    }
    if (n < (ssize_t)sizeof(Elf64_Ehdr) || memcmp(buf, ELFMAG, SELFMAG) != 0) return "";
    if (buf[EI_CLASS] != ELFCLASS64) return "a 32-bit program, which a 64-bit library cannot be loaded into";
    const Elf64_Ehdr *eh = reinterpret_cast<const Elf64_Ehdr *>(buf);
    if (eh->e_phoff + (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > (uint64_t)n) return "";  // unusual layout: assume fine
    for (int i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, buf + eh->e_phoff + (size_t)i * sizeof(Elf64_Phdr), sizeof ph);
        if (ph.p_type == PT_INTERP) return "";
    }
    return "statically linked, so LD_PRELOAD cannot load anything into it";
}

void check_command(Checks &c, const std::string &lib, char **cmd) {
    std::string path, why;
    int rc = gg::tool::locate_command(cmd[0], &path, &why);
    if (rc) {
        c.line(kFail, "command", why, "check the command's name and PATH");
        return;
    }
    std::string kind = program_kind(path);
    if (kind.compare(0, 7, "script:") == 0) {
        std::string interp;
        if (gg::tool::locate_command(kind.substr(7), &interp, &why) == 0) kind = program_kind(interp);
        else kind.clear();
    }
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID)))
        c.line(kWarn, "command", path + " is set-user-ID: the loader ignores LD_PRELOAD paths for it");

    printf("  running %s with libgpuguard.so preloaded; its output follows\n", cmd[0]);
    fflush(stdout);
    fflush(stderr);
    std::vector<std::string> env = gg::tool::environment_with("LD_PRELOAD", gg::tool::preload_with(lib, getenv("LD_PRELOAD")));
    std::vector<char *> envp;
    for (auto &e : env) envp.push_back(const_cast<char *>(e.c_str()));
    envp.push_back(nullptr);
    pid_t pid;
    int err = posix_spawnp(&pid, cmd[0], nullptr, nullptr, cmd, envp.data());
    if (err) {
        c.line(kFail, "command", std::string("cannot start ") + cmd[0] + ": " + strerror(err), "check the command");
        return;
    }
    // Watch the process's memory map until it exits. A wrapper may exec another program (pyenv's
    // python3 is a shell script), so the last settled look is the one that counts.
    timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool seen_settled = false, loaded = false;
    std::string exe;
    int status = 0, looks = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        bool settled;
        bool has = maps_hold(pid, real_path(lib), &settled);
        if (settled) {
            seen_settled = true;
            loaded = has;
            char buf[PATH_MAX];
            ssize_t k = readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), buf, sizeof buf - 1);
            if (k > 0) exe.assign(buf, (size_t)k);
        }
        // Closely at first, where short commands live; a long run is looked at five times a second.
        usleep(++looks < 400 ? 5000 : 200000);
    }
    timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    std::string what = std::string(cmd[0]) + " (pid " + std::to_string(pid) + (exe.empty() ? "" : ", " + exe) + ")";
    if (seen_settled && loaded) {
        c.line(kOk, "preload", "libgpuguard.so is loaded in " + what);
    } else if (!kind.empty()) {
        c.line(kFail, "preload", std::string(cmd[0]) + " is " + kind,
               "run a dynamically linked 64-bit build of the program (it must reach libcuda through the loader)");
    } else if (seen_settled) {
        c.line(kFail, "preload", "libgpuguard.so is not loaded in " + what,
               "start the program so that LD_PRELOAD reaches it (gpuguard run -- ...); a wrapper that resets the "
               "environment drops it");
    } else {
        c.line(kWarn, "preload", std::string(cmd[0]) + " exited after " + std::to_string(ms) +
                                     " ms, before its memory map could be read; give a command that runs a moment "
                                     "(e.g. add a sleep)");
    }
    c.line(kInfo, "command", std::string(cmd[0]) + " " + gg::tool::describe_status(status));
}

}  // namespace

int cmd_doctor(int argc, char **argv) {
    char **cmd = nullptr;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(kUsage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--probe-library") && i + 1 < argc) return probe_library(argv[i + 1]);
        if (!strcmp(argv[i], "--")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "gpuguard: doctor: -- needs a command after it (try 'gpuguard doctor --help')\n");
                return 2;
            }
            cmd = argv + i + 1;
            break;
        }
        fprintf(stderr, "gpuguard: doctor: unknown argument '%s' (try 'gpuguard doctor --help')\n", argv[i]);
        return 2;
    }
    Checks c;
    printf("gpuguard doctor %s\n", GPUGUARD_VERSION);
    c.section("GPU and driver");
    std::vector<Gpu> gpus;
    bool driver_ok = check_driver(c, gpus);
    c.section("CUDA libraries");
    check_cudart(c);
    check_cudnn(c);
    check_torch(c, driver_ok);
    c.section("gpuguard");
    std::string lib = check_library(c);
    check_limit_and_ledger(c, gpus);
    check_reports(c);
    check_variables(c);
    if (cmd) {
        c.section("command");
        if (lib.empty())
            c.line(kFail, "preload", "not tried: the library does not load (see above)", "see the library line above");
        else
            check_command(c, lib, cmd);
    }
    printf("\n");
    if (c.failed())
        printf("%d check(s) failed, %d warning(s)\n", c.failed(), c.warned());
    else
        printf("everything gpuguard needs is in place%s\n",
               c.warned() ? (" (" + std::to_string(c.warned()) + " warning(s))").c_str() : "");
    return c.failed() ? 1 : 0;
}
