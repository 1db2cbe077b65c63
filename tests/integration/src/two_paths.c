/* Two native paths to one allocation call, for the stack-reuse tests (t_stacks.sh): path_a() and
 * path_b() have the same frame size, so a Python line that calls either reaches cuMemAlloc at the same
 * stack depth, with the same Python frames: the same site key (shim/stacks/reuse.h). The checks must
 * tell them apart. */
#include <cuda.h>

__attribute__((noinline)) static CUresult common_alloc(CUdeviceptr *p, size_t n) {
    CUresult r = cuMemAlloc(p, n);
    __asm__ volatile("" ::: "memory"); /* not a tail call: common_alloc stays on the stack */
    return r;
}

__attribute__((noinline)) CUresult path_a(CUdeviceptr *p, size_t n) {
    CUresult r = common_alloc(p, n);
    __asm__ volatile("" ::: "memory");
    return r;
}

__attribute__((noinline)) CUresult path_b(CUdeviceptr *p, size_t n) {
    CUresult r = common_alloc(p, n);
    __asm__ volatile("" ::: "memory");
    return r;
}

CUresult alloc_via(int which, CUdeviceptr *p, size_t n) { return which ? path_b(p, n) : path_a(p, n); }

/* A path with a larger frame than path_a's: a Python line that calls either reaches cuMemAlloc at two
 * stack depths, as generate()'s first token and the next ones do. */
__attribute__((noinline)) CUresult path_c(CUdeviceptr *p, size_t n) {
    volatile char pad[256];
    pad[0] = 0;
    CUresult r = common_alloc(p, n);
    __asm__ volatile("" ::"r"(pad) : "memory");
    return r + pad[0];
}

CUresult alloc_via_depth(int which, CUdeviceptr *p, size_t n) { return which ? path_c(p, n) : path_a(p, n); }

/* path_a, or path_a below a frame sized at run time (alloca), a new depth at every call: a key with
 * the stack's depth is then new at almost every allocation. */
static unsigned g_calls;
__attribute__((noinline)) CUresult path_varying(CUdeviceptr *p, size_t n) {
    volatile char *pad = __builtin_alloca(16 + 16 * (g_calls++ % 61));
    pad[0] = 0;
    CUresult r = path_a(p, n);
    __asm__ volatile("" ::"r"(pad) : "memory");
    return r + pad[0];
}

CUresult alloc_via_varying(int which, CUdeviceptr *p, size_t n) { return which ? path_varying(p, n) : path_a(p, n); }

/* The same two paths with a deep common part between them and the allocation (kDeep frames, as c10's
 * allocator, at::empty and the dispatcher lie between a PyTorch operator and the driver): paths that
 * differ only further out than a fixed number of innermost frames. */
enum { kDeep = 20 };

__attribute__((noinline)) static CUresult deep_common(CUdeviceptr *p, size_t n, int levels) {
    CUresult r = levels ? deep_common(p, n, levels - 1) : cuMemAlloc(p, n);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
    return r;
}

__attribute__((noinline)) CUresult deep_path_a(CUdeviceptr *p, size_t n) {
    CUresult r = deep_common(p, n, kDeep);
    __asm__ volatile("" ::: "memory");
    return r;
}

__attribute__((noinline)) CUresult deep_path_b(CUdeviceptr *p, size_t n) {
    CUresult r = deep_common(p, n, kDeep);
    __asm__ volatile("" ::: "memory");
    return r;
}

CUresult alloc_via_deep(int which, CUdeviceptr *p, size_t n) { return which ? deep_path_b(p, n) : deep_path_a(p, n); }
