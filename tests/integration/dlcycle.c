/* dlopen/dlclose of the driver by the program (tests/integration/t_faults.sh). Not linked to libcuda:
 * each round dlopens libcuda.so.1, resolves cuMemAlloc_v2/cuMemFree_v2 with dlsym (or, with `gpa`,
 * through cuGetProcAddress_v2 and its self-lookup), allocates one block, frees the block of the
 * round before through this round's handle, and dlcloses the driver. Prints one line:
 *   "dlcycle rounds=N failures=F" then "info free=.. total=.." from a last round's cuMemGetInfo.
 *   dlcycle dlsym|gpa ROUNDS BYTES */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*info_fn)(size_t *, size_t *);
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *lookup(void *h, int gpa, const char *versioned, const char *base) {
    if (!gpa) return dlsym(h, versioned);
    gpa_fn g = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
    void *self = NULL, *p = NULL;
    CUdriverProcAddressQueryResult st;
    if (!g || g("cuGetProcAddress", &self, 12000, 0, &st) != CUDA_SUCCESS || !self) return NULL;
    return ((gpa_fn)self)(base, &p, 13000, 0, &st) == CUDA_SUCCESS ? p : NULL;
}

/* Opens the driver and makes device 0's primary context current on this thread. */
static void *open_driver(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlcycle: %s\n", dlerror());
        exit(3);
    }
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(h, "cuInit");
    CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))dlsym(h, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) =
        (CUresult(*)(CUcontext *, CUdevice))dlsym(h, "cuDevicePrimaryCtxRetain");
    CUresult (*set)(CUcontext) = (CUresult(*)(CUcontext))dlsym(h, "cuCtxSetCurrent");
    CUdevice dev;
    CUcontext ctx;
    if (!init || !get || !retain || !set || init(0) || get(&dev, 0) || retain(&ctx, dev) || set(ctx)) {
        fprintf(stderr, "dlcycle: driver setup failed\n");
        exit(3);
    }
    return h;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: dlcycle dlsym|gpa ROUNDS BYTES\n");
        return 2;
    }
    int gpa = !strcmp(argv[1], "gpa"), rounds = atoi(argv[2]), failures = 0;
    size_t bytes = strtoull(argv[3], NULL, 0);
    CUdeviceptr previous = 0;
    for (int i = 0; i < rounds; i++) {
        void *h = open_driver();
        alloc_fn a = (alloc_fn)lookup(h, gpa, "cuMemAlloc_v2", "cuMemAlloc");
        free_fn f = (free_fn)lookup(h, gpa, "cuMemFree_v2", "cuMemFree");
        CUdeviceptr p = 0;
        if (!a || !f || a(&p, bytes) != CUDA_SUCCESS) failures++;
        if (previous && f && f(previous) != CUDA_SUCCESS) failures++;
        previous = p;
        dlclose(h);
    }
    void *h = open_driver();
    free_fn f = (free_fn)lookup(h, gpa, "cuMemFree_v2", "cuMemFree");
    info_fn info = (info_fn)lookup(h, gpa, "cuMemGetInfo_v2", "cuMemGetInfo");
    if (previous && (!f || f(previous) != CUDA_SUCCESS)) failures++;
    size_t fr = 0, t = 0;
    CUresult r = info ? info(&fr, &t) : CUDA_ERROR_NOT_FOUND;
    printf("dlcycle rounds=%d failures=%d\n", rounds, failures);
    printf("info -> %d free=%zu total=%zu\n", (int)r, fr, t);
    dlclose(h);
    return failures ? 1 : 0;
}
