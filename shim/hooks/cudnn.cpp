// The cuDNN hooks: thin, a few lines each. Which function they call is decided in shim/cudnn/resolve
// (never a hook, never null), the cap in shim/cudnn/cap, the bookkeeping in shim/cudnn/record and plans.
// Only the outermost cuDNN hook on a thread does anything but forward: cuDNN calling its own public
// API passes straight through.
#include "common/base/log.h"
#include "shim/api/export.h"
#include "shim/cudnn/cap.h"
#include "shim/cudnn/plans.h"
#include "shim/cudnn/record.h"
#include "shim/cudnn/resolve.h"
#include "shim/quota/guard.h"

using namespace gg;

namespace {

#define CUDNN_HOOK(symbol) cudnn::Slot slot_##symbol{#symbol};
#include "shim/api/cudnn_hooks.def"
#undef CUDNN_HOOK

// Opens a hook: `gate` (depth, outermost) and `real` (the function to call, typed by the header).
#define GG_CUDNN_GATE(name)                         \
    cudnn::Gate gate(slot_##name);                  \
    const auto real = gate.fn<decltype(&::name)>(); \
    if (!real) return CUDNN_STATUS_NOT_INITIALIZED

// The hook's caller: requests are grouped by it.
#define GG_SITE __builtin_return_address(0)

// A workspace size query: the answer is a size asked for.
template <typename Call>
cudnnStatus_t size_query(const cudnn::Gate &gate, const void *site, size_t *size, Call &&call) {
    cudnnStatus_t st = call();
    if (st == CUDNN_STATUS_SUCCESS && gate.outermost() && size) cudnn::requested(*size, site);
    return st;
}

// An algorithm list (Get_v7, Find, FindEx): its largest usable workspace is a size asked for; under
// the cap, results that do not fit are marked unsupported and moved last.
template <typename Perf, typename Call>
cudnnStatus_t algorithm_list(const cudnn::Gate &gate, const void *site, int *returned, Perf *perf, Call &&call) {
    cudnnStatus_t st = call();
    if (st != CUDNN_STATUS_SUCCESS || !gate.outermost() || !returned || !perf || *returned <= 0) return st;
    int n = *returned;
    cudnn::requested(cudnn::largest_usable(perf, n), site);
    cudnn::Cap cap = cudnn::current_cap();
    if (!cap.on) return st;
    uint64_t largest = 0;
    int marked = cudnn::cap_results(perf, n, cap.bytes, &largest);
    cudnn::rejected_algorithms(marked, largest);
    if (marked)
        log_debug("cuDNN: %d algorithm(s) over the %llu-byte workspace cap moved last", marked,
                  (unsigned long long)cap.bytes);
    return st;
}

// A call that runs with a workspace (or, for Find, allocates its own): `bytes` count as in use while
// it runs, and device memory allocated inside is tagged as workspace and named after the call.
template <typename Call>
cudnnStatus_t using_workspace(const cudnn::Gate &gate, Api api, uint64_t bytes, Call &&call) {
    if (!gate.outermost()) return call();
    guard::RuntimeCall name(api);
    guard::WorkspaceScope tag;
    cudnn::InUse in_use(bytes);
    return call();
}

// A finalized plan's workspace size: known from Finalize or GetAttribute, else asked of cuDNN
// directly (the sub-library's function: nothing is recorded for our own question).
int64_t plan_workspace(cudnnBackendDescriptor_t plan) {
    int64_t ws = cudnn::plans::workspace(plan);
    if (ws != cudnn::plans::kUnknown) return ws;
    cudnn::Gate inner(slot_cudnnBackendGetAttribute);
    auto get = inner.fn<decltype(&::cudnnBackendGetAttribute)>();
    int64_t n = 0;
    ws = 0;
    if (!get ||
        get(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws) != CUDNN_STATUS_SUCCESS ||
        n < 1)
        return cudnn::plans::kUnknown;
    return ws;
}

}  // namespace

// ---- Legacy API: workspace sizes ----

GG_EXPORT cudnnStatus_t CUDNNWINAPI
cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                        const cudnnFilterDescriptor_t w, const cudnnConvolutionDescriptor_t c,
                                        const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo, size_t *size) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnGetConvolutionForwardWorkspaceSize);
    return size_query(gate, site, size, [&] { return real(h, x, w, c, y, algo, size); });
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t dx, cudnnConvolutionBwdDataAlgo_t algo,
    size_t *size) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnGetConvolutionBackwardDataWorkspaceSize);
    return size_query(gate, site, size, [&] { return real(h, w, dy, c, dx, algo, size); });
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dw, cudnnConvolutionBwdFilterAlgo_t algo,
    size_t *size) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnGetConvolutionBackwardFilterWorkspaceSize);
    return size_query(gate, site, size, [&] { return real(h, x, dy, c, dw, algo, size); });
}

// ---- Legacy API: algorithm choice ----

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t y, const int want, int *returned,
    cudnnConvolutionFwdAlgoPerf_t *perf) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnGetConvolutionForwardAlgorithm_v7);
    return algorithm_list(gate, site, returned, perf, [&] { return real(h, x, w, c, y, want, returned, perf); });
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t dx, const int want, int *returned,
    cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnGetConvolutionBackwardDataAlgorithm_v7);
    return algorithm_list(gate, site, returned, perf, [&] { return real(h, w, dy, c, dx, want, returned, perf); });
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dw, const int want, int *returned,
    cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnGetConvolutionBackwardFilterAlgorithm_v7);
    return algorithm_list(gate, site, returned, perf, [&] { return real(h, x, dy, c, dw, want, returned, perf); });
}

// Find allocates its own workspaces (one per algorithm it times): those allocations are tagged.
GG_EXPORT cudnnStatus_t CUDNNWINAPI
cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                                     const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t y,
                                     const int want, int *returned, cudnnConvolutionFwdAlgoPerf_t *perf) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnFindConvolutionForwardAlgorithm);
    return using_workspace(gate, Api::cudnnFindConvolutionForwardAlgorithm, 0, [&] {
        return algorithm_list(gate, site, returned, perf, [&] { return real(h, x, w, c, y, want, returned, perf); });
    });
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardDataAlgorithm(
    cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t dx, const int want, int *returned,
    cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnFindConvolutionBackwardDataAlgorithm);
    return using_workspace(gate, Api::cudnnFindConvolutionBackwardDataAlgorithm, 0, [&] {
        return algorithm_list(gate, site, returned, perf, [&] { return real(h, w, dy, c, dx, want, returned, perf); });
    });
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardFilterAlgorithm(
    cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dw, const int want, int *returned,
    cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnFindConvolutionBackwardFilterAlgorithm);
    return using_workspace(gate, Api::cudnnFindConvolutionBackwardFilterAlgorithm, 0, [&] {
        return algorithm_list(gate, site, returned, perf, [&] { return real(h, x, dy, c, dw, want, returned, perf); });
    });
}

// FindEx times the algorithms in the caller's workspace.
GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x, const cudnnFilterDescriptor_t wd, const void *w,
    const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t yd, void *y, const int want, int *returned,
    cudnnConvolutionFwdAlgoPerf_t *perf, void *ws, size_t ws_bytes) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnFindConvolutionForwardAlgorithmEx);
    return using_workspace(gate, Api::cudnnFindConvolutionForwardAlgorithmEx, ws_bytes, [&] {
        return algorithm_list(gate, site, returned, perf,
                              [&] { return real(h, xd, x, wd, w, c, yd, y, want, returned, perf, ws, ws_bytes); });
    });
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void *w, const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t dxd, void *dx, const int want, int *returned,
    cudnnConvolutionBwdDataAlgoPerf_t *perf, void *ws, size_t ws_bytes) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnFindConvolutionBackwardDataAlgorithmEx);
    return using_workspace(gate, Api::cudnnFindConvolutionBackwardDataAlgorithmEx, ws_bytes, [&] {
        return algorithm_list(gate, site, returned, perf,
                              [&] { return real(h, wd, w, dyd, dy, c, dxd, dx, want, returned, perf, ws, ws_bytes); });
    });
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x, const cudnnTensorDescriptor_t dyd, const void *dy,
    const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dwd, void *dw, const int want, int *returned,
    cudnnConvolutionBwdFilterAlgoPerf_t *perf, void *ws, size_t ws_bytes) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnFindConvolutionBackwardFilterAlgorithmEx);
    return using_workspace(gate, Api::cudnnFindConvolutionBackwardFilterAlgorithmEx, ws_bytes, [&] {
        return algorithm_list(gate, site, returned, perf,
                              [&] { return real(h, xd, x, dyd, dy, c, dwd, dw, want, returned, perf, ws, ws_bytes); });
    });
}

// ---- Legacy API: calls that take a workspace ----

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnConvolutionForward(cudnnHandle_t h, const void *alpha,
                                                            const cudnnTensorDescriptor_t xd, const void *x,
                                                            const cudnnFilterDescriptor_t wd, const void *w,
                                                            const cudnnConvolutionDescriptor_t c,
                                                            cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_bytes,
                                                            const void *beta, const cudnnTensorDescriptor_t yd,
                                                            void *y) {
    GG_CUDNN_GATE(cudnnConvolutionForward);
    return using_workspace(gate, Api::cudnnConvolutionForward, ws_bytes,
                           [&] { return real(h, alpha, xd, x, wd, w, c, algo, ws, ws_bytes, beta, yd, y); });
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha,
                                                                 const cudnnFilterDescriptor_t wd, const void *w,
                                                                 const cudnnTensorDescriptor_t dyd, const void *dy,
                                                                 const cudnnConvolutionDescriptor_t c,
                                                                 cudnnConvolutionBwdDataAlgo_t algo, void *ws,
                                                                 size_t ws_bytes, const void *beta,
                                                                 const cudnnTensorDescriptor_t dxd, void *dx) {
    GG_CUDNN_GATE(cudnnConvolutionBackwardData);
    return using_workspace(gate, Api::cudnnConvolutionBackwardData, ws_bytes,
                           [&] { return real(h, alpha, wd, w, dyd, dy, c, algo, ws, ws_bytes, beta, dxd, dx); });
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha,
                                                                   const cudnnTensorDescriptor_t xd, const void *x,
                                                                   const cudnnTensorDescriptor_t dyd, const void *dy,
                                                                   const cudnnConvolutionDescriptor_t c,
                                                                   cudnnConvolutionBwdFilterAlgo_t algo, void *ws,
                                                                   size_t ws_bytes, const void *beta,
                                                                   const cudnnFilterDescriptor_t dwd, void *dw) {
    GG_CUDNN_GATE(cudnnConvolutionBackwardFilter);
    return using_workspace(gate, Api::cudnnConvolutionBackwardFilter, ws_bytes,
                           [&] { return real(h, alpha, xd, x, dyd, dy, c, algo, ws, ws_bytes, beta, dwd, dw); });
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnConvolutionBiasActivationForward(
    cudnnHandle_t h, const void *alpha1, const cudnnTensorDescriptor_t xd, const void *x,
    const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t c,
    cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_bytes, const void *alpha2, const cudnnTensorDescriptor_t zd,
    const void *z, const cudnnTensorDescriptor_t biasd, const void *bias, const cudnnActivationDescriptor_t act,
    const cudnnTensorDescriptor_t yd, void *y) {
    GG_CUDNN_GATE(cudnnConvolutionBiasActivationForward);
    return using_workspace(gate, Api::cudnnConvolutionBiasActivationForward, ws_bytes, [&] {
        return real(h, alpha1, xd, x, wd, w, c, algo, ws, ws_bytes, alpha2, zd, z, biasd, bias, act, yd, y);
    });
}

// ---- Backend API ----

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                                                 cudnnBackendDescriptor_t *desc) {
    GG_CUDNN_GATE(cudnnBackendCreateDescriptor);
    cudnnStatus_t st = real(type, desc);
    if (st == CUDNN_STATUS_SUCCESS && gate.outermost() && desc && type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)
        cudnn::plans::created(*desc);
    return st;
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t desc) {
    GG_CUDNN_GATE(cudnnBackendDestroyDescriptor);
    // Forgotten before the real destroy: the address may be handed out again at once.
    cudnn::plans::destroyed(desc);
    return real(desc);
}

// Checked after the real finalize, because only a finalized plan knows its workspace size. Turning
// a finalized plan down is safe: frameworks treat a failed finalize as "this engine is not supported
// here" and destroy the plan (cudnn-frontend's ExecutionPlanBuilder throws, PyTorch's Conv_v8 catches
// and builds the next engine config), so its finalized state is never used.
GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnBackendFinalize(cudnnBackendDescriptor_t desc) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnBackendFinalize);
    cudnnStatus_t st = real(desc);
    if (st != CUDNN_STATUS_SUCCESS || !gate.outermost() || !cudnn::plans::is_plan(desc)) return st;
    int64_t ws = plan_workspace(desc);
    if (ws < 0) return st;
    cudnn::plans::set_workspace(desc, ws);
    cudnn::requested((uint64_t)ws, site);
    cudnn::Cap cap = cudnn::current_cap();
    if (!cap.on || (uint64_t)ws <= cap.bytes) return st;
    cudnn::rejected_plan((uint64_t)ws);
    log_debug("cuDNN: plan %p needs a %lld-byte workspace, over the %llu-byte cap: finalize -> NOT_SUPPORTED", desc,
              (long long)ws, (unsigned long long)cap.bytes);
    return CUDNN_STATUS_NOT_SUPPORTED;
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc,
                                                             cudnnBackendAttributeName_t name,
                                                             cudnnBackendAttributeType_t type, int64_t want,
                                                             int64_t *count, void *values) {
    const void *site = GG_SITE;
    GG_CUDNN_GATE(cudnnBackendGetAttribute);
    cudnnStatus_t st = real(desc, name, type, want, count, values);
    // The frontend asks every attribute of every descriptor: one comparison for all the others.
    if (name != CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE || st != CUDNN_STATUS_SUCCESS || !gate.outermost()) return st;
    if (type != CUDNN_TYPE_INT64 || want < 1 || !values || (count && *count < 1)) return st;
    int64_t ws = *static_cast<const int64_t *>(values);
    cudnn::plans::set_workspace(desc, ws);
    if (ws >= 0) cudnn::requested((uint64_t)ws, site);
    return st;
}

GG_EXPORT cudnnStatus_t CUDNNWINAPI cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan,
                                                        cudnnBackendDescriptor_t pack) {
    GG_CUDNN_GATE(cudnnBackendExecute);
    if (!gate.outermost()) return real(h, plan, pack);
    // The variant pack's workspace is as large as the plan asked for (cuDNN requires it).
    int64_t ws = plan_workspace(plan);
    return using_workspace(gate, Api::cudnnBackendExecute, ws > 0 ? (uint64_t)ws : 0,
                           [&] { return real(h, plan, pack); });
}
