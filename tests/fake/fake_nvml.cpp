// Test double of NVML (libnvidia-ml.so.1). It describes the same physical machine as the fake driver
// (fake_device.h): device i of NVML is PHYSICAL device i, because NVML ignores CUDA_VISIBLE_DEVICES,
// and its UUID is the driver's cuDeviceGetUuid bytes in NVML's "GPU-8-4-4-4-12" form. That mismatch
// of numbering is real, and is why the shim must match devices by UUID, not by index.
// "used" is the fake driver's ground truth (FAKE_CUDA_TRUTH) when set, else 0: NVML counts every
// process on the device, as the real one does. The running processes are the truth's per-process
// table (live processes holding bytes on the device), as nvidia-smi --query-compute-apps lists them;
// FAKE_NVML_PIDS makes them look as from inside a container: `hidden` lists none, `host` shows each
// pid as another PID namespace's (pid + 1000000, which no test process has).
// FAKE_NVML_SPIKE=N:BYTES[,N:BYTES...] adds BYTES to every process's figure in this process's N-th
// call of the list (counted from 1): memory a driver takes and gives back within a call, caught by
// one reading, or readings that move under traffic.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#pragma GCC visibility push(default)
#include "common/nvidia/nvml_min.h"
extern "C" {
// The unversioned entry points of old NVML, still dlsym'd by libraries today (docs/platform-facts.md).
nvmlReturn_t nvmlInit(void);
nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device);
}
#pragma GCC visibility pop

#include "fake_truth.h"

struct nvmlDevice_st {
    int phys;
};

namespace {

std::mutex g_mu;
int g_refs = 0;  // nvmlInit/nvmlShutdown nest, as in the real library
int g_count = 0;
nvmlDevice_st g_dev[fake::kMaxDevices];
fake::Truth *g_truth = nullptr;

bool initialized() {
    std::lock_guard<std::mutex> lock(g_mu);
    return g_refs > 0;
}

nvmlReturn_t need_device(nvmlDevice_t d) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!d || d < g_dev || d >= g_dev + g_count) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t copy_out(const char *s, char *out, unsigned int length) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (std::strlen(s) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    std::memcpy(out, s, std::strlen(s) + 1);
    return NVML_SUCCESS;
}

void memory(nvmlDevice_t d, unsigned long long *total, unsigned long long *free, unsigned long long *used) {
    *total = fake::physical_capacity(d->phys);
    *used = g_truth ? g_truth->dev[d->phys].current.load() : 0;
    if (*used > *total) *used = *total;
    *free = *total - *used;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2(void) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_refs++ == 0) {
        g_count = fake::physical_count();
        for (int i = 0; i < g_count; i++) g_dev[i].phys = i;
        const char *tf = std::getenv("FAKE_CUDA_TRUTH");
        // Read-mostly, but created if absent so that a later driver process shares the same file.
        if (tf && *tf && !g_truth) g_truth = fake::truth_map(tf, true);
    }
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

nvmlReturn_t nvmlShutdown(void) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_refs == 0) return NVML_ERROR_UNINITIALIZED;
    g_refs--;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = static_cast<unsigned int>(g_count);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= static_cast<unsigned int>(g_count)) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_dev[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    if (nvmlReturn_t r = need_device(device)) return r;
    return copy_out(fake::uuid_string(device->phys).c_str(), uuid, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    if (nvmlReturn_t r = need_device(device)) return r;
    char s[32];
    std::snprintf(s, sizeof s, "Fake GPU %d", device->phys);
    return copy_out(s, name, length);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m) {
    if (nvmlReturn_t r = need_device(device)) return r;
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    memory(device, &m->total, &m->free, &m->used);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m) {
    if (nvmlReturn_t r = need_device(device)) return r;
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    m->reserved = 0;
    memory(device, &m->total, &m->free, &m->used);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < g_count; i++)
        if (fake::uuid_string(i) == uuid) {
            *device = &g_dev[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    if (nvmlReturn_t r = need_device(device)) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    const char *mode = std::getenv("FAKE_NVML_PIDS");
    bool hidden = mode && !std::strcmp(mode, "hidden"), host = mode && !std::strcmp(mode, "host");
    static std::atomic<unsigned long> calls{0};
    unsigned long call = ++calls;
    unsigned long long spike = 0;
    for (const char *s = std::getenv("FAKE_NVML_SPIKE"); s && *s;) {
        unsigned long at = 0;
        unsigned long long bytes = 0;
        if (std::sscanf(s, "%lu:%llu", &at, &bytes) != 2) break;
        if (at == call) spike = bytes;
        s = std::strchr(s, ',');
        if (s) s++;
    }
    unsigned n = 0;
    for (int i = 0; g_truth && !hidden && i < fake::kMaxProcs; i++) {
        const fake::TruthProc &p = g_truth->proc[i];
        int pid = p.pid.load();
        uint64_t bytes = p.bytes[device->phys].load(), left = p.left[device->phys].load();
        bytes = bytes > left ? bytes - left : 0;  // an exec'd image's leftovers are not this process's
        if (!bytes || fake::pid_gone(pid)) continue;
        if (infos && n < *count)
            infos[n] = nvmlProcessInfo_t{(unsigned)(host ? pid + 1000000 : pid), bytes + spike, ~0u, ~0u};
        n++;
    }
    nvmlReturn_t r = infos && n <= *count ? NVML_SUCCESS : n == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    *count = n;
    return r;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;
    return copy_out("580.159.04", version, length);
}

}  // extern "C"
