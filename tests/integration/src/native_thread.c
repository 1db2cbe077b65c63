/* Built by t_stacks.sh as a shared library: allocates on threads of its own.
 *   alloc_in_native_thread   on a thread that has never run Python
 *   run_autograd_like        on a thread that keeps a Python thread state without running Python, as
 *                            PyTorch's autograd threads do (PythonEngine::thread_init): eight
 *                            allocations at one native site, with Python run once halfway (a callback,
 *                            which allocates from a Python line through alloc_from_python)
 * CPython's calls are found at run time: the library needs no Python headers. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

static size_t g_bytes;
static int g_result = -1;
typedef int (*callback_fn)(void);
static callback_fn g_callback;

static int set_context(void) {
    CUdevice dev;
    CUcontext ctx;
    return cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx);
}

/* Runs fn on a new thread; what it left in g_result (-1 where it could not start). */
static int on_thread(void *(*fn)(void *)) {
    pthread_t t;
    g_result = -1;
    if (pthread_create(&t, NULL, fn, NULL)) return -1;
    pthread_join(t, NULL);
    return g_result;
}

static void *native_worker(void *arg) {
    (void)arg;
    CUdeviceptr p;
    if (set_context()) return NULL;
    g_result = (int)cuMemAlloc_v2(&p, g_bytes);
    return NULL;
}

int alloc_in_native_thread(size_t bytes) {
    g_bytes = bytes;
    return on_thread(native_worker);
}

__attribute__((noinline, visibility("default"))) int autograd_like_site(size_t bytes) {
    CUdeviceptr p;
    int rc = (int)cuMemAlloc_v2(&p, bytes);
    __asm__ volatile("" ::: "memory"); /* not a tail call: this frame stays on the stack */
    return rc;
}

static void *autograd_like_worker(void *arg) {
    (void)arg;
    int (*ensure)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    void (*release)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "PyGILState_Release");
    void *(*save)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyEval_SaveThread");
    void (*restore)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "PyEval_RestoreThread");
    if (!ensure || !release || !save || !restore || set_context()) return NULL;
    int state = ensure();
    void *thread_state = save(); /* the thread state kept, the GIL let go */
    int rc = 0;
    for (int i = 0; i < 8; i++) { /* one call site: eight allocations, Python run once halfway */
        if (i == 4) rc |= g_callback();
        rc |= autograd_like_site(1 << 20);
    }
    restore(thread_state);
    release(state);
    g_result = rc;
    return NULL;
}

int run_autograd_like(callback_fn callback) {
    g_callback = callback;
    return on_thread(autograd_like_worker);
}

int alloc_from_python(size_t bytes) {
    CUdeviceptr p;
    return (int)cuMemAlloc_v2(&p, bytes);
}
