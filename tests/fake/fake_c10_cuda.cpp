// Test double of PyTorch's libc10_cuda.so: a caching allocator of device 0 whose blocks come from the
// model of c10's caching allocator that `gpuguard report --what-if` replays reports through
// (tools/report/whatif/allocator_model.h), so that a run of this double checks the model's rules
// against the test driver, and a report written over it replays exactly.
//
// Like c10, it gets its segments from the driver (build/fake/libcuda.so.1, linked): cuMemAlloc_v2 and
// cuMemFree_v2, or with expandable segments an address range per pool (cuMemAddressReserve, 9/8 of
// the device's memory as c10 reserves) whose pages are made and mapped as needed (cuMemCreate,
// cuMemMap, cuMemSetAccess; cuMemUnmap, cuMemRelease). And like c10 it reports to libc10.so's profiler
// functions, which it imports through its PLT (the Makefile builds it with -fplt and links it against
// the double of libc10.so), so that a preloaded shim's definitions of them win: after a block is
// handed out (+size and the totals), after one is taken back (-size and the totals), and when it
// gives up on a request (the rounded request and the totals, after emptying its cache), all under
// its lock, as c10 does.
//
// Environment:
//   FAKE_C10_CONF=OPTIONS   PYTORCH_CUDA_ALLOC_CONF's syntax ("key:value,key:value"):
//                           expandable_segments:True|False, max_split_size_mb:N (N > 20, as c10
//                           requires); other keys are ignored with one line on stderr.
//
// C API (fake_c10.h): c10fake_malloc, c10fake_free, c10fake_empty_cache, c10fake_allocated,
// c10fake_reserved.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "fake_c10.h"
#include "tools/report/whatif/allocator_model.h"

namespace {

using gg::whatif::CachingAllocatorModel;
using gg::whatif::Options;

constexpr c10::Device kDevice{c10::kCUDA, 0};

// The driver as c10 uses it, for device 0 through its primary context.
class DriverDevice : public gg::whatif::Device {
public:
    uint64_t alloc_segment(uint64_t bytes) override {
        CUdeviceptr p = 0;
        return current() && cuMemAlloc_v2(&p, bytes) == CUDA_SUCCESS ? p : 0;
    }
    void free_segment(uint64_t address, uint64_t) override {
        if (current()) cuMemFree_v2(address);
    }
    uint64_t reserve_range(uint64_t bytes) override {
        CUdeviceptr p = 0;
        return current() && cuMemAddressReserve(&p, bytes, 0, 0, 0) == CUDA_SUCCESS ? p : 0;
    }
    void release_range(uint64_t address, uint64_t bytes) override {
        if (current()) cuMemAddressFree(address, bytes);
    }
    // One handle per page, as c10's expandable segments make them: a page is unmapped and released alone.
    bool map_pages(uint64_t address, uint64_t bytes, uint64_t page) override {
        for (uint64_t at = 0; at < bytes; at += page) {
            if (!map_page(address + at, page)) {
                unmap_pages(address, at, page);
                return false;
            }
        }
        return true;
    }
    void unmap_pages(uint64_t address, uint64_t bytes, uint64_t page) override {
        if (!current()) return;
        for (uint64_t at = 0; at < bytes; at += page) {
            cuMemUnmap(address + at, page);
            auto it = handles_.find(address + at);
            if (it == handles_.end()) continue;
            cuMemRelease(it->second);
            handles_.erase(it);
        }
    }

    // The address range c10 reserves for an expandable segment: 9/8 of the device's memory.
    uint64_t range_bytes() {
        size_t total = 0;
        if (!current() || cuDeviceTotalMem_v2(&total, kDevice.index) != CUDA_SUCCESS) total = 16ull << 30;
        return total + total / 8;
    }

private:
    bool map_page(uint64_t address, uint64_t bytes) {
        if (!current()) return false;
        CUmemAllocationProp prop{};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = kDevice.index;
        CUmemGenericAllocationHandle h = 0;
        if (cuMemCreate(&h, bytes, &prop, 0) != CUDA_SUCCESS) return false;
        if (cuMemMap(address, bytes, 0, h, 0) != CUDA_SUCCESS) {
            cuMemRelease(h);
            return false;
        }
        CUmemAccessDesc access{};
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        cuMemSetAccess(address, bytes, &access, 1);
        handles_[address] = h;
        return true;
    }
    // The calling thread's context is device 0's primary one (the driver's contexts are per thread).
    bool current() {
        if (!ctx_) {
            CUdevice dev = 0;
            if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, kDevice.index) != CUDA_SUCCESS ||
                cuDevicePrimaryCtxRetain(&ctx_, dev) != CUDA_SUCCESS) {
                ctx_ = nullptr;
                return false;
            }
        }
        return cuCtxSetCurrent(ctx_) == CUDA_SUCCESS;
    }
    CUcontext ctx_ = nullptr;
    std::unordered_map<uint64_t, CUmemGenericAllocationHandle> handles_;  // mapped page -> its memory
};

Options options_from_env() {
    Options o;
    const char *conf = std::getenv("FAKE_C10_CONF");
    std::string s = conf ? conf : "";
    size_t at = 0;
    while (at < s.size()) {
        size_t comma = s.find(',', at);
        std::string item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        at = comma == std::string::npos ? s.size() : comma + 1;
        size_t colon = item.find(':');
        std::string key = item.substr(0, colon), value = colon == std::string::npos ? "" : item.substr(colon + 1);
        if (key == "expandable_segments" && (value == "True" || value == "False")) {
            o.expandable = value == "True";
        } else if (key == "max_split_size_mb" && std::strtoull(value.c_str(), nullptr, 10) > 20) {
            o.max_split_size = std::strtoull(value.c_str(), nullptr, 10) << 20;
        } else if (!item.empty()) {
            std::fprintf(stderr, "fake_c10_cuda: ignoring '%s' in FAKE_C10_CONF\n", item.c_str());
        }
    }
    return o;
}

Options with_range(Options o, DriverDevice &device) {
    if (o.expandable) o.range_bytes = device.range_bytes();
    return o;
}

struct Allocator {
    std::mutex mu;
    DriverDevice device;  // before the model, which uses it
    CachingAllocatorModel model;
    explicit Allocator(const Options &o) : model(with_range(o, device), &device) {}
};

// Never destroyed: a program's exit-time code may still free tensors.
Allocator &allocator() {
    static Allocator *a = new Allocator(options_from_env());
    return *a;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void *c10fake_malloc(size_t size) {
    if (size == 0) return nullptr;  // c10 hands out no block for an empty tensor
    Allocator &a = allocator();
    std::lock_guard<std::mutex> lock(a.mu);
    uint64_t bytes = 0;
    uint64_t p = a.model.malloc(size, &bytes);
    if (!p) {
        c10::reportOutOfMemoryToProfiler(int64_t(gg::whatif::round_size(size)), a.model.allocated(), a.model.reserved(),
                                         kDevice);
        return nullptr;
    }
    c10::reportMemoryUsageToProfiler(reinterpret_cast<void *>(p), int64_t(bytes), a.model.allocated(),
                                     a.model.reserved(), kDevice);
    return reinterpret_cast<void *>(p);
}

__attribute__((visibility("default"))) void c10fake_free(void *ptr) {
    if (!ptr) return;
    Allocator &a = allocator();
    std::lock_guard<std::mutex> lock(a.mu);
    uint64_t bytes = 0;
    if (!a.model.free(reinterpret_cast<uint64_t>(ptr), &bytes)) {
        std::fprintf(stderr, "fake_c10_cuda: free of %p, which is no block of this allocator\n", ptr);
        return;
    }
    c10::reportMemoryUsageToProfiler(ptr, -int64_t(bytes), a.model.allocated(), a.model.reserved(), kDevice);
}

__attribute__((visibility("default"))) void c10fake_empty_cache(void) {
    Allocator &a = allocator();
    std::lock_guard<std::mutex> lock(a.mu);
    a.model.empty_cache();
}

__attribute__((visibility("default"))) uint64_t c10fake_allocated(void) {
    Allocator &a = allocator();
    std::lock_guard<std::mutex> lock(a.mu);
    return a.model.allocated();
}

__attribute__((visibility("default"))) uint64_t c10fake_reserved(void) {
    Allocator &a = allocator();
    std::lock_guard<std::mutex> lock(a.mu);
    return a.model.reserved();
}

}  // extern "C"
