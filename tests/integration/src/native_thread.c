/* Built by t_stacks.sh as a shared library: allocates on a thread that has never run Python. */
#include <cuda.h>
#include <pthread.h>
#include <stddef.h>

static size_t g_bytes;
static int g_result = -1;

static void *worker(void *arg) {
    (void)arg;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    if (cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return NULL;
    g_result = (int)cuMemAlloc_v2(&p, g_bytes);
    return NULL;
}

int alloc_in_native_thread(size_t bytes) {
    pthread_t t;
    g_bytes = bytes;
    if (pthread_create(&t, NULL, worker, NULL)) return -1;
    pthread_join(t, NULL);
    return g_result;
}
