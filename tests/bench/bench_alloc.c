/* Allocation benchmarks for gpuguard: one program, run with and without LD_PRELOAD=libgpuguard.so,
 * linked to the driver directly (-lcuda), so that the same binary runs against the test driver
 * (LD_LIBRARY_PATH=build/fake, FAKE_CUDA_BENCH=1) on the CPU machine and against the real driver
 * on the GPU machine. Every mode prints one line of key=value pairs; tests/bench/run.sh and
 * tests/bench/gpu_run.sh interleave the runs and take the medians.
 *
 *   pairs SIZE N DEPTH        N cuMemAlloc+cuMemFree pairs of SIZE bytes, timed together, made from
 *                             DEPTH extra native frames (so that an unwinder has a realistic stack
 *                             to walk): ns_per_pair
 *   calls SIZES N WARMUP      per size (comma list), N pairs each timed call by call: the medians
 *                             and 10th/90th percentiles of alloc, free and the pair, in ns
 *   ab SIZES N WARMUP         per size, N rounds of two pairs in one process, taking turns: one
 *                             through the exported cuMemAlloc/cuMemFree (the shim's hooks when it is
 *                             preloaded), one straight into libcuda's own definitions (found in its
 *                             dynamic symbol table, past any interposer): medians of each pair and
 *                             of the per-round difference, extra_ns (about 0 without a preload: the
 *                             control). Driver time varies by 15% from one process to the next, far
 *                             more than the shim's cost; within one process both paths share it.
 *   graphab BYTES N WARMUP    the same for a launch of a CUDA graph that allocates BYTES and frees
 *                             them (memory nodes, mapped by an upload first): N rounds of two
 *                             launches, the exported cuGraphLaunch and libcuda's own, each call
 *                             timed alone and followed by a cuStreamSynchronize outside the timing:
 *                             medians and the per-round difference, extra_ns
 *   threads T SIZE N DEPTH    T threads, each N pairs, released together: pairs_per_s
 *   procs P SIZE N DEPTH      P processes (this program again), each N pairs, released together at
 *                             one CLOCK_MONOTONIC instant: pairs_per_s, late (children not ready)
 *   blocks N DEPTH SITES [EVICT_KIB]
 *                             N block reports of PyTorch's caching allocator (c10's
 *                             reportMemoryUsageToProfiler, the shim's when preloaded: the tensor
 *                             view), a block handed out then taken back, from SITES call sites in
 *                             turn, DEPTH extra native frames below, on a thread with no Python (as
 *                             PyTorch's autograd threads): ns_per_report (about 0 without the shim).
 *                             EVICT_KIB: that much memory read before each pair, as PyTorch's work
 *                             between two allocations pushes the shim's lines out of the nearer
 *                             caches; then each pair is timed alone, the reading left out
 *   hold N SIZE REPORTS       holds N allocations made from 64 distinct stacks, prints the resident
 *                             memory they added per allocation, then asks the shim for REPORTS
 *                             reports (gpuguard_report, include/gpuguard/gpuguard.h), timing each
 *                             from call to return (assembled and written): report_ms=a,b,...
 */
#include <cuda.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpuguard/gpuguard.h"

extern char **environ;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, CUresult r) {
    fprintf(stderr, "bench_alloc: %s failed: %d\n", what, (int)r);
    exit(3);
}

static CUcontext g_ctx;

static void open_device(void) {
    CUdevice dev;
    CUresult r;
    if ((r = cuInit(0))) die("cuInit", r);
    if ((r = cuDeviceGet(&dev, 0))) die("cuDeviceGet", r);
    if ((r = cuDevicePrimaryCtxRetain(&g_ctx, dev))) die("cuDevicePrimaryCtxRetain", r);
    if ((r = cuCtxSetCurrent(g_ctx))) die("cuCtxSetCurrent", r);
}

static void one_pair(size_t bytes) {
    CUdeviceptr p;
    CUresult r = cuMemAlloc(&p, bytes);
    if (r) die("cuMemAlloc", r);
    if ((r = cuMemFree(p))) die("cuMemFree", r);
}

/* Runs fn(arg) under `depth` extra frames of this function. The volatile local and the work after
 * the call keep the compiler from turning the recursion into a loop or a tail call. */
typedef void (*body_fn)(void *);
__attribute__((noinline)) static int at_depth(int depth, body_fn fn, void *arg) {
    volatile int mark = depth;
    if (depth <= 0) {
        fn(arg);
        return mark;
    }
    int r = at_depth(depth - 1, fn, arg);
    __asm__ volatile("" ::: "memory");
    return r + mark;
}

/* ---- pairs ---- */

struct pairs {
    size_t bytes;
    long n;
    uint64_t t0, t1;
};

static void run_pairs(void *arg) {
    struct pairs *p = arg;
    for (long i = 0; i < 1000; i++) one_pair(p->bytes);  // warm-up: first-use costs stay out
    p->t0 = now_ns();
    for (long i = 0; i < p->n; i++) one_pair(p->bytes);
    p->t1 = now_ns();
}

static int mode_pairs(int argc, char **argv) {
    if (argc < 5) return 2;
    struct pairs p = {strtoull(argv[2], NULL, 0), atol(argv[3]), 0, 0};
    open_device();
    at_depth(atoi(argv[4]), run_pairs, &p);
    printf("pairs size=%zu n=%ld ns_per_pair=%.1f\n", p.bytes, p.n, (double)(p.t1 - p.t0) / (double)p.n);
    return 0;
}

/* ---- calls: every call timed on its own (the GPU machine, where a call takes tens of µs) ---- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
static uint64_t pct(uint64_t *v, long n, int p) {
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    return v[(n - 1) * p / 100];
}

static int mode_calls(int argc, char **argv) {
    if (argc < 5) return 2;
    long n = atol(argv[3]), warmup = atol(argv[4]);
    if (n <= 0) return 2;
    uint64_t *ta = malloc(sizeof(uint64_t) * (size_t)n), *tf = malloc(sizeof(uint64_t) * (size_t)n),
             *tp = malloc(sizeof(uint64_t) * (size_t)n);
    open_device();
    char *sizes = strdup(argv[2]);
    for (char *tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
        size_t bytes = strtoull(tok, NULL, 0);
        for (long i = 0; i < warmup; i++) one_pair(bytes);
        for (long i = 0; i < n; i++) {
            CUdeviceptr p;
            uint64_t a = now_ns();
            CUresult r = cuMemAlloc(&p, bytes);
            uint64_t b = now_ns();
            if (r) die("cuMemAlloc", r);
            if ((r = cuMemFree(p))) die("cuMemFree", r);
            uint64_t c = now_ns();
            ta[i] = b - a, tf[i] = c - b, tp[i] = c - a;
        }
        printf("calls size=%zu n=%ld alloc_ns=%llu free_ns=%llu pair_ns=%llu pair_p10_ns=%llu pair_p90_ns=%llu\n",
               bytes, n, (unsigned long long)pct(ta, n, 50), (unsigned long long)pct(tf, n, 50),
               (unsigned long long)pct(tp, n, 50), (unsigned long long)pct(tp, n, 10),
               (unsigned long long)pct(tp, n, 90));
        fflush(stdout);
    }
    free(sizes);
    free(ta), free(tf), free(tp);
    return 0;
}

/* ---- ab: the shim's extra time per pair, measured against the driver in the same process ---- */

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

/* How many symbols a GNU hash table covers: the highest index any bucket's chain reaches, + 1. */
static size_t gnu_hash_symbols(const uint32_t *gh) {
    uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_words = gh[2];
    const uint32_t *buckets = gh + 4 + bloom_words * (sizeof(ElfW(Addr)) / 4);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t last = 0;
    for (uint32_t b = 0; b < nbuckets; b++)
        if (buckets[b] > last) last = buckets[b];
    if (last < symoffset) return symoffset;
    while (!(chain[last - symoffset] & 1)) last++;
    return (size_t)last + 1;
}

/* libcuda's own definition of `name`, read from its dynamic symbol table: dlsym and cuGetProcAddress
 * would answer with the shim's hook, which is the point of the shim but not of this measurement. */
static void *driver_definition(const char *name) {
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    struct link_map *lm = NULL;
    if (!h || dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || !lm) return NULL;
    const ElfW(Sym) *syms = NULL;
    const char *strs = NULL;
    const uint32_t *hash = NULL, *gnu_hash = NULL;
    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        /* The loader has relocated these in place on x86-64; an unrelocated one is below l_addr. */
        uintptr_t v = (uintptr_t)d->d_un.d_ptr;
        if (v < lm->l_addr) v += lm->l_addr;
        if (d->d_tag == DT_SYMTAB) syms = (const ElfW(Sym) *)v;
        else if (d->d_tag == DT_STRTAB) strs = (const char *)v;
        else if (d->d_tag == DT_HASH) hash = (const uint32_t *)v;
        else if (d->d_tag == DT_GNU_HASH) gnu_hash = (const uint32_t *)v;
    }
    if (!syms || !strs || (!hash && !gnu_hash)) return NULL;
    size_t n = hash ? hash[1] : gnu_hash_symbols(gnu_hash);
    for (size_t i = 0; i < n; i++)
        if (syms[i].st_shndx != SHN_UNDEF && ELF64_ST_TYPE(syms[i].st_info) == STT_FUNC &&
            !strcmp(strs + syms[i].st_name, name))
            return (void *)(lm->l_addr + syms[i].st_value);
    return NULL;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* One timed turn of an A/B: through the exported symbol (the shim's hook when preloaded) when
 * `hooked`, else straight into libcuda's own definition; returns its nanoseconds. */
typedef uint64_t (*turn_fn)(int hooked, void *ctx);

/* N rounds of two turns, the order alternating every round; prints LABEL then the medians of each
 * path and of the per-round difference. */
static void ab_rounds(const char *label, long n, turn_fn turn, void *ctx) {
    uint64_t *th = malloc(sizeof(uint64_t) * (size_t)n), *td = malloc(sizeof(uint64_t) * (size_t)n);
    int64_t *diff = malloc(sizeof(int64_t) * (size_t)n);
    for (long i = 0; i < n; i++) {
        for (int t = 0; t < 2; t++) {
            int hooked = (t == 0) == (i % 2 == 0);
            (hooked ? th : td)[i] = turn(hooked, ctx);
        }
        diff[i] = (int64_t)th[i] - (int64_t)td[i];
    }
    qsort(diff, (size_t)n, sizeof *diff, cmp_i64);
    uint64_t hm = pct(th, n, 50), dm = pct(td, n, 50);
    printf("%s hooked_ns=%llu direct_ns=%llu extra_ns=%lld extra_of_medians_ns=%lld\n", label, (unsigned long long)hm,
           (unsigned long long)dm, (long long)diff[(n - 1) / 2], (long long)hm - (long long)dm);
    fflush(stdout);
    free(th), free(td), free(diff);
}

struct pair_turn {
    size_t bytes;
    alloc_fn direct_alloc;
    free_fn direct_free;
};

static uint64_t pair_turn(int hooked, void *ctx) {
    struct pair_turn *c = ctx;
    CUdeviceptr p;
    CUresult r;
    uint64_t a = now_ns();
    if (hooked) {
        if ((r = cuMemAlloc(&p, c->bytes))) die("cuMemAlloc", r);
        if ((r = cuMemFree(p))) die("cuMemFree", r);
    } else {
        if ((r = c->direct_alloc(&p, c->bytes))) die("libcuda's own cuMemAlloc", r);
        if ((r = c->direct_free(p))) die("libcuda's own cuMemFree", r);
    }
    return now_ns() - a;
}

static int mode_ab(int argc, char **argv) {
    if (argc < 5) return 2;
    long n = atol(argv[3]), warmup = atol(argv[4]);
    if (n <= 0) return 2;
    struct pair_turn c = {0, (alloc_fn)driver_definition("cuMemAlloc_v2"), (free_fn)driver_definition("cuMemFree_v2")};
    if (!c.direct_alloc || !c.direct_free) {
        fprintf(stderr, "bench_alloc: cannot find libcuda's own cuMemAlloc_v2/cuMemFree_v2\n");
        return 3;
    }
    open_device();
    char *sizes = strdup(argv[2]);
    for (char *tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
        c.bytes = strtoull(tok, NULL, 0);
        for (long i = 0; i < warmup; i++) pair_turn(1, &c), pair_turn(0, &c);
        char label[96];
        snprintf(label, sizeof label, "ab size=%zu n=%ld", c.bytes, n);
        ab_rounds(label, n, pair_turn, &c);
    }
    free(sizes);
    return 0;
}

typedef CUresult (*launch_fn)(CUgraphExec, CUstream);

struct launch_turn {
    CUgraphExec exec;
    CUstream stream;
    launch_fn direct;
};

/* The launch alone is timed; the synchronization after it is not. */
static uint64_t launch_turn(int hooked, void *ctx) {
    struct launch_turn *c = ctx;
    uint64_t a = now_ns();
    CUresult r = hooked ? cuGraphLaunch(c->exec, c->stream) : c->direct(c->exec, c->stream);
    uint64_t t = now_ns() - a;
    if (r || (r = cuStreamSynchronize(c->stream))) die("a launch", r);
    return t;
}

static int mode_graphab(int argc, char **argv) {
    if (argc < 5) return 2;
    size_t bytes = strtoull(argv[2], NULL, 0);
    long n = atol(argv[3]), warmup = atol(argv[4]);
    if (n <= 0 || !bytes) return 2;
    struct launch_turn c = {NULL, NULL, (launch_fn)driver_definition("cuGraphLaunch")};
    if (!c.direct) {
        fprintf(stderr, "bench_alloc: cannot find libcuda's own cuGraphLaunch\n");
        return 3;
    }
    open_device();
    CUgraph g;
    CUdeviceptr p;
    CUresult r;
    if ((r = cuStreamCreate(&c.stream, CU_STREAM_NON_BLOCKING))) die("cuStreamCreate", r);
    if ((r = cuStreamBeginCapture(c.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))) die("cuStreamBeginCapture", r);
    if ((r = cuMemAllocAsync(&p, bytes, c.stream)) || (r = cuMemFreeAsync(p, c.stream)))
        die("a captured allocation", r);
    if ((r = cuStreamEndCapture(c.stream, &g))) die("cuStreamEndCapture", r);
    if ((r = cuGraphInstantiateWithFlags(&c.exec, g, 0))) die("cuGraphInstantiateWithFlags", r);
    if ((r = cuGraphUpload(c.exec, c.stream)) || (r = cuStreamSynchronize(c.stream))) die("cuGraphUpload", r);
    for (long i = 0; i < warmup; i++) launch_turn(1, &c), launch_turn(0, &c);
    char label[96];
    snprintf(label, sizeof label, "graphab bytes=%zu n=%ld", bytes, n);
    ab_rounds(label, n, launch_turn, &c);
    cuGraphExecDestroy(c.exec);
    cuGraphDestroy(g);
    return 0;
}

/* ---- threads ---- */

struct worker {
    pthread_barrier_t *ready;
    struct pairs p;
    int depth;
};

static void run_after_barrier(void *arg) {
    struct worker *w = arg;
    for (long i = 0; i < 200; i++) one_pair(w->p.bytes);
    pthread_barrier_wait(w->ready);
    w->p.t0 = now_ns();
    for (long i = 0; i < w->p.n; i++) one_pair(w->p.bytes);
    w->p.t1 = now_ns();
}

static void *thread_main(void *arg) {
    struct worker *w = arg;
    CUresult r = cuCtxSetCurrent(g_ctx);
    if (r) die("cuCtxSetCurrent", r);
    at_depth(w->depth, run_after_barrier, w);
    return NULL;
}

static int mode_threads(int argc, char **argv) {
    if (argc < 6) return 2;
    int t = atoi(argv[2]);
    if (t < 1 || t > 256) return 2;
    open_device();
    pthread_barrier_t ready;
    pthread_barrier_init(&ready, NULL, (unsigned)t);
    struct worker *w = calloc((size_t)t, sizeof *w);
    pthread_t *tid = calloc((size_t)t, sizeof *tid);
    for (int i = 0; i < t; i++) {
        w[i].ready = &ready;
        w[i].p.bytes = strtoull(argv[3], NULL, 0);
        w[i].p.n = atol(argv[4]);
        w[i].depth = atoi(argv[5]);
        pthread_create(&tid[i], NULL, thread_main, &w[i]);
    }
    uint64_t first = UINT64_MAX, last = 0;
    for (int i = 0; i < t; i++) {
        pthread_join(tid[i], NULL);
        if (w[i].p.t0 < first) first = w[i].p.t0;
        if (w[i].p.t1 > last) last = w[i].p.t1;
    }
    double pairs = (double)t * (double)w[0].p.n;
    printf("threads t=%d n=%ld pairs_per_s=%.0f\n", t, w[0].p.n, pairs / ((double)(last - first) / 1e9));
    free(w), free(tid);
    return 0;
}

/* ---- procs: children are this program in mode "child START SIZE N DEPTH" ---- */

struct child {
    uint64_t start;
    struct pairs p;
    int late;
};

static void run_child(void *arg) {
    struct child *c = arg;
    for (long i = 0; i < 200; i++) one_pair(c->p.bytes);
    c->late = now_ns() > c->start;
    while (now_ns() < c->start) {}
    c->p.t0 = now_ns();
    for (long i = 0; i < c->p.n; i++) one_pair(c->p.bytes);
    c->p.t1 = now_ns();
}

static int mode_child(int argc, char **argv) {
    if (argc < 6) return 2;
    struct child c = {strtoull(argv[2], NULL, 0), {strtoull(argv[3], NULL, 0), atol(argv[4]), 0, 0}, 0};
    open_device();
    at_depth(atoi(argv[5]), run_child, &c);
    printf("%llu %llu %d\n", (unsigned long long)c.p.t0, (unsigned long long)c.p.t1, c.late);
    return 0;
}

static int mode_procs(int argc, char **argv) {
    if (argc < 6) return 2;
    int np = atoi(argv[2]);
    if (np < 1 || np > 64) return 2;
    int fd[2];
    if (pipe(fd)) return 3;
    /* Long enough for every child to start, load the shim and warm up on a busy 2-core machine. */
    uint64_t start = now_ns() + 150000000ull * (uint64_t)np;
    char start_s[32];
    snprintf(start_s, sizeof start_s, "%llu", (unsigned long long)start);
    pid_t pids[64];
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
    posix_spawn_file_actions_addclose(&fa, fd[0]);
    char *cargv[] = {argv[0], "child", start_s, argv[3], argv[4], argv[5], NULL};
    for (int i = 0; i < np; i++)
        if (posix_spawn(&pids[i], "/proc/self/exe", &fa, NULL, cargv, environ)) return 3;
    posix_spawn_file_actions_destroy(&fa);
    close(fd[1]);
    FILE *in = fdopen(fd[0], "r");
    uint64_t last = 0, first = UINT64_MAX;
    int got = 0, late = 0;
    unsigned long long a, b;
    int l;
    while (fscanf(in, "%llu %llu %d", &a, &b, &l) == 3) {
        got++, late += l;
        if (a < first) first = a;
        if (b > last) last = b;
    }
    fclose(in);
    int failed = 0;
    for (int i = 0; i < np; i++) {
        int st = 0;
        waitpid(pids[i], &st, 0);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    if (failed || got != np) {
        fprintf(stderr, "bench_alloc: %d of %d children failed\n", failed ? failed : np - got, np);
        return 3;
    }
    double pairs = (double)np * (double)atol(argv[4]);
    printf("procs p=%d n=%ld pairs_per_s=%.0f late=%d\n", np, atol(argv[4]), pairs / ((double)(last - first) / 1e9),
           late);
    return 0;
}

/* ---- hold: memory per live allocation, then reports ---- */

static long rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

struct hold {
    size_t bytes;
    CUdeviceptr *ptrs;
    long i;
};

static void alloc_one(void *arg) {
    struct hold *h = arg;
    CUresult r = cuMemAlloc(&h->ptrs[h->i], h->bytes);
    if (r) die("cuMemAlloc", r);
}

static int mode_hold(int argc, char **argv) {
    if (argc < 5) return 2;
    long n = atol(argv[2]);
    int reports = atoi(argv[4]);
    if (n < 1) return 2;
    size_t slots = (size_t)(n > 64 ? n : 64);  // the warm-up below uses 64
    struct hold h = {strtoull(argv[3], NULL, 0), calloc(slots, sizeof(CUdeviceptr)), 0};
    if (!h.ptrs) return 3;
    memset(h.ptrs, 1, sizeof(CUdeviceptr) * slots);  // resident before the first measurement
    open_device();
    for (h.i = 0; h.i < 64; h.i++) at_depth((int)h.i, alloc_one, &h);  // every stack once: the table
    for (long i = 0; i < 64; i++) cuMemFree(h.ptrs[i]);
    long before = rss_bytes();
    for (h.i = 0; h.i < n; h.i++) at_depth((int)(h.i % 64), alloc_one, &h);
    long after = rss_bytes();
    printf("hold n=%ld rss_bytes_per_alloc=%.1f", n, (double)(after - before) / (double)n);
    for (int k = 0; k < reports; k++) {
        uint64_t t0 = now_ns();
        int rc = gpuguard_report_now("bench");
        uint64_t t1 = now_ns();
        if (rc == 1) break;  // not under gpuguard
        printf(k ? ",%.2f" : " report_ms=%.2f", rc == 0 ? (double)(t1 - t0) / 1e6 : -1.0);
    }
    printf("\n");
    for (long i = 0; i < n; i++) cuMemFree(h.ptrs[i]);
    free(h.ptrs);
    return 0;
}

/* ---- blocks: the tensor view's c10 reports ---- */

typedef struct {
    int8_t type, index;
} c10_device;
typedef void (*c10_report_fn)(void *, int64_t, size_t, size_t, c10_device);

struct blocks {
    c10_report_fn report;
    long n;
    int sites;
    uint64_t t0, t1;
    const volatile char *evict;  // read before each pair, a line at a time (NULL: none)
    size_t evict_bytes;
    uint64_t paired_ns;  // with evict: the pairs' own time, summed
};

static void evict_lines(const struct blocks *b) {
    for (size_t at = 0; at < b->evict_bytes; at += 64) (void)b->evict[at];
}

/* One report pair from one of a few call sites: each site is this function at another recursion
 * depth, so that each has a stack of its own, as PyTorch's allocation sites do. */
__attribute__((noinline)) static void report_from(struct blocks *b, int site, long i) {
    if (site > 0) {
        report_from(b, site - 1, i);
        __asm__ volatile("" ::: "memory");
        return;
    }
    c10_device cuda = {1, 0};
    void *ptr = (void *)(uintptr_t)(0x7f0000000000ull + (uint64_t)(i % 1024) * 4096);
    uint64_t t0 = 0;
    if (b->evict) {
        evict_lines(b);
        t0 = now_ns();
    }
    b->report(ptr, 4 << 20, 4u << 20, 20u << 20, cuda);
    b->report(ptr, -(4 << 20), 0, 20u << 20, cuda);
    if (b->evict) b->paired_ns += now_ns() - t0;
}

static void run_blocks(void *arg) {
    struct blocks *b = arg;
    for (long i = 0; i < 2000; i++) report_from(b, (int)(i % b->sites), i);  // warm-up
    b->paired_ns = 0;
    b->t0 = now_ns();
    for (long i = 0; i < b->n; i++) report_from(b, (int)(i % b->sites), i);
    b->t1 = now_ns();
    if (b->evict) b->t1 = b->t0 + b->paired_ns;
}

static int mode_blocks(int argc, char **argv) {
    if (argc < 5) return 2;
    /* c10's own definitions where PyTorch has them (the test double's libc10.so on LD_LIBRARY_PATH):
     * the shim's forwards there, as under PyTorch. */
    if (!dlopen("libc10.so", RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "bench_alloc: %s\n", dlerror());
        return 1;
    }
    struct blocks b = {(c10_report_fn)dlsym(RTLD_DEFAULT, "_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE"),
                       atol(argv[2]),
                       atoi(argv[4]),
                       0,
                       0,
                       NULL,
                       0,
                       0};
    if (!b.report) return 1; /* libc10.so defines it */
    if (argc > 5) {
        b.evict_bytes = (size_t)atol(argv[5]) << 10;
        char *buffer = calloc(1, b.evict_bytes + 1);
        if (!buffer) return 1;
        for (size_t at = 0; at < b.evict_bytes; at += 64) buffer[at] = (char)at; /* mapped, not the zero page */
        b.evict = buffer;
    }
    if (b.sites < 1) b.sites = 1;
    at_depth(atoi(argv[3]), run_blocks, &b);
    printf("blocks n=%ld sites=%d ns_per_report=%.1f\n", b.n, b.sites, (double)(b.t1 - b.t0) / (double)(2 * b.n));
    return 0;
}

int main(int argc, char **argv) {
    int rc = 2;
    if (argc >= 2) {
        if (!strcmp(argv[1], "pairs")) rc = mode_pairs(argc, argv);
        else if (!strcmp(argv[1], "calls")) rc = mode_calls(argc, argv);
        else if (!strcmp(argv[1], "ab")) rc = mode_ab(argc, argv);
        else if (!strcmp(argv[1], "graphab")) rc = mode_graphab(argc, argv);
        else if (!strcmp(argv[1], "threads")) rc = mode_threads(argc, argv);
        else if (!strcmp(argv[1], "procs")) rc = mode_procs(argc, argv);
        else if (!strcmp(argv[1], "child")) rc = mode_child(argc, argv);
        else if (!strcmp(argv[1], "hold")) rc = mode_hold(argc, argv);
        else if (!strcmp(argv[1], "blocks")) rc = mode_blocks(argc, argv);
    }
    if (rc == 2) fprintf(stderr, "usage: see the comment at the top of tests/bench/bench_alloc.c\n");
    return rc;
}
