// The histograms behind shim/base/profile.h, compiled only into the profiling build (make PROFILE=1).
#ifdef GG_PROFILE
#include "shim/base/profile.h"

#include <atomic>
#include <cstdio>

#include "shim/base/clock.h"

namespace gg::profile {
namespace {

constexpr const char *kNames[kSteps] = {
    "alloc: whole hook",
    "  admit",
    "    current device (cuCtxGetDevice)",
    "    device info",
    "    ledger charge",
    "    ledger reclaim",
    "  driver's cuMemAlloc",
    "  commit (track)",
    "    stack: native unwind",
    "    stack: native site key",
    "    stack: Python site key",
    "    stack: Python frames",
    "      stack: the eval loop looked for",
    "    stack: intern",
    "    stack: check by native frames",
    "    stack: site cache lookup",
    "    stack: whole Python key",
    "      walk memo: recall",
    "        memo: the set",
    "        memo: compare words",
    "        memo: copy return addresses",
    "free: whole hook",
    "  take (untrack)",
    "  driver's cuMemFree",
    "  finish (ledger release)",
    "c10 block: the tensor view's share",
    "  block: stack (capture)",
    "  block: pending log (append)",
    "  block: apply a batch (table, totals, ring)",
};

// Log-linear buckets: exact below 16 ns, then 8 to each doubling (a value is placed within 6.25%):
// 300 buckets reach past 200 s. Small on purpose: the timers run right after the driver's call has
// evicted the caches, and each add() touches its histogram; 40 KB of linear buckets a step made every
// timer a likely miss (109 ns each on the H200, BENCHMARKS.md), now the table is 18 KB in all.
constexpr int kSubBits = 3;
constexpr int kBuckets = 300;

int bucket_of(uint64_t ns) {
    if (ns < 16) return int(ns);
    int octave = 63 - __builtin_clzll(ns);  // >= 4
    int b = 16 + (octave - 4) * (1 << kSubBits) + int((ns >> (octave - kSubBits)) & ((1 << kSubBits) - 1));
    return b < kBuckets ? b : kBuckets - 1;
}

// The middle of the values bucket b holds.
uint64_t value_of(int b) {
    if (b < 16) return uint64_t(b);
    int octave = 4 + (b - 16) / (1 << kSubBits), sub = (b - 16) % (1 << kSubBits);
    uint64_t low = (uint64_t(1) << octave) + (uint64_t(sub) << (octave - kSubBits));
    return low + (uint64_t(1) << (octave - kSubBits)) / 2;
}

struct Histogram {
    std::atomic<uint64_t> count{0}, sum{0};
    std::atomic<uint32_t> buckets[kBuckets];
};
Histogram g_hist[kSteps];

uint64_t percentile(const Histogram &h, uint64_t n, int pct) {
    uint64_t want = (n * pct + 99) / 100, seen = 0;
    for (int b = 0; b < kBuckets; b++) {
        seen += h.buckets[b].load(std::memory_order_relaxed);
        if (seen >= want && want) return value_of(b);
    }
    return 0;
}

__attribute__((destructor)) void print_profile() {
    bool any = false;
    for (const Histogram &h : g_hist) any |= h.count.load() != 0;
    if (!any) return;  // a process that ran no hook (a shell the program ran through)
    fprintf(stderr, "gpuguard: profile (ns)           %10s %10s %10s %10s\n", "count", "mean", "median", "p90");
    for (int s = 0; s < kSteps; s++) {
        const Histogram &h = g_hist[s];
        uint64_t n = h.count.load();
        if (!n) continue;
        fprintf(stderr, "gpuguard: %-34s %10llu %10llu %10llu %10llu\n", kNames[s], (unsigned long long)n,
                (unsigned long long)(h.sum.load() / n), (unsigned long long)percentile(h, n, 50),
                (unsigned long long)percentile(h, n, 90));
    }
}

}  // namespace

uint64_t now() { return steady_ns(); }

void add(Step step, uint64_t ns) {
    Histogram &h = g_hist[step];
    h.count.fetch_add(1, std::memory_order_relaxed);
    h.sum.fetch_add(ns, std::memory_order_relaxed);
    h.buckets[bucket_of(ns)].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace gg::profile
#endif
