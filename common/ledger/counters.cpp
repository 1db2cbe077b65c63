// The ledger's counters: what every allocation and free does to the shared file (common/ledger/ledger.h
// says why it is shaped so: no lock, one counter per process slot and device).
#include "common/ledger/ledger.h"

#include <fcntl.h>
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
#include "common/base/saturating.h"
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

int Ledger::device_index(const uint8_t uuid[16], uint64_t limit_if_new, uint64_t physical_total, const char *name,
                         uint64_t *limit_in_force) {
    auto found = [&](int i) {
        remember();
        if (limit_in_force) *limit_in_force = header_->devices[i].limit.load();
        return i;
    };
    // Registered entries are read without a lock; entries are registered in order, so a free one
    // ends the table for a reader (retrying here spun forever on a read-only ledger: fuzz_ledger).
    for (int i = 0; i < kMaxDevices; i++) {
        DeviceEntry &d = header_->devices[i];
        uint32_t s = d.state.load();
        if (s == kDeviceReady && memcmp(d.uuid, uuid, 16) == 0) return found(i);
        if (s == kDeviceFree && read_only_) return -1;
    }
    if (read_only_) return -1;
    std::lock_guard<std::mutex> lock(device_mu_);
    int waits = 0;  // shared by all entries: see below
    for (int i = 0; i < kMaxDevices; i++) {
        DeviceEntry &d = header_->devices[i];
        for (;;) {
            uint32_t s = d.state.load();
            if (s == kDeviceReady) {
                if (memcmp(d.uuid, uuid, 16) == 0) return found(i);
                break;
            }
            if (s != kDeviceFree && s != kDeviceClaiming) break;  // a value no gpuguard writes: skipped
            // Free, being registered by another process, or left half-registered by one that died:
            // whoever holds the entry's lock is registering it, and a dead one holds nothing.
            if (fd_ < 0 || try_lock(fd_, device_range(i))) {
                s = d.state.load();
                if (s == kDeviceFree || s == kDeviceClaiming) {
                    d.state.store(kDeviceClaiming);
                    memcpy(d.uuid, uuid, 16);
                    d.limit.store(limit_if_new);
                    d.physical_total.store(physical_total);
                    snprintf(d.name, sizeof d.name, "%s", name ? name : "");
                    d.state.store(kDeviceReady);
                }
                if (fd_ >= 0) unlock(fd_, device_range(i));
                if (s == kDeviceFree || s == kDeviceClaiming) return found(i);
                continue;  // registered meanwhile: read it again
            }
            // A live process is registering it: microseconds. A second at most for the whole call,
            // so that a file whose entries all read "claiming" cannot stall an allocation for long.
            if (waits >= 1000) break;
            waits++;
            usleep(1000);
        }
    }
    return -1;
}

void (*Ledger::claim_step_for_test)(int step) = nullptr;

bool Ledger::joined() const { return slot_.load() && slot_pid_.load() == self_pid(); }
bool Ledger::slots_all_held() const { return !joined() && full_pid_.load() == self_pid(); }

GG_HOT bool Ledger::join() {
    int pid = self_pid();
    if (slot_.load(std::memory_order_acquire) && slot_pid_.load(std::memory_order_relaxed) == pid) return true;
    if (read_only_) return false;
    // The first allocations of a process may race on several threads: one claims the slot.
    std::lock_guard<std::mutex> lock(join_mu_);
    if (slot_.load() && slot_pid_.load() == pid) return true;
    slot_ = nullptr;
    full_pid_.store(0);
    if (!own_descriptor()) return false;
    auto step = [](int k) {
        if (claim_step_for_test) claim_step_for_test(k);
    };
    // Slots that say they are free first (most likely nobody's), then any other whose lock is free:
    // its owner died (or exec'd) in whatever state it was, and what it held goes with the slot.
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < kMaxSlots; i++) {
            Slot &s = header_->slots[i];
            uint32_t st = s.state.load();
            bool says_free = st == kSlotFree || st == kSlotReclaimed;
            if (says_free != (pass == 0)) continue;
            if (fd_ >= 0 && !try_lock(fd_, slot_range(i))) continue;  // its owner is alive
            step(1);
            s.state.store(kSlotClaiming);
            step(2);
            for (int d = 0; d < kMaxDevices; d++) {
                s.bytes[d].store(0);
                s.peak[d].store(0);
            }
            clear_kinds(header_, s);
            step(3);
            s.pid.store(pid);
            s.pid_ns.store(pid_ns_);
            s.generation.fetch_add(1);  // the slot's lock is held: no other claimer adds meanwhile
            read_command(s.command, sizeof s.command);
            if (!says_free) header_->reclaimed_processes.fetch_add(1);
            uint32_t high = header_->slot_high.load();
            while (high < (uint32_t)i + 1 && !header_->slot_high.compare_exchange_weak(high, (uint32_t)i + 1)) {}
            step(4);
            s.state.store(kSlotLive);
            slot_pid_.store(pid);
            slot_.store(&s, std::memory_order_release);
            return true;
        }
    }
    full_pid_.store(pid);
    return false;
}

// With join_mu_ held. A child (of fork, or of clone without fork handlers) shares its parent's open
// file description, and so its parent's locks: it would see its parent's slot as its own, and keep
// it alive after its parent died. It opens the file again for a description of its own, at the same
// descriptor number, which drops its share of the parent's.
bool Ledger::own_descriptor() {
    int pid = getpid();  // not self_pid(): in fork's child handler its cache may still be the parent's
    if (fd_pid_.load() == pid || path_.empty()) return true;
    if (fd_ < 0) return false;
    int fd = reopen(fd_, path_);
    if (fd < 0 || dup3(fd, fd_, O_CLOEXEC) < 0) {
        static std::atomic<bool> said{false};
        if (!said.exchange(true))
            log_error("cannot open the ledger %s again in process %d (%s); it allocates nothing under its limit",
                      path_.c_str(), pid, errno_text(errno).c_str());
        if (fd >= 0) close(fd);
        close(fd_);
        fd_ = -1;
        return false;
    }
    close(fd);
    fd_pid_.store(pid);
    return true;
}

void Ledger::on_fork_child() {
    // The fork may have happened while another thread held these: fresh ones for the child.
    new (&join_mu_) std::mutex();
    new (&device_mu_) std::mutex();
    slot_.store(nullptr);
    slot_pid_.store(0);
    // The parent's measurements are its own: their locks stay with its description.
    for (auto &m : measuring_) m.store(false);
    own_descriptor();
}

// Saturating: a count near UINT64_MAX (forged, or a bug) must not wrap the container's usage around to
// a small number that admits what it should refuse.
GG_HOT uint64_t Ledger::sum(int dev) const {
    uint64_t total = 0;
    uint32_t high = header_->slot_high.load();
    for (uint32_t i = 0; i < high && i < (uint32_t)kMaxSlots; i++)
        total = sat_add(total, header_->slots[i].bytes[dev].load());
    return total;
}

GG_HOT bool Ledger::try_charge(int dev, uint64_t bytes, uint64_t *container_used) {
    if (!join()) {
        if (container_used) *container_used = sum(dev);
        return false;
    }
    Slot *slot_ = this->slot_.load(std::memory_order_relaxed);
    std::atomic<uint64_t> &own = slot_->bytes[dev];
    uint64_t limit = header_->devices[dev].limit.load();
    for (int attempt = 0; attempt < 4; attempt++) {
        // A request larger than the whole limit never fits; one that would wrap this process's count
        // cannot be counted (SIZE_MAX: a negative size cast to size_t). Nothing is charged for either,
        // so the rollback of its failure has nothing to take back.
        if (bytes > limit || !add_without_wrap(own, bytes)) {
            if (container_used) *container_used = sum(dev);
            return false;
        }
        uint64_t total = sum(dev);
        if (total <= limit) {
            raise_to(slot_->peak[dev], own.load());
            raise_to(header_->devices[dev].peak, total);
            if (container_used) *container_used = total;
            return true;
        }
        take_off(own, bytes);  // exactly what was added above
        // Two admissions racing near the limit can both see the other's bytes and both back out;
        // try again while the bytes would fit without this request.
        uint64_t without = sum(dev);
        if (container_used) *container_used = without;
        if (without > limit || limit - without < bytes) return false;
    }
    return false;
}

GG_HOT bool Ledger::charge(int dev, uint64_t bytes) {
    if (!join()) return false;
    Slot *slot_ = this->slot_.load(std::memory_order_relaxed);
    if (!add_without_wrap(slot_->bytes[dev], bytes)) return false;
    raise_to(slot_->peak[dev], slot_->bytes[dev].load());
    raise_to(header_->devices[dev].peak, sum(dev));
    return true;
}

GG_HOT uint64_t Ledger::release(int dev, uint64_t bytes) {
    Slot *slot = slot_.load(std::memory_order_acquire);
    if (!slot || slot_pid_.load(std::memory_order_relaxed) != self_pid()) return 0;
    uint64_t take = take_off(slot->bytes[dev], bytes);
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
    if (read_only_ || fd_ < 0) return 0;
    if (periodic) {
        uint64_t now = now_ns(CLOCK_MONOTONIC_COARSE);
        uint64_t last = header_->last_reclaim_ns.load(std::memory_order_relaxed);
        if (now - last < 500000000ull) return 0;
        if (!header_->last_reclaim_ns.compare_exchange_strong(last, now)) return 0;
    }
    std::unique_lock<std::mutex> lock(join_mu_, std::defer_lock);
    if (periodic) {
        if (!lock.try_lock()) return 0;  // another thread of ours is at it: not worth waiting for
    } else {
        lock.lock();
    }
    if (!own_descriptor()) return 0;
    int reclaimed = 0;
    const Slot *mine = slot_pid_.load() == getpid() ? slot_.load() : nullptr;
    uint32_t high = header_->slot_high.load();
    for (uint32_t i = 0; i < high && i < (uint32_t)kMaxSlots; i++) {
        Slot &s = header_->slots[i];
        uint32_t st = s.state.load();
        if (st == kSlotFree || st == kSlotReclaimed || &s == mine) continue;
        if (!try_lock(fd_, slot_range((int)i))) continue;  // its owner is alive
        // Its owner is gone; so is its memory. A reclaimer killed here leaves the lock free again.
        s.state.store(kSlotReclaiming);
        uint64_t freed = 0;
        for (auto &b : s.bytes) freed = sat_add(freed, b.exchange(0));
        clear_kinds(header_, s);
        s.state.store(kSlotReclaimed);
        unlock(fd_, slot_range((int)i));
        header_->reclaimed_processes.fetch_add(1);
        reclaimed++;
        if (freed)
            log_debug("reclaimed %llu bytes of dead process %d from ledger %s", (unsigned long long)freed,
                      (int)s.pid.load(), path_.c_str());
    }
    return reclaimed;
}

}  // namespace gg::ledger
