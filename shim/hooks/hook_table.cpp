#include "shim/hooks/hook_table.h"

#include <cstddef>

#include "shim/resolve/real.h"

namespace gg {
namespace {

// A driver row's real function: its entry in the loaded driver's table.
template <size_t kOffset>
void *real_at(const DriverRow &) {
    return *reinterpret_cast<void *const *>(reinterpret_cast<const char *>(&real_driver()) + kOffset);
}

const DriverRow kDriverRows[] = {
#define DRIVER_HOOK(symbol, family, since, pts, kind) \
    {#symbol, #family, since, pts != 0, reinterpret_cast<void *>(&::symbol), real_at<offsetof(RealDriver, symbol)>},
#include "shim/api/hooks.def"
};

// Runtime, NVML and cuDNN hooks: the real function is the next definition after ours (for cuDNN, the
// entry point of the loaded libcudnn.so, which our dlsym replaces; see shim/cudnn/resolve.h).
const OtherRow kOtherRows[] = {
#define RUNTIME_HOOK(symbol) {#symbol, reinterpret_cast<void *>(&::symbol), real_runtime_fn},
#define NVML_HOOK(symbol) {#symbol, reinterpret_cast<void *>(&::symbol), real_nvml_fn},
#define CUDNN_HOOK(symbol) {#symbol, reinterpret_cast<void *>(&::symbol), real_cudnn_fn},
// TORCH_HOOK rows are not here: libc10_cuda.so reaches c10's functions through its PLT, which the
// preloaded shim wins; nobody looks them up with dlsym.
#include "shim/api/hooks.def"
};

constexpr HookTable kTable = {kDriverRows, sizeof kDriverRows / sizeof kDriverRows[0], kOtherRows,
                              sizeof kOtherRows / sizeof kOtherRows[0]};

}  // namespace

const HookTable &hook_table() { return kTable; }

}  // namespace gg
