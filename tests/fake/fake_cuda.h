// What the two halves of the test driver share (fake_cuda.cpp: devices, contexts, memory, lookups;
// fake_cuda_usage.cpp: what a process holds beside its allocations, issue 19: context and module
// costs, stream-ordered pools, graphs and stream capture). Not a header for anyone else.
#pragma once
#include <sys/types.h>
#include <cstdint>

// Everything cuda.h declares is exported (the Makefile builds with -fvisibility=hidden); the fake's
// own helpers live in namespace fakecu and stay internal.
#pragma GCC visibility push(default)
#include <cuda.h>

// cuda.h maps these base names to their newest variant with macros; the fake also defines the older
// variants under the plain names, which cuGetProcAddress hands out for an old cudaVersion.
#undef cuMemAlloc
#undef cuMemFree
#undef cuDeviceGetUuid
#undef cuGetProcAddress
#undef cuGraphInstantiate

extern "C" {
// Variants that cuda.h declares only inside the driver's own build (__CUDA_API_VERSION_INTERNAL) or
// with per-thread default streams. The per-thread ones take their type from the base function, so a
// wrong signature does not compile.
typedef unsigned int CUdeviceptr_v1;  // 32-bit device pointers of CUDA before 3.2
CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize);
CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr);
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
                                CUdevice dev);
decltype(cuMemAllocAsync) cuMemAllocAsync_ptsz;
decltype(cuMemAllocFromPoolAsync) cuMemAllocFromPoolAsync_ptsz;
decltype(cuMemFreeAsync) cuMemFreeAsync_ptsz;
decltype(cuMemcpyHtoD_v2) cuMemcpyHtoD_v2_ptds;
decltype(cuMemcpyDtoH_v2) cuMemcpyDtoH_v2_ptds;
decltype(cuMemsetD8_v2) cuMemsetD8_v2_ptds;
decltype(cuStreamBeginCapture_v2) cuStreamBeginCapture_v2_ptsz;
decltype(cuStreamEndCapture) cuStreamEndCapture_ptsz;
decltype(cuStreamIsCapturing) cuStreamIsCapturing_ptsz;
decltype(cuStreamSynchronize) cuStreamSynchronize_ptsz;
decltype(cuGraphLaunch) cuGraphLaunch_ptsz;
decltype(cuGraphUpload) cuGraphUpload_ptsz;
decltype(cuGraphInstantiateWithParams) cuGraphInstantiateWithParams_ptsz;
// Graph instantiation before CUDA 12 (cudaVersion 10000 and 11000): an error node and a log buffer
// where CUDA 12's cuGraphInstantiate (cuGraphInstantiateWithFlags) takes flags.
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
                                    size_t bufferSize);
decltype(cuGraphInstantiate) cuGraphInstantiate_v2;
decltype(cuLaunchKernel) cuLaunchKernel_ptsz;
}
#pragma GCC visibility pop

// The handles cuda.h leaves opaque. Destroyed contexts are kept (marked) rather than freed, so that a
// stale handle gives CUDA_ERROR_CONTEXT_IS_DESTROYED instead of a use-after-free in the test program.
struct CUctx_st {
    int ordinal;
    int phys;
    bool primary;
    bool destroyed;
    bool launched;  // a kernel was launched in it: lazily loaded code is on the device (FAKE_CUDA_LAZY_BYTES)
};
struct CUstream_st {
    CUcontext ctx;
    CUgraph capture;  // the graph being captured on this stream, or null
};

namespace fakecu {

// fake_cuda.cpp
CUresult need_init();
CUresult need_ctx(CUctx_st **out);  // the calling thread's current context
CUresult need_device(CUdevice dev, int *phys);
// Device memory of physical device `phys` taken and given back, in the truth file (fake_truth.h) and
// its per-process table; charge() is where every "driver OOM" comes from.
CUresult charge(int phys, uint64_t bytes);
void uncharge(int phys, uint64_t bytes, pid_t owner);
bool tracing();
void trace(const char *fn, CUresult r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
uint64_t env_bytes(const char *name);  // a plain integer variable, 0 when unset

// Objects the driver owns until the program destroys them (streams, graphs, modules): kept reachable
// here, as the real driver keeps them until the process ends, so that a program that exits without
// destroying one is no leak to LeakSanitizer (the sanitized test runs check for leaks).
void own(void *p);
void disown(void *p);
template <class T>
T *owned(T *p) {
    own(p);
    return p;
}

// fake_cuda_usage.cpp: what contexts cost (FAKE_CUDA_CTX_BYTES), charged when a context is made and
// given back when it goes.
CUresult context_made(int phys);
void context_gone(int phys);
// A synchronization point on the device: its pools give back what exceeds their release threshold.
void synchronized(int phys);
// cuMemFree of a pool's allocation (legal: it goes back to its pool); false when `ptr` is none.
bool pool_freed_by_plain_free(CUdeviceptr ptr);

}  // namespace fakecu
