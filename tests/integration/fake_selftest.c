/* Self-test of the test doubles, run WITHOUT the shim (t_fake.sh): the shim's tests are only as good
 * as the fake driver they run against, so its cuGetProcAddress answers, capacity, device remapping and
 * bookkeeping are proved here first. It dlopens libcuda.so.1 (and libcudart.so.13, libnvidia-ml.so.1)
 * from LD_LIBRARY_PATH, like a real program finds the driver.
 *
 *   fake_selftest procaddr              cuGetProcAddress answers, self-lookup included
 *   fake_selftest reachable SYMBOL...   each exported symbol is some base name's answer
 *   fake_selftest context               NOT_INITIALIZED before cuInit, INVALID_CONTEXT without a context
 *   fake_selftest devices               one line per ordinal: name, UUID, total
 *   fake_selftest alloc SIZE...         allocates each (K/M/G suffixes), prints results, frees all
 *   fake_selftest hold SIZE             allocates, prints "held", waits for stdin to close, frees
 *   fake_selftest leak SIZE             allocates and exits without freeing
 *   fake_selftest shapes                pitch, array, mipmap and VMM byte accounting via cuMemGetInfo
 *   fake_selftest cudart SIZE           cudaMalloc/cudaMemGetInfo/cudaFree through the fake runtime
 *   fake_selftest nvml                  one line per NVML device
 * Exit status 0 when every check passed; each failed check prints a line starting with FAIL. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/nvidia/nvml_min.h"

static void *g_lib;
static int g_failed;

/* Driver entry points by their exported names, typed from cuda.h. */
#define SYM(name) ((__typeof__(&name))sym(#name))
static void *sym(const char *name) {
    void *p = dlsym(g_lib, name);
    if (!p) {
        fprintf(stderr, "FAIL: libcuda.so.1 does not export %s\n", name);
        exit(2);
    }
    return p;
}

static void expect(int ok, const char *what) {
    if (!ok) g_failed = 1;
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
}

static const char *err(CUresult r) {
    const char *s = "?";
    SYM(cuGetErrorName)(r, &s);
    return s;
}

static size_t parse_size(const char *s) {
    char *end;
    size_t n = strtoull(s, &end, 10);
    switch (*end) {
        case 'K': return n << 10;
        case 'M': return n << 20;
        case 'G': return n << 30;
        default: return n;
    }
}

/* cuInit and the primary context of ordinal 0 made current: what a runtime does before allocating. */
static void init_ctx(void) {
    CUcontext ctx;
    CUdevice dev;
    if (SYM(cuInit)(0) || SYM(cuDeviceGet)(&dev, 0) || SYM(cuDevicePrimaryCtxRetain)(&ctx, dev) ||
        SYM(cuCtxSetCurrent)(ctx)) {
        fprintf(stderr, "FAIL: cannot set up a context on ordinal 0\n");
        exit(2);
    }
}

static size_t free_bytes(void) {
    size_t f = 0, t = 0;
    SYM(cuMemGetInfo_v2)(&f, &t);
    return f;
}

/* One lookup: expected exported symbol (NULL: none), expected status. */
static void lookup(const char *base, int version, cuuint64_t flags, const char *want,
                   CUdriverProcAddressQueryResult want_st) {
    void *p = (void *)1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    CUresult r = SYM(cuGetProcAddress_v2)(base, &p, version, flags, &st);
    char what[256];
    snprintf(what, sizeof what, "cuGetProcAddress_v2(%s, %d, flags %llu) -> %s (%s, status %d)", base, version,
             (unsigned long long)flags, want ? want : "NULL", err(r), (int)st);
    expect(want ? (r == CUDA_SUCCESS && p == sym(want) && st == want_st)
                : (r == CUDA_ERROR_NOT_FOUND && p == NULL && st == want_st),
           what);
}

static int procaddr(void) {
    const cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    const CUdriverProcAddressQueryResult ok = CU_GET_PROC_ADDRESS_SUCCESS;
    /* The self-lookup real cudart makes: the 5-argument form from 12000, the legacy 4-argument before. */
    lookup("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2", ok);
    lookup("cuGetProcAddress", 11030, 0, "cuGetProcAddress", ok);
    lookup("cuGetProcAddress", 11020, 0, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    /* The legacy form answers from the same table. */
    void *p = NULL;
    CUresult r = ((CUresult(*)(const char *, void **, int, cuuint64_t))sym("cuGetProcAddress"))("cuGetProcAddress", &p,
                                                                                                12000, 0);
    expect(r == CUDA_SUCCESS && p == sym("cuGetProcAddress_v2"),
           "legacy cuGetProcAddress(cuGetProcAddress, 12000) -> cuGetProcAddress_v2");
    /* Versioned variants by cudaVersion. */
    lookup("cuMemAlloc", 13000, 0, "cuMemAlloc_v2", ok);
    lookup("cuMemAlloc", 3020, 0, "cuMemAlloc_v2", ok);
    lookup("cuMemAlloc", 3010, 0, "cuMemAlloc", ok);
    lookup("cuMemFree", 12000, 0, "cuMemFree_v2", ok);
    lookup("cuMemGetInfo", 12000, 0, "cuMemGetInfo_v2", ok);
    lookup("cuDeviceGetUuid", 11040, 0, "cuDeviceGetUuid_v2", ok);
    lookup("cuDeviceGetUuid", 11030, 0, "cuDeviceGetUuid", ok);
    lookup("cuCtxCreate", 13000, 0, "cuCtxCreate_v4", ok);
    lookup("cuCtxCreate", 11040, 0, "cuCtxCreate_v3", ok);
    lookup("cuMemAllocAsync", 11010, 0, NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    /* Per-thread default stream: the _ptsz/_ptds twin where one exists, the plain one where not. */
    lookup("cuMemAllocAsync", 12000, 0, "cuMemAllocAsync", ok);
    lookup("cuMemAllocAsync", 12000, pt, "cuMemAllocAsync_ptsz", ok);
    lookup("cuMemFreeAsync", 12000, pt, "cuMemFreeAsync_ptsz", ok);
    lookup("cuMemAllocFromPoolAsync", 12000, pt, "cuMemAllocFromPoolAsync_ptsz", ok);
    lookup("cuMemcpyHtoD", 12000, pt, "cuMemcpyHtoD_v2_ptds", ok);
    lookup("cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemcpyHtoD_v2", ok);
    lookup("cuMemAlloc", 12000, pt, "cuMemAlloc_v2", ok);
    /* Unknown names, and versioned names (the driver wants base names). */
    lookup("cuNoSuchFunction", 13000, 0, NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    lookup("cuMemAlloc_v2", 13000, 0, NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    /* The status pointer is optional. */
    r = SYM(cuGetProcAddress_v2)("cuInit", &p, 13000, 0, NULL);
    expect(r == CUDA_SUCCESS && p == sym("cuInit"), "cuGetProcAddress_v2 with a NULL status pointer");
    return g_failed;
}

/* Strips _ptsz/_ptds and a _vN suffix: the base name cuGetProcAddress knows the symbol by. */
static void base_of(const char *s, char *out, size_t n) {
    snprintf(out, n, "%s", s);
    size_t len = strlen(out);
    if (len > 5 && (!strcmp(out + len - 5, "_ptsz") || !strcmp(out + len - 5, "_ptds"))) out[len -= 5] = 0;
    char *v = strrchr(out, '_');
    if (v && v[1] == 'v' && v[2] >= '0' && v[2] <= '9') *v = 0;
}

static int reachable(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        char base[128];
        base_of(argv[i], base, sizeof base);
        void *want = sym(argv[i]);
        int found = 0;
        for (int v = 2000; v <= 13000 && !found; v += 10)
            for (cuuint64_t f = 0; f <= CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM && !found; f += 2) {
                void *p = NULL;
                found = SYM(cuGetProcAddress_v2)(base, &p, v, f, NULL) == CUDA_SUCCESS && p == want;
            }
        char what[256];
        snprintf(what, sizeof what, "%s reachable as cuGetProcAddress(\"%s\")", argv[i], base);
        expect(found, what);
    }
    return g_failed;
}

static int context(void) {
    CUdeviceptr p;
    size_t f, t;
    expect(SYM(cuMemAlloc_v2)(&p, 4096) == CUDA_ERROR_NOT_INITIALIZED,
           "cuMemAlloc before cuInit -> CUDA_ERROR_NOT_INITIALIZED");
    SYM(cuInit)(0);
    expect(SYM(cuMemAlloc_v2)(&p, 4096) == CUDA_ERROR_INVALID_CONTEXT,
           "cuMemAlloc without a context -> CUDA_ERROR_INVALID_CONTEXT");
    expect(SYM(cuMemGetInfo_v2)(&f, &t) == CUDA_ERROR_INVALID_CONTEXT,
           "cuMemGetInfo without a context -> CUDA_ERROR_INVALID_CONTEXT");
    CUcontext ctx, cur = NULL;
    expect(SYM(cuCtxCreate_v4)(&ctx, NULL, 0, 0) == CUDA_SUCCESS && SYM(cuCtxGetCurrent)(&cur) == CUDA_SUCCESS &&
               cur == ctx,
           "cuCtxCreate makes the new context current");
    expect(SYM(cuMemAlloc_v2)(&p, 4096) == CUDA_SUCCESS && SYM(cuMemFree_v2)(p) == CUDA_SUCCESS,
           "allocation in a created context");
    expect(SYM(cuMemFree_v2)(p) == CUDA_ERROR_INVALID_VALUE, "double free -> CUDA_ERROR_INVALID_VALUE");
    expect(SYM(cuMemFree_v2)(0) == CUDA_SUCCESS, "free of NULL -> CUDA_SUCCESS");
    expect(SYM(cuMemAlloc_v2)(&p, 0) == CUDA_ERROR_INVALID_VALUE, "zero-byte cuMemAlloc -> CUDA_ERROR_INVALID_VALUE");
    expect(SYM(cuCtxDestroy_v2)(ctx) == CUDA_SUCCESS && SYM(cuMemAlloc_v2)(&p, 4096) == CUDA_ERROR_INVALID_CONTEXT,
           "no context after cuCtxDestroy of the current one");
    return g_failed;
}

static int devices(void) {
    int n = 0;
    SYM(cuInit)(0);
    SYM(cuDeviceGetCount)(&n);
    printf("count %d\n", n);
    for (int i = 0; i < n; i++) {
        char name[64];
        CUuuid u;
        size_t total = 0;
        SYM(cuDeviceGetName)(name, sizeof name, i);
        SYM(cuDeviceGetUuid_v2)(&u, i);
        SYM(cuDeviceTotalMem_v2)(&total, i);
        unsigned char *b = (unsigned char *)u.bytes;
        printf(
            "ordinal %d name %s uuid GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x total %zu\n",
            i, name, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
            b[15], total);
    }
    return 0;
}

static int alloc(int argc, char **argv) {
    CUdeviceptr ptrs[64];
    int n = 0;
    init_ctx();
    for (int i = 0; i < argc && n < 64; i++) {
        CUresult r = SYM(cuMemAlloc_v2)(&ptrs[n], parse_size(argv[i]));
        printf("alloc %s -> %s\n", argv[i], err(r));
        if (r == CUDA_SUCCESS) SYM(cuMemsetD8_v2)(ptrs[n++], 0xab, 4096); /* the memory is writable */
    }
    for (int i = 0; i < n; i++) SYM(cuMemFree_v2)(ptrs[i]);
    return 0;
}

static int hold(const char *size) {
    CUdeviceptr p;
    init_ctx();
    CUresult r = SYM(cuMemAlloc_v2)(&p, parse_size(size));
    printf("%s\n", r == CUDA_SUCCESS ? "held" : err(r));
    fflush(stdout);
    while (getchar() != EOF) {}
    if (r == CUDA_SUCCESS) SYM(cuMemFree_v2)(p);
    return r != CUDA_SUCCESS;
}

static int leak(const char *size) {
    CUdeviceptr p;
    init_ctx();
    CUresult r = SYM(cuMemAlloc_v2)(&p, parse_size(size));
    printf("leak %s -> %s\n", size, err(r));
    return r != CUDA_SUCCESS;
}

static int shapes(void) {
    init_ctx();
    size_t before = free_bytes(), pitch = 0;
    CUdeviceptr p;
    char what[160];
    CUresult r = SYM(cuMemAllocPitch_v2)(&p, &pitch, 1000, 10, 4);
    snprintf(what, sizeof what, "cuMemAllocPitch 1000x10: pitch %zu (512-aligned), charged %zu", pitch,
             before - free_bytes());
    expect(r == CUDA_SUCCESS && pitch == 1024 && before - free_bytes() == 10240, what);
    SYM(cuMemFree_v2)(p);

    CUDA_ARRAY_DESCRIPTOR ad = {1024, 0, CU_AD_FORMAT_FLOAT, 4};
    CUarray arr;
    r = SYM(cuArrayCreate_v2)(&arr, &ad);
    expect(r == CUDA_SUCCESS && before - free_bytes() == 1024 * 16, "cuArrayCreate 1024 x float4 charges 16 KiB");
    SYM(cuArrayDestroy)(arr);
    CUDA_ARRAY3D_DESCRIPTOR md = {256, 256, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
    CUmipmappedArray mip;
    r = SYM(cuMipmappedArrayCreate)(&mip, &md, 3);
    expect(r == CUDA_SUCCESS && before - free_bytes() == 65536 + 16384 + 4096,
           "mipmap 256x256 u8, 3 levels charges 86016");
    SYM(cuMipmappedArrayDestroy)(mip);
    expect(before == free_bytes(), "array frees give every byte back");

    /* VMM: the handle holds the memory until released AND unmapped; host handles cost the device nothing. */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    size_t g = 0, sz = 4u << 20;
    SYM(cuMemGetAllocationGranularity)(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    expect(g == (2u << 20), "granularity is 2 MiB");
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    r = SYM(cuMemCreate)(&h, sz, &prop, 0);
    expect(r == CUDA_SUCCESS && before - free_bytes() == sz, "cuMemCreate on a device charges it");
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    r = SYM(cuMemAddressReserve)(&va, sz, 0, 0, 0);
    if (!r) r = SYM(cuMemMap)(va, sz, 0, h, 0);
    if (!r) r = SYM(cuMemSetAccess)(va, sz, &acc, 1);
    if (!r) memset((void *)va, 0x5a, sz);
    expect(r == CUDA_SUCCESS, "reserve, map, set access, write through the mapping");
    SYM(cuMemRelease)(h);
    expect(before - free_bytes() == sz, "a released handle still mapped keeps its bytes");
    SYM(cuMemUnmap)(va, sz);
    expect(before == free_bytes(), "unmapping the released handle gives the bytes back");
    SYM(cuMemAddressFree)(va, sz);
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
    r = SYM(cuMemCreate)(&h, sz, &prop, 0);
    expect(r == CUDA_SUCCESS && before == free_bytes(), "cuMemCreate of host memory does not charge the device");
    SYM(cuMemRelease)(h);
    r = SYM(cuMemCreate)(&h, 1000, &prop, 0);
    expect(r == CUDA_ERROR_INVALID_VALUE, "cuMemCreate of a size off the granularity -> CUDA_ERROR_INVALID_VALUE");
    return g_failed;
}

static int cudart(const char *size) {
    void *rt = dlopen("libcudart.so.13", RTLD_NOW);
    if (!rt) {
        fprintf(stderr, "FAIL: %s\n", dlerror());
        return 2;
    }
    int (*cuda_malloc)(void **, size_t) = (int (*)(void **, size_t))dlsym(rt, "cudaMalloc");
    int (*cuda_free)(void *) = (int (*)(void *))dlsym(rt, "cudaFree");
    int (*cuda_info)(size_t *, size_t *) = (int (*)(size_t *, size_t *))dlsym(rt, "cudaMemGetInfo");
    void *p = NULL;
    size_t f = 0, t = 0;
    int e = cuda_malloc(&p, parse_size(size));
    cuda_info(&f, &t);
    printf("cudaMalloc %s -> %d free %zu total %zu\n", size, e, f, t);
    if (p) memset(p, 1, 4096);
    if (!e) cuda_free(p);
    return 0;
}

static int nvml(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "FAIL: %s\n", dlerror());
        return 2;
    }
#define NV(name) ((__typeof__(&name))dlsym(lib, #name))
    unsigned n = 0;
    expect(NV(nvmlDeviceGetCount_v2)(&n) == NVML_ERROR_UNINITIALIZED,
           "NVML before nvmlInit -> NVML_ERROR_UNINITIALIZED");
    NV(nvmlInit_v2)();
    NV(nvmlDeviceGetCount_v2)(&n);
    char ver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    NV(nvmlSystemGetDriverVersion)(ver, sizeof ver);
    printf("count %u driver %s\n", n, ver);
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t d;
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], tiny[8];
        nvmlMemory_t m;
        nvmlMemory_v2_t m2;
        m2.version = nvmlMemory_v2;
        NV(nvmlDeviceGetHandleByIndex_v2)(i, &d);
        NV(nvmlDeviceGetUUID)(d, uuid, sizeof uuid);
        NV(nvmlDeviceGetName)(d, name, sizeof name);
        NV(nvmlDeviceGetMemoryInfo)(d, &m);
        expect(NV(nvmlDeviceGetMemoryInfo_v2)(d, &m2) == NVML_SUCCESS && m2.total == m.total && m2.used == m.used,
               "nvmlDeviceGetMemoryInfo_v2 agrees with v1");
        expect(NV(nvmlDeviceGetUUID)(d, tiny, sizeof tiny) == NVML_ERROR_INSUFFICIENT_SIZE,
               "short UUID buffer -> NVML_ERROR_INSUFFICIENT_SIZE");
        printf("index %u name %s uuid %s total %llu used %llu free %llu\n", i, name, uuid, m.total, m.used, m.free);
    }
    NV(nvmlShutdown)();
    return g_failed;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: fake_selftest procaddr|reachable|context|devices|alloc|hold|leak|shapes|cudart|nvml ...\n");
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "nvml")) return nvml();
    g_lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!g_lib) {
        fprintf(stderr, "FAIL: %s\n", dlerror());
        return 2;
    }
    if (!strcmp(cmd, "procaddr")) return procaddr();
    if (!strcmp(cmd, "reachable")) return reachable(argc - 2, argv + 2);
    if (!strcmp(cmd, "context")) return context();
    if (!strcmp(cmd, "devices")) return devices();
    if (!strcmp(cmd, "alloc")) return alloc(argc - 2, argv + 2);
    if (!strcmp(cmd, "hold") && argc == 3) return hold(argv[2]);
    if (!strcmp(cmd, "leak") && argc == 3) return leak(argv[2]);
    if (!strcmp(cmd, "shapes")) return shapes();
    if (!strcmp(cmd, "cudart") && argc == 3) return cudart(argv[2]);
    fprintf(stderr, "fake_selftest: unknown command %s\n", cmd);
    return 2;
}
