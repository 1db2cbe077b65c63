/* Prints what NVML says of device 0's memory: "nvml total=... free=... used=..." (both the v1 and
 * v2 queries), reached through dlopen + dlsym like pynvml does. */
#include <dlfcn.h>
#include <stdio.h>

#include "common/nvidia/nvml_min.h"

int main(void) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "nvml_client: %s\n", dlerror());
        return 3;
    }
    nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2");
    nvmlReturn_t (*get)(unsigned, nvmlDevice_t *) =
        (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nvmlReturn_t (*info)(nvmlDevice_t, nvmlMemory_t *) =
        (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    nvmlReturn_t (*info2)(nvmlDevice_t, nvmlMemory_v2_t *) =
        (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_v2_t *))dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
    nvmlDevice_t dev;
    if (!init || !get || !info || !info2 || init() != NVML_SUCCESS || get(0, &dev) != NVML_SUCCESS) {
        fprintf(stderr, "nvml_client: init failed\n");
        return 3;
    }
    nvmlMemory_t m;
    nvmlMemory_v2_t m2;
    m2.version = nvmlMemory_v2;
    if (info(dev, &m) != NVML_SUCCESS || info2(dev, &m2) != NVML_SUCCESS) {
        fprintf(stderr, "nvml_client: query failed\n");
        return 3;
    }
    printf("nvml total=%llu free=%llu used=%llu\n", m.total, m.free, m.used);
    printf("nvml_v2 total=%llu free=%llu used=%llu reserved=%llu\n", m2.total, m2.free, m2.used, m2.reserved);
    return 0;
}
