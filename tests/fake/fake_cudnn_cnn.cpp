// Test double of cuDNN 9's libcudnn_cnn.so.9 (see fake_cudnn.h): the legacy convolution API. The
// descriptors are not looked at; what an algorithm needs is FAKE_CUDNN_ALGO_WORKSPACES. Find, like
// cuDNN's, allocates each algorithm's workspace itself (from the driver) to time it, reports an
// allocation that failed as CUDNN_STATUS_ALLOC_FAILED, and sorts the results: usable ones fastest
// first, then the others. FindEx times in the caller's workspace and fails the algorithms that need
// more. Get_v7 returns every algorithm in heuristic (here: speed) order without allocating.
#include <algorithm>

#include "fake_cudnn.h"

#pragma GCC visibility push(default)
#include <cudnn.h>
#pragma GCC visibility pop

namespace {

const std::vector<uint64_t> &algo_workspaces() {
    static const std::vector<uint64_t> v = fake_cudnn::sizes_from_env("FAKE_CUDNN_ALGO_WORKSPACES");
    return v;
}
bool listed(int algo) { return algo >= 0 && algo < (int)algo_workspaces().size(); }

cudnnStatus_t size_of(int algo, size_t *size) {
    if (!size) return CUDNN_STATUS_BAD_PARAM;
    if (!listed(algo)) return CUDNN_STATUS_NOT_SUPPORTED;
    *size = algo_workspaces()[(size_t)algo];
    return CUDNN_STATUS_SUCCESS;
}

// How Find learns an algorithm's workspace: from its own table, or (FAKE_CUDNN_CALLBACK) through
// the public API, as a library calling its own exports would.
template <typename Query>
uint64_t find_size(int algo, Query ask_public) {
    if (!fake_cudnn::env_flag("FAKE_CUDNN_CALLBACK")) return algo_workspaces()[(size_t)algo];
    size_t s = 0;
    return ask_public(algo, &s) == CUDNN_STATUS_SUCCESS ? s : ~0ull;
}

enum class Timing { kHeuristic, kAllocate, kCallerWorkspace };

// The one body of Get_v7, Find and FindEx for every direction.
template <typename Perf, typename Algo, typename Query>
cudnnStatus_t algorithms(const char *what, int count, int want, int *returned, Perf *perf, Timing timing,
                         uint64_t caller_ws, Query ask_public) {
    if (!returned || !perf || want < 1) return CUDNN_STATUS_BAD_PARAM;
    int n = std::min(want, count);
    const fake_cudnn::Driver &drv = fake_cudnn::driver();
    for (int i = 0; i < n; i++) {
        Perf p{};
        p.algo = (Algo)i;
        p.time = -1;
        p.determinism = CUDNN_DETERMINISTIC;
        p.mathType = CUDNN_DEFAULT_MATH;
        if (!listed(i)) {
            p.status = CUDNN_STATUS_NOT_SUPPORTED;
        } else {
            p.memory = timing == Timing::kAllocate ? find_size(i, ask_public) : algo_workspaces()[(size_t)i];
            p.status = CUDNN_STATUS_SUCCESS;
            if (timing == Timing::kAllocate && p.memory > 0) {
                CUdeviceptr ws = 0;
                CUresult r = drv.alloc ? drv.alloc(&ws, p.memory) : CUDA_ERROR_NOT_FOUND;
                fake_cudnn::trace("%s: algorithm %d workspace of %llu from the driver -> %d", what, i,
                                  (unsigned long long)p.memory, (int)r);
                if (r == CUDA_SUCCESS) drv.free(ws);
                else p.status = CUDNN_STATUS_ALLOC_FAILED;
            }
            if (timing == Timing::kCallerWorkspace && p.memory > caller_ws) p.status = CUDNN_STATUS_ALLOC_FAILED;
            if (timing != Timing::kHeuristic && p.status == CUDNN_STATUS_SUCCESS) p.time = 0.1f * (float)(i + 1);
        }
        perf[i] = p;
    }
    std::stable_partition(perf, perf + n, [](const Perf &p) { return p.status == CUDNN_STATUS_SUCCESS; });
    *returned = n;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t run(const char *what, int algo, size_t ws_bytes) {
    size_t need = 0;
    cudnnStatus_t st = size_of(algo, &need);
    if (st == CUDNN_STATUS_SUCCESS && ws_bytes < need) st = CUDNN_STATUS_BAD_PARAM;
    fake_cudnn::trace("%s algorithm %d with a workspace of %zu -> %d", what, algo, ws_bytes, (int)st);
    return st;
}

// The public size queries, for FAKE_CUDNN_CALLBACK.
auto fwd_public = [](int a, size_t *s) {
    auto f = fake_cudnn::public_api<decltype(&::cudnnGetConvolutionForwardWorkspaceSize)>(
        "cudnnGetConvolutionForwardWorkspaceSize");
    return f ? f(nullptr, nullptr, nullptr, nullptr, nullptr, (cudnnConvolutionFwdAlgo_t)a, s)
             : CUDNN_STATUS_NOT_INITIALIZED;
};
auto bwd_data_public = [](int a, size_t *s) {
    auto f = fake_cudnn::public_api<decltype(&::cudnnGetConvolutionBackwardDataWorkspaceSize)>(
        "cudnnGetConvolutionBackwardDataWorkspaceSize");
    return f ? f(nullptr, nullptr, nullptr, nullptr, nullptr, (cudnnConvolutionBwdDataAlgo_t)a, s)
             : CUDNN_STATUS_NOT_INITIALIZED;
};
auto bwd_filter_public = [](int a, size_t *s) {
    auto f = fake_cudnn::public_api<decltype(&::cudnnGetConvolutionBackwardFilterWorkspaceSize)>(
        "cudnnGetConvolutionBackwardFilterWorkspaceSize");
    return f ? f(nullptr, nullptr, nullptr, nullptr, nullptr, (cudnnConvolutionBwdFilterAlgo_t)a, s)
             : CUDNN_STATUS_NOT_INITIALIZED;
};

constexpr int kFwd = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
constexpr int kBwdData = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
constexpr int kBwdFilter = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
using FwdPerf = cudnnConvolutionFwdAlgoPerf_t;
using BwdDataPerf = cudnnConvolutionBwdDataAlgoPerf_t;
using BwdFilterPerf = cudnnConvolutionBwdFilterAlgoPerf_t;
using FwdAlgo = cudnnConvolutionFwdAlgo_t;
using BwdDataAlgo = cudnnConvolutionBwdDataAlgo_t;
using BwdFilterAlgo = cudnnConvolutionBwdFilterAlgo_t;

}  // namespace

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                                  const cudnnFilterDescriptor_t,
                                                                  const cudnnConvolutionDescriptor_t,
                                                                  const cudnnTensorDescriptor_t,
                                                                  cudnnConvolutionFwdAlgo_t a, size_t *s) {
    return size_of(a, s);
}
cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t, const cudnnFilterDescriptor_t,
                                                                       const cudnnTensorDescriptor_t,
                                                                       const cudnnConvolutionDescriptor_t,
                                                                       const cudnnTensorDescriptor_t,
                                                                       cudnnConvolutionBwdDataAlgo_t a, size_t *s) {
    return size_of(a, s);
}
cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                                         const cudnnTensorDescriptor_t,
                                                                         const cudnnConvolutionDescriptor_t,
                                                                         const cudnnFilterDescriptor_t,
                                                                         cudnnConvolutionBwdFilterAlgo_t a, size_t *s) {
    return size_of(a, s);
}

cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                                 const cudnnFilterDescriptor_t,
                                                                 const cudnnConvolutionDescriptor_t,
                                                                 const cudnnTensorDescriptor_t, const int n, int *r,
                                                                 FwdPerf *p) {
    return algorithms<FwdPerf, FwdAlgo>("get_v7", kFwd, n, r, p, Timing::kHeuristic, 0, fwd_public);
}
cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t, const cudnnFilterDescriptor_t,
                                                                      const cudnnTensorDescriptor_t,
                                                                      const cudnnConvolutionDescriptor_t,
                                                                      const cudnnTensorDescriptor_t, const int n,
                                                                      int *r, BwdDataPerf *p) {
    return algorithms<BwdDataPerf, BwdDataAlgo>("get_v7", kBwdData, n, r, p, Timing::kHeuristic, 0, bwd_data_public);
}
cudnnStatus_t CUDNNWINAPI cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                                        const cudnnTensorDescriptor_t,
                                                                        const cudnnConvolutionDescriptor_t,
                                                                        const cudnnFilterDescriptor_t, const int n,
                                                                        int *r, BwdFilterPerf *p) {
    return algorithms<BwdFilterPerf, BwdFilterAlgo>("get_v7", kBwdFilter, n, r, p, Timing::kHeuristic, 0,
                                                    bwd_filter_public);
}

cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                               const cudnnFilterDescriptor_t,
                                                               const cudnnConvolutionDescriptor_t,
                                                               const cudnnTensorDescriptor_t, const int n, int *r,
                                                               FwdPerf *p) {
    return algorithms<FwdPerf, FwdAlgo>("find forward", kFwd, n, r, p, Timing::kAllocate, 0, fwd_public);
}
cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t, const cudnnFilterDescriptor_t,
                                                                    const cudnnTensorDescriptor_t,
                                                                    const cudnnConvolutionDescriptor_t,
                                                                    const cudnnTensorDescriptor_t, const int n, int *r,
                                                                    BwdDataPerf *p) {
    return algorithms<BwdDataPerf, BwdDataAlgo>("find backward data", kBwdData, n, r, p, Timing::kAllocate, 0,
                                                bwd_data_public);
}
cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                                      const cudnnTensorDescriptor_t,
                                                                      const cudnnConvolutionDescriptor_t,
                                                                      const cudnnFilterDescriptor_t, const int n,
                                                                      int *r, BwdFilterPerf *p) {
    return algorithms<BwdFilterPerf, BwdFilterAlgo>("find backward filter", kBwdFilter, n, r, p, Timing::kAllocate, 0,
                                                    bwd_filter_public);
}

cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t, const cudnnTensorDescriptor_t,
                                                                 const void *, const cudnnFilterDescriptor_t,
                                                                 const void *, const cudnnConvolutionDescriptor_t,
                                                                 const cudnnTensorDescriptor_t, void *, const int n,
                                                                 int *r, FwdPerf *p, void *, size_t wsb) {
    return algorithms<FwdPerf, FwdAlgo>("findex forward", kFwd, n, r, p, Timing::kCallerWorkspace, wsb, fwd_public);
}
cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t, const cudnnFilterDescriptor_t,
                                                                      const void *, const cudnnTensorDescriptor_t,
                                                                      const void *, const cudnnConvolutionDescriptor_t,
                                                                      const cudnnTensorDescriptor_t, void *,
                                                                      const int n, int *r, BwdDataPerf *p, void *,
                                                                      size_t wsb) {
    return algorithms<BwdDataPerf, BwdDataAlgo>("findex backward data", kBwdData, n, r, p, Timing::kCallerWorkspace,
                                                wsb, bwd_data_public);
}
cudnnStatus_t CUDNNWINAPI cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t, const cudnnTensorDescriptor_t, const void *, const cudnnTensorDescriptor_t, const void *,
    const cudnnConvolutionDescriptor_t, const cudnnFilterDescriptor_t, void *, const int n, int *r, BwdFilterPerf *p,
    void *, size_t wsb) {
    return algorithms<BwdFilterPerf, BwdFilterAlgo>("findex backward filter", kBwdFilter, n, r, p,
                                                    Timing::kCallerWorkspace, wsb, bwd_filter_public);
}

cudnnStatus_t CUDNNWINAPI cudnnConvolutionForward(cudnnHandle_t, const void *, const cudnnTensorDescriptor_t,
                                                  const void *, const cudnnFilterDescriptor_t, const void *,
                                                  const cudnnConvolutionDescriptor_t, cudnnConvolutionFwdAlgo_t a,
                                                  void *, size_t wsb, const void *, const cudnnTensorDescriptor_t,
                                                  void *) {
    return run("cudnnConvolutionForward", a, wsb);
}
cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardData(cudnnHandle_t, const void *, const cudnnFilterDescriptor_t,
                                                       const void *, const cudnnTensorDescriptor_t, const void *,
                                                       const cudnnConvolutionDescriptor_t,
                                                       cudnnConvolutionBwdDataAlgo_t a, void *, size_t wsb,
                                                       const void *, const cudnnTensorDescriptor_t, void *) {
    return run("cudnnConvolutionBackwardData", a, wsb);
}
cudnnStatus_t CUDNNWINAPI cudnnConvolutionBackwardFilter(cudnnHandle_t, const void *, const cudnnTensorDescriptor_t,
                                                         const void *, const cudnnTensorDescriptor_t, const void *,
                                                         const cudnnConvolutionDescriptor_t,
                                                         cudnnConvolutionBwdFilterAlgo_t a, void *, size_t wsb,
                                                         const void *, const cudnnFilterDescriptor_t, void *) {
    return run("cudnnConvolutionBackwardFilter", a, wsb);
}
cudnnStatus_t CUDNNWINAPI cudnnConvolutionBiasActivationForward(
    cudnnHandle_t, const void *, const cudnnTensorDescriptor_t, const void *, const cudnnFilterDescriptor_t,
    const void *, const cudnnConvolutionDescriptor_t, cudnnConvolutionFwdAlgo_t a, void *, size_t wsb, const void *,
    const cudnnTensorDescriptor_t, const void *, const cudnnTensorDescriptor_t, const void *,
    const cudnnActivationDescriptor_t, const cudnnTensorDescriptor_t, void *) {
    return run("cudnnConvolutionBiasActivationForward", a, wsb);
}
