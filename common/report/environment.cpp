#include "common/report/environment.h"

#include <cctype>
#include <cstring>

#include "common/settings/settings.h"

namespace gg::report_env {
namespace {

const char *const kExact[] = {
    // Devices and the driver.
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING", "CUDA_CACHE_DISABLE",
    "CUDA_CACHE_MAXSIZE", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_HOME",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA",
    // Allocators.
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_NVML_BASED_CUDA_CHECK",
    "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR",
    // Collectives.
    "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE",
    "NCCL_CUMEM_ENABLE", "NCCL_BUFFSIZE", "NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
    "NCCL_SOCKET_IFNAME",
    // The process and its job.
    "LD_PRELOAD", "OMP_NUM_THREADS", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    // HAMi-core's names for gpuguard's settings (CUDA_DEVICE_MEMORY_LIMIT_<i> below).
    "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_SHARED_CACHE"};

bool contains_word(const std::string &upper, const char *word) { return upper.find(word) != std::string::npos; }

}  // namespace

bool allowed(const std::string &name) {
    for (const char *e : kExact)
        if (name == e) return true;
    if (settings::find(name)) return true;  // a row of settings.def: gpuguard's own
    const char *per_device = "CUDA_DEVICE_MEMORY_LIMIT_";
    if (name.compare(0, strlen(per_device), per_device) == 0) {
        std::string i = name.substr(strlen(per_device));
        if (!i.empty() && i.size() <= 2 && isdigit((unsigned char)i[0]) &&
            (i.size() == 1 || isdigit((unsigned char)i[1])))
            return std::stoi(i) < 64;
    }
    return false;
}

bool shown(const std::string &name) {
    std::string upper;
    for (char c : name) upper += (char)toupper((unsigned char)c);
    for (const char *w : {"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION"})
        if (contains_word(upper, w)) return false;
    return true;
}

bool carried(const std::string &name, const std::string &value, std::string *out) {
    if (!allowed(name)) return false;
    *out = shown(name) ? value : kRedacted;
    return true;
}

}  // namespace gg::report_env
