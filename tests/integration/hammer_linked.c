/* Processes, threads and signals around the shim (tests/integration/t_process.sh, t_faults.sh). It links
 * the test driver directly and runs one scenario, printing one result line that the test checks:
 *
 *   storm T MS MAXBYTES        T threads allocate and free at random for MS milliseconds (sizes 1..MAXBYTES);
 *                              out-of-memory is expected, a failed free is tried again later; everything
 *                              is freed at the end. Prints "started" after the first allocation (so a test
 *                              may send signals from then on), then "storm allocs=.. oom=.. free_failures=..
 *                              left=.." where left counts allocations that could not be freed at all.
 *   signals T MS MAXBYTES      storm, with SIGALRM every 100 us (a handler without SA_RESTART, so system
 *                              calls inside the shim see EINTR): "signals delivered=N" before the storm line.
 *   handoff P C N BYTES        P threads allocate N blocks each and hand them to C threads that free them.
 *   forkloop T FORKS BYTES     T storm threads run while another thread forks FORKS times; each child
 *                              allocates BYTES, frees them, and exits (alarm(30): a child that deadlocks
 *                              dies of SIGALRM). "forkloop forks=.. hung=.. failed=..".
 *   fork P C [steal]           allocates P, forks a child that allocates C (and with `steal` also frees the
 *   clone P C [steal]          parent's block, which it inherited but does not own); both hold until stdin
 *                              closes; "holding parent=PID child=PID" is printed while they do. `clone`
 *                              makes the child with clone(2) and no CLONE_VM, which runs no fork handlers.
 *   spawn P PROG ARGS...       allocates P, runs PROG with posix_spawn and then with vfork+execv, waits.
 *   exec P PROG ARGS...        allocates P, then execv's PROG (the allocation is not freed).
 *   dlrace LIB MS              one thread makes over-quota requests (each a report when an episode starts)
 *                              while another dlopens and dlcloses LIB (whose constructor allocates) for MS.
 * Every scenario ends with "info free=.. total=.." from cuMemGetInfo. Exit status 0 unless a call that
 * must succeed failed. */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static CUcontext g_ctx;
static atomic_int g_stop;

static void die(const char *what, CUresult r) {
    fprintf(stderr, "hammer: %s failed: %d\n", what, (int)r);
    exit(3);
}

static void use_context(void) {
    CUresult r = cuCtxSetCurrent(g_ctx);
    if (r != CUDA_SUCCESS) die("cuCtxSetCurrent", r);
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void print_info(void) {
    size_t f = 0, t = 0;
    CUresult r = cuMemGetInfo(&f, &t);
    printf("info -> %d free=%zu total=%zu\n", (int)r, f, t);
    fflush(stdout);
}

/* Frees with retries: a failed free leaves the memory allocated, so trying again is right. */
static int free_retrying(CUdeviceptr p, atomic_long *failures) {
    for (int i = 0; i < 1000; i++) {
        if (cuMemFree(p) == CUDA_SUCCESS) return 1;
        if (failures) atomic_fetch_add(failures, 1);
    }
    return 0;
}

/* ---- storm ---- */

struct storm {
    long long until_ms;
    size_t max_bytes;
    atomic_long allocs, oom, free_failures, left;
    atomic_int started;
};

static void *storm_thread(void *arg) {
    struct storm *s = arg;
    use_context();
    unsigned seed = (unsigned)(uintptr_t)pthread_self() ^ (unsigned)getpid();
    CUdeviceptr held[8];
    int n = 0;
    while (!atomic_load(&g_stop) && (s->until_ms == 0 || now_ms() < s->until_ms)) {
        if (n < 8 && (n == 0 || rand_r(&seed) % 2)) {
            size_t bytes = 1 + (size_t)rand_r(&seed) % s->max_bytes;
            CUresult r = cuMemAlloc(&held[n], bytes);
            if (r == CUDA_SUCCESS) {
                n++;
                atomic_fetch_add(&s->allocs, 1);
                if (!atomic_exchange(&s->started, 1)) {
                    printf("started\n");
                    fflush(stdout);
                }
            } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
                atomic_fetch_add(&s->oom, 1);
            } else {
                die("cuMemAlloc", r);
            }
        } else if (n > 0) {
            int k = rand_r(&seed) % n;
            if (cuMemFree(held[k]) == CUDA_SUCCESS) held[k] = held[--n];
            else atomic_fetch_add(&s->free_failures, 1); /* kept: freed on a later turn */
        }
    }
    for (int k = 0; k < n; k++)
        if (!free_retrying(held[k], &s->free_failures)) atomic_fetch_add(&s->left, 1);
    return NULL;
}

static void run_storm(int threads, long ms, size_t max_bytes, struct storm *s) {
    pthread_t t[64];
    if (threads > 64) threads = 64;
    s->until_ms = ms ? now_ms() + ms : 0;
    s->max_bytes = max_bytes ? max_bytes : 1;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, storm_thread, s);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
}

static void print_storm(const char *name, struct storm *s) {
    printf("%s allocs=%ld oom=%ld free_failures=%ld left=%ld\n", name, atomic_load(&s->allocs), atomic_load(&s->oom),
           atomic_load(&s->free_failures), atomic_load(&s->left));
}

/* ---- signals ---- */

static atomic_long g_alarms;
static void on_alarm(int sig) {
    (void)sig;
    atomic_fetch_add(&g_alarms, 1);
}

/* ---- handoff ---- */

#define RING 256
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    CUdeviceptr items[RING];
    int head, count, producers_left;
} q = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0, 0, 0};
static int handoff_n;
static size_t handoff_bytes;
static atomic_long handed, freed, handoff_failed;

static void *producer(void *arg) {
    (void)arg;
    use_context();
    for (int i = 0; i < handoff_n; i++) {
        CUdeviceptr p;
        CUresult r = cuMemAlloc(&p, handoff_bytes);
        if (r != CUDA_SUCCESS) {
            atomic_fetch_add(&handoff_failed, 1);
            continue;
        }
        pthread_mutex_lock(&q.mu);
        while (q.count == RING) pthread_cond_wait(&q.cv, &q.mu);
        q.items[(q.head + q.count++) % RING] = p;
        atomic_fetch_add(&handed, 1);
        pthread_cond_broadcast(&q.cv);
        pthread_mutex_unlock(&q.mu);
    }
    pthread_mutex_lock(&q.mu);
    q.producers_left--;
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    use_context();
    for (;;) {
        pthread_mutex_lock(&q.mu);
        while (q.count == 0 && q.producers_left > 0) pthread_cond_wait(&q.cv, &q.mu);
        if (q.count == 0) {
            pthread_mutex_unlock(&q.mu);
            return NULL;
        }
        CUdeviceptr p = q.items[q.head];
        q.head = (q.head + 1) % RING;
        q.count--;
        pthread_cond_broadcast(&q.cv);
        pthread_mutex_unlock(&q.mu);
        if (free_retrying(p, NULL)) atomic_fetch_add(&freed, 1);
    }
}

/* ---- forkloop ---- */

struct forkloop {
    int forks;
    size_t bytes;
    int hung, failed;
};

static void *forker(void *arg) {
    struct forkloop *f = arg;
    use_context();
    for (int i = 0; i < f->forks; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(30); /* a deadlocked child dies of SIGALRM, which the parent reports */
            use_context();
            CUdeviceptr p;
            int ok = cuMemAlloc(&p, f->bytes) == CUDA_SUCCESS && cuMemFree(p) == CUDA_SUCCESS;
            exit(ok ? 0 : 1);
        }
        if (pid < 0) {
            f->failed++;
            continue;
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) f->hung++;
        else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) f->failed++;
    }
    return NULL;
}

/* ---- fork / clone ---- */

struct family {
    size_t child_bytes;
    int steal;
    CUdeviceptr parent_block;
    int to_parent[2], to_child[2];
};

static int child_body(void *arg) {
    struct family *f = arg;
    use_context();
    CUdeviceptr p;
    CUresult r = cuMemAlloc(&p, f->child_bytes);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "hammer: child cuMemAlloc: %d\n", (int)r);
        _exit(4);
    }
    /* The parent's block is not the child's: whatever the driver says, the parent's count must stay. */
    if (f->steal) cuMemFree(f->parent_block);
    char c = 'r';
    if (write(f->to_parent[1], &c, 1) != 1) _exit(5);
    if (read(f->to_child[0], &c, 1) != 1) _exit(6);
    r = cuMemFree(p);
    exit(r == CUDA_SUCCESS ? 0 : 7);
}

static int run_family(int use_clone, size_t parent_bytes, struct family *f) {
    CUdeviceptr mine;
    CUresult r = cuMemAlloc(&mine, parent_bytes);
    if (r != CUDA_SUCCESS) die("parent cuMemAlloc", r);
    f->parent_block = mine;
    if (pipe(f->to_parent) || pipe(f->to_child)) return 3;
    pid_t pid;
    if (use_clone) {
        static char stack[1 << 20] __attribute__((aligned(16)));
        pid = clone(child_body, stack + sizeof stack, SIGCHLD, f);
    } else {
        pid = fork();
        if (pid == 0) child_body(f);
    }
    if (pid < 0) {
        perror("hammer: fork");
        return 3;
    }
    /* The child's ends: a child that dies before holding then ends the read below instead of hanging it. */
    close(f->to_parent[1]);
    close(f->to_child[0]);
    char c;
    if (read(f->to_parent[0], &c, 1) != 1) {
        fprintf(stderr, "hammer: the child died before holding\n");
        return 3;
    }
    printf("holding parent=%d child=%d\n", (int)getpid(), (int)pid);
    fflush(stdout);
    char buf[64];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {}
    if (write(f->to_child[1], "g", 1) != 1) return 3;
    int st = 0;
    waitpid(pid, &st, 0);
    printf("child exit=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    print_info();
    r = cuMemFree(mine);
    printf("parent free -> %d\n", (int)r);
    return 0;
}

/* ---- spawn ---- */

static int wait_status(pid_t pid) {
    int st = 0;
    if (waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- dlrace ---- */

static atomic_long g_refused;
static void *refuser(void *arg) {
    long long until = *(long long *)arg;
    use_context();
    while (now_ms() < until) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, (size_t)1 << 40) == CUDA_SUCCESS) cuMemFree(p);
        else atomic_fetch_add(&g_refused, 1);
        usleep(1000);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: hammer storm|signals|handoff|forkloop|fork|clone|spawn|exec|dlrace ...\n");
        return 2;
    }
    CUdevice dev;
    CUresult r = cuInit(0);
    if (r == CUDA_SUCCESS) r = cuDeviceGet(&dev, 0);
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&g_ctx, dev);
    if (r != CUDA_SUCCESS) die("driver setup", r);
    use_context();
    const char *mode = argv[1];
#define ARG(i) (argc > (i) ? strtoull(argv[i], NULL, 0) : 0)
    if (!strcmp(mode, "storm") || !strcmp(mode, "signals")) {
        int sig = !strcmp(mode, "signals");
        if (sig) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_alarm; /* no SA_RESTART: interrupted system calls return EINTR */
            sigaction(SIGALRM, &sa, NULL);
            struct itimerval it = {{0, 100}, {0, 100}};
            setitimer(ITIMER_REAL, &it, NULL);
        }
        static struct storm s;
        run_storm((int)ARG(2), (long)ARG(3), ARG(4), &s);
        if (sig) {
            struct itimerval off = {{0, 0}, {0, 0}};
            setitimer(ITIMER_REAL, &off, NULL);
            printf("signals delivered=%ld\n", atomic_load(&g_alarms));
        }
        print_storm("storm", &s);
    } else if (!strcmp(mode, "handoff")) {
        int np = (int)ARG(2), nc = (int)ARG(3);
        handoff_n = (int)ARG(4);
        handoff_bytes = ARG(5);
        q.producers_left = np;
        pthread_t t[128];
        if (np + nc > 128) return 2;
        for (int i = 0; i < np; i++) pthread_create(&t[i], NULL, producer, NULL);
        for (int i = 0; i < nc; i++) pthread_create(&t[np + i], NULL, consumer, NULL);
        for (int i = 0; i < np + nc; i++) pthread_join(t[i], NULL);
        printf("handoff allocated=%ld freed=%ld failed=%ld\n", atomic_load(&handed), atomic_load(&freed),
               atomic_load(&handoff_failed));
    } else if (!strcmp(mode, "forkloop")) {
        static struct storm s;
        struct forkloop f = {(int)ARG(3), ARG(4), 0, 0};
        pthread_t t[16], ft;
        int n = (int)ARG(2) > 16 ? 16 : (int)ARG(2);
        s.max_bytes = 1 << 20;
        for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, storm_thread, &s);
        pthread_create(&ft, NULL, forker, &f);
        pthread_join(ft, NULL);
        atomic_store(&g_stop, 1);
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        printf("forkloop forks=%d hung=%d failed=%d\n", f.forks, f.hung, f.failed);
        print_storm("storm", &s);
    } else if (!strcmp(mode, "fork") || !strcmp(mode, "clone")) {
        static struct family f;
        f.child_bytes = ARG(3);
        f.steal = argc > 4 && !strcmp(argv[4], "steal");
        if (run_family(!strcmp(mode, "clone"), ARG(2), &f)) return 3;
    } else if (!strcmp(mode, "spawn") || !strcmp(mode, "exec")) {
        if (argc < 4) return 2;
        CUdeviceptr p;
        if ((r = cuMemAlloc(&p, ARG(2))) != CUDA_SUCCESS) die("cuMemAlloc", r);
        if (!strcmp(mode, "exec")) {
            fflush(stdout);
            execv(argv[3], argv + 3);
            perror("hammer: execv");
            return 3;
        }
        pid_t pid;
        int rc = posix_spawn(&pid, argv[3], NULL, NULL, argv + 3, environ);
        printf("posix_spawn -> %d exit=%d\n", rc, rc ? -1 : wait_status(pid));
        fflush(stdout);
        pid = vfork();
        if (pid == 0) {
            execv(argv[3], argv + 3);
            _exit(127);
        }
        printf("vfork -> exit=%d\n", wait_status(pid));
        if ((r = cuMemFree(p)) != CUDA_SUCCESS) die("cuMemFree", r);
    } else if (!strcmp(mode, "dlrace")) {
        long long until = now_ms() + (long long)ARG(3);
        pthread_t t;
        pthread_create(&t, NULL, refuser, &until);
        long cycles = 0;
        while (now_ms() < until) {
            void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
            if (!h) {
                fprintf(stderr, "hammer: %s\n", dlerror());
                return 3;
            }
            dlclose(h);
            cycles++;
        }
        pthread_join(t, NULL);
        printf("dlrace cycles=%ld refused=%ld\n", cycles, atomic_load(&g_refused));
    } else {
        fprintf(stderr, "hammer: unknown mode %s\n", mode);
        return 2;
    }
    print_info();
    return 0;
}
