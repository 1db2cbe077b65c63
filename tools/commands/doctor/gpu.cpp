// The driver, the GPUs it sees, and NVML's view of their memory.
#include <cuda.h>

#include "common/ledger/ledger.h"
#include "common/nvidia/driver_check.h"
#include "common/nvidia/nvml_min.h"
#include "common/settings/settings.h"
#include "common/units/human.h"
#include "common/units/size_spec.h"
#include "tools/commands/doctor/checks.h"

namespace gg::doctor {
namespace {

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
    else c.line(kWarn, "nvml", where(h) + ": no driver version");
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

}  // namespace

// Returns false when there is no usable driver or GPU.
bool check_driver(Checks &c, std::vector<Gpu> &gpus) {
    std::optional<std::string> real_text = settings::value(settings::process_env(), settings::Id::kRealLibcuda);
    const char *real = real_text ? real_text->c_str() : nullptr;
    std::string name = real ? real : "libcuda.so.1";
    void *h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        c.line(kFail, "driver", "cannot load " + name + ": " + dlerror(),
               "give the container the GPU driver (docker run --gpus all, or a nvidia.com/gpu resource in Kubernetes)");
        return false;
    }
    // The same check as the shim's (common/nvidia/driver_check.h): the shim itself, or not a driver.
    std::string problem = nvidia::driver_problem([h](const char *s) { return dlsym(h, s); });
    if (!problem.empty()) {
        c.line(kFail, "driver", where(h) + " " + problem,
               real ? "unset GPUGUARD_REAL_LIBCUDA, or set it to the NVIDIA driver's libcuda.so.1"
                    : "install the NVIDIA driver's libcuda.so.1 where the loader finds it");
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
        c.line(kFail, "driver", where(h) + " is not a CUDA driver (cuInit missing)",
               "install the NVIDIA driver's libcuda");
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
        if (cu_uuid && cu_uuid(&u, dev) == CUDA_SUCCESS)
            g.uuid = gg::ledger::uuid_string(reinterpret_cast<uint8_t *>(u.bytes));
        gpus.push_back(g);
    }
    check_nvml(c, gpus);
    for (const Gpu &g : gpus) {
        std::string t = g.name + ", " + gg::human_bytes(g.total) + ", " + (g.uuid.empty() ? "no UUID" : g.uuid);
        if (g.nvml_used >= 0) t += ", " + gg::human_bytes((uint64_t)g.nvml_used) + " in use on the GPU (NVML)";
        c.line(kOk, "gpu " + std::to_string(g.ordinal), t);
    }
    if (const char *v = settings::env("CUDA_VISIBLE_DEVICES"))
        c.line(kInfo, "visible", std::string("CUDA_VISIBLE_DEVICES=") + v);
    return true;
}

}  // namespace gg::doctor
