// The ledger's counters: what every allocation and free does to the shared file (common/ledger/ledger.h
// says why it is shaped so: no lock, one counter per process slot and device).
#include "common/ledger/ledger.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "common/base/atomic_max.h"
#include "common/base/hot.h"
#include "common/base/log.h"
#include "common/ledger/internal.h"

namespace gg::ledger {

using namespace internal;

namespace {

// getpid() is a system call (about 115 ns on the CPU machine) and the ledger needs the pid twice per
// allocation to notice a fork: it is cached, and forgotten in every child. fork() runs the atfork
// handler below, but a child made by clone() without CLONE_VM runs no fork handler at all; it would
// keep its parent's pid and charge its parent's slot. So the cache lives in a page the kernel zeroes
// in every such child (MADV_WIPEONFORK, Linux 4.14); on an older kernel the atfork handler still
// covers fork().
std::atomic<int> g_pid_fallback{0};
std::atomic<std::atomic<int> *> g_pid_cell{nullptr};
void forget_pid() {
    if (std::atomic<int> *cell = g_pid_cell.load(std::memory_order_relaxed)) cell->store(0, std::memory_order_relaxed);
}
std::atomic<int> *make_pid_cell() {
    long page = sysconf(_SC_PAGESIZE);
    void *p = mmap(nullptr, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED && madvise(p, (size_t)page, MADV_WIPEONFORK) == 0) return new (p) std::atomic<int>(0);
    if (p != MAP_FAILED) munmap(p, (size_t)page);
    return &g_pid_fallback;
}
}  // namespace

GG_HOT int internal::self_pid() {
    std::atomic<int> *cell = g_pid_cell.load(std::memory_order_acquire);
    if (cell) {
        int p = cell->load(std::memory_order_relaxed);
        if (p) return p;
    } else {
        // Made without a C++ static guard: a fork() while another thread held the guard would leave
        // the child waiting on it forever. Racing first callers each make a cell; one is kept.
        std::atomic<int> *mine = make_pid_cell(), *first = nullptr;
        if (g_pid_cell.compare_exchange_strong(first, mine, std::memory_order_acq_rel)) {
            pthread_atfork(nullptr, nullptr, forget_pid);
            cell = mine;
        } else {
            if (mine != &g_pid_fallback) munmap(static_cast<void *>(mine), (size_t)sysconf(_SC_PAGESIZE));
            cell = first;
        }
    }
    int p = getpid();
    cell->store(p, std::memory_order_relaxed);
    return p;
}

int Ledger::device_index(const uint8_t uuid[16], uint64_t limit_if_new, uint64_t physical_total, const char *name) {
    int waits = 0;  // shared by all entries: see below
    for (int i = 0; i < kMaxDevices; i++) {
        DeviceEntry &d = header_->devices[i];
        for (;;) {
            uint32_t s = d.state.load();
            if (s == kDeviceReady) {
                if (memcmp(d.uuid, uuid, 16) == 0) {
                    remember();
                    return i;
                }
                break;
            }
            if (s == kDeviceFree) {
                // Entries are claimed in order, so a free one ends the table; a reader registers
                // nothing (retrying here spun forever on a read-only ledger: found by fuzz_ledger).
                if (read_only_) return -1;
                uint32_t expected = kDeviceFree;
                if (!d.state.compare_exchange_strong(expected, kDeviceClaiming)) continue;  // re-read it
                memcpy(d.uuid, uuid, 16);
                d.limit.store(limit_if_new);
                d.physical_total.store(physical_total);
                snprintf(d.name, sizeof d.name, "%s", name ? name : "");
                d.state.store(kDeviceReady);
                remember();
                return i;
            }
            // Another process is registering this entry: it takes microseconds. A claimer killed in
            // that window leaves the entry unusable, so it is waited on for a second at most, and
            // that second is the whole call's: a file whose every entry reads "claiming" (or a value
            // no gpuguard writes, skipped at once) must not stall an allocation for 32 seconds.
            if (s != kDeviceClaiming || waits >= 1000) break;
            waits++;
            usleep(1000);
        }
    }
    return -1;
}

GG_HOT bool Ledger::join() {
    int pid = self_pid();
    if (slot_.load(std::memory_order_acquire) && slot_pid_.load(std::memory_order_relaxed) == pid) return true;
    if (read_only_) return false;
    // The first allocations of a process may race on several threads: one claims the slot.
    std::lock_guard<std::mutex> lock(join_mu_);
    if (slot_.load() && slot_pid_.load() == pid) return true;
    slot_ = nullptr;
    uint64_t ticks = process_start_ticks(pid);
    // A live slot with this pid and start time is this very process before an exec(): exec keeps
    // both, so no other process can ever tell it from a live one, yet the driver freed its memory
    // with the old image. Its bytes go now.
    for (uint32_t i = 0; ticks > 1 && i < header_->slot_high.load() && i < (uint32_t)kMaxSlots; i++) {
        Slot &s = header_->slots[i];
        uint32_t expected = kSlotLive;
        if (s.pid.load() != pid || s.start_ticks.load() != ticks ||
            !s.state.compare_exchange_strong(expected, kSlotReclaiming))
            continue;
        for (auto &b : s.bytes) b.exchange(0);
        clear_kinds(header_, s);
        s.state.store(kSlotReclaimed);
        header_->reclaimed_processes.fetch_add(1);
    }
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < kMaxSlots; i++) {
            Slot &s = header_->slots[i];
            uint32_t st = s.state.load();
            if (st != kSlotFree && st != kSlotReclaimed) continue;
            if (!s.state.compare_exchange_strong(st, kSlotClaiming)) continue;
            s.pid.store(pid);
            s.start_ticks.store(ticks);
            read_command(s.command, sizeof s.command);
            for (int d = 0; d < kMaxDevices; d++) {
                s.bytes[d].store(0);
                s.peak[d].store(0);
            }
            clear_kinds(header_, s);
            s.state.store(kSlotLive);
            uint32_t high = header_->slot_high.load();
            while (high < (uint32_t)i + 1 && !header_->slot_high.compare_exchange_weak(high, (uint32_t)i + 1)) {}
            slot_pid_.store(pid);
            slot_.store(&s, std::memory_order_release);
            return true;
        }
        if (reclaim_dead(false) == 0) break;
    }
    return false;
}

void Ledger::on_fork_child() {
    // The fork may have happened while another thread held join_mu_: a fresh mutex for the child.
    new (&join_mu_) std::mutex();
    slot_.store(nullptr);
    slot_pid_.store(0);
}

GG_HOT uint64_t Ledger::sum(int dev) const {
    uint64_t total = 0;
    uint32_t high = header_->slot_high.load();
    for (uint32_t i = 0; i < high && i < (uint32_t)kMaxSlots; i++) total += header_->slots[i].bytes[dev].load();
    return total;
}

GG_HOT bool Ledger::try_charge(int dev, uint64_t bytes, uint64_t *container_used) {
    if (!join()) return false;
    Slot *slot_ = this->slot_.load(std::memory_order_relaxed);
    uint64_t limit = header_->devices[dev].limit.load();
    for (int attempt = 0; attempt < 4; attempt++) {
        uint64_t mine = slot_->bytes[dev].fetch_add(bytes) + bytes;
        uint64_t total = sum(dev);
        if (total <= limit) {
            raise_to(slot_->peak[dev], mine);
            raise_to(header_->devices[dev].peak, total);
            if (container_used) *container_used = total;
            return true;
        }
        slot_->bytes[dev].fetch_sub(bytes);
        // Two admissions racing near the limit can both see the other's bytes and both back out;
        // try again while the bytes would fit without this request.
        uint64_t without = sum(dev);
        if (container_used) *container_used = without;
        if (without > limit || limit - without < bytes) return false;
    }
    return false;
}

GG_HOT void Ledger::charge(int dev, uint64_t bytes) {
    if (!join()) return;
    Slot *slot_ = this->slot_.load(std::memory_order_relaxed);
    uint64_t mine = slot_->bytes[dev].fetch_add(bytes) + bytes;
    raise_to(slot_->peak[dev], mine);
    raise_to(header_->devices[dev].peak, sum(dev));
}

GG_HOT uint64_t Ledger::release(int dev, uint64_t bytes) {
    Slot *slot = slot_.load(std::memory_order_acquire);
    if (!slot || slot_pid_.load(std::memory_order_relaxed) != self_pid()) return 0;
    std::atomic<uint64_t> &b = slot->bytes[dev];
    uint64_t cur = b.load();
    uint64_t take;
    do {
        take = cur < bytes ? cur : bytes;
    } while (!b.compare_exchange_weak(cur, cur - take));
    if (take < bytes)
        log_debug("released %llu bytes on device %d but the process held %llu", (unsigned long long)bytes, dev,
                  (unsigned long long)take);
    return take;
}

uint64_t Ledger::container_used(int dev) const { return sum(dev); }
uint64_t Ledger::own_bytes(int dev) const {
    Slot *slot = slot_.load();
    return slot ? slot->bytes[dev].load() : 0;
}
uint64_t Ledger::own_peak(int dev) const {
    Slot *slot = slot_.load();
    return slot ? slot->peak[dev].load() : 0;
}

GG_HOT int Ledger::reclaim_dead(bool periodic) {
    if (read_only_ || path_.empty()) return 0;
    if (periodic) {
        uint64_t now = now_ns(CLOCK_MONOTONIC_COARSE);
        uint64_t last = header_->last_reclaim_ns.load(std::memory_order_relaxed);
        if (now - last < 500000000ull) return 0;
        if (!header_->last_reclaim_ns.compare_exchange_strong(last, now)) return 0;
    }
    int reclaimed = 0;
    int self = getpid();
    uint32_t high = header_->slot_high.load();
    for (uint32_t i = 0; i < high && i < (uint32_t)kMaxSlots; i++) {
        Slot &s = header_->slots[i];
        if (!slot_is_live(s)) continue;
        int pid = s.pid.load();
        if (pid == self || process_alive(pid, s.start_ticks.load())) continue;
        uint32_t expected = kSlotLive;
        if (!s.state.compare_exchange_strong(expected, kSlotReclaiming)) continue;  // another process won
        uint64_t freed = 0;
        for (auto &b : s.bytes) freed += b.exchange(0);
        clear_kinds(header_, s);
        s.state.store(kSlotReclaimed);
        header_->reclaimed_processes.fetch_add(1);
        reclaimed++;
        if (freed)
            log_debug("reclaimed %llu bytes of dead process %d from ledger %s", (unsigned long long)freed, pid,
                      path_.c_str());
    }
    return reclaimed;
}

}  // namespace gg::ledger
