// A program whose functions alpha() and beta() allocate different sizes through the driver, for the
// report's stacks; also asks for a report itself through the public API, and can hold a thread
// allocating with no Python while another thread (in a Python test) holds the GIL.
//   stacks_app report      alpha x3 (64 MiB), beta x1 (32 MiB), then gpuguard_report_now()
//   stacks_app oom LIMIT   alpha then beta until refused
#include <cuda.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpuguard/gpuguard.h"

extern "C" __attribute__((noinline)) CUdeviceptr alpha() {
    CUdeviceptr p = 0;
    if (cuMemAlloc_v2(&p, 64u << 20) != CUDA_SUCCESS) return 0;
    asm volatile("" ::: "memory");  // keeps the call from becoming a tail call
    return p;
}

extern "C" __attribute__((noinline)) CUdeviceptr beta() {
    CUdeviceptr p = 0;
    if (cuMemAlloc_v2(&p, 32u << 20) != CUDA_SUCCESS) return 0;
    asm volatile("" ::: "memory");
    return p;
}

int main(int argc, char **argv) {
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 3;
    const char *mode = argc > 1 ? argv[1] : "report";
    if (!strcmp(mode, "report")) {
        // One call site for the three calls: an unrolled loop would give each its own return address.
#pragma GCC unroll 1
        for (int i = 0; i < 3; i++) alpha();
        beta();
        int r = gpuguard_report_now("asked by stacks_app");
        printf("report -> %d\n", r);
        return r == 0 ? 0 : 1;
    }
    for (int i = 0; i < 100; i++)
        if (!(i % 2 ? beta() : alpha())) {
            printf("refused at %d\n", i);
            return 0;
        }
    return 1;
}
