// Calling a real driver function from a hook.
#pragma once
#include "shim/api/cuda_api.h"

namespace gg {

// Calls a real driver function, or answers CUDA_ERROR_NOT_FOUND when the driver lacks it (a
// program built against a newer CUDA than the installed driver) instead of jumping to null.
template <typename Fn, typename... Args>
CUresult real_call(Fn fn, Args... args) {
    return fn ? fn(args...) : CUDA_ERROR_NOT_FOUND;
}

}  // namespace gg
