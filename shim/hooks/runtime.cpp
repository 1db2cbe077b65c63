// cudart hooks. They count nothing themselves: the bytes are counted once, at the driver, where a
// statically linked cudart arrives too. They only name the API the program called, so a report
// says "cudaMalloc" rather than the driver call cudart made for it.
#include "shim/api/export.h"
#include "shim/quota/guard.h"
#include "shim/resolve/real.h"

using namespace gg;

// GG_RUNTIME(name, (parameters), (arguments)): one forwarding hook, typed by cuda_runtime_api.h.
#define GG_RUNTIME(name, params, args)                                   \
    GG_EXPORT GG_HOT cudaError_t CUDARTAPI name params {                 \
        guard::RuntimeCall tag(Api::name);                               \
        decltype(&::name) fn = real_runtime().name.get(real_runtime_fn); \
        return fn ? fn args : cudaErrorInitializationError;              \
    }

GG_RUNTIME(cudaMalloc, (void **p, size_t size), (p, size))
GG_RUNTIME(cudaMallocPitch, (void **p, size_t *pitch, size_t w, size_t h), (p, pitch, w, h))
GG_RUNTIME(cudaMalloc3D, (cudaPitchedPtr * p, cudaExtent e), (p, e))
GG_RUNTIME(cudaMallocManaged, (void **p, size_t size, unsigned int flags), (p, size, flags))
GG_RUNTIME(cudaMallocAsync, (void **p, size_t size, cudaStream_t s), (p, size, s))
GG_RUNTIME(cudaMallocAsync_ptsz, (void **p, size_t size, cudaStream_t s), (p, size, s))
GG_RUNTIME(cudaMallocFromPoolAsync, (void **p, size_t size, cudaMemPool_t pool, cudaStream_t s), (p, size, pool, s))
GG_RUNTIME(cudaMallocFromPoolAsync_ptsz, (void **p, size_t size, cudaMemPool_t pool, cudaStream_t s),
           (p, size, pool, s))
GG_RUNTIME(cudaMallocArray, (cudaArray_t * a, const cudaChannelFormatDesc *d, size_t w, size_t h, unsigned int flags),
           (a, d, w, h, flags))
GG_RUNTIME(cudaMalloc3DArray, (cudaArray_t * a, const cudaChannelFormatDesc *d, cudaExtent e, unsigned int flags),
           (a, d, e, flags))
GG_RUNTIME(cudaMallocMipmappedArray,
           (cudaMipmappedArray_t * a, const cudaChannelFormatDesc *d, cudaExtent e, unsigned int levels,
            unsigned int flags),
           (a, d, e, levels, flags))
GG_RUNTIME(cudaFree, (void *p), (p))
GG_RUNTIME(cudaFreeAsync, (void *p, cudaStream_t s), (p, s))
GG_RUNTIME(cudaFreeAsync_ptsz, (void *p, cudaStream_t s), (p, s))
GG_RUNTIME(cudaFreeArray, (cudaArray_t a), (a))
GG_RUNTIME(cudaFreeMipmappedArray, (cudaMipmappedArray_t a), (a))
