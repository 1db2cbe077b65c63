// The driver hooks of what a process holds beside its allocations (shim/usage/usage.h): contexts,
// modules and libraries, pools, stream capture and graphs. Thin, as in driver.cpp: the decisions
// live in shim/usage/. With GPUGUARD_COUNT_CONTEXT=0 each passes straight to the driver.
#include "shim/usage/usage.h"
#include "shim/api/call.h"
#include "shim/api/export.h"
#include "shim/quota/episode.h"
#include "shim/quota/guard.h"
#include "shim/resolve/real.h"
#include "shim/usage/context.h"
#include "shim/usage/graphs.h"
#include "shim/usage/modules.h"
#include "shim/usage/pools.h"

using namespace gg;
using gg::guard::DriverCall;

namespace {

const RealDriver &R() { return real_driver(); }

// A refusal of a usage room (a context, a graph's memory), reported here as an out-of-memory episode:
// the usage rooms sit below the episodes (docs/architecture.md, "The floors"). Not inlined: the
// report's stack leaves out the shim's frames above the program, the capture, this and the hook.
constexpr int kShimFrames = 3;
__attribute__((noinline)) CUresult refuse(CUresult result, const Refusal &r) {
    if (r.result != CUDA_SUCCESS) episode::failed(r, kShimFrames);
    return result;
}

template <typename T>
uint64_t key_of(T handle) {
    return (uint64_t)(uintptr_t)handle;
}

// A call that makes a context (or retains the primary one): admitted for its cost first.
template <typename Call>
CUresult make_context(Api api, CUdevice dev, bool primary, CUcontext *out, Call &&call) {
    DriverCall scope;
    if (!scope.outermost()) return call();  // made inside a hooked call, which accounts for it
    usage::context::Ticket t;
    if (CUresult refused = usage::context::admit(api, (int)dev, primary, &t)) return refuse(refused, t.refused);
    CUresult r = call();
    usage::context::done(t, r, !primary && r == CUDA_SUCCESS && out ? *out : nullptr);
    return r;
}

// A module or library load: measured around the call.
template <typename Handle, typename Call>
CUresult load(Handle *out, Call &&call) {
    DriverCall scope;
    usage::modules::Ticket t;
    usage::modules::before(&t);
    CUresult r = call();
    usage::modules::after(t, r, r == CUDA_SUCCESS && out ? key_of(*out) : 0);
    return r;
}

// An upload or launch: a graph whose memory is not mapped yet is admitted first.
template <typename Call>
CUresult map_graph(Api api, CUgraphExec exec, Call &&call) {
    DriverCall scope;
    if (!usage::on()) return call();
    usage::graphs::Ticket t;
    if (CUresult refused = usage::graphs::admit(api, exec, &t)) return refuse(refused, t.refused);
    CUresult r = call();
    usage::graphs::done(t, r);
    return r;
}

// A capture's end, whatever ends it (an invalidated capture ends too, with its error).
void capture_end(CUresult r) {
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED || r == CUDA_ERROR_STREAM_CAPTURE_UNJOINED ||
        r == CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
        usage::graphs::capture_ended();
}

}  // namespace

// ---- Contexts ----

GG_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    return make_context(Api::cuDevicePrimaryCtxRetain, dev, true, pctx,
                        [&] { return real_call(R().cuDevicePrimaryCtxRetain, pctx, dev); });
}

GG_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    DriverCall scope;
    CUresult r = real_call(R().cuDevicePrimaryCtxRelease_v2, dev);
    usage::context::released((int)dev, r);
    return r;
}

GG_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
    DriverCall scope;
    CUresult r = real_call(R().cuDevicePrimaryCtxReset_v2, dev);
    usage::context::reset((int)dev, r);
    return r;
}

GG_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    return make_context(Api::cuCtxCreate_v2, dev, false, pctx,
                        [&] { return real_call(R().cuCtxCreate_v2, pctx, flags, dev); });
}

GG_EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags,
                                          CUdevice dev) {
    return make_context(Api::cuCtxCreate_v3, dev, false, pctx,
                        [&] { return real_call(R().cuCtxCreate_v3, pctx, params, n, flags, dev); });
}

GG_EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                          CUdevice dev) {
    return make_context(Api::cuCtxCreate_v4, dev, false, pctx,
                        [&] { return real_call(R().cuCtxCreate_v4, pctx, params, flags, dev); });
}

GG_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
    DriverCall scope;
    CUresult r = real_call(R().cuCtxDestroy_v2, ctx);
    usage::context::destroyed(ctx, r);
    return r;
}

// ---- Modules and libraries ----

GG_EXPORT CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname) {
    return load(module, [&] { return real_call(R().cuModuleLoad, module, fname); });
}

GG_EXPORT CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image) {
    return load(module, [&] { return real_call(R().cuModuleLoadData, module, image); });
}

GG_EXPORT CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int n,
                                              CUjit_option *options, void **values) {
    return load(module, [&] { return real_call(R().cuModuleLoadDataEx, module, image, n, options, values); });
}

GG_EXPORT CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatbin) {
    return load(module, [&] { return real_call(R().cuModuleLoadFatBinary, module, fatbin); });
}

GG_EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule module) {
    DriverCall scope;
    CUresult r = real_call(R().cuModuleUnload, module);
    usage::modules::unloaded(key_of(module), r);
    return r;
}

GG_EXPORT CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jit_options,
                                             void **jit_values, unsigned int n_jit, CUlibraryOption *options,
                                             void **values, unsigned int n) {
    return load(library, [&] {
        return real_call(R().cuLibraryLoadData, library, code, jit_options, jit_values, n_jit, options, values, n);
    });
}

GG_EXPORT CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary *library, const char *file, CUjit_option *jit_options,
                                                 void **jit_values, unsigned int n_jit, CUlibraryOption *options,
                                                 void **values, unsigned int n) {
    return load(library, [&] {
        return real_call(R().cuLibraryLoadFromFile, library, file, jit_options, jit_values, n_jit, options, values, n);
    });
}

GG_EXPORT CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
    DriverCall scope;
    CUresult r = real_call(R().cuLibraryUnload, library);
    usage::modules::unloaded(key_of(library), r);
    return r;
}

// ---- Pools: the shim reads a pool's reserve, so it must forget a pool before the driver destroys it ----

GG_EXPORT CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
    DriverCall scope;
    usage::pools::forget(pool);
    CUresult r = real_call(R().cuMemPoolDestroy, pool);
    // Not from inside the driver's own call (a thread there may hold the pools' readings off).
    if (usage::on() && scope.outermost())
        if (const DeviceInfo *d = device_info(current_ordinal())) usage::reconcile(*d, false);
    return r;
}

GG_EXPORT CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    DriverCall scope;
    CUresult r = real_call(R().cuMemPoolTrimTo, pool, keep);
    if (r == CUDA_SUCCESS && usage::on() && scope.outermost()) usage::pools::trimmed(pool);
    return r;
}

// ---- Stream capture ----

GG_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
    CUresult r = real_call(R().cuStreamBeginCapture_v2, stream, mode);
    usage::graphs::capture_began(r);
    return r;
}

GG_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode) {
    CUresult r = real_call(R().cuStreamBeginCapture_v2_ptsz, stream, mode);
    usage::graphs::capture_began(r);
    return r;
}

GG_EXPORT CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode *deps,
                                                       const CUgraphEdgeData *data, size_t n,
                                                       CUstreamCaptureMode mode) {
    CUresult r = real_call(R().cuStreamBeginCaptureToGraph, stream, graph, deps, data, n, mode);
    usage::graphs::capture_began(r);
    return r;
}

GG_EXPORT CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph, const CUgraphNode *deps,
                                                            const CUgraphEdgeData *data, size_t n,
                                                            CUstreamCaptureMode mode) {
    CUresult r = real_call(R().cuStreamBeginCaptureToGraph_ptsz, stream, graph, deps, data, n, mode);
    usage::graphs::capture_began(r);
    return r;
}

GG_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream stream, CUgraph *graph) {
    CUresult r = real_call(R().cuStreamEndCapture, stream, graph);
    capture_end(r);
    return r;
}

GG_EXPORT CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream stream, CUgraph *graph) {
    CUresult r = real_call(R().cuStreamEndCapture_ptsz, stream, graph);
    capture_end(r);
    return r;
}

// ---- Graphs ----

namespace {
// An instantiation that does not upload: the graph's memory nodes are read for its first launch.
template <typename Call>
CUresult instantiate(CUgraphExec *exec, CUgraph graph, Call &&call) {
    DriverCall scope;
    CUresult r = call();
    if (r == CUDA_SUCCESS && exec) usage::graphs::instantiated(*exec, graph, false);
    return r;
}
}  // namespace

GG_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    return instantiate(exec, graph, [&] { return real_call(R().cuGraphInstantiateWithFlags, exec, graph, flags); });
}

// Before CUDA 12: the same, with an error node and a log for the driver to fill.
GG_EXPORT CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node, char *log,
                                              size_t log_size) {
    return instantiate(exec, graph,
                       [&] { return real_call(R().cuGraphInstantiate, exec, graph, error_node, log, log_size); });
}

GG_EXPORT CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node, char *log,
                                                 size_t log_size) {
    return instantiate(exec, graph,
                       [&] { return real_call(R().cuGraphInstantiate_v2, exec, graph, error_node, log, log_size); });
}

namespace {
// An instantiation that uploads (CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) maps the graph's memory at once:
// it is admitted as a first launch would be.
template <typename Call>
CUresult instantiate_with_params(Api api, CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params,
                                 Call &&call) {
    DriverCall scope;
    bool uploads = params && (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
    usage::graphs::Ticket t;
    if (uploads && usage::on()) {
        int ordinal;
        uint64_t bytes = usage::graphs::footprint(graph, &ordinal);
        if (bytes && ordinal >= 0)
            if (CUresult refused = usage::graphs::admit_footprint(api, ordinal, bytes, &t)) {
                params->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
                return refuse(refused, t.refused);
            }
    }
    CUresult r = call();
    if (r == CUDA_SUCCESS && exec) usage::graphs::instantiated(*exec, graph, uploads);
    usage::graphs::done(t, r);
    return r;
}
}  // namespace

GG_EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *exec, CUgraph graph,
                                                        CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    return instantiate_with_params(Api::cuGraphInstantiateWithParams, exec, graph, params,
                                   [&] { return real_call(R().cuGraphInstantiateWithParams, exec, graph, params); });
}

GG_EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *exec, CUgraph graph,
                                                             CUDA_GRAPH_INSTANTIATE_PARAMS *params) {
    return instantiate_with_params(Api::cuGraphInstantiateWithParams_ptsz, exec, graph, params, [&] {
        return real_call(R().cuGraphInstantiateWithParams_ptsz, exec, graph, params);
    });
}

GG_EXPORT CUresult CUDAAPI cuGraphUpload(CUgraphExec exec, CUstream stream) {
    return map_graph(Api::cuGraphUpload, exec, [&] { return real_call(R().cuGraphUpload, exec, stream); });
}

GG_EXPORT CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec exec, CUstream stream) {
    return map_graph(Api::cuGraphUpload_ptsz, exec, [&] { return real_call(R().cuGraphUpload_ptsz, exec, stream); });
}

GG_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream stream) {
    return map_graph(Api::cuGraphLaunch, exec, [&] { return real_call(R().cuGraphLaunch, exec, stream); });
}

GG_EXPORT CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
    return map_graph(Api::cuGraphLaunch_ptsz, exec, [&] { return real_call(R().cuGraphLaunch_ptsz, exec, stream); });
}

GG_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
    DriverCall scope;
    CUresult r = real_call(R().cuGraphExecDestroy, exec);
    usage::graphs::destroyed(exec, r);
    return r;
}

GG_EXPORT CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice dev) {
    DriverCall scope;
    return usage::graphs::trim_pool(dev);
}
