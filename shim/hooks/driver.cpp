// The driver hooks: thin, a few lines each. The decisions live in shim/quota/guard.cpp.
#include "shim/api/call.h"
#include "shim/api/export.h"
#include "shim/base/profile.h"
#include "shim/hooks/hook_table.h"
#include "shim/quota/guard.h"
#include "shim/quota/sizes.h"
#include "shim/resolve/real.h"
#include "shim/torch/view.h"
#include "shim/usage/graphs.h"
#include "shim/usage/usage.h"

using namespace gg;
using gg::guard::DriverCall;
using gg::guard::Ticket;

namespace {

const RealDriver &R() { return real_driver(); }

// Bytes of one element of an array format.
uint64_t format_bytes(CUarray_format f) {
    switch (f) {
        case CU_AD_FORMAT_UNSIGNED_INT8:
        case CU_AD_FORMAT_SIGNED_INT8: return 1;
        case CU_AD_FORMAT_UNSIGNED_INT16:
        case CU_AD_FORMAT_SIGNED_INT16:
        case CU_AD_FORMAT_HALF: return 2;
        case CU_AD_FORMAT_UNSIGNED_INT32:
        case CU_AD_FORMAT_SIGNED_INT32:
        case CU_AD_FORMAT_FLOAT: return 4;
        default: return 4;  // newer packed and block formats: an estimate is better than nothing
    }
}

uint64_t array_bytes(CUarray_format f, unsigned channels, size_t w, size_t h, size_t d) {
    return sizes::array_bytes(format_bytes(f), channels, w, h, d);
}

uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned levels) {
    uint64_t total = 0;
    size_t w = desc->Width, h = desc->Height, d = desc->Depth;
    unsigned n = levels ? levels : 1;
    for (unsigned i = 0; i < n; i++) {
        uint64_t level = array_bytes(desc->Format, desc->NumChannels, w, h, d);
        if (w <= 1 && h <= 1 && d <= 1) {  // every further level is this size: no loop of 2^32 rounds
            total = sat_add(total, sat_mul(level, n - i));
            break;
        }
        total = sat_add(total, level);
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        d = d > 1 ? d / 2 : d;
    }
    return total;
}

// The one shape of every allocating hook. `call(&key, &actual)` makes the real call and, on
// success, says what to track the result by and how many bytes it really took. `pool`: the pool a
// stream-ordered allocation names (shim/usage/pools.h). kAsync: a stream-ordered allocation, which
// holds the pools' readings off from admit until its driver call is over.
template <bool kAsync = false, typename Call>
CUresult allocate(Api api, int ordinal, uint64_t bytes, KeyKind kind, Call &&call, CUmemoryPool pool = nullptr) {
    DriverCall scope;
    uint64_t key = 0, actual = bytes;
    if (!scope.outermost()) return call(&key, &actual);
    GG_PROFILE_STEP(kAllocTotal);
    Ticket t;
    t.pool = pool;
    {
        GG_PROFILE_STEP(kAdmit);
        if (CUresult refused = guard::admit(api, ordinal, bytes, &t)) return refused;
    }
    CUresult r;
    {
        GG_PROFILE_STEP(kAllocDriver);
        r = call(&key, &actual);
    }
    GG_PROFILE_STEP(kCommit);
    if constexpr (kAsync)
        if (r == CUDA_SUCCESS) guard::release_pools(t);
    if (r == CUDA_SUCCESS) guard::commit(t, kind, key, actual);
    else guard::failed(t, r);
    return r;
}

// The one shape of every freeing hook. kAsync: a stream-ordered free, which holds the pools'
// readings off across its driver call and its move of the bytes to the pools' reserve.
template <bool kAsync = false, typename Call>
CUresult release(KeyKind kind, uint64_t key, Call &&call) {
    DriverCall scope;
    if (!scope.outermost() || key == 0) return call();
    GG_PROFILE_STEP(kFreeTotal);
    Allocation a;
    bool found;
    {
        GG_PROFILE_STEP(kFreeTake);
        found = guard::take(kind, key, &a);
    }
    bool held = false;
    if constexpr (kAsync) held = found && guard::hold_pools_for_free(a);
    CUresult r;
    {
        GG_PROFILE_STEP(kFreeDriver);
        r = call();
    }
    GG_PROFILE_STEP(kFreeFinish);
    if (held) guard::settle_async_free(&a, r);
    guard::finish_free(found, kind, key, a, r);
    return r;
}

template <typename T>
uint64_t key_of(T handle) {
    return (uint64_t)(uintptr_t)handle;
}

}  // namespace

// ---- Linear and managed memory ----

GG_EXPORT GG_HOT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    return allocate(Api::cuMemAlloc_v2, -1, bytesize, KeyKind::kPointer, [&](uint64_t *key, uint64_t *) {
        CUresult r = real_call(R().cuMemAlloc_v2, dptr, bytesize);
        if (r == CUDA_SUCCESS) *key = *dptr;
        return r;
    });
}

GG_EXPORT CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                              unsigned elem) {
    // Admitted at the pitch the driver will most likely choose; the true pitch is charged after.
    uint64_t estimate = sizes::pitch_estimate(width, height);
    return allocate(Api::cuMemAllocPitch_v2, -1, estimate, KeyKind::kPointer, [&](uint64_t *key, uint64_t *actual) {
        CUresult r = real_call(R().cuMemAllocPitch_v2, dptr, pitch, width, height, elem);
        if (r == CUDA_SUCCESS) {
            *key = *dptr;
            *actual = sat_mul(*pitch, height);
        }
        return r;
    });
}

GG_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    return allocate(Api::cuMemAllocManaged, -1, bytesize, KeyKind::kPointer, [&](uint64_t *key, uint64_t *) {
        CUresult r = real_call(R().cuMemAllocManaged, dptr, bytesize, flags);
        if (r == CUDA_SUCCESS) *key = *dptr;
        return r;
    });
}

GG_EXPORT GG_HOT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
    return release(KeyKind::kPointer, dptr, [&] { return real_call(R().cuMemFree_v2, dptr); });
}

// ---- Stream-ordered allocation (charged to the current context's device). On a stream being
// captured into a graph they take no memory: they become the graph's memory nodes, counted when the
// graph is launched (shim/usage/graphs.h), and pass uncharged and untracked. ----

#define GG_ALLOC_ASYNC(name, per_thread)                                                                      \
    GG_EXPORT GG_HOT CUresult CUDAAPI name(CUdeviceptr *dptr, size_t bytesize, CUstream stream) {             \
        if (usage::graphs::capturing(stream, per_thread)) return real_call(R().name, dptr, bytesize, stream); \
        return allocate<true>(Api::name, -1, bytesize, KeyKind::kPointer, [&](uint64_t *key, uint64_t *) {    \
            CUresult r = real_call(R().name, dptr, bytesize, stream);                                         \
            if (r == CUDA_SUCCESS) *key = *dptr;                                                              \
            return r;                                                                                         \
        });                                                                                                   \
    }
GG_ALLOC_ASYNC(cuMemAllocAsync, false)
GG_ALLOC_ASYNC(cuMemAllocAsync_ptsz, true)

#define GG_ALLOC_FROM_POOL(name, per_thread)                                                                         \
    GG_EXPORT GG_HOT CUresult CUDAAPI name(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream stream) { \
        if (usage::graphs::capturing(stream, per_thread)) return real_call(R().name, dptr, bytesize, pool, stream);  \
        return allocate<true>(                                                                                       \
            Api::name, -1, bytesize, KeyKind::kPointer,                                                              \
            [&](uint64_t *key, uint64_t *) {                                                                         \
                CUresult r = real_call(R().name, dptr, bytesize, pool, stream);                                      \
                if (r == CUDA_SUCCESS) *key = *dptr;                                                                 \
                return r;                                                                                            \
            },                                                                                                       \
            pool);                                                                                                   \
    }
GG_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync, false)
GG_ALLOC_FROM_POOL(cuMemAllocFromPoolAsync_ptsz, true)

GG_EXPORT GG_HOT CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
    return release<true>(KeyKind::kPointer, dptr, [&] { return real_call(R().cuMemFreeAsync, dptr, stream); });
}
GG_EXPORT GG_HOT CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
    return release<true>(KeyKind::kPointer, dptr, [&] { return real_call(R().cuMemFreeAsync_ptsz, dptr, stream); });
}

// ---- Virtual memory management: physical memory is created by cuMemCreate ----

GG_EXPORT GG_HOT CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                              const CUmemAllocationProp *prop, unsigned long long flags) {
    bool device = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
    if (!device) return real_call(R().cuMemCreate, handle, size, prop, flags);  // host memory is not ours to count
    return allocate(Api::cuMemCreate, prop->location.id, size, KeyKind::kHandle, [&](uint64_t *key, uint64_t *) {
        CUresult r = real_call(R().cuMemCreate, handle, size, prop, flags);
        if (r == CUDA_SUCCESS) *key = *handle;
        return r;
    });
}

GG_EXPORT GG_HOT CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
    return release(KeyKind::kHandle, handle, [&] { return real_call(R().cuMemRelease, handle); });
}

GG_EXPORT CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                    unsigned long long flags) {
    CUresult r = real_call(R().cuMemMap, ptr, size, offset, handle, flags);
    // Every mapping, not only those after c10's first report: c10 maps an expandable segment's first
    // page before it hands out (and reports) the first block, and a report's mappings must add up to
    // its reserved bytes. Few programs map memory, and rarely: the table stays small.
    if (r == CUDA_SUCCESS && torch::enabled()) torch::on_mapping(true, ptr, size);
    return r;
}

GG_EXPORT CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
    CUresult r = real_call(R().cuMemUnmap, ptr, size);
    if (r == CUDA_SUCCESS && torch::enabled()) torch::on_mapping(false, ptr, size);
    return r;
}

// ---- Arrays ----

GG_EXPORT CUresult CUDAAPI cuArrayCreate_v2(CUarray *array, const CUDA_ARRAY_DESCRIPTOR *desc) {
    uint64_t bytes = desc ? array_bytes(desc->Format, desc->NumChannels, desc->Width, desc->Height, 1) : 0;
    return allocate(Api::cuArrayCreate_v2, -1, bytes, KeyKind::kArray, [&](uint64_t *key, uint64_t *) {
        CUresult r = real_call(R().cuArrayCreate_v2, array, desc);
        if (r == CUDA_SUCCESS) *key = key_of(*array);
        return r;
    });
}

GG_EXPORT CUresult CUDAAPI cuArray3DCreate_v2(CUarray *array, const CUDA_ARRAY3D_DESCRIPTOR *desc) {
    uint64_t bytes = desc ? array_bytes(desc->Format, desc->NumChannels, desc->Width, desc->Height, desc->Depth) : 0;
    return allocate(Api::cuArray3DCreate_v2, -1, bytes, KeyKind::kArray, [&](uint64_t *key, uint64_t *) {
        CUresult r = real_call(R().cuArray3DCreate_v2, array, desc);
        if (r == CUDA_SUCCESS) *key = key_of(*array);
        return r;
    });
}

GG_EXPORT CUresult CUDAAPI cuArrayDestroy(CUarray array) {
    return release(KeyKind::kArray, key_of(array), [&] { return real_call(R().cuArrayDestroy, array); });
}

GG_EXPORT CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray *handle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                                  unsigned int levels) {
    uint64_t bytes = desc ? mipmap_bytes(desc, levels) : 0;
    return allocate(Api::cuMipmappedArrayCreate, -1, bytes, KeyKind::kMipmap, [&](uint64_t *key, uint64_t *) {
        CUresult r = real_call(R().cuMipmappedArrayCreate, handle, desc, levels);
        if (r == CUDA_SUCCESS) *key = key_of(*handle);
        return r;
    });
}

GG_EXPORT CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray handle) {
    return release(KeyKind::kMipmap, key_of(handle), [&] { return real_call(R().cuMipmappedArrayDestroy, handle); });
}

// ---- Queries: frameworks size themselves from these (PyTorch's mem_get_info, JAX's
// preallocation), so they must show the quota: total = min(limit, physical),
// free = min(physical free, limit - the container's usage), clamped at 0. ----

GG_EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    DriverCall scope;
    CUresult r = real_call(R().cuMemGetInfo_v2, free_bytes, total_bytes);
    if (r != CUDA_SUCCESS || !scope.outermost()) return r;
    guard::QuotaView q = guard::quota_of(current_ordinal());
    if (!q.limited) return r;
    uint64_t room = q.limit > q.container_used ? q.limit - q.container_used : 0;
    if (total_bytes && *total_bytes > q.limit) *total_bytes = q.limit;
    if (free_bytes && *free_bytes > room) *free_bytes = room;
    return r;
}

GG_EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    DriverCall scope;
    CUresult r = real_call(R().cuDeviceTotalMem_v2, bytes, dev);
    if (r != CUDA_SUCCESS || !scope.outermost() || !bytes) return r;
    guard::QuotaView q = guard::quota_of((int)dev);
    if (q.limited && *bytes > q.limit) *bytes = q.limit;
    return r;
}

// ---- cuGetProcAddress: cudart asks for "cuGetProcAddress" itself first and resolves everything
// else through the pointer it gets (docs/platform-facts.md), so our answer for every hooked name, that one
// included, must be our hook, chosen by the driver's own rules for cudaVersion and flags. ----

GG_EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags) {
    CUresult r = real_call(R().cuGetProcAddress, symbol, pfn, cuda_version, flags);
    if (r == CUDA_SUCCESS && pfn) *pfn = procaddress_answer(hook_table(), symbol, cuda_version, flags, *pfn);
    return r;
}

GG_EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                                               CUdriverProcAddressQueryResult *status) {
    CUresult r = real_call(R().cuGetProcAddress_v2, symbol, pfn, cuda_version, flags, status);
    if (r == CUDA_SUCCESS && pfn) *pfn = procaddress_answer(hook_table(), symbol, cuda_version, flags, *pfn);
    return r;
}
