// The CUDA declarations the shim is typed from. cuda.h declares most hooked functions; the few it
// hides (the legacy 4-argument cuGetProcAddress, the per-thread-stream "_ptsz" variants, which it
// only declares under CUDA_API_PER_THREAD_DEFAULT_STREAM) are declared here with the same types as
// their siblings, so that every hook and every real-function pointer is typed by the compiler.
#pragma once
#include <cuda.h>
#include <cuda_runtime_api.h>
// cuDNN 9's declarations type the cuDNN hooks (shim/api/cudnn_hooks.def); the shim never links cuDNN.
#include <cudnn.h>

#include "common/nvidia/nvml_min.h"

// PyTorch's c10::Device: a device type and index, one byte each, passed by value in one register
// (docs/platform-facts.md). Type 1 is CUDA.
struct C10Device {
    int8_t type;
    int8_t index;
};
constexpr int8_t kC10DeviceCuda = 1;

// cuda.h maps the name to cuGetProcAddress_v2; the driver still exports the legacy 4-argument
// function under the plain name, and cudart asks for it with cudaVersion below 12000 (docs/platform-facts.md).
#undef cuGetProcAddress
// cuda.h maps cuGraphInstantiate to CUDA 12's cuGraphInstantiateWithFlags; the driver still exports
// the five-argument function of CUDA 10 under the plain name, and of CUDA 11 as _v2, which programs
// built before CUDA 12 call (and cuGetProcAddress hands out for a cudaVersion below 12000).
#undef cuGraphInstantiate

extern "C" {
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
// Contexts' older variants (cuda.h declares them only inside the driver's own build).
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
                                CUdevice dev);
// Stream capture and graph launches on the per-thread default stream.
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                                  const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                  CUstreamCaptureMode mode);
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph);
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus);
CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
                                    size_t bufferSize);
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                       char *logBuffer, size_t bufferSize);
CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
cudaError_t CUDARTAPI cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream);

// c10 (libc10.so), declared under their mangled names (shim/api/hooks.def, TORCH_HOOK).
void _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE(void *ptr, int64_t alloc_size, size_t total_allocated,
                                                           size_t total_reserved, C10Device device);
void _ZN3c1027reportOutOfMemoryToProfilerElmmNS_6DeviceE(int64_t alloc_size, size_t total_allocated,
                                                         size_t total_reserved, C10Device device);
}
