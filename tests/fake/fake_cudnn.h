// Shared by the test doubles of cuDNN 9, which keep its shape, the shape gpuguard's resolution
// depends on (shim/cudnn/resolve.h):
//   fake_cudnn.cpp       -> libcudnn.so.9        the dispatcher: each export dlopens its sub-library
//                                                 RTLD_LOCAL on first use, dlsyms the same name there
//                                                 (through whatever dlsym the process has) and calls it
//   fake_cudnn_graph.cpp -> libcudnn_graph.so.9  handles and the backend API
//   fake_cudnn_cnn.cpp   -> libcudnn_cnn.so.9    the legacy convolution API
// The sub-libraries get device memory from the driver, dlopen("libcuda.so.1") + dlsym, as a library
// with its own allocations does; under the shim those are the shim's hooks.
//
// Environment (sizes in bytes, or with a K, M or G suffix, binary):
//   FAKE_CUDNN_PLAN_WORKSPACES=S0,S1,..  workspace of a plan built on engine i (default "0"); finalize
//                                        of a plan on an engine past the list: NOT_SUPPORTED
//   FAKE_CUDNN_ALGO_WORKSPACES=S0,S1,..  workspace of legacy algorithm i, in all three directions
//                                        (default "0"); algorithm i runs in (i+1)/10 ms, so the list is
//                                        in speed order; algorithms past the list: NOT_SUPPORTED
//   FAKE_CUDNN_CALLBACK=1                the sub-libraries call the public API from inside their own
//                                        calls (dlsym(RTLD_DEFAULT)): Find asks the workspace sizes,
//                                        Finalize asks the plan's workspace size
//   FAKE_CUDNN_TRACE=1                   one stderr line per call that concerns workspaces
#pragma once
#include <dlfcn.h>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda.h>

namespace fake_cudnn {

// "64M" -> 67108864; false when malformed.
inline bool parse_size(const std::string &s, uint64_t *out) {
    char *end = nullptr;
    unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (end == s.c_str()) return false;
    int shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10, end++;
    else if (*end == 'M' || *end == 'm') shift = 20, end++;
    else if (*end == 'G' || *end == 'g') shift = 30, end++;
    if (*end != '\0') return false;
    *out = (uint64_t)v << shift;
    return true;
}

// A comma-separated list of sizes from the environment; a malformed entry is said and skipped.
inline std::vector<uint64_t> sizes_from_env(const char *name) {
    const char *v = std::getenv(name);
    std::vector<uint64_t> out;
    std::string all = v && *v ? v : "0";
    size_t i = 0;
    while (i <= all.size()) {
        size_t comma = all.find(',', i);
        if (comma == std::string::npos) comma = all.size();
        uint64_t bytes = 0;
        if (parse_size(all.substr(i, comma - i), &bytes)) out.push_back(bytes);
        else std::fprintf(stderr, "fake_cudnn: ignoring '%s' in %s\n", all.substr(i, comma - i).c_str(), name);
        i = comma + 1;
    }
    return out;
}

inline bool env_flag(const char *name) {
    const char *v = std::getenv(name);
    return v && *v && std::strcmp(v, "0") != 0;
}

inline void trace(const char *fmt, ...) {
    static const bool on = env_flag("FAKE_CUDNN_TRACE");
    if (!on) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "fake_cudnn: %s\n", line);
}

// The driver's allocation calls, found the way a library finds them at run time.
struct Driver {
    CUresult (*alloc)(CUdeviceptr *, size_t) = nullptr;
    CUresult (*free)(CUdeviceptr) = nullptr;
};
inline const Driver &driver() {
    static const Driver d = [] {
        Driver r;
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            r.alloc = reinterpret_cast<decltype(r.alloc)>(dlsym(h, "cuMemAlloc_v2"));
            r.free = reinterpret_cast<decltype(r.free)>(dlsym(h, "cuMemFree_v2"));
        }
        return r;
    }();
    return d;
}

// A public cuDNN function as any code in the process would reach it (FAKE_CUDNN_CALLBACK).
template <typename Fn>
Fn public_api(const char *name) {
    return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace fake_cudnn
