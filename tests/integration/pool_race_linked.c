/* Stream-ordered allocations and frees on several threads while another thread reads the pools
 * (cuMemGetInfo settles the ledger's pool reserve from the driver's figures) as fast as it can, for
 * t_usage.sh's check that the reading and the ledger's moves do not cross: the test driver is run
 * with FAKE_CUDA_POOL_DELAY_US, so that a reading often falls inside another thread's call.
 *   pool_race_linked THREADS MS MAX_BYTES SLEEP_MS [read|trim|sync]
 * Each thread allocates (up to MAX_BYTES, odd sizes) and frees at random for MS milliseconds, then
 * frees everything it holds; the reader stops when the last thread is done. The default pool keeps
 * what is freed (release threshold UINT64_MAX, as PyTorch's cudaMallocAsync backend). With `trim`
 * the reader also trims the pool (cuMemPoolTrimTo to 0) between readings; with `sync` the pool keeps
 * nothing (threshold 0) and the reader synchronizes the context between readings, where the pool
 * gives back what it holds free: memory another thread's allocation may be counting on. Prints
 * "done allocs=N refused=N" and sleeps SLEEP_MS, so that the test can compare the ledger with the
 * truth while nothing reads the pools any more. */
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_HELD 16
static CUcontext g_ctx;
static long g_ms;
static uint64_t g_max;
static atomic_int g_running;
static atomic_long g_allocs, g_refused, g_errors;
static CUmemoryPool g_pool;
static const char *g_mode = "read";

static uint64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static void *worker(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1;
    CUstream stream = NULL;
    CUdeviceptr held[MAX_HELD];
    int n = 0;
    if (cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS || cuStreamCreate(&stream, 0) != CUDA_SUCCESS) {
        atomic_fetch_add(&g_errors, 1);
        atomic_fetch_sub(&g_running, 1);
        return NULL;
    }
    uint64_t end = now_ms() + (uint64_t)g_ms;
    while (now_ms() < end) {
        if (n < MAX_HELD && (n == 0 || rand_r(&seed) % 2)) {
            uint64_t bytes = 1 + (uint64_t)rand_r(&seed) % g_max;
            CUresult r = cuMemAllocAsync(&held[n], bytes, stream);
            if (r == CUDA_SUCCESS) n++, atomic_fetch_add(&g_allocs, 1);
            else if (r == CUDA_ERROR_OUT_OF_MEMORY) atomic_fetch_add(&g_refused, 1);
            else atomic_fetch_add(&g_errors, 1);
        } else {
            int i = rand_r(&seed) % n;
            if (cuMemFreeAsync(held[i], stream) != CUDA_SUCCESS) atomic_fetch_add(&g_errors, 1);
            held[i] = held[--n];
        }
    }
    while (n)
        if (cuMemFreeAsync(held[--n], stream) != CUDA_SUCCESS) atomic_fetch_add(&g_errors, 1);
    atomic_fetch_sub(&g_running, 1);
    return NULL;
}

static void *reader(void *arg) {
    (void)arg;
    if (cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) return NULL;
    while (atomic_load(&g_running)) {
        size_t free_b, total;
        cuMemGetInfo(&free_b, &total);
        if (!strcmp(g_mode, "trim") && cuMemPoolTrimTo(g_pool, 0) != CUDA_SUCCESS) atomic_fetch_add(&g_errors, 1);
        if (!strcmp(g_mode, "sync") && cuCtxSynchronize() != CUDA_SUCCESS) atomic_fetch_add(&g_errors, 1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: pool_race_linked THREADS MS MAX_BYTES SLEEP_MS [read|trim|sync]\n");
        return 2;
    }
    if (argc == 6) g_mode = argv[5];
    int threads = atoi(argv[1]);
    g_ms = atol(argv[2]);
    g_max = strtoull(argv[3], NULL, 0);
    long sleep_ms = atol(argv[4]);
    CUdevice dev;
    cuuint64_t keep = strcmp(g_mode, "sync") ? UINT64_MAX : 0;
    if (threads < 1 || threads > 64 || !g_max || cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&g_ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS ||
        cuDeviceGetDefaultMemPool(&g_pool, dev) != CUDA_SUCCESS ||
        cuMemPoolSetAttribute(g_pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep) != CUDA_SUCCESS) {
        fprintf(stderr, "pool_race_linked: no device\n");
        return 3;
    }
    pthread_t t[65];
    atomic_store(&g_running, threads);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
    pthread_create(&t[threads], NULL, reader, NULL);
    for (int i = 0; i <= threads; i++) pthread_join(t[i], NULL);
    printf("done allocs=%ld refused=%ld errors=%ld\n", atomic_load(&g_allocs), atomic_load(&g_refused),
           atomic_load(&g_errors));
    fflush(stdout);
    usleep((useconds_t)sleep_ms * 1000);
    return 0;
}
