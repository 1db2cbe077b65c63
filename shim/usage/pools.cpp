#include "shim/usage/pools.h"

#include <atomic>
#include <mutex>

#include "shim/base/shared_lock.h"
#include "shim/core/state.h"
#include "shim/resolve/real.h"

namespace gg::usage::pools {
namespace {

// The pools this process allocated from on each device (few: the default pool, PyTorch's or CuPy's,
// a handful of the program's own). A pool beyond the table is not read: its reserve is not counted
// beyond its live allocations (a debug line says so).
constexpr int kMaxPools = 16;

std::mutex g_mu;  // the tables below; never held across a driver call
struct Device {
    CUmemoryPool pools[kMaxPools] = {};
    int count = 0;
    std::atomic<uint64_t> live{0};  // this process's async allocations on the device, in bytes
    // Shared: an async allocation or free between its first change of the ledger and its last, its
    // driver call in between. Exclusive: a reading of the pools and the settling of kPools (pools.h).
    SharedLock settle;
};
Device g_devices[kMaxOrdinals];

void remember(int ordinal, CUmemoryPool pool) {
    if (!pool) return;
    Device &d = g_devices[ordinal];
    std::lock_guard<std::mutex> lock(g_mu);
    for (int i = 0; i < d.count; i++)
        if (d.pools[i] == pool) return;
    if (d.count < kMaxPools) d.pools[d.count++] = pool;
}

int copy_pools(int ordinal, CUmemoryPool *out) {
    Device &d = g_devices[ordinal];
    std::lock_guard<std::mutex> lock(g_mu);
    for (int i = 0; i < d.count; i++) out[i] = d.pools[i];
    return d.count;
}

uint64_t sub_clamped(std::atomic<uint64_t> &c, uint64_t bytes) {
    uint64_t cur = c.load();
    while (!c.compare_exchange_weak(cur, cur > bytes ? cur - bytes : 0)) {}
    return cur;
}

}  // namespace

void enter(int ordinal) {
    if (ordinal >= 0 && ordinal < kMaxOrdinals) g_devices[ordinal].settle.lock_shared();
}

void leave(int ordinal) {
    if (ordinal >= 0 && ordinal < kMaxOrdinals) g_devices[ordinal].settle.unlock_shared();
}

uint64_t draw(const DeviceInfo &d, uint64_t bytes) {
    return state().ledger->kind_to_allocations(d.ledger_index, ledger::kPools, bytes);
}

void undraw(const DeviceInfo &d, uint64_t drawn) {
    if (drawn) state().ledger->allocations_to_kind(d.ledger_index, ledger::kPools, drawn);
}

void allocated(const DeviceInfo &d, CUmemoryPool pool, uint64_t bytes, bool served_from_reserve) {
    if (d.ordinal < 0 || d.ordinal >= kMaxOrdinals) return;
    g_devices[d.ordinal].live.fetch_add(bytes);
    if (served_from_reserve) return;  // the pool reused memory it held: it did not grow
    if (!pool && real_driver().cuDeviceGetMemPool) real_driver().cuDeviceGetMemPool(&pool, (CUdevice)d.ordinal);
    remember(d.ordinal, pool);
    observe(d);
}

void freed(int ordinal, int ledger_dev, uint64_t bytes) {
    if (ordinal < 0 || ordinal >= kMaxOrdinals) return;
    sub_clamped(g_devices[ordinal].live, bytes);
    // The pool keeps the memory: its bytes stay charged, as reserve, until the pool is read again.
    state().ledger->allocations_to_kind(ledger_dev, ledger::kPools, bytes);
}

void observe(const DeviceInfo &d) {
    if (d.ordinal < 0 || d.ordinal >= kMaxOrdinals || d.ledger_index < 0) return;
    CUmemoryPool pools[kMaxPools];
    int n = copy_pools(d.ordinal, pools);
    if (!n) return;
    auto get = real_driver().cuMemPoolGetAttribute;
    if (!get) return;
    // The reserve beyond what is allocated, both by the pools' own figures read together: the shim's
    // count of live async bytes lags the driver while other threads' calls are in flight, and
    // reading the one against the other counted those allocations twice for a moment.
    // No async allocation or free of this process on the device is between the driver and the ledger
    // while the pools are read and the kind is set: the ledger's live async bytes are then exactly
    // the pools' used bytes, and the reading settles the reserve beside them without counting an
    // in-flight free twice or dropping an in-flight allocation's chunk (pools.h).
    Device &dev = g_devices[d.ordinal];
    dev.settle.lock();
    uint64_t reserved = 0, used = 0;
    bool used_ok = true;
    for (int i = 0; i < n; i++) {
        cuuint64_t r = 0, u = 0;
        if (get(pools[i], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r) == CUDA_SUCCESS) reserved += r;
        if (get(pools[i], CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &u) == CUDA_SUCCESS) used += u;
        else used_ok = false;
    }
    if (!used_ok) used = g_devices[d.ordinal].live.load();
    state().ledger->set_kind(d.ledger_index, ledger::kPools, reserved > used ? reserved - used : 0);
    dev.settle.unlock();
}

void trim(const DeviceInfo &d) {
    if (d.ordinal < 0 || d.ordinal >= kMaxOrdinals) return;
    CUmemoryPool pools[kMaxPools];
    int n = copy_pools(d.ordinal, pools);
    auto trim_to = real_driver().cuMemPoolTrimTo;
    for (int i = 0; trim_to && i < n; i++) trim_to(pools[i], 0);
    observe(d);
}

void forget(CUmemoryPool pool) {
    std::lock_guard<std::mutex> lock(g_mu);
    for (Device &d : g_devices) {
        for (int i = 0; i < d.count; i++)
            if (d.pools[i] == pool) {
                d.pools[i] = d.pools[--d.count];
                break;
            }
    }
}

void trimmed(CUmemoryPool pool) {
    for (int o = 0; o < kMaxOrdinals; o++) {
        bool ours = false;
        {
            std::lock_guard<std::mutex> lock(g_mu);
            for (int i = 0; i < g_devices[o].count; i++) ours |= g_devices[o].pools[i] == pool;
        }
        if (ours)
            if (const DeviceInfo *d = device_info(o)) observe(*d);
    }
}

void lock_for_fork() { g_mu.lock(); }
void unlock_after_fork() { g_mu.unlock(); }
void reset_after_fork() {
    for (Device &d : g_devices) {
        d.count = 0;
        d.live.store(0);
        d.settle.reset();  // held by threads of the parent's that the child does not have
    }
}

}  // namespace gg::usage::pools
