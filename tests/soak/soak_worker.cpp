// A soak worker: THREADS threads of random device-memory traffic through the test driver, under the
// shim, until SIGTERM (a clean exit, leaving some memory held for the driver's teardown) or SIGKILL.
//   soak_worker JOURNAL THREADS MAX_ALLOC_BYTES SEED EXEC_AFTER_MS
// Each thread allocates through cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged, cuMemAllocAsync and
// cuMemCreate, frees through the matching call, asks cuMemGetInfo now and then, and records every
// driver call in the journal before making it (journal.h says why). Sizes are log-uniform up to
// MAX_ALLOC_BYTES, now and then up to twice the whole limit, and now and then near SIZE_MAX (a
// negative size cast to size_t: 2^63, SIZE_MAX - k, a pitch whose width wraps), which no device
// holds and the quota must refuse without disturbing anything else. With EXEC_AFTER_MS > 0 the
// worker execs itself that long after it starts, its memory still allocated (up to three times).
// With SOAK_USAGE=1 (issue 19), pool
// and graph traffic that the journal does not follow (the supervisor reads the truth's per-process table):
// half the threads keep what their pool frees (release threshold UINT64_MAX, as PyTorch's
// cudaMallocAsync backend), the others let it go at a synchronization; now and then a thread captures
// a graph with a memory node, launches it and destroys it, and trims the graph pool.
#include <cuda.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../fake/fake_truth.h"
#include "journal.h"

namespace {

soak::Journal *g_journal;
std::atomic<bool> g_stop{false};
size_t g_max_alloc;
uint64_t g_context_bytes;  // what the test driver's context costs (FAKE_CUDA_CTX_BYTES)
// Sizes above this are more than the test driver's devices hold (run.sh: FAKE_CUDA_MEM, 64 TiB): they
// can never be handed out, so they are journaled as 0 bytes in flight.
constexpr uint64_t kNoDeviceHolds = uint64_t(1) << 47;
bool g_usage_traffic;  // SOAK_USAGE=1: pool and graph traffic (issue 19)

enum Kind { kAlloc, kPitch, kManaged, kAsync, kCreate, kKinds };
struct Held {
    Kind kind;
    CUdeviceptr ptr;
    CUmemGenericAllocationHandle handle;
    uint64_t size;
};

void on_term(int) { g_stop.store(true); }
std::atomic<bool> g_exec{false};  // stop the threads for an exec, not for good

struct Thread {
    int index;
    unsigned seed;
};

// One driver call that allocates or frees `size` bytes, journaled around the call.
template <class F>
CUresult journaled(soak::ThreadRecord &rec, soak::Phase phase, uint64_t size, F call) {
    rec.size.store(size);
    rec.phase.store(phase);
    if (phase == soak::kFreeing) g_journal->held.fetch_sub(size);
    CUresult r = call();
    if (phase == soak::kAllocating && r == CUDA_SUCCESS) g_journal->held.fetch_add(size);
    if (phase == soak::kFreeing && r != CUDA_SUCCESS) g_journal->held.fetch_add(size);  // still held
    rec.phase.store(soak::kIdle);
    g_journal->ops.fetch_add(1);
    return r;
}

// An error the soak fails on: counted in the journal, and the first one named there (stderr is /dev/null).
void error(const char *what, CUresult r) {
    if (!g_journal->first_error_claimed.exchange(1))
        snprintf(g_journal->first_error, sizeof g_journal->first_error, "%s: error %d", what, (int)r);
    g_journal->errors.fetch_add(1);
}

void count(CUresult r, const char *what) {
    if (r == CUDA_SUCCESS) return;
    if (r == CUDA_ERROR_OUT_OF_MEMORY) g_journal->oom.fetch_add(1);
    else error(what, r);
}

bool release(soak::ThreadRecord &rec, const Held &h) {
    CUresult r = journaled(rec, soak::kFreeing, h.size, [&] {
        switch (h.kind) {
            case kAsync: return cuMemFreeAsync(h.ptr, nullptr);
            case kCreate: return cuMemRelease(h.handle);
            default: return cuMemFree_v2(h.ptr);
        }
    });
    count(r, "a free");
    if (r == CUDA_SUCCESS) g_journal->frees.fetch_add(1);
    return r == CUDA_SUCCESS;
}

// A graph whose capture allocates `bytes` (a memory node) and frees it, launched once (the launch
// maps its memory in the device's graph pool, or is refused by the quota) and destroyed; `upload`
// maps it by cuGraphUpload first.
void graph_cycle(soak::ThreadRecord &rec, CUstream stream, uint64_t bytes, bool upload) {
    CUgraph g = nullptr;
    CUgraphExec exec = nullptr;
    CUdeviceptr p = 0;
    if (CUresult r = cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)) {
        error("cuStreamBeginCapture", r);
        return;
    }
    CUresult r = cuMemAllocAsync(&p, bytes, stream);
    if (r == CUDA_SUCCESS) r = cuMemFreeAsync(p, stream);
    CUresult e = cuStreamEndCapture(stream, &g);
    if (r == CUDA_SUCCESS) r = e;
    if (r == CUDA_SUCCESS) r = cuGraphInstantiate(&exec, g, 0);
    rec.admitting.store(bytes);
    if (r == CUDA_SUCCESS && upload) r = cuGraphUpload(exec, stream);
    if (r == CUDA_SUCCESS) r = cuGraphLaunch(exec, stream);
    rec.admitting.store(0);
    count(r, "a graph's capture, instantiation, upload or launch");
    if (exec) count(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
    if (g) count(cuGraphDestroy(g), "cuGraphDestroy");
    g_journal->ops.fetch_add(1);
}

void *run(void *arg) {
    Thread *t = static_cast<Thread *>(arg);
    soak::ThreadRecord &rec = g_journal->thread[t->index];
    std::mt19937_64 rng(t->seed);
    CUdevice dev;
    CUcontext ctx;
    CUresult made = cuDeviceGet(&dev, 0);
    // A context whose cost no longer fits in the quota is refused (out of memory, issue 19): the
    // thread waits for its siblings to free some, as a program retrying would.
    rec.admitting.store(g_context_bytes);
    while (made == CUDA_SUCCESS && (made = cuDevicePrimaryCtxRetain(&ctx, dev)) == CUDA_ERROR_OUT_OF_MEMORY) {
        g_journal->oom.fetch_add(1);
        if (g_stop.load() || g_journal->term_requested.load()) return rec.admitting.store(0), nullptr;
        usleep(10000);
        made = CUDA_SUCCESS;  // and again
    }
    rec.admitting.store(0);
    if (made == CUDA_SUCCESS) made = cuCtxSetCurrent(ctx);
    if (made != CUDA_SUCCESS) {
        error("a context", made);
        return nullptr;
    }
    std::vector<Held> held;
    std::uniform_real_distribution<double> log_size(12, __builtin_log2((double)g_max_alloc));
    std::uniform_real_distribution<double> log_wide(12, __builtin_log2((double)g_max_alloc * 8));
    CUstream stream = nullptr;
    if (CUresult r = cuStreamCreate(&stream, 0)) error("cuStreamCreate", r);
    bool usage = g_usage_traffic;
    if (usage && t->index % 2) {
        CUmemoryPool pool;
        cuuint64_t keep = UINT64_MAX;
        CUresult r = cuDeviceGetDefaultMemPool(&pool, dev);
        if (r == CUDA_SUCCESS) r = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
        if (r) error("the pool's release threshold", r);
    }
    while (!g_stop.load() && !g_exec.load() && !g_journal->term_requested.load()) {
        unsigned op = rng() % 100;
        if (op < 2) {
            // A size no device holds: the quota refuses it before the driver, and nothing else moves.
            static const uint64_t kEdges[] = {UINT64_MAX,        UINT64_MAX - 1,          UINT64_MAX - 4095,
                                              uint64_t(1) << 63, (uint64_t(1) << 63) + 1, uint64_t(1) << 62};
            uint64_t size = kEdges[rng() % (sizeof kEdges / sizeof *kEdges)] - (rng() % 2 ? rng() % 100000 : 0);
            CUdeviceptr p = 0;
            size_t pitch = 0;
            CUmemGenericAllocationHandle hd = 0;
            CUmemAllocationProp prop = {};
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            unsigned how = rng() % 4;
            CUresult r = journaled(rec, soak::kAllocating, 0, [&] {
                switch (how) {
                    case 0: return cuMemAllocAsync(&p, size, nullptr);
                    case 1: return cuMemAllocPitch_v2(&p, &pitch, size, 1 + rng() % 3, 16);  // the width wraps
                    case 2: return cuMemCreate(&hd, size / (2u << 20) * (2u << 20), &prop, 0);
                    default: return cuMemAlloc_v2(&p, size);
                }
            });
            g_journal->huge.fetch_add(1);
            if (r == CUDA_SUCCESS) error("a request near SIZE_MAX handed out", r);  // the quota broken
            else count(r, "a request near SIZE_MAX");
        } else if (usage && op < 3) {
            graph_cycle(rec, stream, (uint64_t)__builtin_exp2(log_size(rng)), rng() % 2 == 0);
        } else if (usage && op < 4) {
            count(cuDeviceGraphMemTrim(dev), "cuDeviceGraphMemTrim");
            g_journal->ops.fetch_add(1);
        } else if (usage && op < 5) {
            count(cuStreamSynchronize(stream), "cuStreamSynchronize");
            g_journal->ops.fetch_add(1);
        } else if (op < 5) {
            size_t free_b = 0, total_b = 0;
            count(cuMemGetInfo_v2(&free_b, &total_b), "cuMemGetInfo");
            g_journal->ops.fetch_add(1);
        } else if (op < 55 && held.size() < 12) {
            Held h{Kind(rng() % kKinds), 0, 0,
                   (uint64_t)__builtin_exp2(rng() % 20 ? log_size(rng) : log_wide(rng))};  // up to twice the limit
            CUresult r;
            if (h.kind == kPitch) {
                // A width that is a multiple of the driver's pitch alignment, so that the size charged
                // (pitch x height) is known before the call.
                size_t width = (h.size / 64 + 511) / 512 * 512, height = 64;
                h.size = width * height;
                size_t pitch = 0;
                r = journaled(rec, soak::kAllocating, h.size,
                              [&] { return cuMemAllocPitch_v2(&h.ptr, &pitch, width, height, 16); });
                if (r == CUDA_SUCCESS && pitch * height != h.size) error("a pitch other than asked", r);
            } else if (h.kind == kCreate) {
                h.size = (h.size + (2u << 20) - 1) / (2u << 20) * (2u << 20);  // the granularity
                CUmemAllocationProp prop = {};
                prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
                prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
                prop.location.id = 0;
                r = journaled(rec, soak::kAllocating, h.size, [&] { return cuMemCreate(&h.handle, h.size, &prop, 0); });
            } else {
                r = journaled(rec, soak::kAllocating, h.size, [&] {
                    switch (h.kind) {
                        case kManaged: return cuMemAllocManaged(&h.ptr, h.size, CU_MEM_ATTACH_GLOBAL);
                        case kAsync: return cuMemAllocAsync(&h.ptr, h.size, nullptr);
                        default: return cuMemAlloc_v2(&h.ptr, h.size);
                    }
                });
            }
            count(r, "an allocation");
            if (r == CUDA_SUCCESS) {
                g_journal->allocs.fetch_add(1);
                held.push_back(h);
            }
        } else if (!held.empty()) {
            size_t i = rng() % held.size();
            if (release(rec, held[i])) held.erase(held.begin() + (long)i);
        }
        if (rng() % 4 == 0) usleep((useconds_t)(rng() % 2000));
    }
    // A clean exit frees about half; the rest is left to the driver's teardown at exit, as programs do.
    // An exec leaves all of it, as a launcher that execs its payload does.
    if (!g_exec.load())
        for (size_t i = 0; i < held.size(); i += 2) release(rec, held[i]);
    return nullptr;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: soak_worker JOURNAL THREADS MAX_ALLOC_BYTES SEED EXEC_AFTER_MS\n");
        return 2;
    }
    int fd = open(argv[1], O_RDWR | O_CLOEXEC);
    void *p = fd >= 0 ? mmap(nullptr, sizeof(soak::Journal), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        perror(argv[1]);
        return 2;
    }
    close(fd);
    g_journal = static_cast<soak::Journal *>(p);
    int threads = atoi(argv[2]);
    if (threads < 1 || threads > soak::kMaxThreads) return 2;
    g_max_alloc = strtoull(argv[3], nullptr, 0);
    unsigned seed = (unsigned)strtoul(argv[4], nullptr, 0);
    long exec_after_ms = strtol(argv[5], nullptr, 0);
    signal(SIGTERM, on_term);
    if (g_journal->term_requested.load()) return 0;  // stopped while this image was being exec'd
    const char *usage = getenv("SOAK_USAGE");
    if (const char *c = getenv("FAKE_CUDA_CTX_BYTES")) g_context_bytes = strtoull(c, nullptr, 0);
    g_usage_traffic = usage && !strcmp(usage, "1");
    if (cuInit(0) != CUDA_SUCCESS) {
        fprintf(stderr, "soak_worker: cuInit failed\n");
        return 3;
    }
    size_t f = 0, t = 0;
    cuMemGetInfo_v2(&f, &t);  // the shim is set up (its report signal handler too): signals are safe now
    g_journal->ready.store(1);
    std::vector<pthread_t> ids((size_t)threads);
    std::vector<Thread> args((size_t)threads);
    for (int i = 0; i < threads; i++) {
        args[(size_t)i] = {i, seed * 7919u + (unsigned)i};
        pthread_create(&ids[(size_t)i], nullptr, run, &args[(size_t)i]);
    }
    if (exec_after_ms > 0 && g_journal->execs.load() < 3) {
        for (long waited = 0; waited < exec_after_ms && !g_stop.load() && !g_journal->term_requested.load();
             waited += 10)
            usleep(10000);
        if (!g_stop.load() && !g_journal->term_requested.load()) g_exec.store(true);
    }
    for (pthread_t id : ids) pthread_join(id, nullptr);
    if (g_exec.load() && !g_stop.load() && !g_journal->term_requested.load()) {
        // What this image holds stays in the test driver's truth (a real driver frees it at exec):
        // the truth's entry of this process says how much, its pools' reserve and graph memory too,
        // which the journal does not follow (it counted allocations alone, and the soak then took
        // what exec'd images left in their pools for live processes' bytes over the limit). The entry
        // also holds what earlier images left: exec_left is all of it.
        g_journal->ready.store(0);
        g_journal->held.store(0);
        const char *truth_path = getenv("FAKE_CUDA_TRUTH");
        fake::Truth *truth = truth_path ? fake::truth_map(truth_path, false) : nullptr;
        fake::TruthProc *mine = truth ? fake::truth_proc(truth, fake::truth_pid(getpid()), false) : nullptr;
        g_journal->exec_left.store(mine ? mine->bytes[0].load() : 0);
        g_journal->execs.fetch_add(1);
        std::string again = std::to_string(exec_after_ms * 2);
        char *next[] = {argv[0], argv[1], argv[2], argv[3], argv[4], again.data(), nullptr};
        execv("/proc/self/exe", next);
        g_journal->errors.fetch_add(1);  // exec failed
        return 4;
    }
    return 0;
}
