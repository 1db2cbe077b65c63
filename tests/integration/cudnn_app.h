/* A scriptable cuDNN client for tests/integration/t_cudnn.sh, built twice:
 *   cudnn_linked   links libcudnn.so.9 and libcuda.so.1, as PyTorch links cuDNN
 *   cudnn_dlopen   dlopens both late, RTLD_LOCAL, and takes every function from dlsym on their
 *                  handles, as frameworks that load cuDNN on demand do; with a first argument
 *                  "nocudnn" it never loads cuDNN at all
 * It makes device 0's context current and a cuDNN handle, then runs the operations given as
 * arguments, printing one line each (STATUS is ok, not_initialized, bad_param, not_supported,
 * alloc_failed, or the number):
 *   plan I              build and finalize a plan on engine I      "plan I -> STATUS workspace W"
 *   probe N             PyTorch's heuristic path: for engines 0..N-1 build the plan, allocate its
 *                       workspace from the driver, execute; stop at the first that ran
 *                       "probe engine I -> finalize STATUS" / "-> alloc RESULT" / "probe -> engine I"
 *   execute I           build plan I, execute it without a workspace (cuDNN takes its own)
 *   get_v7|find DIR N   the legacy algorithm list (DIR: fwd, bwd_data, bwd_filter), N requested
 *                       "find fwd -> ALGO:STATUS:MEMORY ..." in the order returned
 *   findex DIR N BYTES  the same, timed in a workspace of BYTES from the driver
 *   wssize DIR ALGO     "wssize fwd 2 -> ok 536870912"
 *   conv DIR ALGO BYTES run the convolution with a workspace of BYTES from the driver
 *   whois NAME          the module that defines the function this program holds for NAME
 *   absent NAME         call NAME, found with dlsym(RTLD_DEFAULT), with null arguments
 *   hold BYTES          allocate from the driver, outside cuDNN, and keep it
 *   report              gpuguard_report_now("cudnn_app") */
#include <cuda.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuguard/gpuguard.h"

// One name a line, which clang-format cannot keep in a macro:
// clang-format off
#define CUDNN_API(X) \
    X(cudnnCreate) \
    X(cudnnBackendCreateDescriptor) \
    X(cudnnBackendDestroyDescriptor) \
    X(cudnnBackendSetAttribute) \
    X(cudnnBackendFinalize) \
    X(cudnnBackendGetAttribute) \
    X(cudnnBackendExecute) \
    X(cudnnGetConvolutionForwardWorkspaceSize) \
    X(cudnnGetConvolutionBackwardDataWorkspaceSize) \
    X(cudnnGetConvolutionBackwardFilterWorkspaceSize) \
    X(cudnnGetConvolutionForwardAlgorithm_v7) \
    X(cudnnGetConvolutionBackwardDataAlgorithm_v7) \
    X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) \
    X(cudnnFindConvolutionForwardAlgorithm) \
    X(cudnnFindConvolutionBackwardDataAlgorithm) \
    X(cudnnFindConvolutionBackwardFilterAlgorithm) \
    X(cudnnFindConvolutionForwardAlgorithmEx) \
    X(cudnnFindConvolutionBackwardDataAlgorithmEx) \
    X(cudnnFindConvolutionBackwardFilterAlgorithmEx) \
    X(cudnnConvolutionForward) \
    X(cudnnConvolutionBackwardData) \
    X(cudnnConvolutionBackwardFilter)
// clang-format on

#define DRIVER_API(X) \
    X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuMemAlloc_v2) X(cuMemFree_v2)

#define FIELD(name) __typeof__(&name) name;
static struct { CUDNN_API(FIELD) } C;
static struct { DRIVER_API(FIELD) } D;
static cudnnHandle_t handle;

static void resolve(void) {
#ifdef CUDNN_APP_LINKED
#define TAKE(table, name) table.name = &name;
#define TAKE_C(name) TAKE(C, name)
#define TAKE_D(name) TAKE(D, name)
    CUDNN_API(TAKE_C)
    DRIVER_API(TAKE_D)
#else
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void *cudnn = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!cuda || !cudnn) {
        fprintf(stderr, "cudnn_app: %s\n", dlerror());
        exit(2);
    }
#define LOOK(table, lib, name) table.name = (__typeof__(table.name))dlsym(lib, #name);
#define LOOK_C(name) LOOK(C, cudnn, name)
#define LOOK_D(name) LOOK(D, cuda, name)
    CUDNN_API(LOOK_C)
    DRIVER_API(LOOK_D)
#endif
}

static const char *status(cudnnStatus_t s) {
    static char other[16];
    switch (s) {
        case CUDNN_STATUS_SUCCESS: return "ok";
        case CUDNN_STATUS_NOT_INITIALIZED: return "not_initialized";
        case CUDNN_STATUS_BAD_PARAM: return "bad_param";
        case CUDNN_STATUS_NOT_SUPPORTED: return "not_supported";
        case CUDNN_STATUS_ALLOC_FAILED: return "alloc_failed";
        default: snprintf(other, sizeof other, "%d", (int)s); return other;
    }
}

static void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t,
                const void *v) {
    C.cudnnBackendSetAttribute(d, n, t, 1, v);
}

/* A plan on `engine`, finalized: as the frontend does, a plan whose finalize failed is destroyed. */
static cudnnStatus_t build_plan(int64_t engine, cudnnBackendDescriptor_t *plan) {
    cudnnBackendDescriptor_t eng, cfg;
    C.cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng);
    set(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, &engine);
    C.cudnnBackendFinalize(eng);
    C.cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg);
    set(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, &eng);
    C.cudnnBackendFinalize(cfg);
    C.cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan);
    set(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle);
    set(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &cfg);
    cudnnStatus_t st = C.cudnnBackendFinalize(*plan);
    if (st != CUDNN_STATUS_SUCCESS) C.cudnnBackendDestroyDescriptor(*plan);
    /* A finalized plan needs neither: destroyed as the frontend does (and LeakSanitizer wants). */
    C.cudnnBackendDestroyDescriptor(cfg);
    C.cudnnBackendDestroyDescriptor(eng);
    return st;
}

static int64_t plan_workspace(cudnnBackendDescriptor_t plan) {
    int64_t n = 0, ws = -1;
    C.cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
    return ws;
}

static cudnnStatus_t execute(cudnnBackendDescriptor_t plan, void *workspace) {
    cudnnBackendDescriptor_t pack;
    C.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace);
    C.cudnnBackendFinalize(pack);
    cudnnStatus_t st = C.cudnnBackendExecute(handle, plan, pack);
    C.cudnnBackendDestroyDescriptor(pack);
    return st;
}

static void op_probe(int n) {
    for (int i = 0; i < n; i++) {
        cudnnBackendDescriptor_t plan;
        cudnnStatus_t st = build_plan(i, &plan);
        if (st != CUDNN_STATUS_SUCCESS) {
            printf("probe engine %d -> finalize %s\n", i, status(st));
            continue;
        }
        int64_t ws = plan_workspace(plan);
        CUdeviceptr p = 0;
        CUresult r = ws > 0 ? D.cuMemAlloc_v2(&p, (size_t)ws) : CUDA_SUCCESS;
        if (r != CUDA_SUCCESS) {
            printf("probe engine %d -> alloc %d\n", i, (int)r);
            C.cudnnBackendDestroyDescriptor(plan);
            continue;
        }
        st = execute(plan, (void *)(uintptr_t)p);
        if (p) D.cuMemFree_v2(p);
        C.cudnnBackendDestroyDescriptor(plan);
        if (st == CUDNN_STATUS_SUCCESS) {
            printf("probe -> engine %d\n", i);
            return;
        }
        printf("probe engine %d -> execute %s\n", i, status(st));
    }
    printf("probe -> none\n");
}

/* The three directions share one perf layout but not one type: copy what is printed. */
typedef struct {
    int algo;
    cudnnStatus_t status;
    size_t memory;
} Result;

#define COPY_RESULTS(perf, n, out)       \
    for (int k = 0; k < (n); k++) {      \
        out[k].algo = (int)perf[k].algo; \
        out[k].status = perf[k].status;  \
        out[k].memory = perf[k].memory;  \
    }

static CUdeviceptr alloc_or_die(size_t bytes) {
    CUdeviceptr p = 0;
    if (bytes && D.cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS) {
        printf("workspace of %zu -> cannot allocate\n", bytes);
        exit(3);
    }
    return p;
}

static void op_algorithms(const char *op, const char *dir, int want, size_t ex_bytes) {
    cudnnConvolutionFwdAlgoPerf_t fwd[16];
    cudnnConvolutionBwdDataAlgoPerf_t bd[16];
    cudnnConvolutionBwdFilterAlgoPerf_t bf[16];
    Result res[16];
    int n = 0;
    cudnnStatus_t st = CUDNN_STATUS_BAD_PARAM;
    int find = !strcmp(op, "find"), ex = !strcmp(op, "findex");
    CUdeviceptr ws = ex ? alloc_or_die(ex_bytes) : 0;
    void *w = (void *)(uintptr_t)ws;
    if (want > 16) want = 16;
    if (!strcmp(dir, "fwd")) {
        st = ex     ? C.cudnnFindConvolutionForwardAlgorithmEx(handle, 0, 0, 0, 0, 0, 0, 0, want, &n, fwd, w, ex_bytes)
             : find ? C.cudnnFindConvolutionForwardAlgorithm(handle, 0, 0, 0, 0, want, &n, fwd)
                    : C.cudnnGetConvolutionForwardAlgorithm_v7(handle, 0, 0, 0, 0, want, &n, fwd);
        COPY_RESULTS(fwd, n, res)
    } else if (!strcmp(dir, "bwd_data")) {
        st = ex ? C.cudnnFindConvolutionBackwardDataAlgorithmEx(handle, 0, 0, 0, 0, 0, 0, 0, want, &n, bd, w, ex_bytes)
             : find ? C.cudnnFindConvolutionBackwardDataAlgorithm(handle, 0, 0, 0, 0, want, &n, bd)
                    : C.cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, 0, 0, 0, 0, want, &n, bd);
        COPY_RESULTS(bd, n, res)
    } else {
        st =
            ex ? C.cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, 0, 0, 0, 0, 0, 0, 0, want, &n, bf, w, ex_bytes)
            : find ? C.cudnnFindConvolutionBackwardFilterAlgorithm(handle, 0, 0, 0, 0, want, &n, bf)
                   : C.cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, 0, 0, 0, 0, want, &n, bf);
        COPY_RESULTS(bf, n, res)
    }
    if (ws) D.cuMemFree_v2(ws);
    printf("%s %s -> %s", op, dir, status(st));
    for (int k = 0; st == CUDNN_STATUS_SUCCESS && k < n; k++)
        printf(" %d:%s:%zu", res[k].algo, status(res[k].status), res[k].memory);
    printf("\n");
}

static void op_wssize(const char *dir, int algo) {
    size_t size = 0;
    cudnnStatus_t st;
    if (!strcmp(dir, "fwd"))
        st = C.cudnnGetConvolutionForwardWorkspaceSize(handle, 0, 0, 0, 0, (cudnnConvolutionFwdAlgo_t)algo, &size);
    else if (!strcmp(dir, "bwd_data"))
        st = C.cudnnGetConvolutionBackwardDataWorkspaceSize(handle, 0, 0, 0, 0, (cudnnConvolutionBwdDataAlgo_t)algo,
                                                            &size);
    else
        st = C.cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, 0, 0, 0, 0, (cudnnConvolutionBwdFilterAlgo_t)algo,
                                                              &size);
    printf("wssize %s %d -> %s %zu\n", dir, algo, status(st), size);
}

static void op_conv(const char *dir, int algo, size_t bytes) {
    CUdeviceptr ws = alloc_or_die(bytes);
    void *w = (void *)(uintptr_t)ws;
    cudnnStatus_t st;
    if (!strcmp(dir, "fwd"))
        st = C.cudnnConvolutionForward(handle, 0, 0, 0, 0, 0, 0, (cudnnConvolutionFwdAlgo_t)algo, w, bytes, 0, 0, 0);
    else if (!strcmp(dir, "bwd_data"))
        st = C.cudnnConvolutionBackwardData(handle, 0, 0, 0, 0, 0, 0, (cudnnConvolutionBwdDataAlgo_t)algo, w, bytes, 0,
                                            0, 0);
    else
        st = C.cudnnConvolutionBackwardFilter(handle, 0, 0, 0, 0, 0, 0, (cudnnConvolutionBwdFilterAlgo_t)algo, w, bytes,
                                              0, 0, 0);
    if (ws) D.cuMemFree_v2(ws);
    printf("conv %s %d %zu -> %s\n", dir, algo, bytes, status(st));
}

static void op_whois(const char *name) {
    void *fn = NULL;
#define FIND(table, field) \
    if (!strcmp(name, #field)) fn = (void *)table.field;
#define FIND_C(field) FIND(C, field)
    CUDNN_API(FIND_C)
    Dl_info info;
    const char *module = fn && dladdr(fn, &info) && info.dli_fname ? strrchr(info.dli_fname, '/') : NULL;
    printf("whois %s -> %s\n", name, module ? module + 1 : "?");
}

static void op_absent(const char *name) {
    cudnnStatus_t (*fn)(void *, void *, void *) = (cudnnStatus_t(*)(void *, void *, void *))dlsym(RTLD_DEFAULT, name);
    printf("absent %s -> %s\n", name, fn ? status(fn(NULL, NULL, NULL)) : "no such function");
}

int main(int argc, char **argv) {
    int i = 1;
    int with_cudnn = !(argc > 1 && !strcmp(argv[1], "nocudnn"));
    if (!with_cudnn) i++;
    if (with_cudnn) {
        resolve();
        CUdevice dev;
        CUcontext ctx;
        if (D.cuInit(0) || D.cuDeviceGet(&dev, 0) || D.cuDevicePrimaryCtxRetain(&ctx, dev) || D.cuCtxSetCurrent(ctx)) {
            fprintf(stderr, "cudnn_app: no context\n");
            return 2;
        }
        if (C.cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) {
            fprintf(stderr, "cudnn_app: cudnnCreate failed\n");
            return 2;
        }
    }
    for (; i < argc; i++) {
        const char *op = argv[i];
        const char *a1 = i + 1 < argc ? argv[i + 1] : "0", *a2 = i + 2 < argc ? argv[i + 2] : "0";
        const char *a3 = i + 3 < argc ? argv[i + 3] : "0";
        if (!strcmp(op, "plan")) {
            cudnnBackendDescriptor_t plan;
            cudnnStatus_t st = build_plan(atoll(a1), &plan);
            printf("plan %s -> %s workspace %lld\n", a1, status(st),
                   st == CUDNN_STATUS_SUCCESS ? (long long)plan_workspace(plan) : -1LL);
            if (st == CUDNN_STATUS_SUCCESS) C.cudnnBackendDestroyDescriptor(plan);
            i += 1;
        } else if (!strcmp(op, "probe")) {
            op_probe(atoi(a1));
            i += 1;
        } else if (!strcmp(op, "execute")) {
            cudnnBackendDescriptor_t plan;
            cudnnStatus_t st = build_plan(atoll(a1), &plan);
            if (st == CUDNN_STATUS_SUCCESS) {
                st = execute(plan, NULL);
                C.cudnnBackendDestroyDescriptor(plan);
            }
            printf("execute %s -> %s\n", a1, status(st));
            i += 1;
        } else if (!strcmp(op, "get_v7") || !strcmp(op, "find")) {
            op_algorithms(op, a1, atoi(a2), 0);
            i += 2;
        } else if (!strcmp(op, "findex")) {
            op_algorithms(op, a1, atoi(a2), (size_t)strtoull(a3, NULL, 10));
            i += 3;
        } else if (!strcmp(op, "wssize")) {
            op_wssize(a1, atoi(a2));
            i += 2;
        } else if (!strcmp(op, "conv")) {
            op_conv(a1, atoi(a2), (size_t)strtoull(a3, NULL, 10));
            i += 3;
        } else if (!strcmp(op, "whois")) {
            op_whois(a1);
            i += 1;
        } else if (!strcmp(op, "absent")) {
            op_absent(a1);
            i += 1;
        } else if (!strcmp(op, "hold")) {
            CUdeviceptr p = 0;
            printf("hold %s -> %d\n", a1, (int)D.cuMemAlloc_v2(&p, (size_t)strtoull(a1, NULL, 10)));
            i += 1;
        } else if (!strcmp(op, "report")) {
            printf("report -> %d\n", gpuguard_report_now("cudnn_app"));
        } else {
            fprintf(stderr, "cudnn_app: unknown operation %s\n", op);
            return 2;
        }
    }
    return 0;
}
