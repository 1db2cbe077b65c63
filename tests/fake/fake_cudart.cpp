// Test double of the CUDA runtime (libcudart.so.13). What matters is HOW it reaches the driver, which
// is exactly how the real cudart 13 does (docs/platform-facts.md): dlopen("libcuda.so.1"), dlsym only
// "cuGetProcAddress_v2", ask that for "cuGetProcAddress" itself (the self-lookup, cudaVersion 12000),
// and resolve every other driver function through the pointer it returned. A shim that misses any of
// these steps misses every allocation of a PyTorch program; this library lets CI prove it does not.
// The library links no libcuda (no driver symbol is undefined in it), so no other path exists.
//
// Runtime behaviour is minimal: lazy initialisation, the device chosen per thread by cudaSetDevice,
// whose primary context is made current on first use, as the real runtime does.
#include <dlfcn.h>
#include <cstring>
#include <mutex>

#include <cuda.h>
#pragma GCC visibility push(default)
#include <cuda_runtime_api.h>
#pragma GCC visibility pop

namespace {

// The driver functions this runtime uses, each typed from cuda.h by the variant that the lookup at
// cudaVersion 13000 hands out (so cuCtxGetDevice is the CUDA 13 two-argument _v2, for instance).
#define FAKE_CUDART_DRIVER(X)                                                       \
    X(init, "cuInit", cuInit)                                                       \
    X(deviceGetCount, "cuDeviceGetCount", cuDeviceGetCount)                         \
    X(deviceGet, "cuDeviceGet", cuDeviceGet)                                        \
    X(devicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain) \
    X(ctxGetCurrent, "cuCtxGetCurrent", cuCtxGetCurrent)                            \
    X(ctxSetCurrent, "cuCtxSetCurrent", cuCtxSetCurrent)                            \
    X(ctxGetDevice, "cuCtxGetDevice", cuCtxGetDevice_v2)                            \
    X(ctxSynchronize, "cuCtxSynchronize", cuCtxSynchronize_v2)                      \
    X(memAlloc, "cuMemAlloc", cuMemAlloc_v2)                                        \
    X(memFree, "cuMemFree", cuMemFree_v2)                                           \
    X(memAllocAsync, "cuMemAllocAsync", cuMemAllocAsync)                            \
    X(memFreeAsync, "cuMemFreeAsync", cuMemFreeAsync)                               \
    X(memAllocManaged, "cuMemAllocManaged", cuMemAllocManaged)                      \
    X(memAllocPitch, "cuMemAllocPitch", cuMemAllocPitch_v2)                         \
    X(memAllocFromPoolAsync, "cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync)    \
    X(memGetInfo, "cuMemGetInfo", cuMemGetInfo_v2)                                  \
    X(arrayCreate, "cuArrayCreate", cuArrayCreate_v2)                               \
    X(arrayDestroy, "cuArrayDestroy", cuArrayDestroy)

struct Driver {
#define FAKE_CUDART_FIELD(field, base, sym) decltype(&::sym) field = nullptr;
    FAKE_CUDART_DRIVER(FAKE_CUDART_FIELD)
};

Driver g_drv;
cudaError_t g_init_error = cudaSuccess;
std::once_flag g_once;
thread_local int t_device = 0;
thread_local cudaError_t t_last = cudaSuccess;

constexpr int kRuntimeVersion = 13000;

void load_driver() {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    auto gpa = lib ? reinterpret_cast<decltype(&::cuGetProcAddress_v2)>(dlsym(lib, "cuGetProcAddress_v2")) : nullptr;
    if (!gpa) {
        g_init_error = cudaErrorInsufficientDriver;
        return;
    }
    // The self-lookup: from here on only the returned pointer is used, never the dlsym'd one.
    void *p = nullptr;
    CUdriverProcAddressQueryResult st;
    if (gpa("cuGetProcAddress", &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || !p) {
        g_init_error = cudaErrorInsufficientDriver;
        return;
    }
    auto lookup = reinterpret_cast<decltype(&::cuGetProcAddress_v2)>(p);
#define FAKE_CUDART_RESOLVE(field, base, sym)                                                        \
    if (lookup(base, &p, kRuntimeVersion, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || !p) { \
        g_init_error = cudaErrorSymbolNotFound;                                                      \
        return;                                                                                      \
    }                                                                                                \
    g_drv.field = reinterpret_cast<decltype(&::sym)>(p);
    FAKE_CUDART_DRIVER(FAKE_CUDART_RESOLVE)
    if (g_drv.init(0) != CUDA_SUCCESS) g_init_error = cudaErrorInitializationError;
}

cudaError_t to_runtime(CUresult r) {
    switch (r) {
        case CUDA_SUCCESS: return cudaSuccess;
        case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
        case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
        case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
        case CUDA_ERROR_DEINITIALIZED: return cudaErrorCudartUnloading;
        case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
        case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
        case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
        case CUDA_ERROR_CONTEXT_IS_DESTROYED: return cudaErrorContextIsDestroyed;
        case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
        case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
        default: return cudaErrorUnknown;
    }
}

// Every call's result passes through here so that cudaGetLastError sees failures.
cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) t_last = e;
    return e;
}
cudaError_t ret(CUresult r) { return ret(to_runtime(r)); }

// Loads the driver once, then makes sure this thread has a context: the one already current (set
// through the driver API) or the primary context of the thread's device.
cudaError_t ready() {
    std::call_once(g_once, load_driver);
    if (g_init_error) return g_init_error;
    CUcontext ctx = nullptr;
    if (CUresult r = g_drv.ctxGetCurrent(&ctx)) return to_runtime(r);
    if (ctx) return cudaSuccess;
    CUdevice dev;
    if (CUresult r = g_drv.deviceGet(&dev, t_device)) return to_runtime(r);
    if (CUresult r = g_drv.devicePrimaryCtxRetain(&ctx, dev)) return to_runtime(r);
    return to_runtime(g_drv.ctxSetCurrent(ctx));
}

#define FAKE_CUDART_READY()                           \
    do {                                              \
        if (cudaError_t e_ = ready()) return ret(e_); \
    } while (0)

}  // namespace

extern "C" {

cudaError_t cudaMalloc(void **devPtr, size_t size) {
    FAKE_CUDART_READY();
    if (!devPtr) return ret(cudaErrorInvalidValue);
    if (size == 0) {  // the real runtime answers a zero-byte request with NULL and success
        *devPtr = nullptr;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    CUresult r = g_drv.memAlloc(&p, size);
    if (!r) *devPtr = reinterpret_cast<void *>(p);
    return ret(r);
}

cudaError_t cudaFree(void *devPtr) {
    FAKE_CUDART_READY();
    if (!devPtr) return cudaSuccess;
    return ret(g_drv.memFree(reinterpret_cast<CUdeviceptr>(devPtr)));
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream) {
    FAKE_CUDART_READY();
    if (!devPtr) return ret(cudaErrorInvalidValue);
    CUdeviceptr p = 0;
    CUresult r = g_drv.memAllocAsync(&p, size, reinterpret_cast<CUstream>(hStream));
    if (!r) *devPtr = reinterpret_cast<void *>(p);
    return ret(r);
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream) {
    FAKE_CUDART_READY();
    return ret(g_drv.memFreeAsync(reinterpret_cast<CUdeviceptr>(devPtr), reinterpret_cast<CUstream>(hStream)));
}

cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
    FAKE_CUDART_READY();
    if (!ptr) return ret(cudaErrorInvalidValue);
    CUdeviceptr p = 0;
    CUresult r = g_drv.memAllocFromPoolAsync(&p, size, reinterpret_cast<CUmemoryPool>(memPool),
                                             reinterpret_cast<CUstream>(stream));
    if (!r) *ptr = reinterpret_cast<void *>(p);
    return ret(r);
}

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
    FAKE_CUDART_READY();
    if (!devPtr) return ret(cudaErrorInvalidValue);
    CUdeviceptr p = 0;
    CUresult r = g_drv.memAllocManaged(&p, size, flags);
    if (!r) *devPtr = reinterpret_cast<void *>(p);
    return ret(r);
}

cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height) {
    FAKE_CUDART_READY();
    if (!devPtr || !pitch) return ret(cudaErrorInvalidValue);
    CUdeviceptr p = 0;
    CUresult r = g_drv.memAllocPitch(&p, pitch, width, height, 4);
    if (!r) *devPtr = reinterpret_cast<void *>(p);
    return ret(r);
}

// A 3D allocation is a pitched allocation of height x depth rows.
cudaError_t cudaMalloc3D(cudaPitchedPtr *pitchedDevPtr, cudaExtent extent) {
    FAKE_CUDART_READY();
    if (!pitchedDevPtr) return ret(cudaErrorInvalidValue);
    size_t rows = (extent.height ? extent.height : 1) * (extent.depth ? extent.depth : 1), pitch = 0;
    CUdeviceptr p = 0;
    CUresult r = g_drv.memAllocPitch(&p, &pitch, extent.width, rows, 4);
    if (!r) *pitchedDevPtr = cudaPitchedPtr{reinterpret_cast<void *>(p), pitch, extent.width, extent.height};
    return ret(r);
}

cudaError_t cudaMallocArray(cudaArray_t *array, const cudaChannelFormatDesc *desc, size_t width, size_t height,
                            unsigned int) {
    FAKE_CUDART_READY();
    if (!array || !desc) return ret(cudaErrorInvalidValue);
    int bits = desc->x;
    unsigned channels = (desc->x > 0) + (desc->y > 0) + (desc->z > 0) + (desc->w > 0);
    CUDA_ARRAY_DESCRIPTOR d{};
    d.Width = width;
    d.Height = height;
    d.NumChannels = channels == 3 ? 4 : channels;  // 3-channel arrays are padded to 4, as on the GPU
    bool is_float = desc->f == cudaChannelFormatKindFloat, is_signed = desc->f == cudaChannelFormatKindSigned;
    if (is_float) d.Format = bits == 16 ? CU_AD_FORMAT_HALF : CU_AD_FORMAT_FLOAT;
    else if (bits == 8) d.Format = is_signed ? CU_AD_FORMAT_SIGNED_INT8 : CU_AD_FORMAT_UNSIGNED_INT8;
    else if (bits == 16) d.Format = is_signed ? CU_AD_FORMAT_SIGNED_INT16 : CU_AD_FORMAT_UNSIGNED_INT16;
    else d.Format = is_signed ? CU_AD_FORMAT_SIGNED_INT32 : CU_AD_FORMAT_UNSIGNED_INT32;
    CUarray a = nullptr;
    CUresult r = g_drv.arrayCreate(&a, &d);
    if (!r) *array = reinterpret_cast<cudaArray_t>(a);
    return ret(r);
}

cudaError_t cudaFreeArray(cudaArray_t array) {
    FAKE_CUDART_READY();
    if (!array) return cudaSuccess;
    return ret(g_drv.arrayDestroy(reinterpret_cast<CUarray>(array)));
}

cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
    FAKE_CUDART_READY();
    return ret(g_drv.memGetInfo(free, total));
}

// Choosing a device makes its primary context current on this thread (CUDA 12+ behaviour).
cudaError_t cudaSetDevice(int device) {
    std::call_once(g_once, load_driver);
    if (g_init_error) return ret(g_init_error);
    CUdevice dev;
    CUcontext ctx = nullptr;
    if (CUresult r = g_drv.deviceGet(&dev, device)) return ret(r);
    if (CUresult r = g_drv.devicePrimaryCtxRetain(&ctx, dev)) return ret(r);
    t_device = device;
    return ret(g_drv.ctxSetCurrent(ctx));
}

cudaError_t cudaGetDevice(int *device) {
    FAKE_CUDART_READY();
    if (!device) return ret(cudaErrorInvalidValue);
    CUdevice dev;
    if (CUresult r = g_drv.ctxGetDevice(&dev, nullptr)) return ret(r);
    *device = dev;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count) {
    std::call_once(g_once, load_driver);
    if (g_init_error) return ret(g_init_error);
    if (!count) return ret(cudaErrorInvalidValue);
    if (CUresult r = g_drv.deviceGetCount(count)) return ret(r);
    return *count ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t cudaDeviceSynchronize(void) {
    FAKE_CUDART_READY();
    return ret(g_drv.ctxSynchronize(nullptr));
}

// Device memory is host memory in the fake driver, so every direction of copy is a memcpy.
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind) {
    FAKE_CUDART_READY();
    if (count && (!dst || !src)) return ret(cudaErrorInvalidValue);
    if (count) std::memcpy(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInitializationError: return "initialization error";
        case cudaErrorCudartUnloading: return "driver shutting down";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorDeviceUninitialized: return "invalid device context";
        case cudaErrorContextIsDestroyed: return "context is destroyed";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotSupported: return "operation not supported";
        case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
        case cudaErrorSymbolNotFound: return "named symbol not found";
        default: return "unknown error";
    }
}

}  // extern "C"
