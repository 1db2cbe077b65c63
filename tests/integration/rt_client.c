/* Allocates through the CUDA runtime (the test double of libcudart, which reaches the driver only
 * through cuGetProcAddress, as the real cudart does): "rt_client BYTES..." cudaMallocs each size,
 * prints the result, then frees them all. A size prefixed with 'a' uses cudaMallocAsync. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    void *h = dlopen("libcudart.so.13", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "rt_client: %s\n", dlerror());
        return 3;
    }
    int (*malloc_fn)(void **, size_t) = (int (*)(void **, size_t))dlsym(h, "cudaMalloc");
    int (*malloc_async)(void **, size_t, void *) = (int (*)(void **, size_t, void *))dlsym(h, "cudaMallocAsync");
    int (*free_fn)(void *) = (int (*)(void *))dlsym(h, "cudaFree");
    if (!malloc_fn || !free_fn || !malloc_async) {
        fprintf(stderr, "rt_client: missing symbols\n");
        return 3;
    }
    void *ptrs[64];
    int n = 0;
    for (int i = 1; i < argc && n < 64; i++) {
        int async = argv[i][0] == 'a';
        size_t bytes = strtoull(argv[i] + async, NULL, 0);
        void *p = NULL;
        int r = async ? malloc_async(&p, bytes, NULL) : malloc_fn(&p, bytes);
        printf("%s %zu -> %d\n", async ? "cudaMallocAsync" : "cudaMalloc", bytes, r);
        if (r == 0) ptrs[n++] = p;
    }
    for (int i = 0; i < n; i++) printf("cudaFree -> %d\n", free_fn(ptrs[i]));
    return 0;
}
