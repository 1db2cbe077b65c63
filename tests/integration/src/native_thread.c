/* Built by t_stacks.sh as a shared library: allocates on threads of its own.
 *   alloc_in_native_thread   on a thread that has never run Python
 *   run_autograd_like        on a thread that keeps a Python thread state without running Python, as
 *                            PyTorch's autograd threads do (PythonEngine::thread_init): eight
 *                            allocations at one native site, with Python run once halfway (a callback,
 *                            which allocates from a Python line through alloc_from_python)
 *   run_no_unwind_info       on such a thread: four allocations through a function without unwind
 *                            information (its frame at one address), then a Python callback which
 *                            allocates through it too (at_fixed_depth)
 * CPython's calls are found at run time: the library needs no Python headers. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

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

/* On a thread of its own: body, with a Python thread state kept and the GIL let go, as PyTorch's
 * autograd threads keep theirs (PythonEngine::thread_init). */
static int (*g_body)(void);
static void *idle_thread_state_worker(void *arg) {
    (void)arg;
    int (*ensure)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    void (*release)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "PyGILState_Release");
    void *(*save)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "PyEval_SaveThread");
    void (*restore)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "PyEval_RestoreThread");
    if (!ensure || !release || !save || !restore || set_context()) return NULL;
    int state = ensure();
    void *thread_state = save(); /* the thread state kept, the GIL let go */
    int rc = g_body();
    restore(thread_state);
    release(state);
    g_result = rc;
    return NULL;
}

static int with_idle_thread_state(int (*body)(void), callback_fn callback) {
    g_body = body;
    g_callback = callback;
    return on_thread(idle_thread_state_worker);
}

static int autograd_like_body(void) {
    int rc = 0;
    for (int i = 0; i < 8; i++) { /* one call site: eight allocations, Python run once halfway */
        if (i == 4) rc |= g_callback();
        rc |= autograd_like_site(1 << 20);
    }
    return rc;
}

int run_autograd_like(callback_fn callback) { return with_idle_thread_state(autograd_like_body, callback); }

int alloc_from_python(size_t bytes) {
    CUdeviceptr p;
    return (int)cuMemAlloc_v2(&p, bytes);
}

/* A function without unwind information (top-level assembly, no CFI): a walk ends at its frame, short of
 * the thread's outermost frame, so it says nothing of the frames outside it. */
int no_unwind_info_call(size_t bytes);
__asm__(
    ".text\n"
    ".globl no_unwind_info_call\n"
    ".type no_unwind_info_call, @function\n"
    "no_unwind_info_call:\n"
    "    sub $8, %rsp\n"
    "    call autograd_like_site@PLT\n"
    "    add $8, %rsp\n"
    "    ret\n"
    ".size no_unwind_info_call, .-no_unwind_info_call\n");

static char *g_target; /* where at_fixed_depth puts no_unwind_info_call's frame, on the worker's stack */

/* Calls no_unwind_info_call with its frame at g_target whatever the depth of the call here: the words a
 * walk from the allocation reads, up to that frame, are then the same from any caller. */
__attribute__((noinline, visibility("default"))) int at_fixed_depth(size_t bytes) {
    char *here = (char *)__builtin_frame_address(0);
    if (here <= g_target) return -1; /* deeper than the worker's reserve: no fixed frame to give */
    volatile char *pad = (volatile char *)__builtin_alloca((size_t)(here - g_target));
    pad[0] = 0;
    int rc = no_unwind_info_call(bytes);
    __asm__ volatile("" ::"r"(pad) : "memory"); /* not a tail call: the frame (and pad) stay until it returns */
    return rc;
}

static int no_unwind_info_body(void) {
    /* 256 KiB below this frame: room for the Python callback's frames above it, and 16-aligned as
     * frame addresses are. */
    g_target = (char *)__builtin_frame_address(0) - (256 << 10);
    int rc = 0;
    for (int i = 0; i < 4; i++) rc |= at_fixed_depth(1 << 20);
    return rc | g_callback(); /* Python, which calls at_fixed_depth itself */
}

int run_no_unwind_info(callback_fn callback) { return with_idle_thread_state(no_unwind_info_body, callback); }
