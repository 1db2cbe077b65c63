/* A scriptable CUDA driver client for the integration tests, reaching the driver in the way the
 * first argument names:
 *   linked     calls the exported functions directly (the program links libcuda; name ends _linked)
 *   dlsym      dlopen("libcuda.so.1") + dlsym of each versioned name
 *   gpa        like cudart: dlsym cuGetProcAddress_v2, ask it for "cuGetProcAddress" itself, then
 *              resolve every function through the pointer that came back (cudaVersion 12000)
 *   gpa_legacy the same through the legacy 4-argument cuGetProcAddress (cudaVersion 11030)
 * then runs operations given as arguments, printing one line each: "<op> <arg> -> <CUresult>".
 *   alloc BYTES | pitch WIDTH HEIGHT | managed BYTES | async BYTES | async_ptsz BYTES | create BYTES |
 *   array W H | array3d W H D | mipmap W H LEVELS | free I | release I | destroy I | info | total |
 *   sleep MS | device N | nocontext | freeall | threads N BYTES ROUNDS (N threads racing alloc/free) |
 *   exec PROG ARGS... (the rest of the arguments: replaces this image, its allocations not freed)
 * I is the index of an earlier successful allocation (0-based, in order). */

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);

static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
    CUresult (*managed)(CUdeviceptr *, size_t, unsigned);
    CUresult (*async)(CUdeviceptr *, size_t, CUstream);
    CUresult (*async_ptsz)(CUdeviceptr *, size_t, CUstream);
    CUresult (*free_async)(CUdeviceptr, CUstream);
    CUresult (*free)(CUdeviceptr);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*array)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    CUresult (*array3d)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
    CUresult (*array_destroy)(CUarray);
    CUresult (*mipmap)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
    CUresult (*mipmap_destroy)(CUmipmappedArray);
    CUresult (*info)(size_t *, size_t *);
    CUresult (*total)(size_t *, CUdevice);
} D;

enum kind { K_PTR, K_HANDLE, K_ARRAY, K_MIPMAP };
static struct {
    enum kind kind;
    unsigned long long v;
} held[4096];
static int nheld;
static int device_ordinal;

static void resolve_linked(void) {
    D.init = cuInit;
    D.device_get = cuDeviceGet;
    D.retain = cuDevicePrimaryCtxRetain;
    D.set_current = cuCtxSetCurrent;
    D.alloc = cuMemAlloc_v2;
    D.pitch = cuMemAllocPitch_v2;
    D.managed = cuMemAllocManaged;
    D.async = cuMemAllocAsync;
    D.async_ptsz = cuMemAllocAsync_ptsz;
    D.free_async = cuMemFreeAsync;
    D.free = cuMemFree_v2;
    D.create = cuMemCreate;
    D.release = cuMemRelease;
    D.array = cuArrayCreate_v2;
    D.array3d = cuArray3DCreate_v2;
    D.array_destroy = cuArrayDestroy;
    D.mipmap = cuMipmappedArrayCreate;
    D.mipmap_destroy = cuMipmappedArrayDestroy;
    D.info = cuMemGetInfo_v2;
    D.total = cuDeviceTotalMem_v2;
}

static void *must(void *p, const char *name) {
    if (!p) {
        fprintf(stderr, "drv: cannot resolve %s\n", name);
        exit(3);
    }
    return p;
}

static void resolve_dlsym(void) {
    void *h = must(dlopen("libcuda.so.1", RTLD_NOW), "libcuda.so.1");
#define S(field, name) *(void **)&D.field = must(dlsym(h, name), name)
    S(init, "cuInit");
    S(device_get, "cuDeviceGet");
    S(retain, "cuDevicePrimaryCtxRetain");
    S(set_current, "cuCtxSetCurrent");
    S(alloc, "cuMemAlloc_v2");
    S(pitch, "cuMemAllocPitch_v2");
    S(managed, "cuMemAllocManaged");
    S(async, "cuMemAllocAsync");
    S(async_ptsz, "cuMemAllocAsync_ptsz");
    S(free_async, "cuMemFreeAsync");
    S(free, "cuMemFree_v2");
    S(create, "cuMemCreate");
    S(release, "cuMemRelease");
    S(array, "cuArrayCreate_v2");
    S(array3d, "cuArray3DCreate_v2");
    S(array_destroy, "cuArrayDestroy");
    S(mipmap, "cuMipmappedArrayCreate");
    S(mipmap_destroy, "cuMipmappedArrayDestroy");
    S(info, "cuMemGetInfo_v2");
    S(total, "cuDeviceTotalMem_v2");
#undef S
}

static void resolve_gpa(int legacy) {
    void *h = must(dlopen("libcuda.so.1", RTLD_NOW), "libcuda.so.1");
    CUresult (*gpa2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        must(dlsym(h, "cuGetProcAddress_v2"), "cuGetProcAddress_v2");
    CUdriverProcAddressQueryResult st;
    void *self = NULL;
    int version = legacy ? 11030 : 12000;
    /* The self-lookup, exactly as cudart 13 does it. */
    if (gpa2("cuGetProcAddress", &self, version, 0, &st) != CUDA_SUCCESS || !self) {
        fprintf(stderr, "drv: self-lookup failed\n");
        exit(3);
    }
    CUresult (*gpa_new)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) = self;
    CUresult (*gpa_old)(const char *, void **, int, cuuint64_t) = self;
#define G(field, name, flags)                                                                         \
    do {                                                                                              \
        void *p = NULL;                                                                               \
        CUresult r = legacy ? gpa_old(name, &p, 13000, flags) : gpa_new(name, &p, 13000, flags, &st); \
        if (r != CUDA_SUCCESS) {                                                                      \
            fprintf(stderr, "drv: cuGetProcAddress(%s) = %d\n", name, r);                             \
            exit(3);                                                                                  \
        }                                                                                             \
        *(void **)&D.field = p;                                                                       \
    } while (0)
    G(init, "cuInit", 0);
    G(device_get, "cuDeviceGet", 0);
    G(retain, "cuDevicePrimaryCtxRetain", 0);
    G(set_current, "cuCtxSetCurrent", 0);
    G(alloc, "cuMemAlloc", 0);
    G(pitch, "cuMemAllocPitch", 0);
    G(managed, "cuMemAllocManaged", 0);
    G(async, "cuMemAllocAsync", 0);
    G(async_ptsz, "cuMemAllocAsync", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    G(free_async, "cuMemFreeAsync", 0);
    G(free, "cuMemFree", 0);
    G(create, "cuMemCreate", 0);
    G(release, "cuMemRelease", 0);
    G(array, "cuArrayCreate", 0);
    G(array3d, "cuArray3DCreate", 0);
    G(array_destroy, "cuArrayDestroy", 0);
    G(mipmap, "cuMipmappedArrayCreate", 0);
    G(mipmap_destroy, "cuMipmappedArrayDestroy", 0);
    G(info, "cuMemGetInfo", 0);
    G(total, "cuDeviceTotalMem", 0);
#undef G
}

static void keep(enum kind k, unsigned long long v) {
    if (nheld < 4096) {
        held[nheld].kind = k;
        held[nheld].v = v;
        nheld++;
    }
}

static const char *name_of(CUresult r) {
    switch (r) {
        case CUDA_SUCCESS: return "CUDA_SUCCESS";
        case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
        case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
        case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
        case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
        default: return "CUDA_ERROR_OTHER";
    }
}

static void make_current(int ordinal) {
    CUdevice dev;
    CUcontext ctx;
    if (D.device_get(&dev, ordinal) || D.retain(&ctx, dev) || D.set_current(ctx)) {
        fprintf(stderr, "drv: no device %d\n", ordinal);
        exit(3);
    }
}

static void use_device(int ordinal) {
    make_current(ordinal);
    device_ordinal = ordinal;
}

struct race {
    size_t bytes;
    int rounds;
    int ordinal;
    int ok, refused;
};
static void *racer(void *arg) {
    struct race *r = arg;
    make_current(r->ordinal); /* the main thread's device; device_ordinal is the main thread's to write */
    for (int i = 0; i < r->rounds; i++) {
        CUdeviceptr p;
        CUresult res = D.alloc(&p, r->bytes);
        if (res == CUDA_SUCCESS) {
            r->ok++;
            usleep(50);
            D.free(p);
        } else if (res == CUDA_ERROR_OUT_OF_MEMORY) r->refused++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: drv linked|dlsym|gpa|gpa_legacy OPS...\n");
        return 2;
    }
    if (!strcmp(argv[1], "linked")) resolve_linked();
    else if (!strcmp(argv[1], "dlsym")) resolve_dlsym();
    else if (!strcmp(argv[1], "gpa")) resolve_gpa(0);
    else if (!strcmp(argv[1], "gpa_legacy")) resolve_gpa(1);
    else {
        fprintf(stderr, "drv: unknown mode %s\n", argv[1]);
        return 2;
    }
    if (D.init(0) != CUDA_SUCCESS) {
        fprintf(stderr, "drv: cuInit failed\n");
        return 3;
    }
    use_device(0);
    for (int i = 2; i < argc; i++) {
        const char *op = argv[i];
        CUresult r;
#define ARG(k) (i + (k) < argc ? strtoull(argv[i + (k)], NULL, 0) : 0)
        if (!strcmp(op, "alloc") || !strcmp(op, "managed") || !strcmp(op, "async") || !strcmp(op, "async_ptsz")) {
            CUdeviceptr p = 0;
            size_t n = ARG(1);
            r = !strcmp(op, "alloc")     ? D.alloc(&p, n)
                : !strcmp(op, "managed") ? D.managed(&p, n, CU_MEM_ATTACH_GLOBAL)
                : !strcmp(op, "async")   ? D.async(&p, n, 0)
                                         : D.async_ptsz(&p, n, 0);
            if (r == CUDA_SUCCESS) keep(K_PTR, p);
            printf("%s %zu -> %s\n", op, n, name_of(r));
            i += 1;
        } else if (!strcmp(op, "pitch")) {
            CUdeviceptr p = 0;
            size_t pitch = 0;
            r = D.pitch(&p, &pitch, ARG(1), ARG(2), 4);
            if (r == CUDA_SUCCESS) keep(K_PTR, p);
            printf("pitch %llu %llu -> %s pitch=%zu\n", ARG(1), ARG(2), name_of(r), pitch);
            i += 2;
        } else if (!strcmp(op, "create")) {
            CUmemAllocationProp prop;
            memset(&prop, 0, sizeof prop);
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            prop.location.id = device_ordinal;
            CUmemGenericAllocationHandle h = 0;
            r = D.create(&h, ARG(1), &prop, 0);
            if (r == CUDA_SUCCESS) keep(K_HANDLE, h);
            printf("create %llu -> %s\n", ARG(1), name_of(r));
            i += 1;
        } else if (!strcmp(op, "array") || !strcmp(op, "array3d") || !strcmp(op, "mipmap")) {
            CUDA_ARRAY_DESCRIPTOR d2;
            CUDA_ARRAY3D_DESCRIPTOR d3;
            memset(&d2, 0, sizeof d2);
            memset(&d3, 0, sizeof d3);
            d2.Format = d3.Format = CU_AD_FORMAT_FLOAT;
            d2.NumChannels = d3.NumChannels = 1;
            d2.Width = d3.Width = ARG(1);
            d2.Height = d3.Height = ARG(2);
            d3.Depth = !strcmp(op, "array3d") ? ARG(3) : 0;
            if (!strcmp(op, "mipmap")) {
                CUmipmappedArray m;
                r = D.mipmap(&m, &d3, (unsigned)ARG(3));
                if (r == CUDA_SUCCESS) keep(K_MIPMAP, (unsigned long long)(uintptr_t)m);
            } else {
                CUarray a;
                r = !strcmp(op, "array") ? D.array(&a, &d2) : D.array3d(&a, &d3);
                if (r == CUDA_SUCCESS) keep(K_ARRAY, (unsigned long long)(uintptr_t)a);
            }
            printf("%s -> %s\n", op, name_of(r));
            i += !strcmp(op, "array") ? 2 : 3;
        } else if (!strcmp(op, "free") || !strcmp(op, "release") || !strcmp(op, "destroy") ||
                   !strcmp(op, "free_async")) {
            int k = (int)ARG(1);
            if (k >= nheld) {
                fprintf(stderr, "drv: no allocation %d\n", k);
                return 2;
            }
            switch (held[k].kind) {
                case K_PTR: r = !strcmp(op, "free_async") ? D.free_async(held[k].v, 0) : D.free(held[k].v); break;
                case K_HANDLE: r = D.release(held[k].v); break;
                case K_ARRAY: r = D.array_destroy((CUarray)(uintptr_t)held[k].v); break;
                default: r = D.mipmap_destroy((CUmipmappedArray)(uintptr_t)held[k].v); break;
            }
            printf("%s %d -> %s\n", op, k, name_of(r));
            i += 1;
        } else if (!strcmp(op, "freeptr")) {
            r = D.free((CUdeviceptr)ARG(1));
            printf("freeptr -> %s\n", name_of(r));
            i += 1;
        } else if (!strcmp(op, "info")) {
            size_t f = 0, t = 0;
            r = D.info(&f, &t);
            printf("info -> %s free=%zu total=%zu\n", name_of(r), f, t);
        } else if (!strcmp(op, "total")) {
            size_t t = 0;
            r = D.total(&t, device_ordinal);
            printf("total -> %s total=%zu\n", name_of(r), t);
        } else if (!strcmp(op, "sleep")) {
            usleep((useconds_t)ARG(1) * 1000);
            i += 1;
        } else if (!strcmp(op, "nocontext")) {
            r = D.set_current(NULL);
            printf("nocontext -> %s\n", name_of(r));
        } else if (!strcmp(op, "device")) {
            use_device((int)ARG(1));
            i += 1;
        } else if (!strcmp(op, "wait")) {
            /* Holds its memory until stdin closes: for tests that kill it. */
            printf("ready\n");
            fflush(stdout);
            char buf[64];
            while (fread(buf, 1, sizeof buf, stdin) > 0) {}
        } else if (!strcmp(op, "exec")) {
            fflush(stdout);
            execvp(argv[i + 1], argv + i + 1);
            fprintf(stderr, "drv: cannot exec %s\n", argv[i + 1]);
            return 2;
        } else if (!strcmp(op, "threads")) {
            int n = (int)ARG(1);
            struct race rs[64];
            pthread_t t[64];
            if (n > 64) n = 64;
            for (int k = 0; k < n; k++) {
                rs[k].bytes = ARG(2);
                rs[k].rounds = (int)ARG(3);
                rs[k].ordinal = device_ordinal;
                rs[k].ok = rs[k].refused = 0;
                pthread_create(&t[k], NULL, racer, &rs[k]);
            }
            int ok = 0, refused = 0;
            for (int k = 0; k < n; k++) {
                pthread_join(t[k], NULL);
                ok += rs[k].ok;
                refused += rs[k].refused;
            }
            printf("threads ok=%d refused=%d\n", ok, refused);
            i += 3;
        } else {
            fprintf(stderr, "drv: unknown op %s\n", op);
            return 2;
        }
        fflush(stdout);
#undef ARG
    }
    return 0;
}
