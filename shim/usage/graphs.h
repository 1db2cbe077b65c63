// CUDA graphs' memory (graph memory nodes: cuGraphAddMemAllocNode, or cuMemAllocAsync on a stream
// being captured, which is how PyTorch's cudaMallocAsync backend makes them). The device's graph
// pool maps a graph's allocations when the graph is uploaded or launched, keeps them between launches
// and after the graph is destroyed, until cuDeviceGraphMemTrim. The ledger's kind kGraphs is the
// pool's own figure, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, read after every instantiation, upload,
// first launch, destruction and trim.
//
// Admission: a graph's footprint is the sum of its memory nodes, read when it is instantiated. Its
// first upload or launch (and the first after a trim) needs what of that footprint the graph pool
// cannot serve from what it holds free (RESERVED - USED); that is charged before the call, or, when
// it does not fit even after trimming, the launch is refused with CUDA_ERROR_OUT_OF_MEMORY and a
// report. Later launches of a mapped graph take nothing new and pass at the cost of a table lookup.
//
// A first upload or launch holds the device's readings of the graph pool (a lock) from its own
// reading before the call to the one after: two first launches at once each counted on the same free
// memory of the pool, and a reading between another's charge and its mapping set kGraphs below what
// the pool then held (both seen as the truth over the limit in the soak). Only first launches take
// it, and readings, which are rare.
//
// Every upload or launch of a graph with memory nodes holds trims of the graph pool off (a second
// lock, shared; a trim takes it exclusively) from its check of the graph's mapping to the end of its
// driver call: a trim between the two unmapped the graph, and the launch, taken for one of a mapped
// graph, mapped its memory uncharged until the pool was read again (the soak: 46 MiB over the limit
// for a moment). A launch of a mapped graph costs two table lookups and that lock's two atomic
// instructions; trims are rare.
//
// Allocations made while their stream is captured take no memory then (they become the graph's
// nodes): the async hooks let them pass uncharged and untracked (capturing()).
#pragma once
#include <cstdint>

#include "shim/api/api.h"
#include "shim/api/cuda_api.h"
#include "shim/api/refusal.h"
#include "shim/device/device.h"

namespace gg::usage::graphs {

struct Ticket {
    const DeviceInfo *dev = nullptr;
    CUgraphExec exec = nullptr;
    uint64_t charged = 0;
    int launching = -1;  // the ordinal whose trims it holds off until done()
    Refusal refused{};   // when admitted no room: what the hook reports (shim/quota/episode.h)
};

// After a successful instantiation; `uploaded`: CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD mapped it already.
void instantiated(CUgraphExec exec, CUgraph graph, bool uploaded);
// The footprint of a graph not yet instantiated (for an instantiation that uploads).
uint64_t footprint(CUgraph graph, int *ordinal);

// Before an upload or launch. CUDA_ERROR_OUT_OF_MEMORY: refused, as t->refused says (the hook reports it). Admitted, it
// may hold the pool's readings and its trims until done(), which must follow.
CUresult admit(Api api, CUgraphExec exec, Ticket *t);
// The same for an instantiation that uploads, from its graph's footprint.
CUresult admit_footprint(Api api, int ordinal, uint64_t footprint, Ticket *t);
void done(Ticket &t, CUresult result);

void destroyed(CUgraphExec exec, CUresult result);
// cuDeviceGraphMemTrim, ours or the program's: the real call, with uploads and launches held off.
CUresult trim_pool(CUdevice dev);

void observe(const DeviceInfo &d);
void trim(const DeviceInfo &d);  // before a refusal

// Stream capture: whether an async allocation on `stream` is being captured into a graph.
void capture_began(CUresult result);
void capture_ended();
bool capturing(CUstream stream, bool per_thread);

void lock_for_fork();
void unlock_after_fork();
void reset_after_fork();

}  // namespace gg::usage::graphs
