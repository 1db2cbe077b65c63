// Test double of the CUDA driver (libcuda.so.1) for machines without a GPU.
//
// Faithful where the shim depends on it: the cuGetProcAddress answers (base names, versioned
// variants, per-thread variants, the self-lookup), contexts that are per-thread and required by
// allocations, physical capacity that a real "driver OOM" comes from, CUDA_VISIBLE_DEVICES remapping
// ordinals to physical devices with the physical device's UUID. Device memory is host memory
// (mmap with MAP_NORESERVE, so GiB-sized allocations are free and programs may write to them).
// Streams are accepted and ignored: every "async" call completes at once.
//
// Environment (see also fake_device.h for the machine itself):
//   FAKE_CUDA_TRUTH=FILE       shared per-device counters of bytes handed out (fake_truth.h)
//   FAKE_CUDA_FAIL_EVERY=N     every Nth allocation call fails with CUDA_ERROR_OUT_OF_MEMORY
//   FAKE_CUDA_FAIL_FREE_EVERY=N every Nth freeing call (cuMemFree*, cuMemRelease, cuArrayDestroy, ...)
//                              fails with CUDA_ERROR_UNKNOWN and frees nothing: the memory stays
//                              allocated, so a program that tries again later frees it then
//   FAKE_CUDA_FAIL_GPA=a,b     cuGetProcAddress of these base names ("*": every name) fails with
//                              CUDA_ERROR_NOT_FOUND and a NULL pointer, as for a symbol the driver lacks
//   FAKE_CUDA_FAIL_QUERY=q,..  these device queries fail with CUDA_ERROR_UNKNOWN: uuid
//                              (cuDeviceGetUuid*), name (cuDeviceGetName), total (cuDeviceTotalMem)
//   FAKE_CUDA_TRACE=1          one stderr line per memory call and per cuGetProcAddress lookup
//   FAKE_CUDA_BENCH=1          benchmarks only (tests/bench): the cuMemAlloc family hands out addresses
//                              from one reserved, inaccessible region instead of an mmap per call, and
//                              never reuses them, so that mmap/munmap do not dominate what is timed.
//                              Programs must not touch that memory.
//   FAKE_CUDA_EVICT_KIB=n      benchmarks only: every allocation and free first reads through n KiB
//                              of the driver's own memory, as the real driver's call evicts the
//                              caller's cache lines (its pair takes 40 to 90 µs); with n larger than
//                              the CPU's L2, the shim's bookkeeping is timed with cold caches.
//   CUDA_VISIBLE_DEVICES=i,j   ordinal k is physical device list[k], as with the real driver
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "fake_cuda.h"
#include "fake_truth.h"

// The one list of what cuGetProcAddress answers: (base name, exported symbol, CUDA version that
// introduced this variant, per-thread-default-stream variant?). Versions are those of the PFN_ typedefs
// in cudaTypedefs.h. Every exported function appears here, and only here is a lookup answered from.
#define FAKE_CUDA_PROCS(X)                                                          \
    X("cuInit", cuInit, 2000, false)                                                \
    X("cuDriverGetVersion", cuDriverGetVersion, 2020, false)                        \
    X("cuDeviceGetCount", cuDeviceGetCount, 2000, false)                            \
    X("cuDeviceGet", cuDeviceGet, 2000, false)                                      \
    X("cuDeviceGetName", cuDeviceGetName, 2000, false)                              \
    X("cuDeviceGetUuid", cuDeviceGetUuid, 9020, false)                              \
    X("cuDeviceGetUuid", cuDeviceGetUuid_v2, 11040, false)                          \
    X("cuDeviceTotalMem", cuDeviceTotalMem_v2, 3020, false)                         \
    X("cuDeviceGetAttribute", cuDeviceGetAttribute, 2000, false)                    \
    X("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain, 7000, false)            \
    X("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2, 11000, false)      \
    X("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset_v2, 11000, false)          \
    X("cuCtxCreate", cuCtxCreate_v2, 3020, false)                                   \
    X("cuCtxCreate", cuCtxCreate_v3, 11040, false)                                  \
    X("cuCtxCreate", cuCtxCreate_v4, 12050, false)                                  \
    X("cuCtxDestroy", cuCtxDestroy_v2, 4000, false)                                 \
    X("cuCtxSetCurrent", cuCtxSetCurrent, 4000, false)                              \
    X("cuCtxGetCurrent", cuCtxGetCurrent, 4000, false)                              \
    X("cuCtxGetDevice", cuCtxGetDevice, 2000, false)                                \
    X("cuCtxGetDevice", cuCtxGetDevice_v2, 13000, false)                            \
    X("cuCtxPushCurrent", cuCtxPushCurrent_v2, 4000, false)                         \
    X("cuCtxPopCurrent", cuCtxPopCurrent_v2, 4000, false)                           \
    X("cuCtxSynchronize", cuCtxSynchronize, 2000, false)                            \
    X("cuCtxSynchronize", cuCtxSynchronize_v2, 13000, false)                        \
    X("cuStreamCreate", cuStreamCreate, 2000, false)                                \
    X("cuStreamDestroy", cuStreamDestroy_v2, 4000, false)                           \
    X("cuGetErrorString", cuGetErrorString, 6000, false)                            \
    X("cuGetErrorName", cuGetErrorName, 6000, false)                                \
    X("cuGetExportTable", cuGetExportTable, 3000, false)                            \
    X("cuGetProcAddress", cuGetProcAddress, 11030, false)                           \
    X("cuGetProcAddress", cuGetProcAddress_v2, 12000, false)                        \
    X("cuMemAlloc", cuMemAlloc, 2000, false)                                        \
    X("cuMemAlloc", cuMemAlloc_v2, 3020, false)                                     \
    X("cuMemFree", cuMemFree, 2000, false)                                          \
    X("cuMemFree", cuMemFree_v2, 3020, false)                                       \
    X("cuMemAllocPitch", cuMemAllocPitch_v2, 3020, false)                           \
    X("cuMemGetInfo", cuMemGetInfo_v2, 3020, false)                                 \
    X("cuMemAllocManaged", cuMemAllocManaged, 6000, false)                          \
    X("cuMemAllocAsync", cuMemAllocAsync, 11020, false)                             \
    X("cuMemAllocAsync", cuMemAllocAsync_ptsz, 11020, true)                         \
    X("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync, 11020, false)             \
    X("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync_ptsz, 11020, true)         \
    X("cuMemFreeAsync", cuMemFreeAsync, 11020, false)                               \
    X("cuMemFreeAsync", cuMemFreeAsync_ptsz, 11020, true)                           \
    X("cuMemCreate", cuMemCreate, 10020, false)                                     \
    X("cuMemRelease", cuMemRelease, 10020, false)                                   \
    X("cuMemAddressReserve", cuMemAddressReserve, 10020, false)                     \
    X("cuMemAddressFree", cuMemAddressFree, 10020, false)                           \
    X("cuMemMap", cuMemMap, 10020, false)                                           \
    X("cuMemUnmap", cuMemUnmap, 10020, false)                                       \
    X("cuMemSetAccess", cuMemSetAccess, 10020, false)                               \
    X("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity, 10020, false) \
    X("cuArrayCreate", cuArrayCreate_v2, 3020, false)                               \
    X("cuArray3DCreate", cuArray3DCreate_v2, 3020, false)                           \
    X("cuArrayDestroy", cuArrayDestroy, 2000, false)                                \
    X("cuMipmappedArrayCreate", cuMipmappedArrayCreate, 5000, false)                \
    X("cuMipmappedArrayDestroy", cuMipmappedArrayDestroy, 5000, false)              \
    X("cuMemcpyHtoD", cuMemcpyHtoD_v2, 3020, false)                                 \
    X("cuMemcpyHtoD", cuMemcpyHtoD_v2_ptds, 7000, true)                             \
    X("cuMemcpyDtoH", cuMemcpyDtoH_v2, 3020, false)                                 \
    X("cuMemcpyDtoH", cuMemcpyDtoH_v2_ptds, 7000, true)                             \
    X("cuMemsetD8", cuMemsetD8_v2, 3020, false)                                     \
    X("cuMemsetD8", cuMemsetD8_v2_ptds, 7000, true)                                 \
    FAKE_CUDA_USAGE_PROCS(X)

// fake_cuda_usage.cpp's functions: pools, stream capture, graphs, modules, launches.
#define FAKE_CUDA_USAGE_PROCS(X)                                                      \
    X("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool, 11020, false)           \
    X("cuDeviceGetMemPool", cuDeviceGetMemPool, 11020, false)                         \
    X("cuDeviceSetMemPool", cuDeviceSetMemPool, 11020, false)                         \
    X("cuMemPoolCreate", cuMemPoolCreate, 11020, false)                               \
    X("cuMemPoolDestroy", cuMemPoolDestroy, 11020, false)                             \
    X("cuMemPoolTrimTo", cuMemPoolTrimTo, 11020, false)                               \
    X("cuMemPoolSetAttribute", cuMemPoolSetAttribute, 11020, false)                   \
    X("cuMemPoolGetAttribute", cuMemPoolGetAttribute, 11020, false)                   \
    X("cuStreamSynchronize", cuStreamSynchronize, 2000, false)                        \
    X("cuStreamSynchronize", cuStreamSynchronize_ptsz, 7000, true)                    \
    X("cuStreamBeginCapture", cuStreamBeginCapture_v2, 10010, false)                  \
    X("cuStreamBeginCapture", cuStreamBeginCapture_v2_ptsz, 10010, true)              \
    X("cuStreamEndCapture", cuStreamEndCapture, 10000, false)                         \
    X("cuStreamEndCapture", cuStreamEndCapture_ptsz, 10000, true)                     \
    X("cuStreamIsCapturing", cuStreamIsCapturing, 10000, false)                       \
    X("cuStreamIsCapturing", cuStreamIsCapturing_ptsz, 10000, true)                   \
    X("cuGraphCreate", cuGraphCreate, 10000, false)                                   \
    X("cuGraphDestroy", cuGraphDestroy, 10000, false)                                 \
    X("cuGraphAddEmptyNode", cuGraphAddEmptyNode, 10000, false)                       \
    X("cuGraphAddMemAllocNode", cuGraphAddMemAllocNode, 11040, false)                 \
    X("cuGraphAddMemFreeNode", cuGraphAddMemFreeNode, 11040, false)                   \
    X("cuGraphGetNodes", cuGraphGetNodes, 10000, false)                               \
    X("cuGraphNodeGetType", cuGraphNodeGetType, 10000, false)                         \
    X("cuGraphMemAllocNodeGetParams", cuGraphMemAllocNodeGetParams, 11040, false)     \
    X("cuGraphInstantiate", cuGraphInstantiate, 10000, false)                         \
    X("cuGraphInstantiate", cuGraphInstantiate_v2, 11000, false)                      \
    X("cuGraphInstantiate", cuGraphInstantiateWithFlags, 12000, false)                \
    X("cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags, 11040, false)       \
    X("cuGraphInstantiateWithParams", cuGraphInstantiateWithParams, 12000, false)     \
    X("cuGraphInstantiateWithParams", cuGraphInstantiateWithParams_ptsz, 12000, true) \
    X("cuGraphUpload", cuGraphUpload, 11010, false)                                   \
    X("cuGraphUpload", cuGraphUpload_ptsz, 11010, true)                               \
    X("cuGraphLaunch", cuGraphLaunch, 10000, false)                                   \
    X("cuGraphLaunch", cuGraphLaunch_ptsz, 10000, true)                               \
    X("cuGraphExecDestroy", cuGraphExecDestroy, 10000, false)                         \
    X("cuDeviceGraphMemTrim", cuDeviceGraphMemTrim, 11040, false)                     \
    X("cuDeviceGetGraphMemAttribute", cuDeviceGetGraphMemAttribute, 11040, false)     \
    X("cuModuleLoad", cuModuleLoad, 2000, false)                                      \
    X("cuModuleLoadData", cuModuleLoadData, 2000, false)                              \
    X("cuModuleLoadDataEx", cuModuleLoadDataEx, 2010, false)                          \
    X("cuModuleLoadFatBinary", cuModuleLoadFatBinary, 2000, false)                    \
    X("cuModuleUnload", cuModuleUnload, 2000, false)                                  \
    X("cuLibraryLoadData", cuLibraryLoadData, 12000, false)                           \
    X("cuLibraryLoadFromFile", cuLibraryLoadFromFile, 12000, false)                   \
    X("cuLibraryUnload", cuLibraryUnload, 12000, false)                               \
    X("cuLaunchKernel", cuLaunchKernel, 4000, false)                                  \
    X("cuLaunchKernel", cuLaunchKernel_ptsz, 7000, true)

struct CUarray_st {
    int phys;
    uint64_t bytes;
    pid_t owner;
};
struct CUmipmappedArray_st {
    int phys;
    uint64_t bytes;
    pid_t owner;
};

namespace fakecu {

namespace {
std::mutex g_owned_mu;
std::unordered_set<void *> &g_owned = *new std::unordered_set<void *>;  // never destroyed: exit-time calls
}  // namespace

void own(void *p) {
    std::lock_guard<std::mutex> lock(g_owned_mu);
    g_owned.insert(p);
}

void disown(void *p) {
    std::lock_guard<std::mutex> lock(g_owned_mu);
    g_owned.erase(p);
}

constexpr size_t kGranularity = 2u << 20;  // cuMemGetAllocationGranularity, minimum and recommended
constexpr size_t kPitchAlign = 512;

struct Proc {
    const char *base;
    void *fn;
    int since;
    bool per_thread;
    const char *symbol;
};
#define FAKE_PROC_ROW(base, sym, since, pt) {base, reinterpret_cast<void *>(&sym), since, pt, #sym},
const Proc kProcs[] = {FAKE_CUDA_PROCS(FAKE_PROC_ROW)};

struct Alloc {  // one allocation of the cuMemAlloc family
    size_t mapped;
    uint64_t bytes;
    int phys;
    pid_t pid;  // the process that made it: a forked child inherits the table, not the memory
};
struct Handle {  // one cuMemCreate: the memory lives as long as the handle or any mapping of it
    int fd;
    size_t size;
    int phys;  // -1: host memory, not counted against a device
    int mappings;
    bool released;
    pid_t owner;
};
struct Mapping {
    CUmemGenericAllocationHandle handle;
    size_t size;
};

// Process-wide state; `mu` guards the tables. The truth counters are atomics and need no lock.
struct Driver {
    std::mutex mu;
    std::atomic<bool> initialized{false};
    std::atomic<bool> torn_down{false};
    pid_t owner = 0;
    std::vector<int> visible;  // ordinal -> physical index
    uint64_t capacity[fake::kMaxDevices] = {};
    fake::Truth local{};  // used when FAKE_CUDA_TRUTH is not set
    fake::Truth *truth = nullptr;
    uint64_t fail_every = 0;
    std::atomic<uint64_t> alloc_calls{0};
    uint64_t fail_free_every = 0;
    std::atomic<uint64_t> free_calls{0};
    std::string fail_gpa;    // ",name,name," (or ",*,"), "" for none
    std::string fail_query;  // ",uuid,name,total," subset, "" for none
    bool trace = false;
    // FAKE_CUDA_BENCH: a PROT_NONE reservation [bench_begin, bench_end) and its bump pointer; 0 when off.
    std::atomic<uintptr_t> bench_next{0};
    uintptr_t bench_begin = 0, bench_end = 0;
    // FAKE_CUDA_EVICT_KIB: the buffer each memory call reads through; empty when off.
    std::vector<char> evict;
    CUctx_st primary[fake::kMaxDevices] = {};
    int primary_refs[fake::kMaxDevices] = {};
    std::unordered_map<uintptr_t, Alloc> allocs;
    std::unordered_map<CUmemGenericAllocationHandle, Handle> handles;
    CUmemGenericAllocationHandle next_handle = 0x1000;
    std::unordered_map<uintptr_t, size_t> reservations;  // base -> size (PROT_NONE address ranges)
    std::unordered_map<uintptr_t, Mapping> mappings;     // mapped address -> handle
    std::unordered_map<CUarray, int> arrays;
    std::unordered_map<CUmipmappedArray, int> mipmaps;
};

// Never destroyed: a program's own exit-time code may still call in after our destructor ran.
Driver &drv() {
    static Driver *d = [] {
        Driver *p = new Driver;
        p->owner = getpid();
        // A fork while another thread holds the tables' lock would leave it held in the child, whose
        // next call (or its exit) would hang: the lock is taken across fork, as a real driver must.
        pthread_atfork([] { drv().mu.lock(); }, [] { drv().mu.unlock(); }, [] { drv().mu.unlock(); });
        int n = fake::physical_count();
        for (int i = 0; i < n; i++) p->capacity[i] = fake::physical_capacity(i);
        // CUDA_VISIBLE_DEVICES: a comma list of physical indices; like the real driver, the list ends at
        // the first entry that is not a valid, unused index.
        const char *cvd = std::getenv("CUDA_VISIBLE_DEVICES");
        if (!cvd) {
            for (int i = 0; i < n; i++) p->visible.push_back(i);
        } else {
            std::string s = cvd;
            size_t pos = 0;
            while (pos <= s.size()) {
                size_t comma = s.find(',', pos);
                std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
                char *end = nullptr;
                long v = std::strtol(item.c_str(), &end, 10);
                bool dup = false;
                for (int q : p->visible) dup |= (q == v);
                if (item.empty() || *end != '\0' || v < 0 || v >= n || dup) break;
                p->visible.push_back(static_cast<int>(v));
                if (comma == std::string::npos) break;
                pos = comma + 1;
            }
        }
        for (size_t o = 0; o < p->visible.size(); o++)
            p->primary[o] = CUctx_st{static_cast<int>(o), p->visible[o], true, false, false};
        const char *tf = std::getenv("FAKE_CUDA_TRUTH");
        p->truth = &p->local;
        if (tf && *tf) {
            if (fake::Truth *t = fake::truth_map(tf, true))
                p->truth = t, fake::images_left(t, fake::truth_pid(getpid()));
            else std::fprintf(stderr, "fake_cuda: cannot map FAKE_CUDA_TRUTH=%s\n", tf);
        }
        p->fail_every = fake::env_u64("FAKE_CUDA_FAIL_EVERY", 0);
        p->fail_free_every = fake::env_u64("FAKE_CUDA_FAIL_FREE_EVERY", 0);
        // Kept with a comma at each end, so that a name is found by searching ",name,".
        for (auto [var, out] : {std::pair<const char *, std::string *>{"FAKE_CUDA_FAIL_GPA", &p->fail_gpa},
                                {"FAKE_CUDA_FAIL_QUERY", &p->fail_query}}) {
            const char *v = std::getenv(var);
            if (v && *v) *out = std::string(",") + v + ",";
        }
        const char *tr = std::getenv("FAKE_CUDA_TRACE");
        p->trace = tr && *tr && std::strcmp(tr, "0") != 0;
        p->evict.resize(fake::env_u64("FAKE_CUDA_EVICT_KIB", 0) << 10);
        if (fake::env_u64("FAKE_CUDA_BENCH", 0) == 1) {
            constexpr size_t kBenchRegion = size_t(256) << 30;  // address space only: PROT_NONE, no reserve
            void *r = mmap(nullptr, kBenchRegion, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (r != MAP_FAILED) {
                p->bench_begin = reinterpret_cast<uintptr_t>(r);
                p->bench_end = p->bench_begin + kBenchRegion;
                p->bench_next = p->bench_begin;
            }
        }
        return p;
    }();
    return *d;
}

// The current context is per thread, as a stack (cuCtxPush/PopCurrent); cuCtxSetCurrent replaces the top.
// The thread's context stack. Trivially destructible on purpose: a thread_local std::vector is
// destroyed at exit before atexit handlers run, and the shim's at-exit report still asks which
// context is current (a real driver answers then too).
struct ContextStack {
    CUcontext items[64];
    int n = 0;
    bool empty() const { return n == 0; }
    CUcontext &back() { return items[n - 1]; }
    void push_back(CUcontext c) {
        if (n < 64) items[n++] = c;
    }
    void pop_back() {
        if (n > 0) n--;
    }
};
thread_local ContextStack t_stack;

const char *error_name(CUresult r);

bool tracing() { return drv().trace; }

uint64_t env_bytes(const char *name) { return fake::env_u64(name, 0); }

void trace(const char *fn, CUresult r, const char *fmt, ...) {
    if (!drv().trace) return;
    char arg[256];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(arg, sizeof arg, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "fake_cuda: %s %s -> %s\n", fn, arg, error_name(r));
}

CUresult need_init() {
    Driver &d = drv();
    if (d.torn_down) return CUDA_ERROR_DEINITIALIZED;
    return d.initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

// Like the real driver, calls that act on "the current context" fail without one.
CUresult need_ctx(CUctx_st **out) {
    if (CUresult r = need_init()) return r;
    if (t_stack.empty() || !t_stack.back()) return CUDA_ERROR_INVALID_CONTEXT;
    if (t_stack.back()->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = t_stack.back();
    return CUDA_SUCCESS;
}

CUresult need_device(CUdevice dev, int *phys) {
    if (CUresult r = need_init()) return r;
    Driver &d = drv();
    if (dev < 0 || static_cast<size_t>(dev) >= d.visible.size()) return CUDA_ERROR_INVALID_DEVICE;
    *phys = d.visible[dev];
    return CUDA_SUCCESS;
}

// Charges `bytes` to a physical device: the fault injection first, then the capacity, shared with
// other processes through the truth file. This is where every "driver OOM" of the tests comes from.
CUresult charge(int phys, uint64_t bytes) {
    Driver &d = drv();
    uint64_t n = ++d.alloc_calls;
    if (d.fail_every && n % d.fail_every == 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (phys < 0) return CUDA_SUCCESS;  // host memory
    return fake::truth_take(d.truth, fake::truth_pid(getpid()), phys, bytes, d.capacity[phys])
               ? CUDA_SUCCESS
               : CUDA_ERROR_OUT_OF_MEMORY;
}
void uncharge(int phys, uint64_t bytes, pid_t owner) {
    if (phys >= 0) fake::truth_give(drv().truth, fake::truth_pid(owner), phys, bytes);
}

// FAKE_CUDA_FAIL_FREE_EVERY: whether this freeing call is one that fails (before it changes anything).
bool free_fails() {
    Driver &d = drv();
    return d.fail_free_every && ++d.free_calls % d.fail_free_every == 0;
}

// Whether `item` is in a FAKE_CUDA_FAIL_* list (",a,b," form; "*" matches everything).
bool listed(const std::string &list, const char *item) {
    return !list.empty() && item &&
           (list.find(",*,") != std::string::npos || list.find("," + std::string(item) + ",") != std::string::npos);
}

size_t page_round(size_t n) {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return (n + page - 1) / page * page;
}

// FAKE_CUDA_EVICT_KIB: one read per cache line of the buffer, which pushes the caller's lines out
// (reads, so that threads calling at once share the buffer without a race).
void evict_caller_lines() {
    const std::vector<char> &b = drv().evict;
    unsigned sum = 0;
    for (size_t i = 0; i < b.size(); i += 64) sum += static_cast<unsigned char>(b[i]);
    asm volatile("" : : "r"(sum));  // the reads must happen
}

// The allocation family shares one path: charge, map host memory, record the pointer.
CUresult device_alloc(const char *fn, CUdeviceptr *dptr, uint64_t bytes, uint64_t charged = 0) {
    evict_caller_lines();
    if (!charged) charged = bytes;
    CUctx_st *ctx = nullptr;
    CUresult r = need_ctx(&ctx);
    if (!r && (!dptr || bytes == 0)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) r = charge(ctx->phys, charged);
    if (!r) {
        size_t len = page_round(bytes);
        void *p = MAP_FAILED;
        if (drv().bench_end) {  // FAKE_CUDA_BENCH: a bump pointer, no system call
            uintptr_t at = drv().bench_next.fetch_add(len);
            if (at + len <= drv().bench_end) p = reinterpret_cast<void *>(at);
        }
        if (p == MAP_FAILED)
            p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            uncharge(ctx->phys, charged, getpid());
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            std::lock_guard<std::mutex> lock(drv().mu);
            drv().allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{len, charged, ctx->phys, getpid()};
            *dptr = reinterpret_cast<CUdeviceptr>(p);
        }
    }
    trace(fn, r, "%llu", static_cast<unsigned long long>(bytes));
    return r;
}

CUresult device_free(const char *fn, CUdeviceptr ptr) {
    evict_caller_lines();
    CUresult r = need_init();
    if (!r && ptr && free_fails()) r = CUDA_ERROR_UNKNOWN;
    if (!r && ptr) {
        Alloc a{};
        {
            std::lock_guard<std::mutex> lock(drv().mu);
            auto it = drv().allocs.find(ptr);
            if (it == drv().allocs.end()) {
                r = CUDA_ERROR_INVALID_VALUE;
            } else {
                a = it->second;
                drv().allocs.erase(it);
            }
        }
        if (!r) {
            bool from_bench_region = ptr >= drv().bench_begin && ptr < drv().bench_end;
            if (!from_bench_region) munmap(reinterpret_cast<void *>(ptr), a.mapped);
            uncharge(a.phys, a.bytes, a.pid);
        } else if (pool_freed_by_plain_free(ptr)) {  // a stream-ordered allocation, back to its pool
            r = CUDA_SUCCESS;
        }
    }
    trace(fn, r, "0x%llx", static_cast<unsigned long long>(ptr));
    return r;
}

// Bytes of one element of a CUDA array, by format; 0 for formats the fake does not size.
uint64_t element_size(CUarray_format f) {
    switch (f) {
        case CU_AD_FORMAT_UNSIGNED_INT8:
        case CU_AD_FORMAT_SIGNED_INT8:
        case CU_AD_FORMAT_UNORM_INT8X1:
        case CU_AD_FORMAT_SNORM_INT8X1: return 1;
        case CU_AD_FORMAT_UNSIGNED_INT16:
        case CU_AD_FORMAT_SIGNED_INT16:
        case CU_AD_FORMAT_HALF:
        case CU_AD_FORMAT_UNORM_INT8X2:
        case CU_AD_FORMAT_SNORM_INT8X2:
        case CU_AD_FORMAT_UNORM_INT16X1:
        case CU_AD_FORMAT_SNORM_INT16X1: return 2;
        case CU_AD_FORMAT_UNSIGNED_INT32:
        case CU_AD_FORMAT_SIGNED_INT32:
        case CU_AD_FORMAT_FLOAT:
        case CU_AD_FORMAT_UNORM_INT8X4:
        case CU_AD_FORMAT_SNORM_INT8X4:
        case CU_AD_FORMAT_UNORM_INT16X2:
        case CU_AD_FORMAT_SNORM_INT16X2: return 4;
        case CU_AD_FORMAT_UNORM_INT16X4:
        case CU_AD_FORMAT_SNORM_INT16X4: return 8;
        default: return 0;
    }
}

// element size x channels x Width x max(Height,1) x max(Depth,1); 0 when invalid or overflowing.
uint64_t array_bytes(CUarray_format f, unsigned channels, size_t w, size_t h, size_t depth) {
    uint64_t es = element_size(f), b = 0;
    if (!es || w == 0 || !(channels == 1 || channels == 2 || channels == 4)) return 0;
    if (__builtin_mul_overflow(es * channels, w, &b) || __builtin_mul_overflow(b, h ? h : 1, &b) ||
        __builtin_mul_overflow(b, depth ? depth : 1, &b))
        return 0;
    return b;
}

CUresult array_create(const char *fn, CUarray *out, CUarray_format f, unsigned ch, size_t w, size_t h, size_t depth) {
    CUctx_st *ctx = nullptr;
    uint64_t bytes = array_bytes(f, ch, w, h, depth);
    CUresult r = need_ctx(&ctx);
    if (!r && (!out || !bytes)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) r = charge(ctx->phys, bytes);
    if (!r) {
        *out = new CUarray_st{ctx->phys, bytes, getpid()};
        std::lock_guard<std::mutex> lock(drv().mu);
        drv().arrays[*out] = ctx->phys;
    }
    trace(fn, r, "%llu", static_cast<unsigned long long>(bytes));
    return r;
}

// Frees a handle's memory once it is released and no longer mapped (caller holds mu).
void handle_maybe_destroy(CUmemGenericAllocationHandle h) {
    auto it = drv().handles.find(h);
    if (it == drv().handles.end() || !it->second.released || it->second.mappings > 0) return;
    close(it->second.fd);
    uncharge(it->second.phys, it->second.size, it->second.owner);
    drv().handles.erase(it);
}

// The real driver gives back a process's memory when it exits. So does the fake, for what the truth
// file counts; afterwards every call returns CUDA_ERROR_DEINITIALIZED, like a driver shutting down.
// A forked child inherits the tables but not the memory: it gives back the allocations it made itself
// (the cuMemAlloc family, which the fork tests use), and only the first process the rest.
__attribute__((destructor)) void teardown() {
    Driver &d = drv();
    std::lock_guard<std::mutex> lock(d.mu);
    d.torn_down = true;
    for (auto &a : d.allocs)
        if (a.second.pid == getpid()) uncharge(a.second.phys, a.second.bytes, a.second.pid);
    if (getpid() != d.owner) return;
    for (auto &h : d.handles) uncharge(h.second.phys, h.second.size, h.second.owner);
    for (auto &a : d.arrays) uncharge(a.second, a.first->bytes, a.first->owner);
    for (auto &m : d.mipmaps) uncharge(m.second, m.first->bytes, m.first->owner);
    d.allocs.clear();
    d.handles.clear();
    d.arrays.clear();
    d.mipmaps.clear();
}

#define FAKE_CUDA_ERRORS(X)                                       \
    X(CUDA_SUCCESS, "no error")                                   \
    X(CUDA_ERROR_INVALID_VALUE, "invalid argument")               \
    X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                  \
    X(CUDA_ERROR_NOT_INITIALIZED, "initialization error")         \
    X(CUDA_ERROR_DEINITIALIZED, "driver shutting down")           \
    X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected") \
    X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")        \
    X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")       \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")    \
    X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")       \
    X(CUDA_ERROR_NOT_FOUND, "named symbol not found")             \
    X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")        \
    X(CUDA_ERROR_UNKNOWN, "unknown error")

const char *error_name(CUresult r) {
#define FAKE_ERR_NAME(code, text) \
    if (r == code) return #code;
    FAKE_CUDA_ERRORS(FAKE_ERR_NAME)
    return "CUDA_ERROR_UNKNOWN";
}

// The answer to every cuGetProcAddress form. Among the rows of `symbol`, the newest variant introduced
// at or before cudaVersion; with the per-thread flag a per-thread row is preferred when one qualifies
// (each per-thread row is the twin of its base's newest variant). No row at all: SYMBOL_NOT_FOUND;
// rows, but all newer than cudaVersion: VERSION_NOT_SUFFICIENT. Both return CUDA_ERROR_NOT_FOUND and a
// NULL pointer, as CUDA 12+ drivers do.
CUresult lookup(const char *api, const char *symbol, void **pfn, int version, cuuint64_t flags,
                CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    if (listed(drv().fail_gpa, symbol)) {
        *pfn = nullptr;
        if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        trace(api, CUDA_ERROR_NOT_FOUND, "%s@%d = NULL (FAKE_CUDA_FAIL_GPA)", symbol, version);
        return CUDA_ERROR_NOT_FOUND;
    }
    bool want_pt = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    const Proc *best = nullptr, *best_pt = nullptr;
    bool known = false;
    for (const Proc &p : kProcs) {
        if (std::strcmp(p.base, symbol) != 0) continue;
        known = true;
        if (p.since > version) continue;
        const Proc *&slot = p.per_thread ? best_pt : best;
        if (!slot || p.since > slot->since) slot = &p;
    }
    if (want_pt && best_pt) best = best_pt;
    CUdriverProcAddressQueryResult st = best    ? CU_GET_PROC_ADDRESS_SUCCESS
                                        : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                                : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    *pfn = best ? best->fn : nullptr;
    if (status) *status = st;
    CUresult r = best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
    trace(api, r, "%s@%d%s = %s", symbol, version, want_pt ? "/ptds" : "", best ? best->symbol : "NULL");
    return r;
}

}  // namespace fakecu

using namespace fakecu;

extern "C" {

// ---- initialisation, version, errors ---------------------------------------------------------------

CUresult cuInit(unsigned int Flags) {
    Driver &d = drv();
    if (d.torn_down) return CUDA_ERROR_DEINITIALIZED;
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    d.initialized = true;
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *driverVersion) {
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = 13000;
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
#define FAKE_ERR_TEXT(code, text) \
    if (error == code) {          \
        *pStr = text;             \
        return CUDA_SUCCESS;      \
    }
    FAKE_CUDA_ERRORS(FAKE_ERR_TEXT)
    *pStr = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult error, const char **pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
#define FAKE_ERR_CODE(code, text) \
    if (error == code) {          \
        *pStr = #code;            \
        return CUDA_SUCCESS;      \
    }
    FAKE_CUDA_ERRORS(FAKE_ERR_CODE)
    *pStr = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
}

// Real cudart asks for private tables here; the fake has none, and callers must cope with that.
CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *) {
    if (ppExportTable) *ppExportTable = nullptr;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus) {
    return lookup("cuGetProcAddress_v2", symbol, pfn, cudaVersion, flags, symbolStatus);
}

// The 4-argument form of CUDA 11.3 to 11.8, still handed out for cudaVersion < 12000.
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    return lookup("cuGetProcAddress", symbol, pfn, cudaVersion, flags, nullptr);
}

// ---- devices ------------------------------------------------------------------------------------------

CUresult cuDeviceGetCount(int *count) {
    if (CUresult r = need_init()) return r;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = static_cast<int>(drv().visible.size());
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    int phys;
    if (CUresult r = need_device(ordinal, &phys)) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (listed(drv().fail_query, "name")) return CUDA_ERROR_UNKNOWN;
    std::snprintf(name, static_cast<size_t>(len), "Fake GPU %d", phys);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (listed(drv().fail_query, "uuid")) return CUDA_ERROR_UNKNOWN;
    fake::uuid_bytes(phys, reinterpret_cast<unsigned char *>(uuid->bytes));
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (listed(drv().fail_query, "total")) return CUDA_ERROR_UNKNOWN;
    *bytes = drv().capacity[phys];
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    switch (attrib) {  // an H100/H200-like device; anything not listed reads as 0
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = 9; break;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = 0; break;
        case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = 132; break;
        case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
        case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
        case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = 0x10 + phys; break;
        case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
        case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
        case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *pi = 1; break;
        default: *pi = 0; break;
    }
    return CUDA_SUCCESS;
}

// ---- contexts -----------------------------------------------------------------------------------------

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> lock(drv().mu);
    // The first retain makes the context, and its memory (FAKE_CUDA_CTX_BYTES): it can fail as on a full GPU.
    if (drv().primary_refs[dev] == 0)
        if (CUresult r = context_made(phys)) return r;
    drv().primary_refs[dev]++;
    *pctx = &drv().primary[dev];
    return CUDA_SUCCESS;
}

// The primary context object stays valid after its last release (the real one is only deactivated).
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    std::lock_guard<std::mutex> lock(drv().mu);
    if (drv().primary_refs[dev] == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--drv().primary_refs[dev] == 0) context_gone(phys);
    return CUDA_SUCCESS;
}

// Destroys the primary context at once, whatever its retains (the real driver frees its memory too).
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    std::lock_guard<std::mutex> lock(drv().mu);
    if (drv().primary_refs[dev] > 0) context_gone(phys);
    drv().primary_refs[dev] = 0;
    return CUDA_SUCCESS;
}

// Every cuCtxCreate variant makes a new context and pushes it onto the calling thread's stack.
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int, CUdevice dev) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = context_made(phys)) return r;
    *pctx = new CUctx_st{dev, phys, false, false, false};
    t_stack.push_back(*pctx);
    return CUDA_SUCCESS;
}
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *, int, unsigned int flags, CUdevice dev) {
    return cuCtxCreate_v2(pctx, flags, dev);
}
CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *, unsigned int flags, CUdevice dev) {
    return cuCtxCreate_v2(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx) {
    if (CUresult r = need_init()) return r;
    if (!ctx || ctx->primary || ctx->destroyed) return CUDA_ERROR_INVALID_VALUE;
    ctx->destroyed = true;  // kept, not freed: see CUctx_st
    context_gone(ctx->phys);
    if (!t_stack.empty() && t_stack.back() == ctx) t_stack.pop_back();
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
    if (CUresult r = need_init()) return r;
    if (ctx && ctx->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (!ctx) {
        if (!t_stack.empty()) t_stack.pop_back();
    } else if (t_stack.empty()) {
        t_stack.push_back(ctx);
    } else {
        t_stack.back() = ctx;
    }
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx) {
    if (CUresult r = need_init()) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = t_stack.empty() ? nullptr : t_stack.back();
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device) {
    CUctx_st *ctx = nullptr;
    if (CUresult r = need_ctx(&ctx)) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = ctx->ordinal;
    return CUDA_SUCCESS;
}

// CUDA 13's variants name the context; NULL means the current one.
CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
    if (!ctx) return cuCtxGetDevice(device);
    if (CUresult r = need_init()) return r;
    if (ctx->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = ctx->ordinal;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
    if (CUresult r = need_init()) return r;
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    t_stack.push_back(ctx);
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
    if (CUresult r = need_init()) return r;
    if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx) *pctx = t_stack.back();
    t_stack.pop_back();
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() {
    CUctx_st *ctx = nullptr;
    if (CUresult r = need_ctx(&ctx)) return r;
    synchronized(ctx->phys);
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize_v2(CUcontext ctx) {
    if (!ctx) return cuCtxSynchronize();
    if (CUresult r = need_init()) return r;
    if (ctx->destroyed) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    synchronized(ctx->phys);
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *phStream, unsigned int) {
    CUctx_st *ctx = nullptr;
    if (CUresult r = need_ctx(&ctx)) return r;
    if (!phStream) return CUDA_ERROR_INVALID_VALUE;
    *phStream = owned(new CUstream_st{ctx, nullptr});
    return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream hStream) {
    if (CUresult r = need_init()) return r;
    // NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are not streams of ours.
    if (reinterpret_cast<uintptr_t>(hStream) <= 2) return CUDA_ERROR_INVALID_HANDLE;
    disown(hStream);
    delete hStream;
    return CUDA_SUCCESS;
}

// ---- linear device memory ------------------------------------------------------------------------------

// FAKE_CUDA_ALLOC_DELAY_US: cuMemAlloc_v2 takes that long before it allocates, as a large real one
// does: its bytes are charged by the shim and not yet in the driver meanwhile (t_usage).
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    static const uint64_t delay_us = fake::env_u64("FAKE_CUDA_ALLOC_DELAY_US", 0);
    if (delay_us) usleep((useconds_t)delay_us);
    return device_alloc("cuMemAlloc_v2", dptr, bytesize);
}
CUresult cuMemFree_v2(CUdeviceptr dptr) { return device_free("cuMemFree_v2", dptr); }

// 32-bit device pointers cannot hold the fake's host addresses; these exist so that an old cudaVersion
// gets a distinct entry point, as it would from the real driver.
CUresult cuMemAlloc(CUdeviceptr_v1 *, unsigned int) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult cuMemFree(CUdeviceptr_v1) { return CUDA_ERROR_NOT_SUPPORTED; }

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes) {
    bool ok =
        pPitch && WidthInBytes && Height && (ElementSizeBytes == 4 || ElementSizeBytes == 8 || ElementSizeBytes == 16);
    if (!ok) {
        CUresult r = need_init();
        if (!r) r = CUDA_ERROR_INVALID_VALUE;
        trace("cuMemAllocPitch_v2", r, "%zux%zu", WidthInBytes, Height);
        return r;
    }
    // A width or a height whose pitched size passes 2^64 is more than any device holds: out of
    // memory, as a real driver says, never a size that wrapped around to a small one.
    unsigned __int128 bytes =
        ((unsigned __int128)WidthInBytes + kPitchAlign - 1) / kPitchAlign * kPitchAlign * (unsigned __int128)Height;
    if (bytes > UINT64_MAX) {
        trace("cuMemAllocPitch_v2", CUDA_ERROR_OUT_OF_MEMORY, "%zux%zu", WidthInBytes, Height);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    size_t pitch = (WidthInBytes + kPitchAlign - 1) / kPitchAlign * kPitchAlign;
    CUresult r = device_alloc("cuMemAllocPitch_v2", dptr, static_cast<uint64_t>(bytes));
    if (!r) *pPitch = pitch;
    return r;
}

// Managed memory is charged to the current context's device like cuMemAlloc (a simplification: the
// real driver may oversubscribe it), so that it shows up in the device's bytes.
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) {
        trace("cuMemAllocManaged", CUDA_ERROR_INVALID_VALUE, "%zu", bytesize);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return device_alloc("cuMemAllocManaged", dptr, bytesize);
}

// Stream-ordered allocation and its pools: fake_cuda_usage.cpp.

CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
    CUctx_st *ctx = nullptr;
    CUresult r = need_ctx(&ctx);
    if (!r && (!free || !total)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        uint64_t cap = drv().capacity[ctx->phys], used = drv().truth->dev[ctx->phys].current.load();
        *total = cap;
        *free = used < cap ? cap - used : 0;
    }
    trace("cuMemGetInfo_v2", r, "%zu", r ? 0 : *free);
    return r;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
    if (CUresult r = need_init()) return r;
    if (ByteCount && (!dstDevice || !srcHost)) return CUDA_ERROR_INVALID_VALUE;
    if (ByteCount) std::memcpy(reinterpret_cast<void *>(dstDevice), srcHost, ByteCount);
    return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    if (CUresult r = need_init()) return r;
    if (ByteCount && (!dstHost || !srcDevice)) return CUDA_ERROR_INVALID_VALUE;
    if (ByteCount) std::memcpy(dstHost, reinterpret_cast<const void *>(srcDevice), ByteCount);
    return CUDA_SUCCESS;
}
CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
    if (CUresult r = need_init()) return r;
    if (N && !dstDevice) return CUDA_ERROR_INVALID_VALUE;
    if (N) std::memset(reinterpret_cast<void *>(dstDevice), uc, N);
    return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) { return cuMemcpyHtoD_v2(d, s, n); }
CUresult cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n) { return cuMemcpyDtoH_v2(d, s, n); }
CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char uc, size_t n) { return cuMemsetD8_v2(d, uc, n); }

// ---- virtual memory management: handles, address ranges, mappings ----------------------------------
// A handle is a memfd (sparse, so free until touched); cuMemMap maps it over the reserved range with
// MAP_FIXED, so programs can write through the address after cuMemSetAccess, as on a GPU.

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags) {
    if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
    *granularity = kGranularity;
    return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long) {
    CUresult r = need_init();
    int phys = -1;
    if (!r &&
        (!handle || !prop || size == 0 || size % kGranularity != 0 || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED))
        r = CUDA_ERROR_INVALID_VALUE;
    if (!r && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) r = need_device(prop->location.id, &phys);
    if (!r) r = charge(phys, size);
    if (!r) {
        int fd = memfd_create("fake_cuda_vmm", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
            if (fd >= 0) close(fd);
            uncharge(phys, size, getpid());
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            std::lock_guard<std::mutex> lock(drv().mu);
            *handle = drv().next_handle++;
            drv().handles[*handle] = Handle{fd, size, phys, 0, false, getpid()};
        }
    }
    trace("cuMemCreate", r, "%zu", size);
    return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    CUresult r = need_init();
    if (!r && free_fails()) r = CUDA_ERROR_UNKNOWN;
    if (!r) {
        std::lock_guard<std::mutex> lock(drv().mu);
        auto it = drv().handles.find(handle);
        if (it == drv().handles.end() || it->second.released) {
            r = CUDA_ERROR_INVALID_VALUE;
        } else {
            it->second.released = true;
            handle_maybe_destroy(handle);
        }
    }
    trace("cuMemRelease", r, "0x%llx", handle);
    return r;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr, unsigned long long) {
    if (CUresult r = need_init()) return r;
    if (!ptr || size == 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
    size_t align = alignment > kGranularity ? alignment : kGranularity;
    // Over-reserve, then trim to an aligned range.
    void *p = mmap(nullptr, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t start = reinterpret_cast<uintptr_t>(p), base = (start + align - 1) / align * align;
    if (base > start) munmap(p, base - start);
    if (base + size < start + size + align) munmap(reinterpret_cast<void *>(base + size), start + align - base);
    std::lock_guard<std::mutex> lock(drv().mu);
    drv().reservations[base] = size;
    *ptr = base;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    if (CUresult r = need_init()) return r;
    std::lock_guard<std::mutex> lock(drv().mu);
    auto it = drv().reservations.find(ptr);
    if (it == drv().reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
    munmap(reinterpret_cast<void *>(ptr), size);
    drv().reservations.erase(it);
    return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long) {
    if (CUresult r = need_init()) return r;
    std::lock_guard<std::mutex> lock(drv().mu);
    auto h = drv().handles.find(handle);
    if (h == drv().handles.end() || h->second.released || size == 0 || offset + size > h->second.size)
        return CUDA_ERROR_INVALID_VALUE;
    bool inside = false;
    for (auto &res : drv().reservations) inside |= ptr >= res.first && ptr + size <= res.first + res.second;
    if (!inside || drv().mappings.count(ptr)) return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap(reinterpret_cast<void *>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->second.fd,
                   static_cast<off_t>(offset));
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    h->second.mappings++;
    drv().mappings[ptr] = Mapping{handle, size};
    return CUDA_SUCCESS;
}

// Unmaps every mapping that starts inside [ptr, ptr+size), leaving the address range reserved.
CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    if (CUresult r = need_init()) return r;
    std::lock_guard<std::mutex> lock(drv().mu);
    bool any = false;
    for (auto it = drv().mappings.begin(); it != drv().mappings.end();) {
        if (it->first < ptr || it->first >= ptr + size) {
            ++it;
            continue;
        }
        mmap(reinterpret_cast<void *>(it->first), it->second.size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        CUmemGenericAllocationHandle h = it->second.handle;
        it = drv().mappings.erase(it);
        drv().handles[h].mappings--;
        handle_maybe_destroy(h);
        any = true;
    }
    return any ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    if (CUresult r = need_init()) return r;
    if (!desc || count == 0) return CUDA_ERROR_INVALID_VALUE;
    int prot = PROT_NONE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) prot = PROT_READ | PROT_WRITE;
        else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE) prot = PROT_READ;
    }
    return mprotect(reinterpret_cast<void *>(ptr), size, prot) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- CUDA arrays (no backing memory: programs cannot address an array directly) ----------------------

CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    return array_create("cuArrayCreate_v2", pHandle, d->Format, d->NumChannels, d->Width, d->Height, 0);
}

CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    return array_create("cuArray3DCreate_v2", pHandle, d->Format, d->NumChannels, d->Width, d->Height, d->Depth);
}

CUresult cuArrayDestroy(CUarray hArray) {
    CUresult r = need_init();
    int phys = -1;
    if (!r && free_fails()) r = CUDA_ERROR_UNKNOWN;
    if (!r) {
        std::lock_guard<std::mutex> lock(drv().mu);
        auto it = drv().arrays.find(hArray);
        if (it == drv().arrays.end()) r = CUDA_ERROR_INVALID_HANDLE;
        else phys = it->second, drv().arrays.erase(it);
    }
    trace("cuArrayDestroy", r, "%p", static_cast<void *>(hArray));
    if (!r) {
        uncharge(phys, hArray->bytes, hArray->owner);
        delete hArray;
    }
    return r;
}

// A mipmapped array holds every level, each dimension halving (never below 1) from one level to the next.
CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                unsigned int numMipmapLevels) {
    CUctx_st *ctx = nullptr;
    CUresult r = need_ctx(&ctx);
    uint64_t total = 0;
    if (!r && (!pHandle || !d || numMipmapLevels == 0)) r = CUDA_ERROR_INVALID_VALUE;
    for (unsigned l = 0; !r && l < numMipmapLevels; l++) {
        auto level = [l](size_t n) -> size_t { return n == 0 ? 0 : ((n >> l) ? (n >> l) : 1); };
        uint64_t b = array_bytes(d->Format, d->NumChannels, level(d->Width), level(d->Height), level(d->Depth));
        if (!b) r = CUDA_ERROR_INVALID_VALUE;
        total += b;
    }
    if (!r) r = charge(ctx->phys, total);
    if (!r) {
        *pHandle = new CUmipmappedArray_st{ctx->phys, total, getpid()};
        std::lock_guard<std::mutex> lock(drv().mu);
        drv().mipmaps[*pHandle] = ctx->phys;
    }
    trace("cuMipmappedArrayCreate", r, "%llu", static_cast<unsigned long long>(total));
    return r;
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) {
    CUresult r = need_init();
    int phys = -1;
    if (!r && free_fails()) r = CUDA_ERROR_UNKNOWN;
    if (!r) {
        std::lock_guard<std::mutex> lock(drv().mu);
        auto it = drv().mipmaps.find(h);
        if (it == drv().mipmaps.end()) r = CUDA_ERROR_INVALID_HANDLE;
        else phys = it->second, drv().mipmaps.erase(it);
    }
    trace("cuMipmappedArrayDestroy", r, "%p", static_cast<void *>(h));
    if (!r) {
        uncharge(phys, h->bytes, h->owner);
        delete h;
    }
    return r;
}

}  // extern "C"
