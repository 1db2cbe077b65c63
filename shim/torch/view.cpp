#include "shim/torch/view.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <map>
#include <new>

#include "shim/api/export.h"
#include "shim/base/clock.h"
#include "shim/base/futex_lock.h"
#include "shim/base/profile.h"
#include "shim/base/race_once.h"
#include "shim/core/state.h"
#include "shim/device/device.h"
#include "shim/stacks/stacks.h"
#include "shim/torch/events.h"
#include "shim/torch/pending.h"

namespace gg::torch {

namespace detail {
std::atomic<bool> g_active{false};
}
using detail::g_active;

namespace {

// Frames of the shim above c10's call skipped at capture: on_block's own (the hook's is dropped when
// the report is made, as every leading frame inside libgpuguard.so is).
constexpr int kSkipFrames = 1;

std::atomic<bool> g_enabled{true};
std::atomic<uint64_t> g_refusals_recovered{0};

// The run-time switch's history (Coverage), under g_switch_mu: switching is rare and never on the
// block path, which reads g_enabled alone.
FutexLock g_switch_mu;
Coverage g_coverage;
uint64_t g_off_since_ns = 0;

struct DeviceTotals {
    std::atomic<uint64_t> allocated{0}, reserved{0}, peak_allocated{0}, peak_reserved{0};
    std::atomic<bool> seen{false};
};
// What apply() writes at every event, on cache lines of its own (aligned, and a whole number of
// lines long). Beside other globals, it took their line to the applier's core at every event, and
// the program's next read of g_active, at every block and every driver allocation, missed on it. (The
// CPU machine's block rows did not move beyond their spread: BENCHMARKS.md, the thirteenth session.)
struct alignas(64) AppliedTotals {
    DeviceTotals devices[kMaxOrdinals];
    std::atomic<uint64_t> sum_allocated{0}, sum_reserved{0};
};
AppliedTotals g_totals;

// Made on first use, never destroyed (hooks run during exit()): shim/base/race_once.h.
std::atomic<Tracker *> g_blocks{nullptr};
std::atomic<Timeline<2> *> g_timeline{nullptr};
Timeline<2> &totals_timeline() {
    Timeline<2> *t = g_timeline.load(std::memory_order_acquire);
    return t ? *t : never_destroyed(g_timeline);
}

FutexLock g_mu;  // the last OOM and the mappings
OutOfMemory g_oom;
struct Mappings {
    std::map<uint64_t, uint64_t> ranges;
};
std::atomic<Mappings *> g_mappings_made{nullptr};
Mappings &mappings_table() {
    Mappings *m = g_mappings_made.load(std::memory_order_acquire);
    return m ? *m : never_destroyed(g_mappings_made);
}

// Replaces a value only apply() writes (one batch at a time: shim/torch/pending.h): a load
// and a store, where an atomic read-modify-write would lock the bus for nothing; readers still load
// whole values. Returns the value it replaced.
uint64_t replace(std::atomic<uint64_t> &value, uint64_t now) {
    uint64_t was = value.load(std::memory_order_relaxed);
    value.store(now, std::memory_order_relaxed);
    return was;
}
void raise_alone(std::atomic<uint64_t> &peak, uint64_t v) {
    if (v > peak.load(std::memory_order_relaxed)) peak.store(v, std::memory_order_relaxed);
}

// PyTorch's totals of one device as the event left them; the sums over devices follow. Only apply()
// calls it (see replace()).
void note_totals(int device, uint64_t allocated, uint64_t reserved, uint64_t now) {
    if (device < 0 || device >= kMaxOrdinals) return;
    DeviceTotals &d = g_totals.devices[device];
    if (!d.seen.load(std::memory_order_relaxed)) d.seen.store(true, std::memory_order_relaxed);
    uint64_t old_a = replace(d.allocated, allocated), old_r = replace(d.reserved, reserved);
    raise_alone(d.peak_allocated, allocated);
    raise_alone(d.peak_reserved, reserved);
    uint64_t sum_a = g_totals.sum_allocated.load(std::memory_order_relaxed) + (allocated - old_a);
    uint64_t sum_r = g_totals.sum_reserved.load(std::memory_order_relaxed) + (reserved - old_r);
    g_totals.sum_allocated.store(sum_a, std::memory_order_relaxed);
    g_totals.sum_reserved.store(sum_r, std::memory_order_relaxed);
    totals_timeline().note(now, {sum_a, sum_r});
}

Totals totals_as_applied(int device) {
    Totals t;
    if (device < 0 || device >= kMaxOrdinals) return t;
    const DeviceTotals &d = g_totals.devices[device];
    t.seen = d.seen.load(std::memory_order_relaxed);
    t.allocated = d.allocated.load(std::memory_order_relaxed);
    t.reserved = d.reserved.load(std::memory_order_relaxed);
    t.peak_allocated = d.peak_allocated.load(std::memory_order_relaxed);
    t.peak_reserved = d.peak_reserved.load(std::memory_order_relaxed);
    return t;
}

Tracker &table() {
    Tracker *t = g_blocks.load(std::memory_order_acquire);
    return t ? *t : never_destroyed(g_blocks);
}

// One event's changes to the tables, in the order c10 reported it (shim/torch/pending.h).
void apply_one(const BlockEvent &e) {
    Event history{e.t_ns, e.address, e.bytes, e.allocated, e.reserved, e.device, e.action};
    switch (e.action) {
        case Action::kAlloc: {
            Allocation a;
            a.bytes = uint64_t(e.bytes);
            a.t_ns = e.t_ns;
            a.thread = e.thread;
            a.ordinal = int16_t(e.device);
            a.api = Api::_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE;
            a.driver_api = a.api;
            a.stack = e.stack;
            table().insert(KeyKind::kPointer, e.address, a);  // false (no host memory for the table): untracked
            note_totals(e.device, e.allocated, e.reserved, e.t_ns);
            break;
        }
        case Action::kFree: {
            Allocation a;
            table().take(KeyKind::kPointer, e.address, &a, e.t_ns);  // false: a block from before the shim saw c10
            note_totals(e.device, e.allocated, e.reserved, e.t_ns);
            break;
        }
        case Action::kOom: note_totals(e.device, e.allocated, e.reserved, e.t_ns); break;
        case Action::kSegmentAlloc:
        case Action::kSegmentFree: {
            // The totals c10 last reported before this segment, as the events before it left them.
            Totals t = totals_as_applied(e.device);
            history.allocated = t.allocated;
            history.reserved = t.reserved;
            break;
        }
    }
    events().push(history);
}

// How many events ahead a batch starts loading what an event will touch: on the GPU machine the
// live-block table and the bytes by stack are cold at each batch (the driver's and PyTorch's work
// since the last), and a line found while earlier events are applied is no longer waited on. In two
// stages: the table's slot (and an allocation's stack, which its event names) kSlotAhead events
// ahead; a free's stack, which is in that slot, kHolderAhead events ahead, once the slot has come.
constexpr int kSlotAhead = 8, kHolderAhead = 4;

void prefetch_slot(const BlockEvent &e) {
    table().prefetch(KeyKind::kPointer, e.address);
    if (e.action == Action::kAlloc) table().prefetch_stack(e.stack);
}
void prefetch_holder(const BlockEvent &e) {
    if (e.action == Action::kFree) table().prefetch_holder(KeyKind::kPointer, e.address);
}

void apply(const BlockEvent *events, int n) {
    GG_PROFILE_STEP(kTorchApply);
    for (int i = 0; i < n && i < kSlotAhead; i++) prefetch_slot(events[i]);
    for (int i = 0; i < n && i < kHolderAhead; i++) prefetch_holder(events[i]);
    for (int i = 0; i < n; i++) {
        if (i + kSlotAhead < n) prefetch_slot(events[i + kSlotAhead]);
        if (i + kHolderAhead < n) prefetch_holder(events[i + kHolderAhead]);
        try {
            apply_one(events[i]);
        } catch (const std::bad_alloc &) {
            // No host memory for a table's growth: this event's change is lost, not the rest of the batch.
        }
    }
}

PendingLog g_pending(apply, /*background=*/true);

void append(const BlockEvent &e) {
    GG_PROFILE_STEP(kTorchLog);
    g_pending.append(e);
}

void settle() { g_pending.settle(); }

}  // namespace

void configure(bool on, size_t events_capacity) {
    g_enabled.store(on, std::memory_order_relaxed);
    if (on) events().configure(events_capacity);
}

bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

bool set_enabled(bool on) {
    std::lock_guard<FutexLock> lock(g_switch_mu);
    bool was = g_enabled.load(std::memory_order_relaxed);
    if (was == on) return was;
    uint64_t now = mono_ns();
    if (!on) {
        g_enabled.store(false, std::memory_order_relaxed);
        g_off_since_ns = now;
        g_coverage.switched_off++;
        return was;
    }
    // Emptied before the first event is taken again: a block listed before the switch may have been
    // freed while the view was off, and would stay listed for ever. What is left unlisted is
    // PyTorch's allocated total less the listed bytes (the report's "coverage").
    events().configure(state().cfg->tensor_events);  // started with GPUGUARD_TENSOR_VIEW=0: no ring yet
    g_pending.settled([] { table().clear(); });      // what was pending happened before the switch
    if (g_off_since_ns) g_coverage.missed_off_ns += now - g_off_since_ns;
    g_coverage.listed_since_ns = now;
    g_off_since_ns = 0;
    g_enabled.store(true, std::memory_order_release);
    return was;
}

Coverage coverage() {
    std::lock_guard<FutexLock> lock(g_switch_mu);
    Coverage c = g_coverage;
    c.off = !g_enabled.load(std::memory_order_relaxed);
    if (c.off && g_off_since_ns) c.missed_off_ns += mono_ns() - g_off_since_ns;
    return c;
}

Tracker &blocks() {
    settle();
    return table();
}

// noinline: the captured stack is counted from this frame (kSkipFrames).
GG_HOT __attribute__((noinline)) void on_block(uint64_t ptr, int64_t size, uint64_t allocated, uint64_t reserved,
                                               int device) {
    State &s = state();  // the first hooked call of a process may be this one
    if (!enabled() || ptr == 0 || size == 0) return;
    // Stored once: the driver hooks read it on every allocation, and a store at every block would take
    // its cache line from them each time.
    if (!g_active.load(std::memory_order_relaxed)) g_active.store(true, std::memory_order_relaxed);
    BlockEvent e{};
    e.t_ns = mono_ns();
    e.address = ptr;
    // The size taken back, as a magnitude: INT64_MIN (from no real caller) has none in an int64.
    e.bytes = size > 0 ? size : size == INT64_MIN ? INT64_MAX : -size;
    e.allocated = allocated;
    e.reserved = reserved;
    e.device = int8_t(device);
    e.action = size > 0 ? Action::kAlloc : Action::kFree;
    if (size > 0) {
        e.thread = thread_id();
        const Config &c = *s.cfg;
        if (c.stack_depth > 0 && uint64_t(size) >= c.stack_min_bytes) {
            GG_PROFILE_STEP(kTorchStack);
            e.stack = stacks::capture(kSkipFrames);
        }
    }
    append(e);
}

void on_out_of_memory(int64_t size, uint64_t allocated, uint64_t reserved, int device) {
    (void)state();
    if (!enabled()) return;
    uint64_t now = mono_ns();
    {
        std::lock_guard<FutexLock> lock(g_mu);
        g_oom = {true, size > 0 ? uint64_t(size) : 0, allocated, reserved, device, now};
    }
    BlockEvent e{};
    e.t_ns = now;
    e.bytes = size;
    e.allocated = allocated;
    e.reserved = reserved;
    e.device = int8_t(device);
    e.action = Action::kOom;
    append(e);
}

void note_refusal_recovered() { g_refusals_recovered.fetch_add(1, std::memory_order_relaxed); }
uint64_t refusals_recovered() { return g_refusals_recovered.load(std::memory_order_relaxed); }

void on_segment(bool made, uint64_t address, uint64_t bytes, int device) {
    if (!enabled()) return;
    BlockEvent e{};
    e.t_ns = mono_ns();
    e.address = address;
    e.bytes = int64_t(bytes);
    e.device = int8_t(device);
    e.action = made ? Action::kSegmentAlloc : Action::kSegmentFree;
    append(e);
}

void on_mapping(bool mapped, uint64_t address, uint64_t bytes) {
    std::lock_guard<FutexLock> lock(g_mu);
    auto &ranges = mappings_table().ranges;
    if (mapped) ranges[address] = bytes;
    else ranges.erase(address);
}

bool inside_allocator(stacks::StackId stack) {
    if (!active() || !stack) return false;
    // libc10_cuda.so's mapped ranges, looked up on this cold path (a failure) each time: a library
    // can be loaded or moved, and failures are few.
    struct Ranges {
        std::vector<std::pair<uintptr_t, uintptr_t>> r;
    } ranges;
    dl_iterate_phdr(
        [](dl_phdr_info *info, size_t, void *data) -> int {
            if (!info->dlpi_name || !strstr(info->dlpi_name, "libc10_cuda.so")) return 0;
            auto *out = static_cast<Ranges *>(data);
            for (int i = 0; i < info->dlpi_phnum; i++)
                if (info->dlpi_phdr[i].p_type == PT_LOAD)
                    out->r.push_back({info->dlpi_addr + info->dlpi_phdr[i].p_vaddr,
                                      info->dlpi_addr + info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz});
            return 1;
        },
        &ranges);
    for (uintptr_t ip : stacks::native_frames(stack))
        for (const auto &[lo, hi] : ranges.r)
            if (ip > lo && ip <= hi) return true;  // a return address: the call is just before it
    return false;
}

Totals totals(int device) {
    settle();
    return totals_as_applied(device);
}

OutOfMemory last_out_of_memory() {
    std::lock_guard<FutexLock> lock(g_mu);
    return g_oom;
}

std::vector<Timeline<2>::Point> timeline() {
    settle();
    return totals_timeline().points();
}

std::vector<std::pair<uint64_t, uint64_t>> mappings() {
    std::lock_guard<FutexLock> lock(g_mu);
    const auto &ranges = mappings_table().ranges;
    return {ranges.begin(), ranges.end()};
}

void lock_for_fork() {
    g_switch_mu.lock();         // first: a switch back on settles the log and clears the table
    g_pending.lock_for_fork();  // then: an append may apply, and so take the locks below
    g_mu.lock();
    totals_timeline().lock_for_fork();
    table().lock_for_fork();
}

void unlock_after_fork() {
    table().unlock_after_fork();
    totals_timeline().unlock_after_fork();
    g_mu.unlock();
    g_pending.unlock_after_fork();
    g_switch_mu.unlock();
}

void reset_after_fork() {
    g_pending.clear_after_fork();
    table().clear_after_fork();
    g_refusals_recovered.store(0, std::memory_order_relaxed);
    totals_timeline().clear();
    events().clear();
    mappings_table().ranges.clear();
    g_oom = OutOfMemory();
    for (DeviceTotals &d : g_totals.devices) {
        d.allocated = d.reserved = d.peak_allocated = d.peak_reserved = 0;
        d.seen = false;
    }
    g_totals.sum_allocated = g_totals.sum_reserved = 0;
    g_active = false;
    // The child's coverage is its own: it starts with nothing listed and nothing missed, off if the
    // parent was.
    g_coverage = Coverage();
    g_off_since_ns = enabled() ? 0 : mono_ns();
}

}  // namespace gg::torch

GG_EXPORT int gpuguard_tensor_view(void) {
    (void)gg::state();
    if (!gg::torch::enabled()) return -1;
    return gg::torch::active() ? 1 : 0;
}

GG_EXPORT int gpuguard_set_tensor_view(int on) {
    (void)gg::state();
    return gg::torch::set_enabled(on != 0) ? 1 : 0;
}
