#include "shim/torch/view.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <map>

#include "common/base/atomic_max.h"
#include "shim/api/export.h"
#include "shim/base/clock.h"
#include "shim/base/futex_lock.h"
#include "shim/base/profile.h"
#include "shim/base/race_once.h"
#include "shim/core/state.h"
#include "shim/device/device.h"
#include "shim/stacks/stacks.h"
#include "shim/torch/events.h"

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
DeviceTotals g_totals[kMaxOrdinals];
std::atomic<uint64_t> g_sum_allocated{0}, g_sum_reserved{0};

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

// PyTorch's totals of one device as the event left them; the sums over devices follow.
void note_totals(int device, uint64_t allocated, uint64_t reserved, uint64_t now) {
    if (device < 0 || device >= kMaxOrdinals) return;
    DeviceTotals &d = g_totals[device];
    d.seen.store(true, std::memory_order_relaxed);
    uint64_t old_a = d.allocated.exchange(allocated, std::memory_order_relaxed);
    uint64_t old_r = d.reserved.exchange(reserved, std::memory_order_relaxed);
    raise_to(d.peak_allocated, allocated);
    raise_to(d.peak_reserved, reserved);
    uint64_t sum_a = g_sum_allocated.fetch_add(allocated - old_a, std::memory_order_relaxed) + (allocated - old_a);
    uint64_t sum_r = g_sum_reserved.fetch_add(reserved - old_r, std::memory_order_relaxed) + (reserved - old_r);
    totals_timeline().note(now, {sum_a, sum_r});
}

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
    blocks().clear();
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
    Tracker *t = g_blocks.load(std::memory_order_acquire);
    return t ? *t : never_destroyed(g_blocks);
}

// noinline: the captured stack is counted from this frame (kSkipFrames).
__attribute__((noinline)) void on_block(uint64_t ptr, int64_t size, uint64_t allocated, uint64_t reserved, int device) {
    State &s = state();  // the first hooked call of a process may be this one
    if (!enabled() || ptr == 0 || size == 0) return;
    // Stored once: the driver hooks read it on every allocation, and a store at every block would take
    // its cache line from them each time.
    if (!g_active.load(std::memory_order_relaxed)) g_active.store(true, std::memory_order_relaxed);
    uint64_t now = mono_ns();
    if (size > 0) {
        Allocation a;
        a.bytes = uint64_t(size);
        a.t_ns = now;
        a.thread = thread_id();
        a.ordinal = int16_t(device);
        a.api = Api::_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE;
        a.driver_api = a.api;
        const Config &c = *s.cfg;
        if (c.stack_depth > 0 && a.bytes >= c.stack_min_bytes) {
            GG_PROFILE_STEP(kTorchStack);
            a.stack = stacks::capture(kSkipFrames);
        }
        {
            GG_PROFILE_STEP(kTorchTable);
            blocks().insert(KeyKind::kPointer, ptr, a);  // false (no host memory for the table): untracked
        }
    } else {
        GG_PROFILE_STEP(kTorchTable);
        Allocation a;
        blocks().take(KeyKind::kPointer, ptr, &a, now);  // false: a block from before the shim saw c10
    }
    {
        GG_PROFILE_STEP(kTorchTotals);
        note_totals(device, allocated, reserved, now);
    }
    GG_PROFILE_STEP(kTorchRing);
    // The size taken back, as a magnitude: INT64_MIN (from no real caller) has none in an int64.
    int64_t magnitude = size > 0 ? size : size == INT64_MIN ? INT64_MAX : -size;
    events().push(
        {now, ptr, magnitude, allocated, reserved, int8_t(device), size > 0 ? Action::kAlloc : Action::kFree});
}

void on_out_of_memory(int64_t size, uint64_t allocated, uint64_t reserved, int device) {
    (void)state();
    if (!enabled()) return;
    uint64_t now = mono_ns();
    {
        std::lock_guard<FutexLock> lock(g_mu);
        g_oom = {true, size > 0 ? uint64_t(size) : 0, allocated, reserved, device, now};
    }
    note_totals(device, allocated, reserved, now);
    events().push({now, 0, size, allocated, reserved, int8_t(device), Action::kOom});
}

void note_refusal_recovered() { g_refusals_recovered.fetch_add(1, std::memory_order_relaxed); }
uint64_t refusals_recovered() { return g_refusals_recovered.load(std::memory_order_relaxed); }

void on_segment(bool made, uint64_t address, uint64_t bytes, int device) {
    if (!enabled()) return;
    Totals t = totals(device);
    events().push({mono_ns(), address, int64_t(bytes), t.allocated, t.reserved, int8_t(device),
                   made ? Action::kSegmentAlloc : Action::kSegmentFree});
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
    Totals t;
    if (device < 0 || device >= kMaxOrdinals) return t;
    const DeviceTotals &d = g_totals[device];
    t.seen = d.seen.load(std::memory_order_relaxed);
    t.allocated = d.allocated.load(std::memory_order_relaxed);
    t.reserved = d.reserved.load(std::memory_order_relaxed);
    t.peak_allocated = d.peak_allocated.load(std::memory_order_relaxed);
    t.peak_reserved = d.peak_reserved.load(std::memory_order_relaxed);
    return t;
}

OutOfMemory last_out_of_memory() {
    std::lock_guard<FutexLock> lock(g_mu);
    return g_oom;
}

std::vector<Timeline<2>::Point> timeline() { return totals_timeline().points(); }

std::vector<std::pair<uint64_t, uint64_t>> mappings() {
    std::lock_guard<FutexLock> lock(g_mu);
    const auto &ranges = mappings_table().ranges;
    return {ranges.begin(), ranges.end()};
}

void lock_for_fork() {
    g_mu.lock();
    totals_timeline().lock_for_fork();
    blocks().lock_for_fork();
}

void unlock_after_fork() {
    blocks().unlock_after_fork();
    totals_timeline().unlock_after_fork();
    g_mu.unlock();
}

void reset_after_fork() {
    blocks().clear_after_fork();
    g_refusals_recovered.store(0, std::memory_order_relaxed);
    totals_timeline().clear();
    events().clear();
    mappings_table().ranges.clear();
    g_oom = OutOfMemory();
    for (DeviceTotals &d : g_totals) {
        d.allocated = d.reserved = d.peak_allocated = d.peak_reserved = 0;
        d.seen = false;
    }
    g_sum_allocated = g_sum_reserved = 0;
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
