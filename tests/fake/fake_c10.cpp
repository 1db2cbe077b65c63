// Test double of PyTorch's libc10.so: the two profiler functions PyTorch's caching allocator reports
// its blocks to, under their real mangled names (docs/platform-facts.md), with c10::Device passed by
// value as two int8_t. They count the calls and keep the last values, which c10fake_profiler_get
// (fake_c10.h) reads: a test checks with it that the preloaded shim, whose definitions of these two
// win over this library's, still forwards every call here, as PyTorch's own profiler needs.
#include <cstdint>
#include <cstring>
#include <mutex>

#include "fake_c10.h"

namespace {
std::mutex g_mu;
c10fake_profiler g_seen;
}  // namespace

void c10::reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size, size_t total_allocated, size_t total_reserved,
                                      Device device) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_seen.usage_calls++;
    g_seen.usage_sum += alloc_size;
    g_seen.last_ptr = ptr;
    g_seen.last_size = alloc_size;
    g_seen.last_allocated = total_allocated;
    g_seen.last_reserved = total_reserved;
    g_seen.last_device_type = device.type;
    g_seen.last_device_index = device.index;
}

void c10::reportOutOfMemoryToProfiler(int64_t alloc_size, size_t total_allocated, size_t total_reserved,
                                      Device device) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_seen.oom_calls++;
    g_seen.oom_last_size = alloc_size;
    g_seen.oom_last_allocated = total_allocated;
    g_seen.oom_last_reserved = total_reserved;
    g_seen.last_device_type = device.type;
    g_seen.last_device_index = device.index;
}

extern "C" __attribute__((visibility("default"))) void c10fake_profiler_get(c10fake_profiler *out) {
    std::lock_guard<std::mutex> lock(g_mu);
    *out = g_seen;
}
