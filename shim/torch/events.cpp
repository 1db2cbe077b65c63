#include "shim/torch/events.h"

#include <sys/mman.h>

#include "common/report/schema.h"
#include "shim/base/race_once.h"

namespace gg::torch {
namespace {

std::atomic<EventRing *> g_ring{nullptr};

constexpr auto kRelaxed = std::memory_order_relaxed;

}  // namespace

EventRing &events() {
    EventRing *r = g_ring.load(std::memory_order_acquire);
    return r ? *r : never_destroyed(g_ring);
}

char action_code(Action a) {
    namespace code = schema::action;
    switch (a) {
        case Action::kAlloc: return code::kAlloc;
        case Action::kFree: return code::kFree;
        case Action::kOom: return code::kOom;
        case Action::kSegmentAlloc: return code::kSegmentAlloc;
        case Action::kSegmentFree: return code::kSegmentFree;
    }
    return '?';
}

void EventRing::configure(size_t capacity) {
    if (capacity == 0 || slots_.load(std::memory_order_acquire)) return;
    // Address space only until written: untouched slots cost no memory (MAP_NORESERVE).
    void *p = mmap(nullptr, capacity * sizeof(Slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return;  // no history kept; the rest of the tensor view works without it
    Slot *expected = nullptr;
    if (!slots_.compare_exchange_strong(expected, static_cast<Slot *>(p))) {
        munmap(p, capacity * sizeof(Slot));
        return;
    }
    capacity_.store(capacity, std::memory_order_release);
}

void EventRing::push(const Event &e) {
    Slot *slots = slots_.load(std::memory_order_acquire);
    size_t cap = capacity_.load(std::memory_order_acquire);
    if (!slots || !cap) return;
    uint64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    Slot &s = slots[i % cap];
    s.seq.store(0, kRelaxed);
    std::atomic_thread_fence(std::memory_order_release);
    s.w[0].store(e.t_ns, kRelaxed);
    s.w[1].store(e.address, kRelaxed);
    s.w[2].store(uint64_t(e.bytes), kRelaxed);
    s.w[3].store(e.allocated, kRelaxed);
    s.w[4].store(e.reserved, kRelaxed);
    s.w[5].store(uint64_t(uint8_t(e.device)) << 8 | uint64_t(e.action), kRelaxed);
    s.seq.store(i + 1, std::memory_order_release);
}

EventRing::Counts EventRing::visit_newest(size_t newest, const std::function<void(const Event &)> &fn) const {
    Counts c;
    Slot *slots = slots_.load(std::memory_order_acquire);
    c.capacity = capacity_.load(std::memory_order_acquire);
    c.recorded = next_.load(std::memory_order_acquire);
    if (!slots || !c.capacity) return c;
    uint64_t held = c.recorded > c.capacity ? c.recorded - c.capacity : 0;
    uint64_t first = c.recorded - held > newest ? c.recorded - newest : held;
    c.left_out = first - held;
    uint64_t visited = 0;
    for (uint64_t i = first; i < c.recorded; i++) {
        const Slot &s = slots[i % c.capacity];
        if (s.seq.load(std::memory_order_acquire) != i + 1) continue;  // being written, or already newer
        Event e;
        e.t_ns = s.w[0].load(kRelaxed);
        e.address = s.w[1].load(kRelaxed);
        e.bytes = int64_t(s.w[2].load(kRelaxed));
        e.allocated = s.w[3].load(kRelaxed);
        e.reserved = s.w[4].load(kRelaxed);
        uint64_t tag = s.w[5].load(kRelaxed);
        e.device = int8_t(uint8_t(tag >> 8));
        e.action = Action(uint8_t(tag));
        std::atomic_thread_fence(std::memory_order_acquire);
        if (s.seq.load(kRelaxed) != i + 1) continue;  // overwritten while copied
        fn(e);
        visited++;
    }
    c.dropped = c.recorded - visited;
    return c;
}

EventRing::Copy EventRing::copy() const {
    Copy c;
    Counts n = visit_newest(SIZE_MAX, [&](const Event &e) { c.events.push_back(e); });
    c.capacity = n.capacity;
    c.recorded = n.recorded;
    c.dropped = n.dropped;
    return c;
}

void EventRing::clear() {
    Slot *slots = slots_.load();
    uint64_t written = next_.load(), cap = capacity_.load();
    if (slots)  // only the slots ever written: the others were never touched
        for (uint64_t i = 0; i < written && i < cap; i++) slots[i].seq.store(0, kRelaxed);
    next_.store(0);
}

}  // namespace gg::torch
