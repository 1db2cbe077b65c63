/* The driver paths of memory that no allocation call returns (issue 19), run one by one from the
 * command line so that t_usage.sh can compare the ledger with the test driver's truth after each:
 *   ctx                      retain device 0's primary context and make it current
 *   ctx_threads N            N threads retain it at once, each allocating 1 MiB as soon as it has it
 *                            (kept), as a program's threads starting together do
 *   release                  release it (the last release destroys it)
 *   create / destroy         cuCtxCreate a context of its own, cuCtxDestroy it
 *   module / unload          cuModuleLoadData, cuModuleUnload of the last one loaded
 *   launch_kernel            a kernel launch (the test driver loads code lazily at the first)
 *   threshold                the default pool keeps everything (release threshold UINT64_MAX, as
 *                            PyTorch's cudaMallocAsync backend sets it)
 *   async N / free_async     cuMemAllocAsync of N bytes, cuMemFreeAsync of the last one
 *   sync                     cuStreamSynchronize (pools give back beyond their threshold)
 *   capture N                captures cuMemAllocAsync(N) + cuMemFreeAsync into a graph, instantiates it
 *   capture_v1 N / capture_v2 N / capture_gpa11 N
 *                            the same, instantiated by the cuGraphInstantiate of CUDA 10 (the plain
 *                            symbol), of CUDA 11 (_v2), or by what cuGetProcAddress("cuGraphInstantiate",
 *                            11000) hands out
 *   node N                   a graph with one memory node of N bytes (cuGraphAddMemAllocNode), instantiated
 *   glaunch / gupload        cuGraphLaunch / cuGraphUpload of the last instantiated graph
 *   gdestroy                 cuGraphExecDestroy of it
 *   gtrim                    cuDeviceGraphMemTrim
 *   alloc N / free           cuMemAlloc, cuMemFree of the last
 *   alloc_bg N / join        cuMemAlloc of N on another thread (kept), and waiting for it
 *   info                     cuMemGetInfo
 *   sleep MS
 * Each prints "<op> -> <result>" on stdout. */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* cuda.h maps the name to CUDA 12's cuGraphInstantiateWithFlags; programs built before CUDA 12 call
 * these (the driver still exports them). */
#undef cuGraphInstantiate
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node, char *log, size_t size);
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph graph, CUgraphNode *error_node, char *log,
                                       size_t size);
typedef CUresult(CUDAAPI *Instantiate11)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);

static CUdevice g_dev;
static CUcontext g_bg_ctx;
static unsigned long long g_bg_bytes;
static CUresult g_bg_result;
static pthread_t g_bg;
static int g_bg_started;

static void *allocate_in_background(void *arg) {
    (void)arg;
    CUdeviceptr p;
    g_bg_result = cuCtxSetCurrent(g_bg_ctx);
    if (g_bg_result == CUDA_SUCCESS) g_bg_result = cuMemAlloc(&p, g_bg_bytes);
    return NULL;
}

static void *retain_and_allocate(void *arg) {
    CUcontext ctx;
    CUdeviceptr p;
    CUresult r = cuDevicePrimaryCtxRetain(&ctx, g_dev);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(ctx);
    if (r == CUDA_SUCCESS) r = cuMemAlloc(&p, 1 << 20);
    *(CUresult *)arg = r;
    return NULL;
}

static const char *name_of(CUresult r) {
    switch (r) {
        case CUDA_SUCCESS: return "CUDA_SUCCESS";
        case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
        case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
        case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
        default: return "CUDA_ERROR_OTHER";
    }
}

#define MAX_HELD 64
int main(int argc, char **argv) {
    CUdevice dev;
    CUcontext primary = NULL, own = NULL;
    CUmodule mods[MAX_HELD];
    CUdeviceptr ptrs[MAX_HELD], asyncs[MAX_HELD];
    int nmods = 0, nptrs = 0, nasyncs = 0;
    CUgraphExec exec = NULL;
    CUstream stream = NULL;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "usage_linked: no device\n");
        return 3;
    }
    for (int i = 1; i < argc; i++) {
        const char *op = argv[i];
        unsigned long long n = i + 1 < argc ? strtoull(argv[i + 1], NULL, 0) : 0;
        CUresult r = CUDA_SUCCESS;
        if (!strcmp(op, "ctx")) {
            r = cuDevicePrimaryCtxRetain(&primary, dev);
            if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(primary);
            if (r == CUDA_SUCCESS) r = cuStreamCreate(&stream, 0);
        } else if (!strcmp(op, "ctx_threads")) {
            pthread_t t[16];
            CUresult each[16];
            unsigned long long k = n < 16 ? n : 16;
            g_dev = dev;
            for (unsigned long long j = 0; j < k; j++) pthread_create(&t[j], NULL, retain_and_allocate, &each[j]);
            for (unsigned long long j = 0; j < k; j++) {
                pthread_join(t[j], NULL);
                if (each[j] != CUDA_SUCCESS) r = each[j];
            }
            if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&primary, dev);
            if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(primary);
            i++;
        } else if (!strcmp(op, "release")) {
            r = cuDevicePrimaryCtxRelease(dev);
        } else if (!strcmp(op, "create")) {
            r = cuCtxCreate(&own, NULL, 0, dev);
        } else if (!strcmp(op, "destroy")) {
            r = cuCtxDestroy(own);
            if (primary) cuCtxSetCurrent(primary);
        } else if (!strcmp(op, "module")) {
            static const char image[] = "fake module";
            r = nmods < MAX_HELD ? cuModuleLoadData(&mods[nmods], image) : CUDA_ERROR_INVALID_VALUE;
            if (r == CUDA_SUCCESS) nmods++;
        } else if (!strcmp(op, "unload")) {
            r = nmods ? cuModuleUnload(mods[--nmods]) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "launch_kernel")) {
            r = cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL);
        } else if (!strcmp(op, "threshold")) {
            CUmemoryPool pool;
            cuuint64_t keep = UINT64_MAX;
            r = cuDeviceGetDefaultMemPool(&pool, dev);
            if (r == CUDA_SUCCESS) r = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
        } else if (!strcmp(op, "async")) {
            r = nasyncs < MAX_HELD ? cuMemAllocAsync(&asyncs[nasyncs], n, stream) : CUDA_ERROR_INVALID_VALUE;
            if (r == CUDA_SUCCESS) nasyncs++;
            i++;
        } else if (!strcmp(op, "free_async")) {
            r = nasyncs ? cuMemFreeAsync(asyncs[--nasyncs], stream) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "sync")) {
            r = cuStreamSynchronize(stream);
        } else if (!strncmp(op, "capture", 7)) {
            CUgraph g;
            CUdeviceptr p;
            CUgraphNode error_node;
            char log[64];
            r = cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
            if (r == CUDA_SUCCESS) r = cuMemAllocAsync(&p, n, stream);
            if (r == CUDA_SUCCESS) r = cuMemFreeAsync(p, stream);
            CUresult e = cuStreamEndCapture(stream, &g);
            if (r == CUDA_SUCCESS) r = e;
            if (r != CUDA_SUCCESS) {
            } else if (!strcmp(op, "capture")) {
                r = cuGraphInstantiateWithFlags(&exec, g, 0);
            } else if (!strcmp(op, "capture_v1")) {
                r = cuGraphInstantiate(&exec, g, &error_node, log, sizeof log);
            } else if (!strcmp(op, "capture_v2")) {
                r = cuGraphInstantiate_v2(&exec, g, &error_node, log, sizeof log);
            } else if (!strcmp(op, "capture_gpa11")) {
                void *fn = NULL;
                r = cuGetProcAddress("cuGraphInstantiate", &fn, 11000, 0, NULL);
                if (r == CUDA_SUCCESS) r = ((Instantiate11)fn)(&exec, g, &error_node, log, sizeof log);
            } else {
                r = CUDA_ERROR_INVALID_VALUE;
            }
            i++;
        } else if (!strcmp(op, "node")) {
            CUgraph g;
            CUgraphNode node;
            CUDA_MEM_ALLOC_NODE_PARAMS params;
            memset(&params, 0, sizeof params);
            params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
            params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            params.poolProps.location.id = 0;
            params.bytesize = n;
            r = cuGraphCreate(&g, 0);
            if (r == CUDA_SUCCESS) r = cuGraphAddMemAllocNode(&node, g, NULL, 0, &params);
            if (r == CUDA_SUCCESS) r = cuGraphInstantiateWithFlags(&exec, g, 0);
            i++;
        } else if (!strcmp(op, "glaunch")) {
            r = cuGraphLaunch(exec, stream);
        } else if (!strcmp(op, "gupload")) {
            r = cuGraphUpload(exec, stream);
        } else if (!strcmp(op, "gdestroy")) {
            r = cuGraphExecDestroy(exec);
            exec = NULL;
        } else if (!strcmp(op, "gtrim")) {
            r = cuDeviceGraphMemTrim(dev);
        } else if (!strcmp(op, "alloc")) {
            r = nptrs < MAX_HELD ? cuMemAlloc(&ptrs[nptrs], n) : CUDA_ERROR_INVALID_VALUE;
            if (r == CUDA_SUCCESS) nptrs++;
            i++;
        } else if (!strcmp(op, "alloc_bg")) {
            g_bg_bytes = n;
            r = cuCtxGetCurrent(&g_bg_ctx);
            if (r == CUDA_SUCCESS && !g_bg_started && pthread_create(&g_bg, NULL, allocate_in_background, NULL) != 0)
                r = CUDA_ERROR_UNKNOWN;
            g_bg_started = r == CUDA_SUCCESS;
            i++;
        } else if (!strcmp(op, "join")) {
            r = g_bg_started ? (pthread_join(g_bg, NULL), g_bg_result) : CUDA_ERROR_INVALID_VALUE;
            g_bg_started = 0;
        } else if (!strcmp(op, "free")) {
            r = nptrs ? cuMemFree(ptrs[--nptrs]) : CUDA_ERROR_INVALID_VALUE;
        } else if (!strcmp(op, "info")) {
            size_t free_b = 0, total = 0;
            r = cuMemGetInfo(&free_b, &total);
            printf("info -> %s free=%zu total=%zu\n", name_of(r), free_b, total);
            fflush(stdout);
            continue;
        } else if (!strcmp(op, "sleep")) {
            usleep((useconds_t)n * 1000);
            i++;
        } else {
            fprintf(stderr, "usage_linked: unknown op %s\n", op);
            return 2;
        }
        printf("%s -> %s\n", op, name_of(r));
        fflush(stdout);
    }
    return 0;
}
