// The cap on cuDNN workspaces (GPUGUARD_CUDNN_WORKSPACE_LIMIT): a size, "off", or "auto" (the
// default), which is the quota left on the current device (limit - the container's usage) when a
// quota is set, and no cap otherwise. A plan or algorithm over the cap is turned down before any
// memory is asked for, so a framework that probes plans takes the next one instead of failing an
// allocation (and, under a quota, writing a report) for each.
#pragma once
#include <algorithm>
#include <cstdint>

#include "shim/api/cuda_api.h"

namespace gg::cudnn {

struct Cap {
    bool on = false;
    uint64_t bytes = 0;
};

// The cap for a decision made now, on the calling thread's current device.
Cap current_cap();

// Legacy Find/Get_v7 results: those over the cap get CUDNN_STATUS_NOT_SUPPORTED and move behind
// the ones that fit (order kept within each group), so a framework that takes the first usable
// result takes one that fits. Returns how many were marked; `largest` gets the largest of them.
template <typename Perf>
int cap_results(Perf *perf, int n, uint64_t cap, uint64_t *largest) {
    int marked = 0;
    *largest = 0;
    for (int i = 0; i < n; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory <= cap) continue;
        perf[i].status = CUDNN_STATUS_NOT_SUPPORTED;
        *largest = std::max<uint64_t>(*largest, perf[i].memory);
        marked++;
    }
    if (marked) std::stable_partition(perf, perf + n, [](const Perf &p) { return p.status == CUDNN_STATUS_SUCCESS; });
    return marked;
}

// The largest workspace among usable results: what the list asks for at most.
template <typename Perf>
uint64_t largest_usable(const Perf *perf, int n) {
    uint64_t m = 0;
    for (int i = 0; i < n; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS) m = std::max<uint64_t>(m, perf[i].memory);
    return m;
}

}  // namespace gg::cudnn
