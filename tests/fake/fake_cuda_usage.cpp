// The test driver's memory beside allocations (issue 19): what a real driver takes for a process
// that no allocation call returns, so that the shim's accounting of it can be checked against the
// truth file (fake_truth.h), which counts all of it:
//   - contexts: FAKE_CUDA_CTX_BYTES per context, taken when the primary context is first retained
//     (or a context created) and given back when it goes, as a real context's ~500 MiB;
//   - modules and libraries: FAKE_CUDA_MODULE_BYTES per load, given back at unload;
//   - lazily loaded code: FAKE_CUDA_LAZY_BYTES at a context's first kernel launch, which no memory
//     call sees (only the driver's per-process view, the fake NVML, shows it);
//   - stream-ordered pools: each device has a default pool, more can be made; an async allocation
//     takes from its pool's free reserve first and grows the reserve in 2 MiB chunks; a free keeps
//     its bytes in the pool, which gives back what exceeds its release threshold (default 0) at a
//     synchronization point (cuStreamSynchronize, cuCtxSynchronize) or cuMemPoolTrimTo;
//   - graphs: memory nodes (cuGraphAddMemAllocNode, or cuMemAllocAsync on a capturing stream) take
//     nothing until the executable graph is uploaded or launched; then the device's graph pool maps
//     the graph's nodes, reusing what it holds free, and keeps it after the graph is destroyed until
//     cuDeviceGraphMemTrim (which also unmaps graphs not running: in the fake, all of them).
// Everything completes at once, as in the rest of the fake; nothing is thread-safe beyond one lock.
// FAKE_CUDA_POOL_DELAY_US: an async allocation or free, or a graph's mapping (upload, launch), sleeps
// that long before and after it changes its pool, as a real call takes its time: a reading of the
// pools by another thread then falls between a call's effect and its caller's bookkeeping
// (tests/integration/pool_race_linked.c, graph_race_linked.c).
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "fake_cuda.h"
#include "fake_device.h"

struct CUmemPoolHandle_st {
    int phys;
    uint64_t reserved, used, threshold, reserved_high, used_high;
    bool is_default;
};
struct CUgraphNode_st {
    CUgraphNodeType type;
    uint64_t bytes;  // a memory node's allocation
    int phys;
    CUdeviceptr dptr;
};
struct CUgraph_st {
    std::vector<CUgraphNode> nodes;
};
struct CUgraphExec_st {
    uint64_t footprint[fake::kMaxDevices];  // its memory nodes' bytes, per physical device
    bool resident;                          // mapped by an upload or a launch, not trimmed since
};
struct CUmod_st {
    int phys;
    uint64_t bytes;
};
struct CUlib_st {
    int phys;
    uint64_t bytes;
};

namespace fakecu {
namespace {

constexpr uint64_t kChunk = 2u << 20;
uint64_t round_up(uint64_t n) { return (n + kChunk - 1) / kChunk * kChunk; }

struct GraphPool {
    uint64_t reserved = 0, used = 0, reserved_high = 0, used_high = 0;
};

struct Usage {
    std::mutex mu;
    pid_t owner = getpid();
    CUmemPoolHandle_st default_pool[fake::kMaxDevices];
    CUmemoryPool current_pool[fake::kMaxDevices] = {};
    std::vector<CUmemoryPool> created;
    std::unordered_map<CUdeviceptr, std::pair<CUmemoryPool, uint64_t>> pool_allocs;
    GraphPool graphs[fake::kMaxDevices];
    std::vector<CUgraphExec> execs;
    uint64_t contexts[fake::kMaxDevices] = {};  // FAKE_CUDA_CTX_BYTES charged, per physical device
    uint64_t modules[fake::kMaxDevices] = {};
    uint64_t lazy[fake::kMaxDevices] = {};
    uintptr_t next_va = 0x7e0000000000;  // addresses of graph allocations (never mapped, never touched)
    Usage() {
        for (int i = 0; i < fake::kMaxDevices; i++) {
            default_pool[i] = CUmemPoolHandle_st{i, 0, 0, 0, 0, 0, true};
            current_pool[i] = &default_pool[i];
        }
    }
};

Usage &usage() {
    // Never destroyed: exit-time code may still call in. Its lock is taken across fork, as the rest
    // of the fake's (a child would otherwise inherit it held).
    static Usage *u = [] {
        Usage *made = new Usage;
        pthread_atfork([] { usage().mu.lock(); }, [] { usage().mu.unlock(); }, [] { usage().mu.unlock(); });
        return made;
    }();
    return *u;
}

// Gives back what a pool holds beyond max(keep, its live bytes rounded to chunks) (caller holds mu).
void pool_trim(CUmemoryPool p, uint64_t keep) {
    if (keep >= p->reserved) return;  // also keeps round_up(UINT64_MAX), PyTorch's threshold, from wrapping
    uint64_t floor = round_up(p->used);
    if (keep > floor) floor = round_up(keep);
    if (p->reserved <= floor) return;
    uncharge(p->phys, p->reserved - floor, getpid());
    p->reserved = floor;
}

bool pool_known(CUmemoryPool p) {
    Usage &u = usage();
    if (p >= u.default_pool && p < u.default_pool + fake::kMaxDevices) return true;
    for (CUmemoryPool q : u.created)
        if (q == p) return true;
    return false;
}

void pool_delay() {
    static const uint64_t us = env_bytes("FAKE_CUDA_POOL_DELAY_US");
    if (us) usleep((useconds_t)us);
}

// One async allocation from `pool` (null: the current context's device's current pool).
CUresult pool_alloc_now(const char *fn, CUdeviceptr *dptr, uint64_t bytes, CUmemoryPool pool, CUstream stream) {
    CUctx_st *ctx = nullptr;
    CUresult r = need_ctx(&ctx);
    if (!r && (!dptr || bytes == 0)) r = CUDA_ERROR_INVALID_VALUE;
    Usage &u = usage();
    std::lock_guard<std::mutex> lock(u.mu);
    if (!r && stream && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD && stream->capture) {
        // Captured: a memory node of the graph, no memory now (cuGraphLaunch maps it).
        auto *node = new CUgraphNode_st{CU_GRAPH_NODE_TYPE_MEM_ALLOC, bytes, ctx->phys, u.next_va};
        u.next_va += round_up(bytes);
        stream->capture->nodes.push_back(node);
        *dptr = node->dptr;
        trace(fn, r, "%llu captured", (unsigned long long)bytes);
        return CUDA_SUCCESS;
    }
    if (!r && !pool) pool = u.current_pool[ctx->phys];
    if (!r && !pool_known(pool)) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        uint64_t free_in_pool = pool->reserved - pool->used;
        uint64_t grow = bytes > free_in_pool ? round_up(bytes - free_in_pool) : 0;
        if (grow) r = charge(pool->phys, grow);
        if (!r) {
            pool->reserved += grow;
            pool->used += bytes;
            if (pool->reserved > pool->reserved_high) pool->reserved_high = pool->reserved;
            if (pool->used > pool->used_high) pool->used_high = pool->used;
            // Addresses that a program may write to, as from the other allocation calls.
            void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (p == MAP_FAILED) {
                pool->used -= bytes;
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                *dptr = reinterpret_cast<CUdeviceptr>(p);
                u.pool_allocs[*dptr] = {pool, bytes};
            }
        }
    }
    trace(fn, r, "%llu", (unsigned long long)bytes);
    return r;
}

CUresult pool_alloc(const char *fn, CUdeviceptr *dptr, uint64_t bytes, CUmemoryPool pool, CUstream stream) {
    pool_delay();
    CUresult r = pool_alloc_now(fn, dptr, bytes, pool, stream);
    pool_delay();
    return r;
}

CUresult pool_free_now(const char *fn, CUdeviceptr ptr, CUstream stream) {
    CUresult r = need_init();
    Usage &u = usage();
    std::lock_guard<std::mutex> lock(u.mu);
    if (!r && stream && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD && stream->capture) {
        auto *node = new CUgraphNode_st{CU_GRAPH_NODE_TYPE_MEM_FREE, 0, -1, ptr};
        stream->capture->nodes.push_back(node);
        return CUDA_SUCCESS;
    }
    auto it = r ? u.pool_allocs.end() : u.pool_allocs.find(ptr);
    if (!r && it == u.pool_allocs.end()) r = CUDA_ERROR_INVALID_VALUE;
    if (!r) {
        it->second.first->used -= it->second.second;
        munmap(reinterpret_cast<void *>(ptr), it->second.second);
        u.pool_allocs.erase(it);
    }
    trace(fn, r, "0x%llx", (unsigned long long)ptr);
    return r;
}

CUresult pool_free(const char *fn, CUdeviceptr ptr, CUstream stream) {
    pool_delay();
    CUresult r = pool_free_now(fn, ptr, stream);
    pool_delay();
    return r;
}

// Maps an executable graph's memory nodes into the device's graph pool (an upload or a launch).
CUresult graph_map_now(const char *fn, CUgraphExec exec) {
    CUresult r = need_init();
    if (!r && !exec) r = CUDA_ERROR_INVALID_VALUE;
    Usage &u = usage();
    std::lock_guard<std::mutex> lock(u.mu);
    if (!r && !exec->resident) {
        int phys = 0;
        for (; phys < fake::kMaxDevices && !r; phys++) {
            uint64_t need = exec->footprint[phys];
            if (!need) continue;
            GraphPool &g = u.graphs[phys];
            uint64_t free_in_pool = g.reserved - g.used;
            uint64_t grow = need > free_in_pool ? round_up(need - free_in_pool) : 0;
            if (grow && (r = charge(phys, grow))) break;
            g.reserved += grow;
            g.used += need;
            if (g.reserved > g.reserved_high) g.reserved_high = g.reserved;
            if (g.used > g.used_high) g.used_high = g.used;
        }
        if (r) {  // give back what the devices before the failing one took for it
            for (int q = 0; q < phys; q++)
                if (exec->footprint[q]) u.graphs[q].used -= exec->footprint[q];
        } else {
            exec->resident = true;
        }
    }
    trace(fn, r, "%p", static_cast<void *>(exec));
    return r;
}

CUresult graph_map(const char *fn, CUgraphExec exec) {
    pool_delay();
    CUresult r = graph_map_now(fn, exec);
    pool_delay();
    return r;
}

CUresult instantiate(CUgraphExec *out, CUgraph graph) {
    if (CUresult r = need_init()) return r;
    if (!out || !graph) return CUDA_ERROR_INVALID_VALUE;
    auto *e = new CUgraphExec_st{};
    for (CUgraphNode n : graph->nodes)
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && n->phys >= 0) e->footprint[n->phys] += round_up(n->bytes);
    Usage &u = usage();
    std::lock_guard<std::mutex> lock(u.mu);
    u.execs.push_back(e);
    *out = e;
    return CUDA_SUCCESS;
}

// A real driver gives back everything at exit; so does the fake, for what its owner process holds.
__attribute__((destructor)) void teardown() {
    Usage &u = usage();
    std::lock_guard<std::mutex> lock(u.mu);
    if (getpid() != u.owner) return;
    for (int i = 0; i < fake::kMaxDevices; i++) {
        uint64_t held = u.default_pool[i].reserved + u.graphs[i].reserved + u.contexts[i] + u.modules[i] + u.lazy[i];
        if (held) uncharge(i, held, u.owner);
    }
    for (CUmemoryPool p : u.created) uncharge(p->phys, p->reserved, u.owner);
}

}  // namespace

CUresult context_made(int phys) {
    uint64_t bytes = env_bytes("FAKE_CUDA_CTX_BYTES");
    if (!bytes) return CUDA_SUCCESS;
    if (CUresult r = charge(phys, bytes)) return r;
    std::lock_guard<std::mutex> lock(usage().mu);
    usage().contexts[phys] += bytes;
    return CUDA_SUCCESS;
}

void context_gone(int phys) {
    uint64_t bytes = env_bytes("FAKE_CUDA_CTX_BYTES");
    std::lock_guard<std::mutex> lock(usage().mu);
    if (!bytes || usage().contexts[phys] < bytes) return;
    usage().contexts[phys] -= bytes;
    uncharge(phys, bytes, getpid());
}

void synchronized(int phys) {
    Usage &u = usage();
    std::lock_guard<std::mutex> lock(u.mu);
    pool_trim(&u.default_pool[phys], u.default_pool[phys].threshold);
    for (CUmemoryPool p : u.created)
        if (p->phys == phys) pool_trim(p, p->threshold);
}

bool pool_freed_by_plain_free(CUdeviceptr ptr) {
    Usage &u = usage();
    std::lock_guard<std::mutex> lock(u.mu);
    auto it = u.pool_allocs.find(ptr);
    if (it == u.pool_allocs.end()) return false;
    it->second.first->used -= it->second.second;
    munmap(reinterpret_cast<void *>(ptr), it->second.second);
    u.pool_allocs.erase(it);
    return true;
}

}  // namespace fakecu

using namespace fakecu;

// Module and library loads share one shape.
namespace {
template <typename Handle>
CUresult load(const char *fn, Handle *out) {
    CUctx_st *ctx = nullptr;
    CUresult r = need_ctx(&ctx);
    uint64_t bytes = env_bytes("FAKE_CUDA_MODULE_BYTES");
    if (!r && !out) r = CUDA_ERROR_INVALID_VALUE;
    if (!r && bytes) r = charge(ctx->phys, bytes);
    if (!r) {
        *out = owned(new typename std::remove_pointer<Handle>::type{ctx->phys, bytes});
        std::lock_guard<std::mutex> lock(usage().mu);
        usage().modules[ctx->phys] += bytes;
    }
    trace(fn, r, "%llu", (unsigned long long)bytes);
    return r;
}

template <typename Handle>
CUresult unload(Handle h) {
    if (CUresult r = need_init()) return r;
    if (!h) return CUDA_ERROR_INVALID_VALUE;
    {
        std::lock_guard<std::mutex> lock(usage().mu);
        usage().modules[h->phys] -= h->bytes;
    }
    uncharge(h->phys, h->bytes, getpid());
    disown(h);
    delete h;
    return CUDA_SUCCESS;
}
}  // namespace

extern "C" {

// ---- stream-ordered allocation ------------------------------------------------------------------------

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s) {
    return pool_alloc("cuMemAllocAsync", dptr, bytesize, nullptr, s);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s) {
    return pool_alloc("cuMemAllocAsync_ptsz", dptr, bytesize, nullptr, s);
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s) {
    return pool ? pool_alloc("cuMemAllocFromPoolAsync", dptr, bytesize, pool, s) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s) {
    return pool ? pool_alloc("cuMemAllocFromPoolAsync_ptsz", dptr, bytesize, pool, s) : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { return pool_free("cuMemFreeAsync", dptr, s); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) { return pool_free("cuMemFreeAsync_ptsz", dptr, s); }

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    *pool = &usage().default_pool[phys];
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> lock(usage().mu);
    *pool = usage().current_pool[phys];
    return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    std::lock_guard<std::mutex> lock(usage().mu);
    if (!pool || !pool_known(pool) || pool->phys != phys) return CUDA_ERROR_INVALID_VALUE;
    usage().current_pool[phys] = pool;
    return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    int phys;
    if (!pool || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = need_device(props->location.id, &phys)) return r;
    std::lock_guard<std::mutex> lock(usage().mu);
    *pool = new CUmemPoolHandle_st{phys, 0, 0, 0, 0, 0, false};
    usage().created.push_back(*pool);
    return CUDA_SUCCESS;
}

// The pool's memory goes back to the device; a destroyed pool's handle is never reused (leaked).
CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    if (CUresult r = need_init()) return r;
    Usage &u = usage();
    std::lock_guard<std::mutex> lock(u.mu);
    for (size_t i = 0; i < u.created.size(); i++) {
        if (u.created[i] != pool) continue;
        uncharge(pool->phys, pool->reserved, getpid());
        pool->reserved = 0;
        u.created.erase(u.created.begin() + (long)i);
        for (CUmemoryPool &c : u.current_pool)
            if (c == pool) c = &u.default_pool[pool->phys];
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;  // unknown, or a default pool
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    if (CUresult r = need_init()) return r;
    std::lock_guard<std::mutex> lock(usage().mu);
    if (!pool_known(pool)) return CUDA_ERROR_INVALID_VALUE;
    pool_trim(pool, keep);
    trace("cuMemPoolTrimTo", CUDA_SUCCESS, "%zu -> reserved %llu", keep, (unsigned long long)pool->reserved);
    return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    if (CUresult r = need_init()) return r;
    std::lock_guard<std::mutex> lock(usage().mu);
    if (!pool_known(pool) || !value) return CUDA_ERROR_INVALID_VALUE;
    cuuint64_t v = *static_cast<cuuint64_t *>(value);
    switch (attr) {
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: pool->threshold = v; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: pool->reserved_high = pool->reserved; break;  // reset to current
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: pool->used_high = pool->used; break;
        default: break;  // the reuse policies: accepted, without effect here
    }
    return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    if (CUresult r = need_init()) return r;
    std::lock_guard<std::mutex> lock(usage().mu);
    if (!pool_known(pool) || !value) return CUDA_ERROR_INVALID_VALUE;
    cuuint64_t *out = static_cast<cuuint64_t *>(value);
    switch (attr) {
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *out = pool->threshold; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *out = pool->reserved; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *out = pool->reserved_high; break;
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *out = pool->used; break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *out = pool->used_high; break;
        default: *static_cast<int *>(value) = 1; break;
    }
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream s) {
    CUctx_st *ctx = nullptr;
    if (CUresult r = need_ctx(&ctx)) return r;
    int phys = s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD ? s->ctx->phys : ctx->phys;
    synchronized(phys);
    return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize_ptsz(CUstream s) { return cuStreamSynchronize(s); }

// ---- stream capture ------------------------------------------------------------------------------------

CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode) {
    if (CUresult r = need_init()) return r;
    // The legacy and per-thread default streams cannot be captured (the real driver refuses too).
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    std::lock_guard<std::mutex> lock(usage().mu);
    if (s->capture) return CUDA_ERROR_ILLEGAL_STATE;
    s->capture = owned(new CUgraph_st);
    return CUDA_SUCCESS;
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m) { return cuStreamBeginCapture_v2(s, m); }

CUresult cuStreamEndCapture(CUstream s, CUgraph *graph) {
    if (CUresult r = need_init()) return r;
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || !graph) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> lock(usage().mu);
    if (!s->capture) return CUDA_ERROR_ILLEGAL_STATE;
    *graph = s->capture;
    s->capture = nullptr;
    return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *graph) { return cuStreamEndCapture(s, graph); }

CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status) {
    if (CUresult r = need_init()) return r;
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> lock(usage().mu);
    bool capturing = s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD && s->capture;
    *status = capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *status) { return cuStreamIsCapturing(s, status); }

// ---- graphs ----------------------------------------------------------------------------------------------

CUresult cuGraphCreate(CUgraph *graph, unsigned int) {
    if (CUresult r = need_init()) return r;
    if (!graph) return CUDA_ERROR_INVALID_VALUE;
    *graph = owned(new CUgraph_st);
    return CUDA_SUCCESS;
}

// The graph's nodes go with it (the fake keeps no node past its graph).
CUresult cuGraphDestroy(CUgraph graph) {
    if (CUresult r = need_init()) return r;
    if (!graph) return CUDA_ERROR_INVALID_VALUE;
    for (CUgraphNode n : graph->nodes) delete n;
    disown(graph);
    delete graph;
    return CUDA_SUCCESS;
}

CUresult cuGraphAddEmptyNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *, size_t) {
    if (CUresult r = need_init()) return r;
    if (!node || !graph) return CUDA_ERROR_INVALID_VALUE;
    *node = new CUgraphNode_st{CU_GRAPH_NODE_TYPE_EMPTY, 0, -1, 0};
    graph->nodes.push_back(*node);
    return CUDA_SUCCESS;
}

CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *, size_t,
                                CUDA_MEM_ALLOC_NODE_PARAMS *params) {
    int phys;
    if (!node || !graph || !params || params->bytesize == 0 ||
        params->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = need_device(params->poolProps.location.id, &phys)) return r;
    std::lock_guard<std::mutex> lock(usage().mu);
    params->dptr = usage().next_va;
    usage().next_va += round_up(params->bytesize);
    *node = new CUgraphNode_st{CU_GRAPH_NODE_TYPE_MEM_ALLOC, params->bytesize, phys, params->dptr};
    graph->nodes.push_back(*node);
    return CUDA_SUCCESS;
}

CUresult cuGraphAddMemFreeNode(CUgraphNode *node, CUgraph graph, const CUgraphNode *, size_t, CUdeviceptr dptr) {
    if (CUresult r = need_init()) return r;
    if (!node || !graph) return CUDA_ERROR_INVALID_VALUE;
    *node = new CUgraphNode_st{CU_GRAPH_NODE_TYPE_MEM_FREE, 0, -1, dptr};
    graph->nodes.push_back(*node);
    return CUDA_SUCCESS;
}

CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *count) {
    if (CUresult r = need_init()) return r;
    if (!graph || !count) return CUDA_ERROR_INVALID_VALUE;
    if (nodes)
        for (size_t i = 0; i < *count && i < graph->nodes.size(); i++) nodes[i] = graph->nodes[i];
    *count = graph->nodes.size();
    return CUDA_SUCCESS;
}

CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type) {
    if (CUresult r = need_init()) return r;
    if (!node || !type) return CUDA_ERROR_INVALID_VALUE;
    *type = node->type;
    return CUDA_SUCCESS;
}

CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *params) {
    if (CUresult r = need_init()) return r;
    if (!node || !params || node->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_INVALID_VALUE;
    memset(params, 0, sizeof *params);
    params->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    // The ordinal of the physical device: the fake's tests run with every device visible in order.
    params->poolProps.location.id = node->phys;
    params->bytesize = node->bytes;
    params->dptr = node->dptr;
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long) {
    return instantiate(exec, graph);
}

CUresult cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node, char *log, size_t log_size) {
    if (error_node) *error_node = nullptr;
    if (log && log_size) log[0] = 0;
    return instantiate(exec, graph);
}

CUresult cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node, char *log, size_t log_size) {
    return cuGraphInstantiate(exec, graph, error_node, log, log_size);
}

CUresult cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    CUresult r = instantiate(exec, graph);
    if (!r && params && (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD))
        r = graph_map("cuGraphInstantiateWithParams", *exec);
    if (params) params->result_out = r ? CUDA_GRAPH_INSTANTIATE_ERROR : CUDA_GRAPH_INSTANTIATE_SUCCESS;
    return r;
}
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    return cuGraphInstantiateWithParams(exec, graph, params);
}

CUresult cuGraphUpload(CUgraphExec exec, CUstream) { return graph_map("cuGraphUpload", exec); }
CUresult cuGraphUpload_ptsz(CUgraphExec exec, CUstream) { return graph_map("cuGraphUpload_ptsz", exec); }
CUresult cuGraphLaunch(CUgraphExec exec, CUstream) { return graph_map("cuGraphLaunch", exec); }
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream) { return graph_map("cuGraphLaunch_ptsz", exec); }

// Its memory stays in the graph pool, free for other graphs, until cuDeviceGraphMemTrim.
CUresult cuGraphExecDestroy(CUgraphExec exec) {
    if (CUresult r = need_init()) return r;
    Usage &u = usage();
    std::lock_guard<std::mutex> lock(u.mu);
    for (size_t i = 0; i < u.execs.size(); i++) {
        if (u.execs[i] != exec) continue;
        if (exec->resident)
            for (int p = 0; p < fake::kMaxDevices; p++) u.graphs[p].used -= exec->footprint[p];
        u.execs.erase(u.execs.begin() + (long)i);
        delete exec;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDeviceGraphMemTrim(CUdevice dev) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    Usage &u = usage();
    std::lock_guard<std::mutex> lock(u.mu);
    for (CUgraphExec e : u.execs)
        if (e->resident && e->footprint[phys]) e->resident = false;  // nothing runs: every graph is idle
    GraphPool &g = u.graphs[phys];
    g.used = 0;
    if (g.reserved) uncharge(phys, g.reserved, getpid());
    g.reserved = 0;
    trace("cuDeviceGraphMemTrim", CUDA_SUCCESS, "%d", dev);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value) {
    int phys;
    if (CUresult r = need_device(dev, &phys)) return r;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> lock(usage().mu);
    const GraphPool &g = usage().graphs[phys];
    cuuint64_t *out = static_cast<cuuint64_t *>(value);
    switch (attr) {
        case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *out = g.used; break;
        case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *out = g.used_high; break;
        case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *out = g.reserved; break;
        case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *out = g.reserved_high; break;
        default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

// ---- modules, libraries, kernels ---------------------------------------------------------------------

CUresult cuModuleLoad(CUmodule *m, const char *) { return load("cuModuleLoad", m); }
CUresult cuModuleLoadData(CUmodule *m, const void *) { return load("cuModuleLoadData", m); }
CUresult cuModuleLoadDataEx(CUmodule *m, const void *, unsigned int, CUjit_option *, void **) {
    return load("cuModuleLoadDataEx", m);
}
CUresult cuModuleLoadFatBinary(CUmodule *m, const void *) { return load("cuModuleLoadFatBinary", m); }
CUresult cuModuleUnload(CUmodule m) { return unload(m); }
CUresult cuLibraryLoadData(CUlibrary *l, const void *, CUjit_option *, void **, unsigned int, CUlibraryOption *,
                           void **, unsigned int) {
    return load("cuLibraryLoadData", l);
}
CUresult cuLibraryLoadFromFile(CUlibrary *l, const char *, CUjit_option *, void **, unsigned int, CUlibraryOption *,
                               void **, unsigned int) {
    return load("cuLibraryLoadFromFile", l);
}
CUresult cuLibraryUnload(CUlibrary l) { return unload(l); }

// Launches nothing; the first launch in a context brings its lazily loaded code onto the device
// (FAKE_CUDA_LAZY_BYTES), which no memory call of the program sees.
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **) {
    CUctx_st *ctx = nullptr;
    if (CUresult r = need_ctx(&ctx)) return r;
    uint64_t bytes = env_bytes("FAKE_CUDA_LAZY_BYTES");
    std::lock_guard<std::mutex> lock(usage().mu);
    if (!ctx->launched && bytes && charge(ctx->phys, bytes) == CUDA_SUCCESS) usage().lazy[ctx->phys] += bytes;
    ctx->launched = true;
    return CUDA_SUCCESS;
}
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shm, CUstream s, void **params, void **extra) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}

}  // extern "C"
