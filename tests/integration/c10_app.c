/* A program of tensors on the test double of PyTorch's caching allocator (build/fake/libc10_cuda.so,
 * tests/fake/fake_c10_cuda.cpp), which it dlopens as Python loads torch: RTLD_LOCAL, or RTLD_GLOBAL
 * with --global. Runs the steps given on its command line, then prints the allocator's totals and
 * what the double of libc10.so's profiler functions received (t_c10_double.sh).
 *
 *   c10_app [--global] STEP...
 *     alloc SIZE       one block; SIZE in bytes or with K, M, G (1024-based)
 *     alloc SIZExN     N blocks of SIZE
 *     free-odd         frees every other live block: the 2nd, 4th, ... in the order they were made
 *     free-all         frees every live block
 *     free-last        frees the newest live block
 *     free-at I        frees the I-th live block (0: the oldest still live)
 *     view-off, view-on  gpuguard_set_tensor_view(0 / 1), when the shim is loaded; prints "view was=W"
 *     report MESSAGE   gpuguard_report(MESSAGE), when the shim is loaded
 *     fork-report MESSAGE  a forked child writes gpuguard_report(MESSAGE) and exits; the parent waits
 *     fork-blocks N MESSAGE  the same, the child making N blocks of 1 KiB first
 *     raw PTR SIZE ALLOCATED  one call of c10's reportMemoryUsageToProfiler as a hostile caller makes
 *                      it: PTR, SIZE ("min": INT64_MIN) and the allocated total as given, reserved the
 *                      same, device cuda:0
 *     empty-cache      torch.cuda.empty_cache()
 *     print            "allocated=A reserved=R live=N"
 *     rss-mark         notes the resident memory and resets its peak (clear_refs 5)
 *     rss-rise         "rss_rise_kib=K": the peak resident memory since rss-mark, less what it was then
 *
 * A request the allocator refuses prints "oom SIZE allocated=A reserved=R" and the program goes on,
 * as a training loop that catches torch.OutOfMemoryError does. The last lines:
 *   allocated=A reserved=R live=N ooms=K
 *   profiler usage_calls=C usage_sum=S last_allocated=A last_reserved=R device=T:I oom_calls=O
 *            oom_last_size=B oom_last_allocated=A oom_last_reserved=R      (one line)
 * Exit status 0, or 2 for a bad step or a library that does not load. */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/fake/fake_c10.h"

static void *(*c10_malloc)(size_t);
static void (*c10_free)(void *);
static void (*c10_empty_cache)(void);
static uint64_t (*c10_allocated)(void);
static uint64_t (*c10_reserved)(void);
static void (*profiler_get)(struct c10fake_profiler *);

static void **g_live;
static size_t g_count, g_cap;
static unsigned g_ooms;

static void *need(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "c10_app: %s not found: %s\n", name, dlerror());
        exit(2);
    }
    return p;
}

static int parse_size(const char *s, uint64_t *out, uint64_t *times) {
    char *end = NULL;
    uint64_t v = strtoull(s, &end, 10);
    if (end == s) return 0;
    if (*end == 'K') v <<= 10, end++;
    else if (*end == 'M') v <<= 20, end++;
    else if (*end == 'G') v <<= 30, end++;
    *times = 1;
    if (*end == 'x') {
        const char *n = end + 1;
        *times = strtoull(n, &end, 10);
        if (end == n) return 0;
    }
    *out = v;
    return *end == '\0';
}

static void print_totals(void) {
    printf("allocated=%" PRIu64 " reserved=%" PRIu64 " live=%zu\n", c10_allocated(), c10_reserved(), g_count);
}

/* The shim's API, found as a program that need not run under it finds it (include/gpuguard/gpuguard.h). */
static int set_view(int on) {
    int (*fn)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "gpuguard_set_tensor_view");
    return fn ? fn(on) : -2;
}

static int report(const char *message) {
    int (*fn)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "gpuguard_report");
    return fn ? fn(message) : -2;
}

struct c10_device {
    int8_t type, index; /* c10::Device, passed by value */
};
typedef void (*c10_usage_fn)(void *, int64_t, size_t, size_t, struct c10_device);

static void raw_report(const char *ptr, const char *size, const char *allocated) {
    c10_usage_fn fn = (c10_usage_fn)dlsym(RTLD_DEFAULT, "_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE");
    int64_t bytes = !strcmp(size, "min") ? INT64_MIN : strtoll(size, NULL, 0);
    struct c10_device cuda0 = {1, 0};
    size_t total = strtoull(allocated, NULL, 0);
    if (fn) fn((void *)(uintptr_t)strtoull(ptr, NULL, 0), bytes, total, total, cuda0);
}

static void alloc(uint64_t size) {
    void *p = c10_malloc(size);
    if (!p) {
        g_ooms++;
        printf("oom %" PRIu64 " allocated=%" PRIu64 " reserved=%" PRIu64 "\n", size, c10_allocated(), c10_reserved());
        return;
    }
    if (g_count == g_cap) {
        g_cap = g_cap ? 2 * g_cap : 64;
        g_live = realloc(g_live, g_cap * sizeof *g_live);
        if (!g_live) exit(2);
    }
    g_live[g_count++] = p;
}

/* A line of /proc/self/status ("VmRSS:", "VmHWM:") in KiB; -1 when absent. */
static long status_kib(const char *name) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, name, strlen(name))) kib = strtol(line + strlen(name), NULL, 10);
    if (f) fclose(f);
    return kib;
}
static long rss_marked_kib;

int main(int argc, char **argv) {
    int i = 1, mode = RTLD_NOW | RTLD_LOCAL;
    if (i < argc && !strcmp(argv[i], "--global")) mode = RTLD_NOW | RTLD_GLOBAL, i++;
    void *lib = dlopen("libc10_cuda.so", mode);
    if (!lib) {
        fprintf(stderr, "c10_app: cannot load libc10_cuda.so: %s\n", dlerror());
        return 2;
    }
    *(void **)&c10_malloc = need(lib, "c10fake_malloc");
    *(void **)&c10_free = need(lib, "c10fake_free");
    *(void **)&c10_empty_cache = need(lib, "c10fake_empty_cache");
    *(void **)&c10_allocated = need(lib, "c10fake_allocated");
    *(void **)&c10_reserved = need(lib, "c10fake_reserved");
    *(void **)&profiler_get = need(lib, "c10fake_profiler_get"); /* libc10.so's, a dependency */

    for (; i < argc; i++) {
        const char *step = argv[i];
        if (!strcmp(step, "alloc") && i + 1 < argc) {
            uint64_t size, times;
            if (!parse_size(argv[++i], &size, &times)) {
                fprintf(stderr, "c10_app: bad size '%s'\n", argv[i]);
                return 2;
            }
            for (uint64_t n = 0; n < times; n++) alloc(size);
        } else if (!strcmp(step, "free-odd")) {
            size_t kept = 0;
            for (size_t k = 0; k < g_count; k++) {
                if (k % 2) c10_free(g_live[k]);
                else g_live[kept++] = g_live[k];
            }
            g_count = kept;
        } else if (!strcmp(step, "free-all")) {
            for (size_t k = 0; k < g_count; k++) c10_free(g_live[k]);
            g_count = 0;
        } else if (!strcmp(step, "free-last")) {
            if (g_count) c10_free(g_live[--g_count]);
        } else if (!strcmp(step, "free-at") && i + 1 < argc) {
            size_t at = strtoull(argv[++i], NULL, 10);
            if (at >= g_count) {
                fprintf(stderr, "c10_app: free-at %zu: only %zu live\n", at, g_count);
                return 2;
            }
            c10_free(g_live[at]);
            memmove(g_live + at, g_live + at + 1, (g_count - at - 1) * sizeof *g_live);
            g_count--;
        } else if (!strcmp(step, "view-off") || !strcmp(step, "view-on")) {
            printf("view was=%d\n", set_view(!strcmp(step, "view-on")));
        } else if (!strcmp(step, "report") && i + 1 < argc) {
            if (report(argv[++i]) != 0) fprintf(stderr, "c10_app: no report written\n");
        } else if (!strcmp(step, "raw") && i + 3 < argc) {
            raw_report(argv[i + 1], argv[i + 2], argv[i + 3]);
            i += 3;
        } else if ((!strcmp(step, "fork-report") && i + 1 < argc) || (!strcmp(step, "fork-blocks") && i + 2 < argc)) {
            long blocks = !strcmp(step, "fork-blocks") ? atol(argv[++i]) : 0;
            const char *message = argv[++i];
            pid_t child = fork();
            if (child == 0) {
                for (long b = 0; b < blocks; b++) alloc(1024);
                _exit(report(message) == 0 ? 0 : 1);
            }
            int status = 0;
            if (child < 0 || waitpid(child, &status, 0) != child || status != 0)
                fprintf(stderr, "c10_app: the forked child wrote no report\n");
        } else if (!strcmp(step, "empty-cache")) {
            c10_empty_cache();
        } else if (!strcmp(step, "print")) {
            print_totals();
        } else if (!strcmp(step, "rss-mark")) {
            rss_marked_kib = status_kib("VmRSS:");
            FILE *f = fopen("/proc/self/clear_refs", "w");
            if (!f || fputs("5", f) < 0 || fclose(f) != 0) fprintf(stderr, "c10_app: cannot reset the peak RSS\n");
        } else if (!strcmp(step, "rss-rise")) {
            printf("rss_rise_kib=%ld\n", status_kib("VmHWM:") - rss_marked_kib);
        } else {
            fprintf(stderr, "c10_app: unknown step '%s'\n", step);
            return 2;
        }
    }
    printf("allocated=%" PRIu64 " reserved=%" PRIu64 " live=%zu ooms=%u\n", c10_allocated(), c10_reserved(), g_count,
           g_ooms);
    struct c10fake_profiler s;
    profiler_get(&s);
    printf("profiler usage_calls=%" PRIu64 " usage_sum=%" PRId64 " last_allocated=%" PRIu64 " last_reserved=%" PRIu64
           " device=%d:%d oom_calls=%" PRIu64 " oom_last_size=%" PRId64 " oom_last_allocated=%" PRIu64
           " oom_last_reserved=%" PRIu64 "\n",
           s.usage_calls, s.usage_sum, s.last_allocated, s.last_reserved, s.last_device_type, s.last_device_index,
           s.oom_calls, s.oom_last_size, s.oom_last_allocated, s.oom_last_reserved);
    fflush(stdout);
    return 0;
}
