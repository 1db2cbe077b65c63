// A library that tests/integration/pyframes_driver.py loads through ctypes, so that gg::py runs inside
// a real interpreter the way it does under the shim: on a thread whose Python frames are live but
// which has released the GIL (ctypes releases it around every foreign call, as PyTorch does around
// an allocation).
#include <execinfo.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "shim/python/frames.h"
#include "shim/stacks/eval_loop.h"

#define PROBE extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kMaxFrames = 128;

// One line per frame, innermost first: "file|function|line|entry".
int format(const gg::py::Frame *f, int n, char *buf, int cap) {
    int used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < cap; ++i)
        used += std::snprintf(buf + used, size_t(cap - used), "%s|%s|%d|%d\n", f[i].file, f[i].function, f[i].line,
                              int(f[i].entry));
    return n;
}

void *capture_here(void *count) {
    gg::py::Frame frames[kMaxFrames];
    *static_cast<int *>(count) = gg::py::capture(frames, kMaxFrames);
    return nullptr;
}

}  // namespace

PROBE int pyprobe_available() { return gg::py::available(); }
PROBE const char *pyprobe_version() { return gg::py::version(); }

// One capture, one line per frame; *ns is how long the capture itself took.
PROBE int pyprobe_capture_timed(char *buf, int cap, double *ns) {
    gg::py::Frame frames[kMaxFrames];
    auto t0 = std::chrono::steady_clock::now();
    int n = gg::py::capture(frames, kMaxFrames);
    *ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    return format(frames, n, buf, cap);
}

PROBE int pyprobe_capture(char *buf, int cap) {
    double ns;
    return pyprobe_capture_timed(buf, cap, &ns);
}

// Python -> C -> Python: the callback is a ctypes CFUNCTYPE, which takes the GIL and runs a new
// eval loop, whose first frame must come out as an entry frame.
PROBE int pyprobe_call(int (*callback)()) { return callback(); }

// The frames seen by a thread that never ran Python; -1 if the thread could not start.
PROBE int pyprobe_capture_on_native_thread() {
    pthread_t t;
    int count = -1;
    if (pthread_create(&t, nullptr, capture_here, &count)) return -1;
    pthread_join(t, nullptr);
    return count;
}

// What a capture with Python frames does first under the shim: learns the eval loop's code where its
// symbol does not cover it (shim/stacks/eval_loop.h).
PROBE void pyprobe_learn_eval_loop() { gg::stacks::learn_eval_loop(); }

// How many of this call's native frames lie in the eval loop (one per eval-loop run on the stack).
PROBE int pyprobe_count_eval_loops() {
    void *ips[256];
    int n = backtrace(ips, 256), loops = 0;
    for (int i = 0; i < n; ++i) loops += gg::py::is_eval_loop(reinterpret_cast<uintptr_t>(ips[i]));
    return loops;
}

// Median nanoseconds of one capture of the calling thread's stack, over `rounds` captures.
PROBE double pyprobe_bench(int rounds, int *frames_seen) {
    std::vector<double> ns(size_t(std::max(rounds, 1)));
    gg::py::Frame frames[kMaxFrames];
    for (double &v : ns) {
        auto t0 = std::chrono::steady_clock::now();
        *frames_seen = gg::py::capture(frames, kMaxFrames);
        v = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    }
    std::nth_element(ns.begin(), ns.begin() + long(ns.size() / 2), ns.end());
    return ns[ns.size() / 2];
}

// Median nanoseconds of one site key (gg::py::site_key) of the calling thread's stack, over `rounds`
// keys, each after reading `evict_kib` KiB of other memory (0: none), as PyTorch's and the driver's
// work pushes the frames out of the nearer caches between two allocations on the GPU. *key is the
// last key.
// max_frames < 0: the whole stack's key (site_key's own reading of such a count); otherwise the key of the
// innermost max_frames, as a capture takes it.
PROBE double pyprobe_site_key_bench(int rounds, int evict_kib, int max_frames, unsigned long long *key) {
    std::vector<double> ns(size_t(std::max(rounds, 1)));
    std::vector<char> other(size_t(std::max(evict_kib, 0)) * 1024 + 64);
    volatile char sink = 0;
    for (double &v : ns) {
        for (size_t i = 0; i + 64 <= other.size(); i += 64) sink = char(sink + other[i]++);
        auto t0 = std::chrono::steady_clock::now();
        uintptr_t beyond;
        *key = gg::py::site_key(1, max_frames, &beyond);
        v = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    }
    std::nth_element(ns.begin(), ns.begin() + long(ns.size() / 2), ns.end());
    return ns[ns.size() / 2];
}
