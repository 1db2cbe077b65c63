// Reading a report file into gg::report::Report (tools/report/model.h): strict about what the file is,
// lenient about what it holds.
#include "common/base/version.h"

#include "tools/report/model.h"
#include "tools/report/scanned_rows.h"
#include "tools/report/streamed_rows.h"

#include "common/base/printable.h"
#include "common/report/environment.h"
#include "common/report/schema.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

namespace gg::report {

namespace key = gg::schema::key;

namespace {

// ---- lenient field access: a missing or mistyped field is unknown, never an error ----

// A JSON number with a fraction or an exponent ("1e300") converted to an integer type, or unknown
// when it does not fit: the cast alone is undefined behaviour out of range (found by fuzz_report).
std::optional<int64_t> double_to_i64(double d) {
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return std::nullopt;
    return static_cast<int64_t>(d);
}
Bytes double_to_u64(double d) {
    if (!(d >= 0 && d < 18446744073709551616.0)) return std::nullopt;
    return static_cast<uint64_t>(d);
}

const json *field(const json &obj, const char *name) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
}

// Every string of the model is made printable here (common/base/printable.h): a report is a file
// anyone may have edited, and its command line is the program's argv, so any of its strings may hold
// a terminal escape (C0 or C1) that the text summary, diff or an export would print raw.
std::string str(const json &obj, const char *name) {
    const json *v = field(obj, name);
    return v && v->is_string() ? printable(v->get<std::string>()) : std::string();
}

std::optional<int64_t> i64(const json &obj, const char *name) {
    const json *v = field(obj, name);
    if (!v) return std::nullopt;
    if (v->is_number_unsigned()) {
        uint64_t u = v->get<uint64_t>();
        if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
        return static_cast<int64_t>(u);
    }
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float()) return double_to_i64(v->get<double>());
    return std::nullopt;
}

// Sizes: negative means unknown (the schema uses -1 for "the driver did not say").
Bytes u64(const json &obj, const char *name) {
    const json *v = field(obj, name);
    if (!v) return std::nullopt;
    if (v->is_number_unsigned()) return v->get<uint64_t>();
    if (v->is_number_integer()) {
        int64_t s = v->get<int64_t>();
        return s < 0 ? Bytes() : Bytes(static_cast<uint64_t>(s));
    }
    if (v->is_number_float()) return double_to_u64(v->get<double>());
    return std::nullopt;
}

// Times (Unix ns, offsets and ages in ns) are kept within [0, 2^62), about the year 2116, or unknown:
// renderers subtract and add them, and two such values can neither overflow a sum nor a difference
// (a report with time_unix_ns -2^63 overflowed the text summary's sparkline: found by fuzz_report).
constexpr int64_t kMaxTimeNs = int64_t(1) << 62;
std::optional<int64_t> time_ns(const json &obj, const char *name) {
    auto v = i64(obj, name);
    if (!v || *v < 0 || *v >= kMaxTimeNs) return std::nullopt;
    return v;
}

std::optional<int> i32(const json &obj, const char *name) {
    auto v = i64(obj, name);
    if (!v || *v < INT32_MIN || *v > INT32_MAX) return std::nullopt;  // never device 0 for 2^32
    return static_cast<int>(*v);
}

bool boolean(const json &obj, const char *name, bool fallback) {
    const json *v = field(obj, name);
    return v && v->is_boolean() ? v->get<bool>() : fallback;
}

const json &empty_object() {
    static const json e = json::object();
    return e;
}
const json &obj(const json &parent, const char *name) {
    const json *v = field(parent, name);
    return v && v->is_object() ? *v : empty_object();
}
const json &arr(const json &parent, const char *name) {
    static const json e = json::array();
    const json *v = field(parent, name);
    return v && v->is_array() ? *v : e;
}

std::vector<StackBytes> read_stack_bytes(const json &list) {
    std::vector<StackBytes> out;
    for (const json &e : list) {
        if (!e.is_object()) continue;
        StackBytes sb;
        sb.stack = str(e, key::stack);
        sb.bytes = u64(e, key::bytes).value_or(0);
        sb.count = u64(e, key::count).value_or(0);
        out.push_back(sb);
    }
    // The schema says largest first; sort anyway so a hand-edited file cannot mislead.
    std::stable_sort(out.begin(), out.end(),
                     [](const StackBytes &a, const StackBytes &b) { return a.bytes > b.bytes; });
    return out;
}

Frame read_frame(const json &f) {
    Frame fr;
    fr.python = str(f, key::kind) == schema::value::kPython;
    if (fr.python) {
        fr.file = str(f, key::file);
        fr.function = str(f, key::function);
        fr.line = i64(f, key::line);
    } else {
        fr.module = str(f, key::module);
        fr.symbol = str(f, key::symbol);
        fr.offset = str(f, key::offset);
        fr.ip = str(f, key::ip);
        fr.build_id = str(f, key::build_id);
    }
    return fr;
}

// A row of numbers as the tensor view writes them ([address, bytes, stack, ...]), read as it is parsed
// (tools/report/streamed_rows.h): lenient, as the rest of the reader is; a row whose address or size
// is not a number is left out.
std::optional<uint64_t> row_u64(const Row &row, size_t i) {
    if (i >= row.size()) return std::nullopt;
    const Cell &v = row[i];
    switch (v.kind) {
        case Cell::kUnsigned: return v.u;
        case Cell::kSigned: return v.i < 0 ? Bytes() : Bytes(uint64_t(v.i));
        case Cell::kFloat: return double_to_u64(v.f);
        default: return std::nullopt;
    }
}
std::string row_str(const Row &row, size_t i) {
    // Printable, as str() makes every other string of the model.
    return i < row.size() && row[i].kind == Cell::kString ? printable(row[i].s) : std::string();
}

void read_block_row(const Row &row, std::vector<TensorBlock> &out) {
    namespace col = schema::block_row;
    auto address = row_u64(row, col::address), bytes = row_u64(row, col::bytes);
    if (!address || !bytes) return;
    TensorBlock b{*address, *bytes, row_str(row, col::stack), std::nullopt};
    if (auto age = row_u64(row, col::age_ns); age && *age < uint64_t(kMaxTimeNs)) b.age_ns = int64_t(*age);
    out.push_back(b);
}

void read_segment_row(const Row &row, std::vector<TensorSegment> &out) {
    namespace seg = schema::segment_row;
    auto address = row_u64(row, seg::address), bytes = row_u64(row, seg::bytes);
    if (address && bytes) out.push_back({*address, *bytes, row_str(row, seg::stack), row_str(row, seg::api)});
}

void read_mapping_row(const Row &row, std::vector<std::pair<uint64_t, uint64_t>> &out) {
    namespace mapping = schema::mapping_row;
    auto address = row_u64(row, mapping::address), bytes = row_u64(row, mapping::bytes);
    if (address && bytes) out.push_back({*address, *bytes});
}

void read_tensor_point_row(const Row &row, std::vector<TensorView::Point> &out) {
    namespace col = schema::tensor_point_row;
    auto at = row_u64(row, col::t_ns), a = row_u64(row, col::allocated), res = row_u64(row, col::reserved);
    if (at && a && res && *at < uint64_t(kMaxTimeNs)) out.push_back({int64_t(*at), *a, *res});
}

// The model's actions are the file's letters (an event's action is its letter, cast).
static_assert(TensorEvent::kAlloc == schema::action::kAlloc && TensorEvent::kFree == schema::action::kFree &&
                  TensorEvent::kOom == schema::action::kOom &&
                  TensorEvent::kSegmentAlloc == schema::action::kSegmentAlloc &&
                  TensorEvent::kSegmentFree == schema::action::kSegmentFree,
              "tools/report/model.h's TensorEvent::Action spells common/report/schema.h's action letters");

// An event row's action letter, or 0 when it names none the schema knows. Read in place, not copied
// as row_str copies: a report holds up to millions of rows, and printable() keeps a known letter as it
// is and makes no other string one.
char row_action(const Row &row, size_t i) {
    if (i >= row.size() || row[i].kind != Cell::kString) return 0;
    const std::string &s = row[i].s;
    return s.size() == 1 && schema::action::known(s[0]) ? s[0] : 0;
}

// `[0,"a",0,0,0,0],`: no event row the reader keeps is shorter; `[0,0],`, no point of the timeline.
constexpr size_t kShortestEventRow = 16;
constexpr size_t kShortestPointRow = 6;

// The device of an event that names none (or none the shim could have: ordinals under 64) is the
// view's, known once the whole view is read: kViewsDevice until then.
constexpr int kViewsDevice = -1;

void read_event_row(const Row &row, std::vector<TensorEvent> &out) {
    namespace col = schema::event_row;
    char action = row_action(row, col::action);
    auto at = row_u64(row, col::t_ns), address = row_u64(row, col::address), bytes = row_u64(row, col::bytes),
         a = row_u64(row, col::allocated), res = row_u64(row, col::reserved), device = row_u64(row, col::device);
    if (!action || !at || *at >= uint64_t(kMaxTimeNs) || !address || !bytes || !a || !res) return;
    TensorEvent e;
    e.t_ns = int64_t(*at);
    e.action = TensorEvent::Action(action);
    e.address = *address;
    e.bytes = *bytes;
    e.allocated = *a;
    e.reserved = *res;
    e.device = device && *device < 64 ? int(*device) : kViewsDevice;
    out.push_back(e);
}

// A point of the process's timeline: [t_ns, bytes], both any JSON number.
void read_point_row(const Row &pt, std::vector<std::pair<int64_t, uint64_t>> &out) {
    namespace col = schema::point_row;
    if (pt.size() < col::kColumns || !pt[col::t_ns].is_number() || !pt[col::bytes].is_number()) return;
    auto t = double_to_i64(pt[col::t_ns].as_double());
    double b = pt[col::bytes].as_double();
    if (!t || *t < 0 || *t >= kMaxTimeNs) return;
    out.emplace_back(*t, b < 0 ? 0 : double_to_u64(b).value_or(UINT64_MAX));
}

// The report's arrays of rows, read as they are parsed. Each is the model's only when the document
// still holds an array at its place (taken()): a later key of the same name may have replaced it.
struct Rows {
    std::vector<TensorEvent> events;
    std::vector<TensorBlock> blocks;
    std::vector<TensorSegment> segments;
    std::vector<std::pair<uint64_t, uint64_t>> mappings;
    std::vector<TensorView::Point> tensor_timeline;
    std::vector<std::pair<int64_t, uint64_t>> timeline;
};

template <typename T, void (*Read)(const Row &, std::vector<T> &)>
RowArray rows_into(std::vector<const char *> path, std::vector<T> &out) {
    return {std::move(path), &out, [](void *o) { static_cast<std::vector<T> *>(o)->clear(); },
            [](void *o, const Row &row) { Read(row, *static_cast<std::vector<T> *>(o)); }};
}

// In the order of row_array_paths().
std::vector<RowArray> row_arrays(Rows &rows) {
    const auto &path = row_array_paths();
    return {rows_into<TensorEvent, read_event_row>(path[0], rows.events),
            rows_into<TensorBlock, read_block_row>(path[1], rows.blocks),
            rows_into<TensorSegment, read_segment_row>(path[2], rows.segments),
            rows_into<std::pair<uint64_t, uint64_t>, read_mapping_row>(path[3], rows.mappings),
            rows_into<TensorView::Point, read_tensor_point_row>(path[4], rows.tensor_timeline),
            rows_into<std::pair<int64_t, uint64_t>, read_point_row>(path[5], rows.timeline)};
}

// A timeline by time. The shim writes it so: then it is left as it is, without stable_sort's buffer
// as large as the timeline (64 MB more memory touched for the 4 million points of 64 MiB).
template <typename Point, typename Earlier>
void sort_by_time(std::vector<Point> &points, Earlier earlier) {
    if (!std::is_sorted(points.begin(), points.end(), earlier)) std::stable_sort(points.begin(), points.end(), earlier);
}

template <typename T>
std::vector<T> taken(const json &parent, const char *name, std::vector<T> &rows) {
    const json *v = field(parent, name);
    return v && v->is_array() ? std::move(rows) : std::vector<T>();
}

void read_tensor_blocks(const json &t, Rows &rows, TensorView &v) {
    const json &blocks = obj(t, key::blocks);
    v.block_count = u64(blocks, key::count).value_or(0);
    v.blocks = taken(blocks, key::list, rows.blocks);
    std::stable_sort(v.blocks.begin(), v.blocks.end(),
                     [](const TensorBlock &a, const TensorBlock &b) { return a.bytes > b.bytes; });
    v.by_stack = read_stack_bytes(arr(t, key::by_stack));
    v.peak_by_stack = read_stack_bytes(arr(t, key::peak_by_stack));
}

void read_tensor_segments(const json &t, Rows &rows, TensorView &v) {
    v.segments = taken(t, key::segments, rows.segments);
    std::sort(v.segments.begin(), v.segments.end(),
              [](const TensorSegment &a, const TensorSegment &b) { return a.address < b.address; });
    v.mappings = taken(t, key::mappings, rows.mappings);
    std::sort(v.mappings.begin(), v.mappings.end());
}

void read_tensor_oom(const json &t, TensorView &v) {
    if (const json *o = field(t, key::oom); o && o->is_object()) {
        TensorOom oom;
        oom.requested = u64(*o, key::requested_bytes).value_or(0);
        oom.allocated = u64(*o, key::allocated_bytes).value_or(0);
        oom.reserved = u64(*o, key::reserved_bytes).value_or(0);
        oom.device = i32(*o, key::device).value_or(v.device);
        oom.time_unix_ns = time_ns(*o, key::time_unix_ns);
        v.oom = oom;
    }
}

void read_tensor_timeline(const json &t, Rows &rows, TensorView &v) {
    const json &tl = obj(t, key::timeline);
    v.timeline_t0_unix_ns = time_ns(tl, key::t0_unix_ns);
    v.timeline = taken(tl, key::points, rows.tensor_timeline);
    sort_by_time(v.timeline, [](const auto &x, const auto &y) { return x.t_ns < y.t_ns; });
}

void read_tensor_coverage(const json &t, TensorView &v) {
    const json &cov = obj(t, key::coverage);
    if (const json *c = field(cov, key::complete); c && c->is_boolean()) v.coverage_complete = c->get<bool>();
    if (const json *o = field(cov, key::off); o && o->is_boolean()) v.off = o->get<bool>();
    v.unlisted_bytes = u64(cov, key::unlisted_bytes).value_or(0);
    v.switched_off = u64(cov, key::switched_off).value_or(0);
}

void read_tensor_events(const json &t, Rows &rows, TensorView &v) {
    const json &ev = obj(t, key::events);
    v.events_capacity = u64(ev, key::capacity).value_or(0);
    v.events_recorded = u64(ev, key::recorded).value_or(0);
    v.events_dropped = u64(ev, key::dropped).value_or(0);
    v.events = taken(ev, key::rows, rows.events);
    for (TensorEvent &e : v.events)
        if (e.device == kViewsDevice) e.device = v.device;
}

TensorView read_tensor_view(const json &t, Rows &rows) {
    TensorView v;
    v.source = str(t, key::source);
    v.backend = str(t, key::backend);
    v.allocator_conf = str(t, key::allocator_conf);
    v.device = i32(t, key::device).value_or(0);
    v.allocated = u64(t, key::allocated_bytes);
    v.reserved = u64(t, key::reserved_bytes);
    v.peak_allocated = u64(t, key::peak_allocated_bytes);
    v.peak_reserved = u64(t, key::peak_reserved_bytes);
    read_tensor_blocks(t, rows, v);
    read_tensor_segments(t, rows, v);
    read_tensor_oom(t, v);
    read_tensor_timeline(t, rows, v);
    read_tensor_coverage(t, v);
    read_tensor_events(t, rows, v);
    return v;
}

void read_process(const json &d, Report &r) {
    const json &p = obj(d, key::process);
    r.pid = i64(p, key::pid);
    r.ppid = i64(p, key::ppid);
    r.uid = i64(p, key::uid);
    r.start_unix_ns = time_ns(p, key::start_unix_ns);
    for (const json &a : arr(p, key::command))
        if (a.is_string()) r.command.push_back(printable(a.get<std::string>()));
    r.exe = str(p, key::exe);
    r.hostname = str(p, key::hostname);
    // By the rule the shim writes with now (common/report/environment.h), also for a report written
    // by an earlier version: parse() has already taken the others out of the document itself.
    for (auto &[k, v] : obj(p, key::env).items()) {
        std::string value;
        if (v.is_string() && report_env::carried(k, v.get<std::string>(), &value))
            r.env[printable(k)] = printable(value);
    }
}

void read_device_limit_and_usage(const json &d, Report &r) {
    const json &dev = obj(d, key::device);
    r.device_ordinal = i32(dev, key::ordinal);
    r.device_uuid = str(dev, key::uuid);
    r.device_name = str(dev, key::name);
    r.device_total = u64(dev, key::total_bytes);
    r.device_free = u64(dev, key::free_bytes);

    if (const json *l = field(d, key::limit); l && l->is_object()) {
        r.limit_bytes = u64(*l, key::bytes);
        r.limit_spec = str(*l, key::spec);
        r.limit_source = str(*l, key::source);
        r.limit_scope = str(*l, key::scope);
    }

    const json &u = obj(d, key::usage);
    r.process_bytes = u64(u, key::process_bytes);
    r.process_peak_bytes = u64(u, key::process_peak_bytes);
    r.container_bytes = u64(u, key::container_bytes);
    r.live_allocations = u64(u, key::live_allocations);
}

void read_failed_request(const json &d, Report &r) {
    if (const json *f = field(d, key::failed_request); f && f->is_object()) {
        FailedRequest fr;
        fr.api = str(*f, key::api);
        fr.driver_api = str(*f, key::driver_api);
        fr.stack = str(*f, key::stack);
        fr.bytes = u64(*f, key::bytes);
        fr.device = i32(*f, key::device);
        fr.thread = i64(*f, key::thread);
        fr.driver_result = i64(*f, key::driver_result);
        r.failed = fr;
    }

    const json &ep = obj(d, key::episode);
    r.episode_id = i64(ep, key::id);
    r.episode_failed_calls = i64(ep, key::failed_calls);
}

void read_allocations(const json &d, Report &r) {
    for (auto &[api, c] : obj(d, key::counts_by_api).items()) {
        ApiCounts ac;
        ac.api = printable(api);
        ac.allocs = u64(c, key::allocs).value_or(0);
        ac.frees = u64(c, key::frees).value_or(0);
        ac.failures = u64(c, key::failures).value_or(0);
        ac.live_bytes = u64(c, key::live_bytes).value_or(0);
        ac.live_count = u64(c, key::live_count).value_or(0);
        r.counts_by_api.push_back(ac);
    }

    for (const json &a : arr(d, key::top_allocations)) {
        if (!a.is_object()) continue;
        Allocation al;
        al.address = str(a, key::address);
        al.api = str(a, key::api);
        al.stack = str(a, key::stack);
        al.tag = str(a, key::tag);
        al.bytes = u64(a, key::bytes).value_or(0);
        al.device = i32(a, key::device);
        al.age_ns = time_ns(a, key::age_ns);
        al.thread = i64(a, key::thread);
        r.top_allocations.push_back(al);
    }
    std::stable_sort(r.top_allocations.begin(), r.top_allocations.end(),
                     [](const Allocation &a, const Allocation &b) { return a.bytes > b.bytes; });

    r.by_stack = read_stack_bytes(arr(d, key::by_stack));
}

void read_peak_and_timeline(const json &d, Rows &rows, Report &r) {
    const json &pk = obj(d, key::peak);
    r.peak_bytes = u64(pk, key::bytes);
    r.peak_time_unix_ns = time_ns(pk, key::time_unix_ns);
    r.peak_by_stack = read_stack_bytes(arr(pk, key::by_stack));

    const json &tl = obj(d, key::timeline);
    r.timeline_t0_unix_ns = time_ns(tl, key::t0_unix_ns);
    r.timeline = taken(tl, key::points, rows.timeline);
    sort_by_time(r.timeline, [](const auto &a, const auto &b) { return a.first < b.first; });
}

void read_stacks(const json &d, Report &r) {
    for (auto &[id, s] : obj(d, key::stacks).items()) {
        Stack st;
        st.id = printable(id);
        for (const json &f : arr(s, key::frames))
            if (f.is_object()) st.frames.push_back(read_frame(f));
        r.stacks[st.id] = std::move(st);
    }
}

void read_ledger(const json &d, Report &r) {
    if (const json *l = field(d, key::ledger); l && l->is_object()) {
        r.has_ledger = true;
        r.ledger_path = str(*l, key::path);
        for (const json &dv : arr(*l, key::devices)) {
            LedgerDevice ld;
            ld.uuid = str(dv, key::uuid);
            ld.limit_bytes = u64(dv, key::limit_bytes);
            ld.used_bytes = u64(dv, key::used_bytes);
            ld.peak_bytes = u64(dv, key::peak_bytes);
            r.ledger_devices.push_back(ld);
        }
        for (const json &pr : arr(*l, key::processes)) {
            if (!pr.is_object()) continue;
            LedgerProcess lp;
            lp.pid = i64(pr, key::pid).value_or(0);
            lp.command = str(pr, key::command);
            lp.bytes = u64(pr, key::bytes).value_or(0);
            lp.peak_bytes = u64(pr, key::peak_bytes);
            lp.alive = boolean(pr, key::alive, true);
            lp.self = boolean(pr, key::self, r.pid && lp.pid == *r.pid);
            r.ledger_processes.push_back(lp);
        }
        std::stable_sort(r.ledger_processes.begin(), r.ledger_processes.end(),
                         [](const LedgerProcess &a, const LedgerProcess &b) { return a.bytes > b.bytes; });
    }
}

void read_cudnn(const json &d, Report &r) {
    if (const json *c = field(d, key::cudnn); c && c->is_object()) {
        Cudnn cd;
        cd.workspace_cap_bytes = u64(*c, key::workspace_cap_bytes);
        cd.largest_workspace_requested_bytes = u64(*c, key::largest_workspace_requested_bytes);
        cd.workspace_in_use_bytes = u64(*c, key::workspace_in_use_bytes);
        cd.plans_rejected = u64(*c, key::plans_rejected);
        for (const json &e : arr(*c, key::requests_by_stack)) {
            CudnnStack cs;
            cs.stack = str(e, key::stack);
            cs.largest_bytes = u64(e, key::largest_bytes).value_or(0);
            cs.count = u64(e, key::count).value_or(0);
            cd.requests_by_stack.push_back(cs);
        }
        std::stable_sort(cd.requests_by_stack.begin(), cd.requests_by_stack.end(),
                         [](const CudnnStack &a, const CudnnStack &b) { return a.largest_bytes > b.largest_bytes; });
        r.cudnn = cd;
    }
}

void read_body(const json &d, Rows &rows, Report &r) {
    r.reason = str(d, key::reason);
    r.message = str(d, key::message);
    r.phase = str(d, key::phase);
    r.gpuguard_version = str(d, key::gpuguard_version);
    r.time_unix_ns = time_ns(d, key::time_unix_ns);
    read_process(d, r);
    read_device_limit_and_usage(d, r);
    read_failed_request(d, r);
    read_allocations(d, r);
    read_peak_and_timeline(d, rows, r);
    read_stacks(d, r);
    read_ledger(d, r);
    if (const json *t = field(d, key::tensor_view); t && t->is_object()) r.tensor = read_tensor_view(*t, rows);
    read_cudnn(d, r);
}

std::string describe(const json &v) {
    if (v.is_string()) return "'" + v.get<std::string>() + "'";
    std::string s = v.dump();
    if (s.size() > 40) s = s.substr(0, 37) + "...";
    return s;
}

// Asks for the 2 MiB pages within [p, p + bytes), where the kernel gives them on request (transparent
// huge pages in "madvise" mode). The file's text and the vectors of rows are up to 64 MB of memory
// touched for the first time: a fault each 4 KiB page, 16,000 of them, took about a fifth of a 64 MiB
// summary on the development machine (0.15 of 0.6 wall s, TTok); in huge pages, 32. Nothing changes
// where the kernel says no.
void in_huge_pages(const void *p, size_t bytes) {
    const uintptr_t huge = uintptr_t(2) << 20;
    const uintptr_t lo = (uintptr_t(p) + huge - 1) & ~(huge - 1), hi = (uintptr_t(p) + bytes) & ~(huge - 1);
    if (hi > lo) madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_HUGEPAGE);
}

}  // namespace

std::string size_text(size_t bytes) {
    return bytes % (1 << 20) == 0 ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

// Reads at most max + 1 bytes: enough to tell a file over the limit (/dev/zero never ends).
bool read_bounded(int fd, size_t max, std::string *text, std::string *error) {
    char buf[1 << 16];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            *error = strerror(errno);
            return false;
        }
        if (n == 0) return true;
        text->append(buf, (size_t)n);
        if (text->size() > max) return true;
    }
}

// The deepest nesting of arrays and objects, counted before anything is parsed (strings skipped);
// stops counting past `max`.
int nesting(const std::string &text, int max) {
    int depth = 0, deepest = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > deepest && (deepest = depth) > max) return deepest;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return deepest;
}

const std::vector<std::vector<const char *>> &row_array_paths() {
    static const std::vector<std::vector<const char *>> paths = {{key::tensor_view, key::events, key::rows},
                                                                 {key::tensor_view, key::blocks, key::list},
                                                                 {key::tensor_view, key::segments},
                                                                 {key::tensor_view, key::mappings},
                                                                 {key::tensor_view, key::timeline, key::points},
                                                                 {key::timeline, key::points}};
    return paths;
}

bool load(const std::string &path, Report &out, LoadError &err, const Limits &limits, Keep keep) {
    out = Report();
    out.path = path;
    out.name = path;
    std::string text, why;
    if (path == "-") {
        out.name = "<stdin>";
        if (!read_bounded(STDIN_FILENO, limits.max_bytes, &text, &why)) {
            err.message = "<stdin>: cannot read: " + why;
            return false;
        }
    } else {
        // A folder opens as a file and reads as nothing, which said "empty file".
        struct stat dir_st;
        if (stat(path.c_str(), &dir_st) == 0 && S_ISDIR(dir_st.st_mode)) {
            err.message = path + ": a folder, not a report (gpuguard report FOLDER reads the newest report in it)";
            return false;
        }
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            err.message = path + ": cannot open: " + strerror(errno);
            return false;
        }
        // A file that says it is too large is refused before a byte is read; one that does not say
        // (a pipe, a device such as /dev/zero) is read up to the limit.
        struct stat st;
        const bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
        if (regular && (uint64_t)st.st_size > limits.max_bytes) {
            close(fd);
            err.message =
                path + ": larger than " + size_text(limits.max_bytes) + ", more than any gpuguard report; not read";
            return false;
        }
        if (regular) text.reserve(size_t(st.st_size) + 1);  // read once, not copied as it grows
        if (regular) in_huge_pages(text.data(), text.capacity());
        bool ok = read_bounded(fd, limits.max_bytes, &text, &why);
        close(fd);
        if (!ok) {
            err.message = path + ": cannot read: " + why;
            return false;
        }
    }
    std::string name = out.name;  // a copy: parse starts by clearing `out`
    // kText's document is kModelOnly's; the text is moved here rather than copied by parse.
    bool ok = parse(text, name, out, err, limits, keep == Keep::kText ? Keep::kModelOnly : keep);
    out.path = path;
    if (ok && keep == Keep::kText) out.text = std::move(text);
    return ok;
}

namespace {

// The rows read by the scanner of their layout (scanned_rows.h), and in `rest` the text it leaves for
// nlohmann's parser; false, with no row kept, where it leaves the whole text to the parser.
bool scan_rows(const std::string &text, int max_depth, Rows &rows, std::string &rest) {
    if (RowScanner(text, row_arrays(rows)).scan(max_depth, rest)) return true;
    for (const RowArray &a : row_arrays(rows)) a.restart(a.reader);
    return false;
}

// The text as a JSON object, or the line that says why it is none; its arrays of rows read into `rows`
// as they are parsed, and kept in the document too only with Keep::kDocument.
bool parse_json(const std::string &text, const std::string &name, const Limits &limits, Keep keep, json &d, Rows &rows,
                LoadError &err) {
    if (text.size() > limits.max_bytes) {
        err.message =
            name + ": larger than " + size_text(limits.max_bytes) + ", more than any gpuguard report; not read";
        return false;
    }
    bool parsed;
    try {
        // Room for as many events and points as the text could hold, so that neither vector regrows (a
        // copy of up to 60 MB each time, and twice the memory touched): only what the rows fill is touched.
        rows.events.reserve(text.size() / kShortestEventRow);
        rows.timeline.reserve(text.size() / kShortestPointRow);
        in_huge_pages(rows.events.data(), rows.events.capacity() * sizeof(TensorEvent));
        in_huge_pages(rows.timeline.data(), rows.timeline.capacity() * sizeof(rows.timeline[0]));
        // Where the scanner does not read every row, or the document keeps them, the parser reads them all.
        std::string rest;
        const bool scanned = keep != Keep::kDocument && scan_rows(text, limits.max_depth, rows, rest);
        if (!scanned && nesting(text, limits.max_depth) > limits.max_depth) {
            err.message = name + ": nested more than " + std::to_string(limits.max_depth) +
                          " levels deep, which no gpuguard report is; not read";
            return false;
        }
        if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
            err.message = name + ": empty file, not a gpuguard report";
            return false;
        }
        if (scanned) {
            StreamedRows handler(d, {}, false);
            parsed = json::sax_parse(rest, &handler);
        } else {
            StreamedRows handler(d, row_arrays(rows), keep == Keep::kDocument);
            parsed = json::sax_parse(text, &handler);
        }
    } catch (const std::bad_alloc &) {
        err.message = name + ": out of memory while parsing it";
        return false;
    }
    if (!parsed) {
        // Tell a cut-off file (a crash while writing, a full disk) from one that never was JSON.
        bool looks_json = text[text.find_first_not_of(" \t\r\n")] == '{';
        err.message = name + (looks_json ? ": truncated or malformed JSON, not a complete gpuguard report"
                                         : ": not JSON, not a gpuguard report");
        return false;
    }
    if (!d.is_object()) {
        err.message = name + ": not a gpuguard report (the JSON is not an object)";
        return false;
    }
    return true;
}

// A gpuguard report of the version this reader reads.
bool check_schema(const json &d, const std::string &name, LoadError &err) {
    auto schema = d.find(key::schema);
    if (schema == d.end()) {
        err.message = name + ": not a gpuguard report (no 'schema' field)";
        return false;
    }
    if (!schema->is_string() || schema->get<std::string>() != gg::schema::kName) {
        err.message =
            name + ": not a gpuguard report (schema " + describe(*schema) + ", expected '" + gg::schema::kName + "')";
        return false;
    }
    auto version = d.find(key::version);
    if (version == d.end() || !version->is_number_integer()) {
        err.message = name + ": gpuguard report without a valid 'version'";
        return false;
    }
    if (version->get<int64_t>() != gg::schema::kVersion) {
        err.message = name + ": gpuguard report version " + version->dump() + " is not supported (this gpuguard " +
                      GPUGUARD_VERSION_STRING + " reads version " + std::to_string(gg::schema::kVersion) + ")";
        return false;
    }
    return true;
}

// The document is what --html embeds whole: the environment the reader does not carry leaves it.
void drop_uncarried_env(json &d) {
    if (auto p = d.find(key::process); p != d.end() && p->is_object()) {
        if (auto env = p->find(key::env); env != p->end() && env->is_object()) {
            json kept = json::object();
            for (auto &[k, v] : env->items()) {
                std::string value;
                if (v.is_string() && report_env::carried(k, v.get<std::string>(), &value)) kept[k] = value;
            }
            *env = std::move(kept);
        }
    }
}

}  // namespace

bool parse(const std::string &text, const std::string &name, Report &out, LoadError &err, const Limits &limits,
           Keep keep) {
    out = Report();
    out.path = name;
    out.name = name;
    json d;
    Rows rows;
    if (!parse_json(text, name, limits, keep, d, rows, err) || !check_schema(d, name, err)) return false;
    try {
        read_body(d, rows, out);
    } catch (const std::bad_alloc &) {
        err.message = name + ": out of memory while reading it";
        return false;
    } catch (const std::exception &e) {  // lenient accessors should make this unreachable
        err.message = name + ": unreadable report: " + e.what();
        return false;
    }
    drop_uncarried_env(d);
    out.raw = std::move(d);
    if (keep == Keep::kText) out.text = text;
    return true;
}

}  // namespace gg::report
