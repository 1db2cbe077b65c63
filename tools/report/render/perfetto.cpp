// Chrome's trace-event JSON ({"traceEvents": [...]}), which ui.perfetto.dev and chrome://tracing open:
// the timeline as a counter track ("ph":"C"), the limit as a second one, and the peak and the report
// (the failure, when there was one) as instant events ("ph":"i"), and the live bytes by stack (of
// PyTorch's tensors or of the driver allocations: render.h, Stacks) as instant events on two tracks of
// their own, at the report and at the peak. Timestamps are microseconds since the process's first
// hooked call, the timeline's origin.
#include "common/base/version.h"
#include "tools/report/render.h"

#include <algorithm>

namespace gg::report {

namespace {

double micros(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

// Unix time to the trace's clock (t0: its origin); unknown origins put the event at the end of the
// timeline.
double trace_time(const Report &r, int64_t t0, std::optional<int64_t> unix_ns) {
    if (unix_ns && t0 && *unix_ns >= t0) return micros(*unix_ns - t0);
    return r.timeline.empty() ? 0.0 : micros(r.timeline.back().first);
}

json counter(const char *track, int64_t pid, double ts, uint64_t bytes) {
    return {{"ph", "C"}, {"name", track}, {"pid", pid}, {"tid", pid}, {"ts", ts}, {"args", {{"bytes", bytes}}}};
}

// The live bytes as a counter track, carried to the report's moment (`end`) so that the failure sits
// at the end of a visible line, and the limit as a second track.
void add_memory_tracks(json &ev, const Report &r, int64_t pid, double end) {
    const char *track = "GPU memory (live bytes)";
    for (const auto &[t, bytes] : r.timeline) ev.push_back(counter(track, pid, micros(t), bytes));
    if (!r.timeline.empty() && end > micros(r.timeline.back().first))
        ev.push_back(counter(track, pid, end, r.live_bytes()));
    if (r.limit_bytes) {
        double start = r.timeline.empty() ? 0.0 : micros(r.timeline.front().first);
        for (double ts : {start, std::max(start, end)})
            ev.push_back(counter("GPU memory limit", pid, ts, *r.limit_bytes));
    }
}

// The report as an instant event: global for a failure, on the failed request's thread when known.
void add_report_event(json &ev, const Report &r, const Analysis &a, int64_t pid, double end) {
    json args = {{"reason", r.reason}, {"summary", a.headline}};
    if (!r.message.empty()) args["message"] = r.message;
    int64_t tid = pid;
    if (r.failed) {
        if (r.failed->bytes) args["bytes"] = *r.failed->bytes;
        args["api"] = r.failed->api;
        args["where"] = best_label(r, r.failed->stack);
        if (r.failed->thread) tid = *r.failed->thread;
    }
    args["live_bytes"] = r.live_bytes();
    if (r.limit_bytes) args["limit_bytes"] = *r.limit_bytes;
    ev.push_back({{"ph", "i"},
                  {"s", a.failure ? "g" : "p"},
                  {"name", a.failure ? "OOM: " + a.headline : a.headline},
                  {"cat", "gpuguard"},
                  {"pid", pid},
                  {"tid", tid},
                  {"ts", end},
                  {"args", args}});
    if (r.failed && r.failed->thread)
        ev.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid},
                      {"tid", tid},
                      {"args", {{"name", "thread " + std::to_string(tid) + " (failed request)"}}}});
}

// Two tracks of their own: thread ids above Linux's largest (2^22), so that they name no real thread.
constexpr int64_t kLiveHoldersTid = int64_t(1) << 30, kPeakHoldersTid = kLiveHoldersTid + 1;

// The moment of the peak of the chosen view: the report's peak for segments; for tensors, the tensor
// timeline's point of most allocated bytes (the tensor view keeps no peak time of its own).
std::optional<int64_t> peak_unix_ns(const Report &r, bool tensors) {
    if (!tensors) return r.peak_time_unix_ns;
    const TensorView &tv = *r.tensor;
    if (tv.timeline.empty() || !tv.timeline_t0_unix_ns) return std::nullopt;
    auto most = std::max_element(
        tv.timeline.begin(), tv.timeline.end(),
        [](const TensorView::Point &a, const TensorView::Point &b) { return a.allocated < b.allocated; });
    return *tv.timeline_t0_unix_ns + most->t_ns;
}

// Live bytes by stack as instant events on a track of their own, largest first, each named by its
// best frame and carrying its bytes and whole stack (innermost frame first) in args: the stacks of a
// flame graph, placed at the moment they describe.
void add_holders(json &ev, const Report &r, const std::vector<StackBytes> &list, int64_t pid, int64_t tid,
                 const std::string &track, double ts) {
    ev.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", track}}}});
    for (const StackBytes &sb : list) {
        if (sb.bytes == 0) continue;
        json stack = json::array();
        if (const Stack *s = r.stack(sb.stack)) {
            std::vector<const Frame *> frames = frames_outermost_first(*s);
            for (auto it = frames.rbegin(); it != frames.rend(); ++it) stack.push_back(frame_label(**it));
        }
        ev.push_back({{"ph", "i"},
                      {"s", "t"},
                      {"name", human_bytes(sb.bytes) + "  " + where_label(r, sb.stack)},
                      {"cat", "gpuguard"},
                      {"pid", pid},
                      {"tid", tid},
                      {"ts", ts},
                      {"args", {{"bytes", sb.bytes}, {"count", sb.count}, {"stack", stack}}}});
    }
}

void add_holder_tracks(json &ev, const Report &r, Stacks stacks, int64_t pid, int64_t t0, double end) {
    const std::vector<StackBytes> &live = stack_bytes(r, stacks, false), &peak = stack_bytes(r, stacks, true);
    const bool tensors = &live != &r.by_stack;
    add_holders(ev, r, live, pid, kLiveHoldersTid,
                tensors ? "live tensors by stack at the report" : "live GPU memory by stack at the report", end);
    if (&peak != &live)
        add_holders(ev, r, peak, pid, kPeakHoldersTid,
                    tensors ? "tensors by stack at the peak of allocated" : "GPU memory by stack at the peak",
                    trace_time(r, t0, peak_unix_ns(r, tensors)));
}

}  // namespace

json render_perfetto(const Report &r, const Analysis &a, Stacks stacks) {
    const int64_t pid = r.pid.value_or(1);
    const std::string who = r.command_line().empty() ? r.name : r.command_line();
    const int64_t t0 = r.timeline_t0_unix_ns ? *r.timeline_t0_unix_ns : r.start_unix_ns.value_or(0);
    json ev = json::array();
    ev.push_back({{"ph", "M"},
                  {"name", "process_name"},
                  {"pid", pid},
                  {"tid", pid},
                  {"args", {{"name", who + " (GPU memory, gpuguard)"}}}});
    double end = trace_time(r, t0, r.time_unix_ns);
    add_memory_tracks(ev, r, pid, end);
    if (Bytes pk = r.peak(); pk && r.peak_time_unix_ns)
        ev.push_back({{"ph", "i"},
                      {"s", "p"},
                      {"name", "peak " + human_bytes(*pk)},
                      {"cat", "gpuguard"},
                      {"pid", pid},
                      {"tid", pid},
                      {"ts", trace_time(r, t0, r.peak_time_unix_ns)},
                      {"args", {{"bytes", *pk}}}});
    add_report_event(ev, r, a, pid, end);
    add_holder_tracks(ev, r, stacks, pid, t0, end);
    return {{"traceEvents", ev},
            {"displayTimeUnit", "ms"},
            {"otherData", {{"exporter", std::string("gpuguard ") + GPUGUARD_VERSION_STRING}, {"report", r.name}}}};
}

}  // namespace gg::report
