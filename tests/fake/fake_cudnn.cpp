// Test double of cuDNN 9's libcudnn.so.9: the dispatcher (see fake_cudnn.h). Like the real one
// (objdump of cuDNN 9.19: each export guards a static pointer, dlopens "libcudnn_<part>.so.9" with
// RTLD_NOW | RTLD_LOCAL, dlsyms the same name in it and jumps there), it defines no behaviour of
// its own beyond the version and error strings. The real one finds its sub-libraries through its
// $ORIGIN run path; this one opens them by full path from its own folder, so that a machine with a
// real cuDNN in the loader's cache never mixes the two.
#include <cstring>
#include <string>

#include "fake_cudnn.h"

#pragma GCC visibility push(default)
#include <cudnn.h>
#pragma GCC visibility pop

namespace {

// FAKE_CUDNN_DISPATCH=global: the sub-libraries are loaded RTLD_GLOBAL and their functions looked up
// in the global scope (dlsym on dlopen(NULL); not RTLD_DEFAULT, which a -Bsymbolic library such as
// this one or cuDNN answers from itself first). Valid only when this library was itself loaded
// RTLD_LOCAL, so that its own exports stay out of that scope. Under a preload that defines the same
// names the table then holds the preload's hooks: the shape in which a preload whose re-entered hook
// calls "the next definition" (this dispatcher) never returns.
bool dispatch_global() {
    static const bool g = [] {
        const char *v = std::getenv("FAKE_CUDNN_DISPATCH");
        return v && !std::strcmp(v, "global");
    }();
    return g;
}

void *open_part(const char *part) {
    Dl_info self{};
    if (!dladdr(reinterpret_cast<void *>(&open_part), &self) || !self.dli_fname) return nullptr;
    std::string path = self.dli_fname;
    path = path.substr(0, path.rfind('/') + 1) + "libcudnn_" + part + ".so.9";
    void *h = dlopen(path.c_str(), RTLD_NOW | (dispatch_global() ? RTLD_GLOBAL : RTLD_LOCAL));
    if (!h) std::fprintf(stderr, "fake_cudnn: cannot load %s: %s\n", path.c_str(), dlerror());
    return h;
}

// The function the dispatcher will call for `name`; FAKE_CUDNN_TRACE says which library it lies in.
void *lookup(void *part, const char *name) {
    if (!part) return nullptr;
    void *fn = dlsym(dispatch_global() ? dlopen(nullptr, RTLD_NOW) : part, name);
    Dl_info info{};
    const char *where = fn && dladdr(fn, &info) && info.dli_fname ? std::strrchr(info.dli_fname, '/') : nullptr;
    fake_cudnn::trace("dispatch %s -> %s", name, where ? where + 1 : "nothing");
    return fn;
}

void *graph() {
    static void *h = open_part("graph");
    return h;
}
void *cnn() {
    static void *h = open_part("cnn");
    return h;
}

}  // namespace

// One forwarding export: the sub-library's function, looked up once.
#define FORWARD(part, name, params, args)                                                  \
    cudnnStatus_t CUDNNWINAPI name params {                                                \
        static const auto fn = reinterpret_cast<decltype(&::name)>(lookup(part(), #name)); \
        return fn ? fn args : CUDNN_STATUS_NOT_INITIALIZED;                                \
    }

size_t CUDNNWINAPI cudnnGetVersion(void) { return CUDNN_VERSION; }

const char *CUDNNWINAPI cudnnGetErrorString(cudnnStatus_t status) {
    switch (status) {
        case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
        case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
        case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
        case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
        case CUDNN_STATUS_ALLOC_FAILED: return "CUDNN_STATUS_ALLOC_FAILED";
        default: return "CUDNN_STATUS_OTHER";
    }
}

// ---- libcudnn_graph.so.9 ----
FORWARD(graph, cudnnCreate, (cudnnHandle_t * h), (h))
FORWARD(graph, cudnnDestroy, (cudnnHandle_t h), (h))
FORWARD(graph, cudnnBackendCreateDescriptor, (cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *d), (t, d))
FORWARD(graph, cudnnBackendDestroyDescriptor, (cudnnBackendDescriptor_t d), (d))
FORWARD(graph, cudnnBackendFinalize, (cudnnBackendDescriptor_t d), (d))
FORWARD(graph, cudnnBackendSetAttribute,
        (cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, int64_t c,
         const void *v),
        (d, n, t, c, v))
FORWARD(graph, cudnnBackendGetAttribute,
        (cudnnBackendDescriptor_t const d, cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, int64_t r,
         int64_t *c, void *v),
        (d, n, t, r, c, v))
FORWARD(graph, cudnnBackendExecute, (cudnnHandle_t h, cudnnBackendDescriptor_t p, cudnnBackendDescriptor_t v),
        (h, p, v))

// ---- libcudnn_cnn.so.9 ----
FORWARD(cnn, cudnnGetConvolutionForwardWorkspaceSize,
        (cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
         const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t a, size_t *s),
        (h, x, w, c, y, a, s))
FORWARD(cnn, cudnnGetConvolutionBackwardDataWorkspaceSize,
        (cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
         const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t dx, cudnnConvolutionBwdDataAlgo_t a,
         size_t *s),
        (h, w, dy, c, dx, a, s))
FORWARD(cnn, cudnnGetConvolutionBackwardFilterWorkspaceSize,
        (cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
         const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dw, cudnnConvolutionBwdFilterAlgo_t a,
         size_t *s),
        (h, x, dy, c, dw, a, s))
FORWARD(cnn, cudnnGetConvolutionForwardAlgorithm_v7,
        (cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
         const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t y, const int n, int *r,
         cudnnConvolutionFwdAlgoPerf_t *p),
        (h, x, w, c, y, n, r, p))
FORWARD(cnn, cudnnGetConvolutionBackwardDataAlgorithm_v7,
        (cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
         const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t dx, const int n, int *r,
         cudnnConvolutionBwdDataAlgoPerf_t *p),
        (h, w, dy, c, dx, n, r, p))
FORWARD(cnn, cudnnGetConvolutionBackwardFilterAlgorithm_v7,
        (cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
         const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dw, const int n, int *r,
         cudnnConvolutionBwdFilterAlgoPerf_t *p),
        (h, x, dy, c, dw, n, r, p))
FORWARD(cnn, cudnnFindConvolutionForwardAlgorithm,
        (cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
         const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t y, const int n, int *r,
         cudnnConvolutionFwdAlgoPerf_t *p),
        (h, x, w, c, y, n, r, p))
FORWARD(cnn, cudnnFindConvolutionBackwardDataAlgorithm,
        (cudnnHandle_t h, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
         const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t dx, const int n, int *r,
         cudnnConvolutionBwdDataAlgoPerf_t *p),
        (h, w, dy, c, dx, n, r, p))
FORWARD(cnn, cudnnFindConvolutionBackwardFilterAlgorithm,
        (cudnnHandle_t h, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
         const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dw, const int n, int *r,
         cudnnConvolutionBwdFilterAlgoPerf_t *p),
        (h, x, dy, c, dw, n, r, p))
FORWARD(cnn, cudnnFindConvolutionForwardAlgorithmEx,
        (cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x, const cudnnFilterDescriptor_t wd,
         const void *w, const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t yd, void *y, const int n,
         int *r, cudnnConvolutionFwdAlgoPerf_t *p, void *ws, size_t wsb),
        (h, xd, x, wd, w, c, yd, y, n, r, p, ws, wsb))
FORWARD(cnn, cudnnFindConvolutionBackwardDataAlgorithmEx,
        (cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void *w, const cudnnTensorDescriptor_t dyd,
         const void *dy, const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t dxd, void *dx, const int n,
         int *r, cudnnConvolutionBwdDataAlgoPerf_t *p, void *ws, size_t wsb),
        (h, wd, w, dyd, dy, c, dxd, dx, n, r, p, ws, wsb))
FORWARD(cnn, cudnnFindConvolutionBackwardFilterAlgorithmEx,
        (cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x, const cudnnTensorDescriptor_t dyd,
         const void *dy, const cudnnConvolutionDescriptor_t c, const cudnnFilterDescriptor_t dwd, void *dw, const int n,
         int *r, cudnnConvolutionBwdFilterAlgoPerf_t *p, void *ws, size_t wsb),
        (h, xd, x, dyd, dy, c, dwd, dw, n, r, p, ws, wsb))
FORWARD(cnn, cudnnConvolutionForward,
        (cudnnHandle_t h, const void *al, const cudnnTensorDescriptor_t xd, const void *x,
         const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t c,
         cudnnConvolutionFwdAlgo_t a, void *ws, size_t wsb, const void *be, const cudnnTensorDescriptor_t yd, void *y),
        (h, al, xd, x, wd, w, c, a, ws, wsb, be, yd, y))
FORWARD(cnn, cudnnConvolutionBackwardData,
        (cudnnHandle_t h, const void *al, const cudnnFilterDescriptor_t wd, const void *w,
         const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t c,
         cudnnConvolutionBwdDataAlgo_t a, void *ws, size_t wsb, const void *be, const cudnnTensorDescriptor_t dxd,
         void *dx),
        (h, al, wd, w, dyd, dy, c, a, ws, wsb, be, dxd, dx))
FORWARD(cnn, cudnnConvolutionBackwardFilter,
        (cudnnHandle_t h, const void *al, const cudnnTensorDescriptor_t xd, const void *x,
         const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t c,
         cudnnConvolutionBwdFilterAlgo_t a, void *ws, size_t wsb, const void *be, const cudnnFilterDescriptor_t dwd,
         void *dw),
        (h, al, xd, x, dyd, dy, c, a, ws, wsb, be, dwd, dw))
FORWARD(cnn, cudnnConvolutionBiasActivationForward,
        (cudnnHandle_t h, const void *a1, const cudnnTensorDescriptor_t xd, const void *x,
         const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t c,
         cudnnConvolutionFwdAlgo_t a, void *ws, size_t wsb, const void *a2, const cudnnTensorDescriptor_t zd,
         const void *z, const cudnnTensorDescriptor_t bd, const void *b, const cudnnActivationDescriptor_t act,
         const cudnnTensorDescriptor_t yd, void *y),
        (h, a1, xd, x, wd, w, c, a, ws, wsb, a2, zd, z, bd, b, act, yd, y))
