/* alloc_until_oom: allocates device memory in chunks through the CUDA driver API until the driver
 * (or gpuguard's quota) says CUDA_ERROR_OUT_OF_MEMORY, then says how far it got. No Python, no
 * runtime library: the smallest program that shows gpuguard at work.
 *
 * Build (either):
 *   nvcc -O2 -o alloc_until_oom alloc_until_oom.c -lcuda
 *   gcc  -O2 -I/usr/local/cuda/include -o alloc_until_oom alloc_until_oom.c \
 *        -L/usr/local/cuda/lib64/stubs -lcuda
 * (the stub libcuda.so is for linking only; at run time the driver's libcuda.so.1 is used.)
 *
 * Run:
 *   gpuguard run --limit 1GiB --report-dir reports -- ./alloc_until_oom        # stops near 1 GiB
 *   gpuguard report reports/gpuguard-quota-*.json                            # who held what
 *
 * Arguments: [CHUNK_MIB] [MAX_MIB] [hold] (default 256 and 32768): it never takes more than MAX_MIB,
 * so that without a quota it does not take a shared GPU's whole memory; with "hold" it keeps what it
 * got until its standard input closes (to watch it with gpuguard top). Exit status: 0 when an
 * allocation was refused (what it is for), 1 when MAX_MIB was reached first, 2 on other errors. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *err_name(CUresult r) {
    const char *s = NULL;
    return cuGetErrorName(r, &s) == CUDA_SUCCESS && s ? s : "unknown error";
}

int main(int argc, char **argv) {
    size_t chunk_mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 256;
    size_t max_mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 32768;
    int hold = argc > 3 && strcmp(argv[3], "hold") == 0;
    if (chunk_mib == 0 || max_mib < chunk_mib || (argc > 3 && !hold)) {
        fprintf(stderr, "usage: %s [CHUNK_MIB] [MAX_MIB] [hold]\n", argv[0]);
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUresult r;
    if ((r = cuInit(0)) != CUDA_SUCCESS || (r = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS ||
        (r = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS || (r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS) {
        fprintf(stderr, "alloc_until_oom: no CUDA device: %s\n", err_name(r));
        return 2;
    }
    char name[128] = "";
    cuDeviceGetName(name, sizeof name - 1, dev);
    size_t free_b = 0, total_b = 0;
    /* Under gpuguard, free and total are the quota's: what the container may still take. */
    cuMemGetInfo(&free_b, &total_b);
    printf("device 0: %s; the driver says %zu MiB free of %zu MiB\n", name, free_b >> 20, total_b >> 20);

    enum { kMaxChunks = 4096 };
    static CUdeviceptr held[kMaxChunks];
    int n = 0, refused = 0;
    while (n < kMaxChunks && (size_t)(n + 1) * chunk_mib <= max_mib) {
        r = cuMemAlloc(&held[n], chunk_mib << 20);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            refused = 1;
            break;
        }
        if (r != CUDA_SUCCESS) {
            fprintf(stderr, "alloc_until_oom: cuMemAlloc: %s\n", err_name(r));
            return 2;
        }
        n++;
    }
    if (refused)
        printf("allocated %d x %zu MiB = %zu MiB; the next %zu MiB was refused: CUDA_ERROR_OUT_OF_MEMORY\n", n,
               chunk_mib, n * chunk_mib, chunk_mib);
    else
        printf("allocated %zu MiB without a refusal (the MAX_MIB cap); run it under gpuguard run --limit 1GiB\n",
               n * chunk_mib);
    if (refused) {
        const char *dir = getenv("GPUGUARD_REPORT_DIR");
        if (getenv("GPUGUARD_MEM_LIMIT"))
            printf("gpuguard wrote a report into %s: read it with  gpuguard report <file>\n",
                   dir ? dir : "the working directory");
    }
    fflush(stdout);
    if (hold)
        while (getchar() != EOF) {}
    for (int i = 0; i < n; i++) cuMemFree(held[i]);
    cuDevicePrimaryCtxRelease(dev);
    return refused ? 0 : 1;
}
