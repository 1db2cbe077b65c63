// Whether a library loaded as the CUDA driver is one: the shim's loader (shim/resolve/real.cpp) and
// `gpuguard doctor` ask the same question of GPUGUARD_REAL_LIBCUDA and of libcuda.so.1.
#pragma once
#include <functional>
#include <string>

namespace gg::nvidia {

// "" when the library looks like the CUDA driver; else what it is instead, as words that follow its
// name: "is the gpuguard shim itself, not the CUDA driver" (its hooks would call themselves until the
// stack ran out), or "is not a CUDA driver (it lacks cuInit, cuMemAlloc_v2, ...)" (every call would
// fail with CUDA_ERROR_NOT_FOUND). `symbol` looks a name up in the library only.
std::string driver_problem(const std::function<void *(const char *)> &symbol);

}  // namespace gg::nvidia
