// Finding libgpuguard.so and putting it first in LD_PRELOAD: what `run` and `doctor` do before they
// start a command under the shim.
#pragma once
#include <string>

namespace gg::tool {

// The preload library: GPUGUARD_LIBRARY, else libgpuguard.so beside this executable (the build
// folder), else ../lib/libgpuguard.so (an install: $PREFIX/bin and $PREFIX/lib). Returns an absolute
// path, or "" with *why naming the places looked at.
std::string find_library(std::string *why);

// LD_PRELOAD with `lib` first and what was there kept in order; any other copy of libgpuguard.so
// is dropped, since two shims in one process would both count every allocation.
std::string preload_with(const std::string &lib, const char *existing);

}  // namespace gg::tool
