/* First launches of CUDA graphs with memory nodes on several threads at once, for t_usage.sh's check
 * that two launches do not both count on the same free memory of the graph pool, and that a reading
 * of the pool does not fall between another launch's charge and its mapping. The test driver is run
 * with FAKE_CUDA_POOL_DELAY_US, so that the calls overlap.
 *   graph_race_linked THREADS ROUNDS BYTES [trim]
 * Each thread, ROUNDS times: captures a graph that allocates BYTES and frees them, instantiates it,
 * launches it (the graph pool maps its memory, or the quota refuses), and destroys it (the pool keeps
 * the memory, free for the next graph); every eighth round it trims the graph pool. Another thread
 * asks cuMemGetInfo meanwhile (a reading of the pool). With `trim`, each thread uploads its graph
 * before launching it (the launch is then of a mapped graph), and the other thread trims the graph
 * pool between its readings (which unmaps graphs not running: their launch maps them again).
 * Prints "done launches=N refused=N errors=N". */
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static CUcontext g_ctx;
static CUdevice g_dev;
static int g_rounds, g_trim;
static uint64_t g_bytes;
static atomic_int g_running;
static atomic_long g_launches, g_refused, g_errors;

static void tally(CUresult r) {
    if (r == CUDA_ERROR_OUT_OF_MEMORY) atomic_fetch_add(&g_refused, 1);
    else if (r != CUDA_SUCCESS) atomic_fetch_add(&g_errors, 1);
}

static void *worker(void *arg) {
    (void)arg;
    CUstream stream = NULL;
    if (cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS || cuStreamCreate(&stream, 0) != CUDA_SUCCESS) {
        atomic_fetch_add(&g_errors, 1);
        atomic_fetch_sub(&g_running, 1);
        return NULL;
    }
    for (int round = 0; round < g_rounds; round++) {
        CUgraph graph = NULL;
        CUgraphExec exec = NULL;
        CUdeviceptr p = 0;
        CUresult r = cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
        if (r == CUDA_SUCCESS) {
            r = cuMemAllocAsync(&p, g_bytes, stream);
            if (r == CUDA_SUCCESS) r = cuMemFreeAsync(p, stream);
            CUresult ended = cuStreamEndCapture(stream, &graph);
            if (r == CUDA_SUCCESS) r = ended;
        }
        if (r == CUDA_SUCCESS) r = cuGraphInstantiateWithFlags(&exec, graph, 0);
        if (r == CUDA_SUCCESS && g_trim) r = cuGraphUpload(exec, stream);
        if (r == CUDA_SUCCESS) {
            r = cuGraphLaunch(exec, stream);
            if (r == CUDA_SUCCESS) atomic_fetch_add(&g_launches, 1);
        }
        tally(r);
        if (exec) tally(cuGraphExecDestroy(exec));
        if (graph) tally(cuGraphDestroy(graph));
        if (round % 8 == 7) tally(cuDeviceGraphMemTrim(g_dev));
    }
    atomic_fetch_sub(&g_running, 1);
    return NULL;
}

static void *reader(void *arg) {
    (void)arg;
    if (cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) return NULL;
    while (atomic_load(&g_running)) {
        size_t free_b, total;
        cuMemGetInfo(&free_b, &total);
        if (g_trim) {
            tally(cuDeviceGraphMemTrim(g_dev));
            usleep(100);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "trim") == 0)) {
        fprintf(stderr, "usage: graph_race_linked THREADS ROUNDS BYTES [trim]\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    g_rounds = atoi(argv[2]);
    g_bytes = strtoull(argv[3], NULL, 0);
    g_trim = argc == 5;
    if (threads < 1 || threads > 64 || g_rounds < 1 || !g_bytes || cuInit(0) != CUDA_SUCCESS ||
        cuDeviceGet(&g_dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&g_ctx, g_dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "graph_race_linked: no device\n");
        return 3;
    }
    pthread_t t[65];
    atomic_store(&g_running, threads);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, NULL);
    pthread_create(&t[threads], NULL, reader, NULL);
    for (int i = 0; i <= threads; i++) pthread_join(t[i], NULL);
    printf("done launches=%ld refused=%ld errors=%ld\n", atomic_load(&g_launches), atomic_load(&g_refused),
           atomic_load(&g_errors));
    return 0;
}
