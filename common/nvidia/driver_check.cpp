#include "common/nvidia/driver_check.h"

namespace gg::nvidia {

std::string driver_problem(const std::function<void *(const char *)> &symbol) {
    // The shim exports its API beside its hooks; no driver has it.
    if (symbol("gpuguard_report")) return "is the gpuguard shim itself, not the CUDA driver";
    // What the shim cannot work without, all in every driver of CUDA 11.3 and newer (the oldest gpuguard
    // supports: cuGetProcAddress).
    static const char *const kNeeded[] = {"cuInit",       "cuDriverGetVersion", "cuDeviceGetCount",
                                          "cuDeviceGet",  "cuCtxGetDevice",     "cuMemAlloc_v2",
                                          "cuMemFree_v2", "cuMemGetInfo_v2",    "cuGetProcAddress"};
    std::string missing;
    for (const char *name : kNeeded)
        if (!symbol(name)) missing += (missing.empty() ? "" : ", ") + std::string(name);
    return missing.empty() ? "" : "is not a CUDA driver (it lacks " + missing + ")";
}

}  // namespace gg::nvidia
