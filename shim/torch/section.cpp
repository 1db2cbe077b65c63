// The report's "tensor_view" section (docs/report-schema.md): PyTorch's allocated and reserved bytes
// and their peaks, its live blocks with their stacks, the segments and mapped ranges they lie in,
// the last out-of-memory as c10 saw it, a timeline of both totals and the recent events. The
// command turns these into the tensor view (tools/report/tensor.h), the fragmentation diagnosis and
// the what-if replay; the shim only records.
#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "common/report/limits.h"
#include "common/report/schema.h"
#include "common/settings/settings.h"
#include "shim/api/api.h"
#include "shim/base/clock.h"
#include "shim/core/state.h"
#include "shim/report/json_out.h"
#include "shim/report/report.h"
#include "shim/torch/events.h"
#include "shim/torch/view.h"
#include "shim/track/tracker.h"

namespace gg::torch {
namespace {

using nlohmann::json;
namespace key = schema::key;
namespace value = schema::value;

// Bounds on what one report lists (the totals are always whole).
constexpr size_t kMaxBlocksListed = 50000;
constexpr size_t kMaxSegmentsListed = 20000;
constexpr size_t kMaxStacksListed = 500;

// Device memory at an address, which c10's blocks can lie in. The driver API decides, not the program's:
// cudart's cudaMallocArray is an array all the same.
bool is_segment(Api driver_api) {
    HookKind k = hook_kind(driver_api);
    return k == HookKind::kLinear || k == HookKind::kAsync;
}

// Whether PyTorch's CUDA library is in the process (its blocks may simply not have been reported:
// the cudaMallocAsync backend, or a PyTorch without the call).
bool c10_cuda_loaded() {
    return dl_iterate_phdr(
               [](dl_phdr_info *info, size_t, void *) -> int {
                   return info->dlpi_name && strstr(info->dlpi_name, "libc10_cuda.so") ? 1 : 0;
               },
               nullptr) != 0;
}

json stack_list(report::SectionWriter &w, const std::vector<StackBytes> &v) {
    json out = json::array();
    for (size_t i = 0; i < v.size() && i < kMaxStacksListed; i++)
        out.push_back({{key::stack, w.stack(v[i].stack)}, {key::bytes, v[i].bytes}, {key::count, v[i].count}});
    return out;
}

// What the listed blocks cover of PyTorch's allocated bytes on `device`: all of them unless the view
// was switched off at run time (shim/torch/view.h). While it is off, the blocks listed are those live
// when it was switched off, some maybe freed since; once back on, the blocks made while it was off
// stay unlisted until freed. Unlisted: PyTorch's total less the listed bytes.
json coverage_json(const Tracker::Snapshot &b, int device, uint64_t allocated, uint64_t start_mono_ns) {
    Coverage c = coverage();
    // Never switched off: every block was seen. PyTorch's total and the table are read a moment apart
    // while other threads allocate and free, so their difference says nothing about the switch then.
    if (c.switched_off == 0 && !c.off)
        return {{key::complete, true},  {key::unlisted_bytes, 0}, {key::listed_since_ns, 0},
                {key::switched_off, 0}, {key::off, false},        {key::off_ns, 0}};
    uint64_t listed = b.live_bytes;  // every device's, where more are live than a snapshot lists
    if (b.top.size() == b.live_count) {
        listed = 0;
        for (const auto &[address, a] : b.top)
            if (a.ordinal == device) listed += a.bytes;
    }
    uint64_t unlisted = allocated > listed ? allocated - listed : 0;
    return {{key::complete, !c.off && unlisted == 0},
            {key::unlisted_bytes, unlisted},
            {key::listed_since_ns, c.listed_since_ns ? c.listed_since_ns - start_mono_ns : 0},
            {key::switched_off, c.switched_off},
            {key::off, c.off},
            {key::off_ns, c.missed_off_ns}};
}

// A row of the report's layout (common/report/schema.h): each value is put at its column.
json row_of(unsigned columns) { return json(json::array_t(columns)); }

// The live blocks on `device`, largest first, each with the stack that allocated it. Written a row at
// a time, as are the lists below (shim/report/json_out.h).
void write_blocks(report::SectionWriter &w, const Tracker::Snapshot &b, int device) {
    namespace col = schema::block_row;
    uint64_t now = mono_ns();
    size_t listed = 0;
    w.out.begin_object(key::blocks);
    w.out.value(key::count, b.live_count);
    w.out.begin_array(key::list);
    for (const auto &[address, a] : b.top) {
        if (a.ordinal != device) continue;
        json row = row_of(col::kColumns);
        row[col::address] = address;
        row[col::bytes] = a.bytes;
        row[col::stack] = w.stack(a.stack);
        row[col::age_ns] = now - a.t_ns;
        w.out.item(row);
        listed++;
    }
    w.out.end_array();
    w.out.value(key::listed, listed);
    w.out.end_object();
}

// The segments the blocks lie in: the device memory this process got from the driver, with the stack
// that made it grow.
void write_segments(report::SectionWriter &w, int device) {
    namespace col = schema::segment_row;
    Tracker::Snapshot seg = tracker().snapshot(kMaxSegmentsListed);
    w.out.begin_array(key::segments);
    for (const auto &[address, a] : seg.top) {
        if (a.ordinal != device || !is_segment(a.driver_api)) continue;
        json row = row_of(col::kColumns);
        row[col::address] = address;
        row[col::bytes] = a.bytes;
        row[col::stack] = w.stack(a.stack);
        row[col::api] = api_name(a.api);
        w.out.item(row);
    }
    w.out.end_array();
}

// The ranges mapped into expandable segments.
void write_mappings(report::JsonOut &out) {
    namespace col = schema::mapping_row;
    out.begin_array(key::mappings);
    for (const auto &[address, bytes] : mappings()) {
        json row = row_of(col::kColumns);
        row[col::address] = address;
        row[col::bytes] = bytes;
        out.item(row);
    }
    out.end_array();
}

json oom_json(const State &s) {
    OutOfMemory oom = last_out_of_memory();
    if (!oom.seen) return nullptr;
    return {{key::requested_bytes, oom.requested},
            {key::allocated_bytes, oom.allocated},
            {key::reserved_bytes, oom.reserved},
            {key::device, oom.device},
            {key::time_unix_ns, s.start_unix_ns + (oom.t_ns - s.start_mono_ns)}};
}

json timeline_json(const State &s) {
    namespace col = schema::tensor_point_row;
    json points = json::array();
    for (const auto &[tp, v] : timeline()) {
        json row = row_of(col::kColumns);
        row[col::t_ns] = tp - s.start_mono_ns;
        row[col::allocated] = v[0];
        row[col::reserved] = v[1];
        points.push_back(std::move(row));
    }
    return {{key::t0_unix_ns, s.start_unix_ns}, {key::points, points}};
}

// The newest rows that a readable report holds (common/report/limits.h), read from the ring as they
// are written; the rest count as dropped.
void write_events(report::JsonOut &out, const State &s) {
    namespace col = schema::event_row;
    out.begin_object(key::events);
    out.value(key::columns, col::kNames);
    out.begin_array(key::rows);
    EventRing::Counts n = events().visit_newest(report_limits::kMaxEventRows, [&](const Event &e) {
        json row = row_of(col::kColumns);
        row[col::t_ns] = e.t_ns - s.start_mono_ns;
        row[col::action] = std::string(1, action_code(e.action));
        row[col::address] = e.address;
        row[col::bytes] = e.bytes;
        row[col::allocated] = e.allocated;
        row[col::reserved] = e.reserved;
        row[col::device] = int(e.device);
        out.item(row);
    });
    out.end_array();
    out.value(key::capacity, n.capacity);
    out.value(key::recorded, n.recorded);
    out.value(key::dropped, n.dropped);
    out.value(key::left_out, n.left_out);
    out.end_object();
}

void section(report::SectionWriter &w) {
    bool c10 = active();
    if (!c10 && !c10_cuda_loaded()) return;  // not a PyTorch process: nothing to say
    int device = w.ordinal < 0 ? 0 : w.ordinal;
    const State &s = state();
    const char *conf = settings::env("PYTORCH_CUDA_ALLOC_CONF");
    std::string conf_text = conf ? conf : "";

    json t;
    t[key::source] = c10 ? value::kSourceC10 : value::kSourceDriver;
    t[key::backend] =
        conf_text.find("cudaMallocAsync") != std::string::npos ? value::kBackendAsync : value::kBackendNative;
    t[key::allocator_conf] = conf_text;
    t[key::device] = device;
    Totals tot = totals(device);
    t[key::allocated_bytes] = tot.allocated;
    t[key::reserved_bytes] = tot.reserved;
    t[key::peak_allocated_bytes] = tot.peak_allocated;
    t[key::peak_reserved_bytes] = tot.peak_reserved;
    t[key::refusals_recovered] = refusals_recovered();  // refusals PyTorch freed its cache for

    Tracker::Snapshot b = blocks().snapshot(kMaxBlocksListed);
    t[key::by_stack] = stack_list(w, b.by_stack);
    t[key::peak_by_stack] = stack_list(w, b.peak_by_stack);
    t[key::coverage] = coverage_json(b, device, tot.allocated, s.start_mono_ns);
    t[key::oom] = oom_json(s);
    t[key::timeline] = timeline_json(s);
    w.out.begin_object(key::tensor_view);
    for (const auto &[k, v] : t.items()) w.out.value(k.c_str(), v);
    write_blocks(w, b, device);
    write_segments(w, device);
    write_mappings(w.out);
    write_events(w.out, s);
    w.out.end_object();
}

std::once_flag g_registered;

}  // namespace

void register_section() {
    std::call_once(g_registered, [] { report::add_streamed_section(section); });
}

}  // namespace gg::torch
