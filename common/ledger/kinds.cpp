// What a process holds beside its allocations, by kind (layout.h, Kind), and the measured cost of a
// context per device (layout.h, DeviceCost). A slot's bytes[dev] stays the one total that admission
// sums, so the allocation path reads nothing more than before; the kinds only say how much of the
// total is which, for reports, `gpuguard top` and the reconciliation with the driver
// (shim/usage/). Only the slot's own process writes its kinds.
#include "common/ledger/ledger.h"

#include "common/ledger/internal.h"

namespace gg::ledger {

using namespace internal;

namespace {

constexpr uint64_t kSourceBits = 8;  // DeviceCost::context packs the bytes above the source

// Takes up to `at_most` from a counter, never below zero; returns what was taken.
uint64_t take_from(std::atomic<uint64_t> &c, uint64_t at_most) {
    uint64_t cur = c.load(), take;
    do {
        take = cur < at_most ? cur : at_most;
    } while (!c.compare_exchange_weak(cur, cur - take));
    return take;
}

}  // namespace

void clear_kinds(Header *h, const Slot &s) {
    SlotKinds &k = h->kinds[&s - h->slots];
    for (auto &dev : k.bytes)
        for (auto &b : dev) b.store(0);
}

std::atomic<uint64_t> *Ledger::own_kind_counter(int dev, Kind k) const {
    Slot *slot = slot_.load(std::memory_order_acquire);
    if (!slot || slot_pid_.load(std::memory_order_relaxed) != self_pid() || dev < 0 || dev >= kMaxDevices)
        return nullptr;
    return &header_->kinds[slot - header_->slots].bytes[dev][k];
}

bool Ledger::try_charge_kind(int dev, Kind k, uint64_t bytes, uint64_t *container_used) {
    if (!try_charge(dev, bytes, container_used)) return false;
    if (std::atomic<uint64_t> *c = own_kind_counter(dev, k)) c->fetch_add(bytes);
    return true;
}

void Ledger::charge_kind(int dev, Kind k, uint64_t bytes) {
    if (!bytes) return;
    charge(dev, bytes);
    if (std::atomic<uint64_t> *c = own_kind_counter(dev, k)) c->fetch_add(bytes);
}

uint64_t Ledger::release_kind(int dev, Kind k, uint64_t bytes) {
    std::atomic<uint64_t> *c = own_kind_counter(dev, k);
    if (!c || !bytes) return 0;
    uint64_t take = take_from(*c, bytes);
    release(dev, take);
    return take;
}

void Ledger::set_kind(int dev, Kind k, uint64_t bytes) {
    uint64_t now = own_kind(dev, k);
    if (bytes > now) charge_kind(dev, k, bytes - now);
    else if (bytes < now) release_kind(dev, k, now - bytes);
}

uint64_t Ledger::kind_to_allocations(int dev, Kind k, uint64_t at_most) {
    std::atomic<uint64_t> *c = own_kind_counter(dev, k);
    return c ? take_from(*c, at_most) : 0;
}

void Ledger::allocations_to_kind(int dev, Kind k, uint64_t bytes) {
    if (std::atomic<uint64_t> *c = own_kind_counter(dev, k)) c->fetch_add(bytes);
}

uint64_t Ledger::own_kind(int dev, Kind k) const {
    std::atomic<uint64_t> *c = own_kind_counter(dev, k);
    return c ? c->load() : 0;
}

uint64_t Ledger::context_cost(int dev, CostSource *source) const {
    uint64_t packed = dev >= 0 && dev < kMaxDevices ? header_->costs[dev].context.load() : 0;
    CostSource s = (CostSource)(packed & ((1u << kSourceBits) - 1));
    if (s != kCostDeviceDelta && s != kCostOwnProcess) s = kCostUnknown;  // a value no gpuguard writes
    if (source) *source = s;
    return s == kCostUnknown ? 0 : packed >> kSourceBits;
}

bool Ledger::offer_context_cost(int dev, uint64_t bytes, CostSource source) {
    if (read_only_ || dev < 0 || dev >= kMaxDevices || source == kCostUnknown || bytes >> (64 - kSourceBits))
        return false;
    std::atomic<uint64_t> &c = header_->costs[dev].context;
    uint64_t want = bytes << kSourceBits | source, cur = c.load();
    for (;;) {
        CostSource have = kCostUnknown;
        (void)context_cost(dev, &have);
        if (have >= source) return false;  // as good a measurement is there already
        if (c.compare_exchange_weak(cur, want)) return true;
    }
}

int Ledger::context_measurer(int dev) const {
    uint64_t packed = dev >= 0 && dev < kMaxDevices ? header_->costs[dev].context.load() : 0;
    return (packed & ((1u << kSourceBits) - 1)) == kCostMeasuring ? (int)(packed >> kSourceBits) : 0;
}

bool Ledger::claim_context_measurement(int dev) {
    if (read_only_ || dev < 0 || dev >= kMaxDevices) return false;
    // One thread of ours at a time: the lock below does not keep our other threads out.
    if (measuring_[dev].exchange(true)) return false;
    // Whoever holds the record's lock is alive and measuring, whatever pid the word names (a pid may
    // be reused, or name a process of another PID namespace); a measurer that died let go of it.
    if (fd_ >= 0 && !try_lock(fd_, cost_range(dev))) {
        measuring_[dev].store(false);
        return false;
    }
    std::atomic<uint64_t> &c = header_->costs[dev].context;
    uint64_t mine = (uint64_t)self_pid() << kSourceBits | kCostMeasuring, cur = c.load();
    for (;;) {
        // Free: nothing there, or the claim of a process that died measuring (nobody held the lock).
        bool free = cur == 0 || (cur & ((1u << kSourceBits) - 1)) == kCostMeasuring;
        if (!free) break;  // measured meanwhile: nothing to measure
        if (c.compare_exchange_weak(cur, mine)) return true;
    }
    if (fd_ >= 0) unlock(fd_, cost_range(dev));
    measuring_[dev].store(false);
    return false;
}

void Ledger::drop_context_claim(int dev) {
    if (read_only_ || dev < 0 || dev >= kMaxDevices || !measuring_[dev].load()) return;
    uint64_t mine = (uint64_t)self_pid() << kSourceBits | kCostMeasuring;
    header_->costs[dev].context.compare_exchange_strong(mine, 0);  // an offer may have replaced it
    if (fd_ >= 0) unlock(fd_, cost_range(dev));
    measuring_[dev].store(false);
}

}  // namespace gg::ledger
