#include "shim/usage/graphs.h"

#include <atomic>
#include <mutex>
#include <new>
#include <vector>

#include "common/base/log.h"
#include "shim/base/futex_lock.h"
#include "shim/base/race_once.h"
#include "shim/base/shared_lock.h"
#include "shim/core/state.h"
#include "shim/resolve/real.h"
#include "shim/usage/chunk.h"
#include "shim/usage/usage.h"

namespace gg::usage::graphs {
namespace {

// Executable graphs with memory nodes (the only ones a launch can take memory for), and whether the
// graph pool has mapped them since their instantiation or the last trim.
struct Exec {
    CUgraphExec exec;
    int ordinal;
    uint64_t footprint;
    bool mapped;
};
std::mutex g_mu;  // the table; never held across a driver call
std::atomic<std::vector<Exec> *> g_execs{nullptr};
std::vector<Exec> &execs() { return never_destroyed(g_execs); }
std::atomic<int> g_count{0};      // entries in the table: a launch of a graph without memory reads only this
std::atomic<bool> g_ever{false};  // this process had graph memory: the graph pool is worth reading
std::atomic<int> g_capturing{0};  // captures under way in this process

// Per ordinal: held by a first upload or launch from its reading of the graph pool to the reading
// after its driver call, and by every other reading of the pool and setting of kGraphs (graphs.h).
FutexLock g_settle[kMaxOrdinals];
// Per ordinal: held shared by an upload or launch of a graph with memory nodes from its check of the
// graph's mapping to the end of its driver call, and exclusively by a trim of the graph pool from
// its driver call until the graphs it unmapped are marked so (graphs.h). Taken before g_settle. One
// per device, not one for all: a launch may block in its driver call (a full launch queue) until
// another device's work runs, and a trim waiting on it would then stop that device's launches too.
SharedLock g_launching[kMaxOrdinals];
// The ordinal whose g_launching this thread holds shared, or -1: not taken twice (a writer waiting
// between would block the second), nor exclusively by the same thread.
__attribute__((tls_model("initial-exec"))) thread_local int t_launching = -1;

void enter_launch(int ordinal, Ticket *t) {
    if (t_launching >= 0) return;
    g_launching[ordinal].lock_shared();
    t_launching = t->launching = ordinal;
}
void leave_launch(Ticket *t) {
    if (t->launching < 0) return;
    g_launching[t->launching].unlock_shared();
    t_launching = t->launching = -1;
}

void settle_locked(const DeviceInfo &d) {
    auto get = real_driver().cuDeviceGetGraphMemAttribute;
    cuuint64_t reserved = 0;
    if (!get || get((CUdevice)d.ordinal, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS) return;
    state().ledger->set_kind(d.ledger_index, ledger::kGraphs, reserved);
}

// What of `footprint` the graph pool cannot serve from the memory it holds free.
uint64_t needed(int ordinal, uint64_t footprint) {
    auto get = real_driver().cuDeviceGetGraphMemAttribute;
    cuuint64_t reserved = 0, used = 0;
    if (!get || get((CUdevice)ordinal, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS ||
        get((CUdevice)ordinal, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS)
        return footprint;
    uint64_t free_in_pool = reserved > used ? reserved - used : 0;
    return footprint > free_in_pool ? footprint - free_in_pool : 0;
}

void set_mapped(CUgraphExec exec, bool mapped) {
    std::lock_guard<std::mutex> lock(g_mu);
    for (Exec &e : execs())
        if (e.exec == exec) e.mapped = mapped;
}

}  // namespace

uint64_t footprint(CUgraph graph, int *ordinal) {
    const RealDriver &r = real_driver();
    *ordinal = -1;
    size_t n = 0;
    if (!graph || !r.cuGraphGetNodes || !r.cuGraphNodeGetType || !r.cuGraphMemAllocNodeGetParams ||
        r.cuGraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS || n == 0)
        return 0;
    std::vector<CUgraphNode> nodes(n);
    if (r.cuGraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n && i < nodes.size(); i++) {
        CUgraphNodeType type;
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        if (r.cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
            r.cuGraphMemAllocNodeGetParams(nodes[i], &p) != CUDA_SUCCESS)
            continue;
        // A graph allocating on several devices is charged to its first (rare: one device per graph).
        if (*ordinal < 0) *ordinal = p.poolProps.location.id;
        // Mapped in chunks: charged so, not by the node's own size (the pool's figure settles it after).
        if (p.poolProps.location.id == *ordinal) bytes += p.bytesize + chunk_rest(p.bytesize);
    }
    return bytes;
}

void instantiated(CUgraphExec exec, CUgraph graph, bool uploaded) {
    if (!on() || !exec) return;
    int ordinal;
    uint64_t bytes = footprint(graph, &ordinal);
    if (!bytes || ordinal < 0 || ordinal >= kMaxOrdinals) return;
    g_ever.store(true);
    {
        std::lock_guard<std::mutex> lock(g_mu);
        execs().push_back(Exec{exec, ordinal, bytes, uploaded});
        g_count.store((int)execs().size());
    }
    // One that uploaded was admitted, and holds the pool's readings until done() reads it.
    if (!uploaded)
        if (const DeviceInfo *d = device_info(ordinal)) observe(*d);
}

CUresult admit_footprint(Api api, int ordinal, uint64_t bytes, Ticket *t) {
    const DeviceInfo *d = device_info(ordinal);
    if (!d || d->ledger_index < 0) return CUDA_SUCCESS;
    g_ever.store(true);
    t->dev = d;
    enter_launch(d->ordinal, t);
    g_settle[d->ordinal].lock();
    uint64_t need = needed(ordinal, bytes);
    if (!need) return CUDA_SUCCESS;
    ledger::Ledger &l = *state().ledger;
    uint64_t used = 0;
    if (l.try_charge_kind(d->ledger_index, ledger::kGraphs, need, &used) ||
        (l.reclaim_dead(false) > 0 && l.try_charge_kind(d->ledger_index, ledger::kGraphs, need, &used))) {
        t->charged = need;
        return CUDA_SUCCESS;
    }
    // Trimming maps nothing of this graph (it is not mapped yet) and frees the pool's idle memory. It
    // reads the pool and trims it, which this thread lets others do meanwhile.
    g_settle[d->ordinal].unlock();
    leave_launch(t);
    bool room = make_room(*d);
    enter_launch(d->ordinal, t);
    g_settle[d->ordinal].lock();
    if (room) {
        need = needed(ordinal, bytes);
        if (!need || l.try_charge_kind(d->ledger_index, ledger::kGraphs, need, &used)) {
            t->charged = need;
            return CUDA_SUCCESS;
        }
    }
    g_settle[d->ordinal].unlock();
    leave_launch(t);
    t->refused = {api, api, need, ordinal, CUDA_ERROR_OUT_OF_MEMORY, RefusalCause::kQuota, used, d->limit};
    t->dev = nullptr;
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult admit(Api api, CUgraphExec exec, Ticket *t) {
    if (g_count.load(std::memory_order_relaxed) == 0) return CUDA_SUCCESS;  // no graph with memory nodes
    auto find = [exec] {
        Exec found{nullptr, -1, 0, true};
        std::lock_guard<std::mutex> lock(g_mu);
        for (const Exec &e : execs())
            if (e.exec == exec) found = e;
        return found;
    };
    Exec found = find();
    if (!found.exec || found.ordinal < 0 || found.ordinal >= kMaxOrdinals) return CUDA_SUCCESS;
    // Whether it is mapped is read again with trims held off: one between this reading and the
    // driver call would unmap it, and the launch map it uncharged.
    enter_launch(found.ordinal, t);
    found = find();
    if (!found.exec || found.mapped) return CUDA_SUCCESS;  // done() lets trims go on
    t->exec = exec;
    return admit_footprint(api, found.ordinal, found.footprint, t);
}

void done(Ticket &t, CUresult result) {
    if (t.dev) {
        if (result == CUDA_SUCCESS && t.exec) set_mapped(t.exec, true);
        // The pool's own figure replaces what was admitted (which it includes when the call succeeded).
        if (result != CUDA_SUCCESS && t.charged)
            state().ledger->release_kind(t.dev->ledger_index, ledger::kGraphs, t.charged);
        settle_locked(*t.dev);
        g_settle[t.dev->ordinal].unlock();
    }
    leave_launch(&t);
}

void destroyed(CUgraphExec exec, CUresult result) {
    if (result != CUDA_SUCCESS || g_count.load() == 0) return;
    int ordinal = -1;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        std::vector<Exec> &v = execs();
        for (size_t i = 0; i < v.size(); i++)
            if (v[i].exec == exec) {
                ordinal = v[i].ordinal;
                v.erase(v.begin() + (long)i);
                break;
            }
        g_count.store((int)v.size());
    }
    if (ordinal >= 0)
        if (const DeviceInfo *d = device_info(ordinal)) observe(*d);
}

CUresult trim_pool(CUdevice dev) {
    auto real = real_driver().cuDeviceGraphMemTrim;
    if (!real) return CUDA_ERROR_NOT_FOUND;
    int ordinal = (int)dev;
    // Not from a thread in an upload or launch (it holds the lock shared), nor when nothing is counted.
    bool hold = on() && ordinal >= 0 && ordinal < kMaxOrdinals && t_launching < 0;
    if (hold) g_launching[ordinal].lock();
    CUresult r = real(dev);
    bool unmapped = r == CUDA_SUCCESS && g_ever.load();
    if (unmapped) {
        // Graphs not running lose their memory: their next launch maps it again.
        std::lock_guard<std::mutex> lock(g_mu);
        for (Exec &e : execs())
            if (e.ordinal == ordinal) e.mapped = false;
    }
    if (hold) g_launching[ordinal].unlock();
    if (unmapped)
        if (const DeviceInfo *d = device_info(ordinal)) observe(*d);
    return r;
}

void observe(const DeviceInfo &d) {
    if (!g_ever.load(std::memory_order_relaxed) || d.ledger_index < 0 || d.ordinal < 0 || d.ordinal >= kMaxOrdinals)
        return;
    std::lock_guard<FutexLock> lock(g_settle[d.ordinal]);
    settle_locked(d);
}

void trim(const DeviceInfo &d) {
    if (g_ever.load()) (void)trim_pool((CUdevice)d.ordinal);
}

void capture_began(CUresult result) {
    if (result == CUDA_SUCCESS) g_capturing.fetch_add(1);
}

void capture_ended() {
    int n = g_capturing.load();
    while (n > 0 && !g_capturing.compare_exchange_weak(n, n - 1)) {}
}

bool capturing(CUstream stream, bool per_thread) {
    if (g_capturing.load(std::memory_order_relaxed) == 0) return false;
    const RealDriver &r = real_driver();
    auto is = per_thread ? r.cuStreamIsCapturing_ptsz : r.cuStreamIsCapturing;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return is && is(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void lock_for_fork() { g_mu.lock(); }
void unlock_after_fork() { g_mu.unlock(); }
void reset_after_fork() {
    execs().clear();
    for (FutexLock &l : g_settle) {
        l.~FutexLock();  // held by a thread of the parent's that the child does not have
        new (&l) FutexLock();
    }
    for (SharedLock &l : g_launching) l.reset();
    t_launching = -1;  // the forking thread's, in an upload's or launch's fork handler (none known)
    g_count.store(0);
    g_ever.store(false);
    g_capturing.store(0);
}

}  // namespace gg::usage::graphs
