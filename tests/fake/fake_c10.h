// The C API of the test doubles of PyTorch's c10 libraries (tests/fake/fake_c10.cpp, libc10.so, and
// tests/fake/fake_c10_cuda.cpp, libc10_cuda.so), for test programs (tests/integration/c10_app.c).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// libc10.so: what its two profiler functions received (they count and keep the last call's values).
struct c10fake_profiler {
    uint64_t usage_calls;  // c10::reportMemoryUsageToProfiler
    int64_t usage_sum;     // the sum of their sizes (+ handed out, - taken back)
    void *last_ptr;
    int64_t last_size;
    uint64_t last_allocated, last_reserved;
    int last_device_type, last_device_index;
    uint64_t oom_calls;  // c10::reportOutOfMemoryToProfiler
    int64_t oom_last_size;
    uint64_t oom_last_allocated, oom_last_reserved;
};
void c10fake_profiler_get(struct c10fake_profiler *out);

// libc10_cuda.so: a caching allocator of device 0 (FAKE_C10_CONF configures it).
void *c10fake_malloc(size_t size);  // NULL when out of memory (after reporting it), or for size 0
void c10fake_free(void *ptr);
void c10fake_empty_cache(void);
uint64_t c10fake_allocated(void);
uint64_t c10fake_reserved(void);

#ifdef __cplusplus
}

// c10's two profiler functions, declared as c10 declares them so that they carry c10's mangled names
// (_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE, _ZN3c1027reportOutOfMemoryToProfilerElmmNS_6DeviceE):
// libc10.so defines them, libc10_cuda.so calls them.
namespace c10 {
struct Device {
    int8_t type;  // 1: CUDA
    int8_t index;
};
constexpr int8_t kCUDA = 1;
__attribute__((visibility("default"))) void reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size,
                                                                        size_t total_allocated, size_t total_reserved,
                                                                        Device device);
__attribute__((visibility("default"))) void reportOutOfMemoryToProfiler(int64_t alloc_size, size_t total_allocated,
                                                                        size_t total_reserved, Device device);
}  // namespace c10
#endif
