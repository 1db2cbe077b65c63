// GPU check for a plain CUDA program built by nvcc (which links cudart statically, so only the
// driver hooks can see it): under GPUGUARD_MEM_LIMIT=2GiB, cudaMemGetInfo shows 2 GiB, of which the
// context already takes its share (the quota counts it, issue 19); 256 MiB blocks are allocated as
// long as the free figure holds one, refused after, and after freeing one the program allocates again.
#include <cstdio>
#include <cuda_runtime.h>
#include <vector>

int main() {
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    printf("nvcc: mem_get_info total=%zu free=%zu\n", total_b, free_b);
    std::vector<void *> blocks;
    cudaError_t last = cudaSuccess;
    for (int i = 0; i < 64; i++) {
        void *p = nullptr;
        last = cudaMalloc(&p, 256u << 20);
        if (last != cudaSuccess) break;
        blocks.push_back(p);
    }
    printf("nvcc: allocated %zu x 256 MiB, then %s\n", blocks.size(), cudaGetErrorName(last));
    cudaGetLastError();
    cudaFree(blocks.back());
    blocks.pop_back();
    void *p = nullptr;
    cudaError_t again = cudaMalloc(&p, 256u << 20);
    printf("nvcc: after a free, cudaMalloc -> %s\n", cudaGetErrorName(again));
    size_t fit = free_b / (256u << 20);  // the free figure after the context: the blocks that fit
    bool ok = total_b == (2ull << 30) && free_b < total_b && last == cudaErrorMemoryAllocation && again == cudaSuccess &&
              blocks.size() + 1 == fit && fit >= 1;  // one was freed
    printf("nvcc: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
