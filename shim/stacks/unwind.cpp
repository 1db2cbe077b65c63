#include "shim/stacks/unwind.h"

#include <dlfcn.h>
#include <unistd.h>
#include <unwind.h>

#include <time.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/base/hot.h"
#include "common/base/log.h"
#include "common/settings/settings.h"
#include "shim/base/thread_counters.h"
#include "shim/stacks/cfi_walker.h"

// libgcc's unwinder is linked statically into the shim (-static-libgcc) and dynamically into other
// programs (libgcc_s); a weak reference lets us notice a build where neither provided it and dlopen
// libgcc_s.so.1 instead of failing to load.
#pragma weak _Unwind_Backtrace
#pragma weak _Unwind_GetIP

namespace gg::stacks::unwind {
namespace {

using BacktraceFn = int (*)(void **, int);

struct Backend {
    const char *name;
    BacktraceFn fn;
};

// libunwind's exported names carry the architecture (nm -D libunwind.so.8): unw_backtrace is plain,
// but unw_set_caching_policy and unw_local_addr_space are macros for these.
#if defined(__x86_64__)
#define GG_UNW_PREFIX "_ULx86_64_"
#elif defined(__aarch64__)
#define GG_UNW_PREFIX "_ULaarch64_"
#else
#define GG_UNW_PREFIX "_UL_unknown_"
#endif
constexpr int kUnwCachePerThread = 2;  // UNW_CACHE_PER_THREAD in libunwind.h (not included: not a build dependency)

BacktraceFn open_libunwind(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        log_debug("stacks: %s not loaded: %s", path, dlerror());
        return nullptr;
    }
    auto fn = reinterpret_cast<BacktraceFn>(dlsym(h, "unw_backtrace"));
    if (!fn) {
        log_debug("stacks: %s has no unw_backtrace", path);
        return nullptr;  // left open: dlclose of a half-used library buys nothing
    }
    // Per-thread caching makes repeated unwinds of similar stacks cheap and avoids the global cache's
    // lock; without it every capture would re-parse unwind tables.
    using SetPolicyFn = int (*)(void *, int);
    auto set_policy = reinterpret_cast<SetPolicyFn>(dlsym(h, GG_UNW_PREFIX "set_caching_policy"));
    auto space = static_cast<void **>(dlsym(h, GG_UNW_PREFIX "local_addr_space"));
    if (set_policy && space && *space) set_policy(*space, kUnwCachePerThread);
    else log_debug("stacks: %s: caching policy not set (symbols not found)", path);
    log_debug("stacks: unwinding with libunwind from %s", path);
    return fn;
}

BacktraceFn load_libunwind() {
    // Beside ourselves first: the build ships libunwind.so.8 next to libgpuguard.so, since the GPU
    // machine and many container images have none installed.
    Dl_info self{};
    if (dladdr(reinterpret_cast<void *>(&open_libunwind), &self) && self.dli_fname) {
        std::string dir = self.dli_fname;
        size_t slash = dir.rfind('/');
        if (slash != std::string::npos) {
            // `make install` puts it in lib/gpuguard/, below the shim, where no other program finds it.
            for (const char *place : {"libunwind.so.8", "gpuguard/libunwind.so.8"}) {
                std::string path = dir.substr(0, slash + 1) + place;
                if (BacktraceFn fn = open_libunwind(path.c_str())) return fn;
            }
        }
    }
    return open_libunwind("libunwind.so.8");
}

using UnwindBacktraceFn = _Unwind_Reason_Code (*)(_Unwind_Trace_Fn, void *);
using UnwindGetIpFn = _Unwind_Ptr (*)(_Unwind_Context *);
// Atomics: two threads may load the unwinder at once (see active()) and store the same pointers.
std::atomic<UnwindBacktraceFn> g_gcc_backtrace{nullptr};
std::atomic<UnwindGetIpFn> g_gcc_get_ip{nullptr};

struct GccWalk {
    void **ips;
    int n, max;
};

// backtrace()'s stop predicate, for gcc_step (the backends share one signature, which has no room).
__attribute__((tls_model("initial-exec"))) thread_local StopFn t_stop = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local int t_tag_only = -1;  // backtrace()'s, for the walker
// Whether this thread's last backtrace() was the caching walker's (last_walk).
__attribute__((tls_model("initial-exec"))) thread_local bool t_by_walker = false;

_Unwind_Reason_Code gcc_step(_Unwind_Context *ctx, void *arg) {
    auto *w = static_cast<GccWalk *>(arg);
    if (w->n >= w->max) return _URC_END_OF_STACK;
    uintptr_t ip = g_gcc_get_ip.load(std::memory_order_relaxed)(ctx);
    if (ip == 0) return _URC_END_OF_STACK;
    w->ips[w->n++] = reinterpret_cast<void *>(ip);
    return t_stop && t_stop(ip) ? _URC_END_OF_STACK : _URC_NO_REASON;
}

int gcc_backtrace(void **ips, int max) {
    GccWalk w{ips, 0, max};
    g_gcc_backtrace.load(std::memory_order_relaxed)(gcc_step, &w);
    // The first frame is gcc_backtrace itself (the caller of _Unwind_Backtrace); shim/stacks/stacks.cpp trims
    // everything up to its own caller by return address, so it is left in.
    return w.n;
}

BacktraceFn load_libgcc() {
    if (&_Unwind_Backtrace != nullptr && &_Unwind_GetIP != nullptr) {
        g_gcc_backtrace = &_Unwind_Backtrace;
        g_gcc_get_ip = &_Unwind_GetIP;
    } else if (void *h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL)) {
        g_gcc_backtrace = reinterpret_cast<UnwindBacktraceFn>(dlsym(h, "_Unwind_Backtrace"));
        g_gcc_get_ip = reinterpret_cast<UnwindGetIpFn>(dlsym(h, "_Unwind_GetIP"));
    }
    if (!g_gcc_backtrace.load() || !g_gcc_get_ip.load()) {
        log_debug("stacks: libgcc's _Unwind_Backtrace not available");
        return nullptr;
    }
    log_debug("stacks: unwinding with libgcc's _Unwind_Backtrace");
    return gcc_backtrace;
}

// Under ThreadSanitizer, libunwind's thread-exit destructor (its per-thread trace cache) locks a
// mutex after TSan has already finished the thread, and the process crashes; libunwind is not
// instrumented anyway, so TSan builds do not load it unless told to: the caching walker falls back
// to libgcc, and libgcc comes before libunwind.
#if defined(__SANITIZE_THREAD__)
constexpr bool kPreferLibgcc = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kPreferLibgcc = true;
#else
constexpr bool kPreferLibgcc = false;
#endif
#else
constexpr bool kPreferLibgcc = false;
#endif

// The caching walker (shim/stacks/cfi_walker.h), and the general unwinder it hands the stacks it cannot walk.
std::atomic<BacktraceFn> g_cfi_fallback{nullptr};

GG_HOT int cfi_backtrace(void **ips, int max) {
    int n = cfi::walk(ips, max, t_stop, t_tag_only);
    if (n >= 0) return n;  // a fallback's walk below is no walk of the memo: its tag stays 0
    BacktraceFn fallback = g_cfi_fallback.load(std::memory_order_relaxed);
    return fallback ? fallback(ips, max) : 0;
}

const Backend *load(const char *which);

BacktraceFn load_cfi() {
    if (!cfi::available()) {
        log_debug("stacks: the caching walker is not available in this build");
        return nullptr;
    }
    const Backend *fallback = load(kPreferLibgcc ? "libgcc" : "libunwind");
    if (!fallback) fallback = load("libgcc");
    if (fallback) g_cfi_fallback.store(fallback->fn, std::memory_order_relaxed);
    log_debug("stacks: unwinding with the caching walker, falling back to %s", fallback ? fallback->name : "nothing");
    return cfi_backtrace;
}

// No lock is held while an unwinder loads: loading takes the loader's lock (dlopen), and a capture
// can run on a thread that holds it (an allocation in a library constructor, inside dlopen), which
// must never wait for a thread that waits for the loader. So racing first callers may each load
// (dlopen of a loaded library only returns it again) and the first result published is kept.
const Backend kNone{"none", nullptr};
std::atomic<const Backend *> g_cfi{nullptr}, g_libunwind{nullptr}, g_libgcc{nullptr};
std::atomic<bool> g_tried_cfi{false}, g_tried_libunwind{false}, g_tried_libgcc{false};  // a failed load is not repeated
std::atomic<const Backend *> g_active{nullptr};

const Backend *load_once(std::atomic<const Backend *> &slot, std::atomic<bool> &tried, const char *name,
                         BacktraceFn (*loader)()) {
    if (const Backend *b = slot.load(std::memory_order_acquire)) return b;
    if (tried.load(std::memory_order_acquire)) return nullptr;
    BacktraceFn fn = loader();
    tried.store(true, std::memory_order_release);
    if (!fn) return nullptr;
    const Backend *mine = new Backend{name, fn}, *first = nullptr;
    if (slot.compare_exchange_strong(first, mine, std::memory_order_acq_rel)) return mine;
    delete mine;
    return first;
}

const Backend *load(const char *which) {
    if (strcmp(which, "cfi") == 0) return load_once(g_cfi, g_tried_cfi, "cfi", load_cfi);
    if (strcmp(which, "libunwind") == 0) return load_once(g_libunwind, g_tried_libunwind, "libunwind", load_libunwind);
    if (strcmp(which, "libgcc") == 0) return load_once(g_libgcc, g_tried_libgcc, "libgcc", load_libgcc);
    if (strcmp(which, "none") == 0) return &kNone;
    return nullptr;
}

GG_HOT const Backend *active() {
    const Backend *b = g_active.load(std::memory_order_acquire);
    if (b) return b;
    // Read here, on first use, through the table of settings (not from the shim's Config: the tests
    // of the stacks module run it without the rest of the shim).
    std::string problem;
    std::string chosen = settings::read_unwinder(settings::process_env(), &problem);
    const char *want = chosen.empty() ? nullptr : chosen.c_str();
    if (want) b = load(want);
    if (!b) b = load("cfi");
    if (!b && kPreferLibgcc) b = load("libgcc");
    if (!b) b = load("libunwind");
    if (!b) b = load("libgcc");
    if (!b) b = &kNone;
    const Backend *first = nullptr;
    if (!g_active.compare_exchange_strong(first, b, std::memory_order_acq_rel)) return first;
    // Said once, by the caller whose choice stands.
    if (!problem.empty()) log_error("%s", problem.c_str());
    if (b == &kNone && !(want && strcmp(want, "none") == 0))
        log_error("no unwinder found (the caching walker, libunwind.so.8, libgcc): reports will have no native stacks");
    return b;
}

// Threads inside an unwinder, counted in stripes (one cache line each) so that threads unwinding at
// once do not share a counter; before_fork() sums them.
constexpr int kStripes = 16;
struct alignas(64) Stripe {
    std::atomic<int> inside{0};
};
Stripe g_stripes[kStripes];

std::atomic<bool> g_fork_pending{false};
bool g_busy_at_fork = false;                // written by the forking thread only (forks are serialised)
std::atomic<bool> g_off_after_fork{false};  // this process was forked mid-unwind: no native stacks

// By the thread's counter slot (shim/base/thread_counters.h): its number among the threads that capture.
GG_HOT Stripe &my_stripe() { return g_stripes[counter_slot() % kStripes]; }

int inside_total() {
    int n = 0;
    for (Stripe &s : g_stripes) n += s.inside.load(std::memory_order_seq_cst);
    return n;
}

}  // namespace

GG_HOT int backtrace(void **ips, int max, StopFn stop, int tag_only) {
    const Backend *b = active();
    t_by_walker = false;  // before any return: a tag of the walker's last walk is not this one's
    if (!b->fn || max <= 0) return 0;
    // Announce, then look (both seq_cst, as before_fork() sets the flag, then counts): either the
    // forking thread sees this thread inside, or this thread sees the fork coming and skips.
    Stripe &s = my_stripe();
    s.inside.fetch_add(1, std::memory_order_seq_cst);
    int n = 0;
    if (!g_fork_pending.load(std::memory_order_seq_cst) && !g_off_after_fork.load(std::memory_order_relaxed)) {
        t_stop = stop;
        t_tag_only = tag_only;
        n = b->fn(ips, max);
        t_stop = nullptr;
        t_tag_only = -1;
        t_by_walker = b->fn == cfi_backtrace;
    }
    s.inside.fetch_sub(1, std::memory_order_release);
    return n;
}

// Only a backtrace() the caching walker made has a tag: one skipped for a fork, or made by another
// unwinder, leaves the walker's last walk as it was, which is not this one.
GG_HOT cfi::LastWalk last_walk(uint16_t salt) { return t_by_walker ? cfi::last_walk(salt) : cfi::LastWalk(); }
void tag_last_walk(uint32_t value, uint16_t salt) {
    if (t_by_walker) cfi::tag_last_walk(value, salt);
}

void before_fork() {
    g_fork_pending.store(true, std::memory_order_seq_cst);
    // An unwind takes microseconds; half a second means one is stuck (on the loader's lock, say).
    timespec pause{0, 100000};
    for (int i = 0; i < 5000 && inside_total() > 0; i++) nanosleep(&pause, nullptr);
    g_busy_at_fork = inside_total() > 0;
}

void after_fork(bool child) {
    if (child) {
        for (Stripe &s : g_stripes) s.inside.store(0, std::memory_order_relaxed);  // those threads are gone
        if (g_busy_at_fork && !g_off_after_fork.exchange(true))
            log_error("forked while another thread was unwinding a stack: no native stacks in this process (pid %d)",
                      int(getpid()));
    }
    g_fork_pending.store(false, std::memory_order_seq_cst);
}

const char *name() { return active()->name; }

bool select(const char *which) {
    active();  // so that a later first call does not overwrite this choice
    const Backend *b = load(which);
    if (b) g_active.store(b, std::memory_order_release);
    return b != nullptr;
}

}  // namespace gg::stacks::unwind
