// The default output of `gpuguard report`: what failed and why, the numbers, the failed request's
// stack, who holds the memory, and what to do about it. Written to be read in ten seconds, top down.
#include "tools/report/render.h"

#include "tools/cli/text.h"
#include "tools/report/analysis/holders.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <sstream>

namespace gg::report {

using gg::tool::clip;
using gg::tool::display_width;
using gg::tool::pad_left;
using gg::tool::pad_right;
using gg::tool::wrap;

namespace {

constexpr size_t kWidth = 100;

const char *cuda_result_name(int64_t r) {
    switch (r) {
        case 0: return "CUDA_SUCCESS";
        case 1: return "CUDA_ERROR_INVALID_VALUE";
        case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
        case 3: return "CUDA_ERROR_NOT_INITIALIZED";
        case 4: return "CUDA_ERROR_DEINITIALIZED";
        case 101: return "CUDA_ERROR_INVALID_DEVICE";
        case 201: return "CUDA_ERROR_INVALID_CONTEXT";
        case 999: return "CUDA_ERROR_UNKNOWN";
        default: return nullptr;
    }
}

// Eight levels of a sparkline, drawn from the timeline: shows in one line whether usage crept up,
// jumped at the end, or sat near the limit all along.
std::string sparkline(const Report &r, size_t cols, uint64_t &max_out) {
    static const char *levels[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    const auto &pts = r.timeline;
    max_out = 0;
    if (pts.size() < 2) return "";
    int64_t t0 = pts.front().first, t1 = pts.back().first;
    if (t1 <= t0) return "";
    std::vector<uint64_t> col(cols, 0);
    std::vector<bool> seen(cols, false);
    // Usage is a step function: each column takes the highest value live during its interval.
    for (size_t i = 0; i < pts.size(); ++i) {
        int64_t a = pts[i].first, b = i + 1 < pts.size() ? pts[i + 1].first : t1;
        size_t ca = static_cast<size_t>((static_cast<long double>(a - t0) * (cols - 1)) / (t1 - t0));
        size_t cb = static_cast<size_t>((static_cast<long double>(b - t0) * (cols - 1)) / (t1 - t0));
        for (size_t c = ca; c <= cb && c < cols; ++c) {
            col[c] = std::max(col[c], pts[i].second);
            seen[c] = true;
        }
        max_out = std::max(max_out, pts[i].second);
    }
    if (max_out == 0) return "";
    std::string s;
    for (size_t c = 0; c < cols; ++c) {
        int lv = static_cast<int>((static_cast<long double>(col[c]) * 7.0L) / max_out + 0.5L);
        s += seen[c] ? levels[std::clamp(lv, 0, 7)] : " ";
    }
    return s;
}

void print_frames(std::ostream &out, const Style &st, const Stack &s) {
    // Python frames first (innermost first, where the program asked), then the native frames nearest
    // the allocation, skipping the driver, the runtime and the shim.
    std::vector<const Frame *> py, native;
    for (const Frame &f : s.frames) {
        if (f.python) py.push_back(&f);
        else if (!is_plumbing(f)) native.push_back(&f);
    }
    const size_t kPy = 8, kNative = 4;
    for (size_t i = 0; i < py.size() && i < kPy; ++i)
        out << "    " << st.dim() << (i == 0 ? "python " : "       ") << st.reset() << ' ' << (i == 0 ? st.bold() : "")
            << clip(frame_label(*py[i]), kWidth - 12) << st.reset() << "\n";
    if (py.size() > kPy)
        out << "            " << st.dim() << "… " << py.size() - kPy << " outer Python frames" << st.reset() << "\n";
    for (size_t i = 0; i < native.size() && i < kNative; ++i)
        out << "    " << st.dim() << (i == 0 ? "native " : "       ") << ' '
            << clip(frame_label(*native[i]), kWidth - 12) << st.reset() << "\n";
    if (native.size() > kNative)
        out << "            " << st.dim() << "… " << native.size() - kNative << " more native frames" << st.reset()
            << "\n";
    if (py.empty() && native.empty())
        out << "    " << st.dim() << "(no frames outside the CUDA libraries)" << st.reset() << "\n";
}

// "best ← caller" into its two halves (the caller is "" when where_label gave none).
std::pair<std::string, std::string> split_where(const std::string &where) {
    auto at = where.find(" ← ");
    if (at == std::string::npos) return {where, ""};
    return {where.substr(0, at), where.substr(at + strlen(" ← "))};
}

// The phase of a stack, and for a segment whether PyTorch's caching allocator made it (every tensor
// of the tensor view went through it: no need to say so there).
std::string phase_tag(const Report &r, const std::string &stack_id, Mode mode, bool segment = true) {
    const Stack *s = r.stack(stack_id);
    if (!s) return "";
    Phase p = classify(*s, mode);
    std::string tag;
    if (p != Phase::Other) tag = phase_name(p);
    if (segment && through_caching_allocator(*s)) tag += tag.empty() ? "caching allocator" : ", caching allocator";
    return tag;
}

}  // namespace

std::string text_bar(uint64_t part, uint64_t whole, int width) {
    static const char *eighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    if (whole == 0 || width <= 0) return std::string(static_cast<size_t>(std::max(width, 0)), ' ');
    long double frac = std::min<long double>(1.0L, static_cast<long double>(part) / whole);
    int total = static_cast<int>(frac * width * 8 + 0.5L);
    std::string s;
    int cells = 0;
    for (; cells < total / 8; ++cells) s += "█";
    if (total % 8 && cells < width) {
        s += eighths[total % 8];
        ++cells;
    }
    for (; cells < width; ++cells) s += ' ';
    return s;
}

namespace {

// A frame's label in `width` columns: a long Python frame loses the end of its function's name rather
// than its file and line, which tell two frames of one function apart (a native frame's symbol says
// more than its module, and is kept).
std::string clip_frame(const std::string &frame, size_t width) {
    size_t where = frame.rfind(" (");
    if (display_width(frame) <= width || where == std::string::npos || frame.find(':', where) == std::string::npos)
        return clip(frame, width);
    std::string place = frame.substr(where);
    size_t place_width = display_width(place);
    if (place_width + 2 > width) return clip(frame, width);
    return clip(frame.substr(0, where), width - place_width) + place;
}

// The callers of a holder's label ("best ← caller ← …" without its best frame), under it from column
// `indent`: as many frames a line as fit, never cut where they fit, since the frame that tells two
// holders apart may be the last.
void print_callers(std::ostream &out, const Style &st, size_t indent, const std::string &callers) {
    const std::string sep = " ← ";
    const size_t width = kWidth - indent - 2;
    std::string line;
    for (size_t at = 0; at <= callers.size();) {
        size_t end = std::min(callers.find(sep, at), callers.size());
        std::string frame = callers.substr(at, end - at);
        if (!line.empty() && display_width(line + sep + frame) > width) {
            out << std::string(indent, ' ') << st.dim() << "← " << line << st.reset() << "\n";
            line.clear();
        }
        line += (line.empty() ? "" : sep) + clip_frame(frame, width);
        at = end + sep.size();
    }
    if (!line.empty()) out << std::string(indent, ' ') << st.dim() << "← " << line << st.reset() << "\n";
}

// One holder of live memory: its bytes, its share of the list's total, a bar against the largest
// holder, how many allocations, where it was made (holder_labels: with the callers that tell it from
// the others listed), and the callers on the lines under it.
void print_holder(std::ostream &out, const Style &st, const StackBytes &sb, const std::string &label, uint64_t total,
                  uint64_t largest, const std::string &tag) {
    auto [best, callers] = split_where(label);
    out << "  " << pad_left(human_bytes(sb.bytes), 11) << ' '
        << pad_left(std::to_string(percent(sb.bytes, total)) + "%", 4) << ' ' << st.cyan()
        << text_bar(sb.bytes, largest, 10) << st.reset() << ' ' << pad_left(std::to_string(sb.count) + "×", 6) << "  "
        << clip_frame(best, 62) << (tag.empty() ? "" : std::string("  ") + st.dim() + "[" + tag + "]" + st.reset())
        << "\n";
    if (!callers.empty()) print_callers(out, st, 38, callers);
}

// The labels of the first `shown` holders of a list, told apart from each other.
std::vector<std::string> shown_labels(const Report &r, const std::vector<StackBytes> &list, size_t shown) {
    std::vector<std::string> ids;
    for (size_t i = 0; i < shown && i < list.size(); ++i) ids.push_back(list[i].stack);
    return holder_labels(r, ids);
}

// The heading of a list of holders: its title, then what it counts and its totals. Returns the total
// bytes, which each row's share is of.
uint64_t print_holders_heading(std::ostream &out, const Style &st, const char *title, const char *what,
                               const char *noun, const std::vector<StackBytes> &list) {
    uint64_t total = 0, count = 0;
    for (const StackBytes &sb : list) {
        total += sb.bytes;
        count += sb.count;
    }
    out << st.bold() << title << st.reset() << st.dim() << what << human_bytes(total) << " in " << count << " " << noun
        << (count == 1 ? "" : "s") << ", " << list.size() << " stack" << (list.size() == 1 ? "" : "s") << st.reset()
        << "\n";
    return total;
}

// The bytes of the holders past the first `shown`, in one line.
void print_more_stacks(std::ostream &out, const Style &st, const std::vector<StackBytes> &list, size_t shown) {
    if (list.size() <= shown) return;
    uint64_t rest = 0;
    for (size_t i = shown; i < list.size(); ++i) rest += list[i].bytes;
    out << "  " << st.dim() << pad_left(human_bytes(rest), 11) << "  in " << list.size() - shown
        << " more stacks (--top N shows more)" << st.reset() << "\n";
}

// One line of the tensor view's totals: a name, the bytes, a bar against the reserved bytes, and a note.
void print_tensor_total(std::ostream &out, const Style &st, const char *name, uint64_t bytes, uint64_t scale,
                        const std::string &rest) {
    out << "  " << st.dim() << pad_right(name, 11) << st.reset() << st.bold() << pad_left(human_bytes(bytes), 11)
        << st.reset() << "  " << text_bar(bytes, scale, 20) << " "
        << pad_left(std::to_string(percent(bytes, scale)) + "%", 4) << "  " << st.dim() << rest << st.reset() << "\n";
}

// PyTorch's allocated and reserved bytes (what memory_allocated() and memory_reserved() said), the
// free part and its holes, the request, what the view does not list, and the peak.
void print_tensor_totals(std::ostream &out, const Style &st, const TensorFacts &t, const TensorView &v) {
    out << st.bold() << "PyTorch" << st.reset() << st.dim() << "  its caching allocator, tensor by tensor"
        << (t.at_oom ? ", when it ran out" : "") << (v.allocator_conf.empty() ? "" : "  (" + v.allocator_conf + ")")
        << st.reset() << "\n";
    uint64_t scale = t.reserved ? t.reserved : 1;
    print_tensor_total(out, st, "allocated", t.allocated, scale,
                       std::to_string(v.block_count) + " live tensors (memory_allocated())");
    print_tensor_total(
        out, st, "reserved", t.reserved, scale,
        std::to_string(t.segments.size()) + (t.expandable ? " mapped pages" : " segments") + " (memory_reserved())");
    std::string free_text = "reserved, unallocated";
    if (t.holes) free_text += ": " + std::to_string(t.holes) + " holes (largest " + human_bytes(t.largest_free) + ")";
    if (t.releasable) free_text += ", " + human_bytes(t.releasable) + " in empty segments";
    print_tensor_total(out, st, "free", t.unallocated, scale, free_text);
    if (t.request)
        out << "  " << st.dim() << pad_right("request", 11) << st.reset() << st.bold()
            << pad_left(human_bytes(t.request), 11) << st.reset() << "  " << st.dim()
            << "what PyTorch asked for when it raised OutOfMemoryError" << st.reset() << "\n";
    if (!v.coverage_complete)
        out << "  " << st.dim() << pad_right("unlisted", 11) << st.reset() << st.bold()
            << pad_left(human_bytes(v.unlisted_bytes), 11) << st.reset() << "  " << st.dim()
            << (v.off ? "partial: the tensor view is switched off (gpuguard.tensor_view); all of this is as it was then"
                      : "partial: tensors made while the tensor view was switched off, not listed until freed")
            << st.reset() << "\n";
    if (t.overlapping_segments || t.overlapping_blocks)
        out << "  " << st.dim() << pad_right("left out", 11) << st.reset()
            << pad_left(std::to_string(t.overlapping_segments + t.overlapping_blocks), 11) << "  " << st.dim()
            << t.overlapping_segments << " segments and " << t.overlapping_blocks
            << " blocks that overlap others, which PyTorch never makes: was this report edited?" << st.reset() << "\n";
    if (v.peak_allocated && v.peak_reserved)
        out << "  " << st.dim() << pad_right("peak", 11) << st.reset() << pad_left(human_bytes(*v.peak_allocated), 11)
            << "  " << st.dim() << "allocated, " << human_bytes(*v.peak_reserved) << " reserved" << st.reset() << "\n";
    out << "\n";
}

// The live tensors by stack, each with the stack that made its segments grow when that is another.
void print_tensor_holders(std::ostream &out, const Style &st, const Report &r, const Analysis &a,
                          const TextOptions &opt) {
    const TensorView &v = *r.tensor;
    uint64_t total = print_holders_heading(out, st, "Top holders", "  live tensors by stack: ", "tensor", v.by_stack);
    size_t shown = std::min(opt.top, v.by_stack.size());
    std::vector<std::string> labels = shown_labels(r, v.by_stack, shown);
    for (size_t i = 0; i < shown; ++i) {
        const StackBytes &sb = v.by_stack[i];
        print_holder(out, st, sb, labels[i], total, v.by_stack.front().bytes, phase_tag(r, sb.stack, a.mode, false));
        auto creator = a.tensor.segment_creator.find(sb.stack);
        if (creator != a.tensor.segment_creator.end() && creator->second != sb.stack) {
            std::string made = where_label(r, creator->second);
            if (made != where_label(r, sb.stack))
                out << std::string(38, ' ') << st.dim() << "in segments made at " << clip(made, 52) << st.reset()
                    << "\n";
        }
    }
    print_more_stacks(out, st, v.by_stack, shown);
    out << "\n";
}

// The tensor view: its totals, then the tensors by stack.
void print_tensor_view(std::ostream &out, const Style &st, const Report &r, const Analysis &a, const TextOptions &opt) {
    print_tensor_totals(out, st, a.tensor, *r.tensor);
    if (!r.tensor->by_stack.empty()) print_tensor_holders(out, st, r, a, opt);
}

// The report's name, then the program, its pid, the host and the time.
void print_who(std::ostream &out, const Style &st, const Report &r) {
    out << st.bold() << "gpuguard report" << st.reset() << st.dim() << " · " << r.name << st.reset() << "\n";
    std::vector<std::string> who;
    std::string cmd = r.command_line();
    if (!cmd.empty()) who.push_back(clip(cmd, 60));
    if (r.pid) who.push_back("pid " + std::to_string(*r.pid));
    if (!r.hostname.empty()) who.push_back(r.hostname);
    if (r.time_unix_ns) who.push_back(human_time_unix_ns(*r.time_unix_ns));
    if (!who.empty()) {
        out << st.dim();
        for (size_t i = 0; i < who.size(); ++i) out << (i ? " · " : "") << who[i];
        out << st.reset() << "\n";
    }
    out << "\n";
}

// The headline, coloured by how bad it is, and the reasons under it.
void print_what_happened(std::ostream &out, const Style &st, const Report &r, const Analysis &a) {
    const char *colour = a.failure ? st.red() : a.kind == "warn" ? st.yellow() : st.green();
    out << colour << (a.failure ? "✗ " : a.kind == "warn" ? "! " : "✓ ") << a.headline << st.reset() << "\n";
    for (const std::string &w : a.why) out << "  " << wrap(w, kWidth - 2, "    ") << "\n";
    if (!r.phase.empty()) out << "  " << st.dim() << "in the program's phase " << st.reset() << r.phase << "\n";
    out << "\n";
}

// One row of the numbers: a name, a value, and what follows it.
void print_number(std::ostream &out, const Style &st, const std::string &name, const std::string &value,
                  const std::string &rest) {
    out << "  " << st.dim() << pad_right(name, 10) << st.reset() << ' ' << st.bold() << pad_left(value, 11)
        << st.reset() << "  " << rest << "\n";
}

// A bar of `part` against the limit and its percentage.
std::string share_of_limit(uint64_t part, uint64_t limit) {
    return text_bar(part, limit, 20) + " " + std::to_string(percent(part, limit)) + "%";
}

void print_limit(std::ostream &out, const Style &st, const Report &r) {
    if (!r.limit_bytes) {
        print_number(out, st, "limit", "none", st.dim() + std::string("no quota on this device") + st.reset());
        return;
    }
    std::string src = r.limit_source + (r.limit_spec.empty() ? "" : "=" + r.limit_spec);
    print_number(out, st, "limit", human_bytes(*r.limit_bytes),
                 st.dim() + std::string(r.limit_scope.empty() ? "" : r.limit_scope) + (src.empty() ? "" : "  " + src) +
                     st.reset());
}

// How long before the report the peak was, when the report says.
std::string peak_when(const Report &r) {
    // A peak time of 0 means "never": a process that has held nothing has no peak moment.
    if (!(r.peak_time_unix_ns && *r.peak_time_unix_ns && r.time_unix_ns && *r.time_unix_ns >= *r.peak_time_unix_ns))
        return "";
    return *r.time_unix_ns - *r.peak_time_unix_ns < 1000000
               ? "at the report"
               : human_duration_ns(*r.time_unix_ns - *r.peak_time_unix_ns) + " before the report";
}

// The container's, the process's and the peak's bytes, each against the limit when there is one.
void print_usage(std::ostream &out, const Style &st, const Report &r) {
    const uint64_t live = r.live_bytes();
    uint64_t scale = r.limit_bytes.value_or(0);
    if (r.container_bytes && (r.has_ledger || *r.container_bytes != live))
        print_number(out, st, "container", human_bytes(*r.container_bytes),
                     scale ? share_of_limit(*r.container_bytes, scale) : "");
    print_number(out, st, "process", human_bytes(live),
                 (scale ? share_of_limit(live, scale) + "  " : "") + st.dim() +
                     (r.live_allocations ? std::to_string(*r.live_allocations) + " live allocations" : std::string()) +
                     st.reset());
    if (Bytes pk = r.peak())
        print_number(out, st, "peak", human_bytes(*pk),
                     (scale ? share_of_limit(*pk, scale) + "  " : "") + st.dim() + peak_when(r) + st.reset());
}

void print_request_and_device(std::ostream &out, const Style &st, const Report &r) {
    if (r.failed && r.failed->bytes)
        print_number(out, st, "request", human_bytes(*r.failed->bytes),
                     st.dim() + std::string("asked by ") + (r.failed->api.empty() ? "?" : r.failed->api) + st.reset());
    if (r.device_total) {
        std::string dev = r.device_name.empty() ? "device" : r.device_name;
        if (r.device_ordinal) dev += " #" + std::to_string(*r.device_ordinal);
        print_number(out, st, "device", human_bytes(*r.device_total),
                     st.dim() + dev + (r.device_free ? ", " + human_bytes(*r.device_free) + " free" : std::string()) +
                         st.reset());
    }
}

void print_timeline(std::ostream &out, const Style &st, const Report &r) {
    uint64_t spark_max = 0;
    std::string spark = sparkline(r, 48, spark_max);
    if (spark.empty()) return;
    int64_t span = r.timeline.back().first - r.timeline.front().first;
    out << "  " << st.dim() << pad_right("timeline", 10) << st.reset() << "             " << st.cyan() << spark
        << st.reset() << st.dim() << "  max " << human_bytes(spark_max) << " over " << human_duration_ns(span)
        << st.reset() << "\n";
}

// The numbers: the limit, the usage against it, the request, the device and the timeline.
void print_numbers(std::ostream &out, const Style &st, const Report &r) {
    print_limit(out, st, r);
    print_usage(out, st, r);
    print_request_and_device(out, st, r);
    print_timeline(out, st, r);
    out << "\n";
}

// What the failed call was beside its API and size: the driver's call and result, the thread, and
// how many calls failed in the episode.
std::vector<std::string> failed_request_notes(const Report &r, const FailedRequest &f) {
    std::vector<std::string> bits;
    if (!f.driver_api.empty() && f.driver_api != f.api) bits.push_back("driver " + f.driver_api);
    if (f.driver_result) {
        const char *n = cuda_result_name(*f.driver_result);
        bits.push_back(n ? n : "CUresult " + std::to_string(*f.driver_result));
    }
    if (f.thread) bits.push_back("thread " + std::to_string(*f.thread));
    if (r.episode_failed_calls && *r.episode_failed_calls > 1)
        bits.push_back(std::to_string(*r.episode_failed_calls) + " failed calls in this episode");
    return bits;
}

void print_failed_request(std::ostream &out, const Style &st, const Report &r, const FailedRequest &f) {
    out << st.bold() << "Failed request" << st.reset() << "  " << (f.api.empty() ? "?" : f.api) << ' '
        << human_bytes(f.bytes) << st.dim();
    std::vector<std::string> bits = failed_request_notes(r, f);
    for (size_t i = 0; i < bits.size(); ++i) out << (i ? ", " : "  (") << bits[i];
    if (!bits.empty()) out << ")";
    out << st.reset() << "\n";
    if (const Stack *s = r.stack(f.stack)) print_frames(out, st, *s);
    else out << "    " << st.dim() << "(no stack recorded)" << st.reset() << "\n";
    out << "\n";
}

// Who holds the memory: live bytes by stack, or with a tensor view the segments, which the tensors
// listed above lie in.
void print_holders(std::ostream &out, const Style &st, const Report &r, const Analysis &a, const TextOptions &opt) {
    bool segments = a.tensor.present;
    uint64_t total = print_holders_heading(
        out, st, segments ? "Segments" : "Top holders",
        segments ? "  device memory from the driver, by the stack that made it grow: " : "  live bytes by stack: ",
        "allocation", r.by_stack);
    size_t shown = std::min(segments ? std::min<size_t>(opt.top, 3) : opt.top, r.by_stack.size());
    bool tag_segments = !(r.tensor && r.tensor->backend == "cudaMallocAsync");
    std::vector<std::string> labels = shown_labels(r, r.by_stack, shown);
    for (size_t i = 0; i < shown; ++i) {
        const StackBytes &sb = r.by_stack[i];
        print_holder(out, st, sb, labels[i], total, r.by_stack.front().bytes,
                     phase_tag(r, sb.stack, a.mode, tag_segments));
    }
    print_more_stacks(out, st, r.by_stack, shown);
    out << "\n";
}

void print_peak(std::ostream &out, const Style &st, const Report &r) {
    out << st.bold() << "At the peak" << st.reset() << st.dim() << "  " << human_bytes(r.peak()) << st.reset() << "\n";
    size_t shown = std::min<size_t>(r.peak_by_stack.size(), 3);
    std::vector<std::string> labels = shown_labels(r, r.peak_by_stack, shown);
    for (size_t i = 0; i < shown; ++i) {
        auto [best, callers] = split_where(labels[i]);
        out << "  " << pad_left(human_bytes(r.peak_by_stack[i].bytes), 11) << "  " << clip_frame(best, 84) << "\n";
        if (!callers.empty()) print_callers(out, st, 15, callers);
    }
    out << "\n";
}

void print_cudnn(std::ostream &out, const Style &st, const Report &r, const Cudnn &c) {
    out << st.bold() << "cuDNN" << st.reset() << "  largest workspace requested "
        << human_bytes(c.largest_workspace_requested_bytes) << st.dim() << " · cap "
        << (c.workspace_cap_bytes ? human_bytes(*c.workspace_cap_bytes) : std::string("off")) << " · in use "
        << human_bytes(c.workspace_in_use_bytes);
    if (c.workspace_cap_bytes && c.plans_rejected) out << " · " << *c.plans_rejected << " plans rejected by the cap";
    out << st.reset() << "\n";
    for (size_t i = 0; i < c.requests_by_stack.size() && i < 3; ++i) {
        const CudnnStack &cs = c.requests_by_stack[i];
        out << "  " << pad_left(human_bytes(cs.largest_bytes), 11) << "  "
            << pad_left(std::to_string(cs.count) + "×", 6) << "  " << clip(where_label(r, cs.stack), 76) << "\n";
    }
    out << "\n";
}

// The ledger's processes, worth a section when another process than this one is in it.
bool shows_container_processes(const Report &r) {
    return r.ledger_processes.size() > 1 || (r.ledger_processes.size() == 1 && !r.ledger_processes[0].self);
}

void print_container_processes(std::ostream &out, const Style &st, const Report &r) {
    uint64_t total = 0;
    for (const LedgerProcess &p : r.ledger_processes) total += p.bytes;
    out << st.bold() << "Container processes" << st.reset() << st.dim() << "  " << human_bytes(total) << " held"
        << (r.ledger_path.empty() ? "" : ", ledger " + r.ledger_path) << st.reset() << "\n";
    for (const LedgerProcess &p : r.ledger_processes) {
        out << "  " << pad_left(human_bytes(p.bytes), 11) << ' '
            << pad_left(std::to_string(percent(p.bytes, total)) + "%", 4) << "  pid "
            << pad_right(std::to_string(p.pid), 8) << clip(p.command, 50) << st.dim()
            << (p.self ? "  (this process)" : "") << (p.alive ? "" : "  (exited)") << st.reset() << "\n";
    }
    out << "\n";
}

void print_advice(std::ostream &out, const Style &st, const std::vector<Advice> &advice) {
    out << st.bold() << "Advice" << st.reset() << "\n";
    for (const Advice &ad : advice) {
        out << "  " << st.yellow() << "• " << ad.title << st.reset() << "\n";
        out << "    " << wrap(ad.detail, kWidth - 4, "    ") << "\n";
    }
    out << "\n";
}

}  // namespace

// The sections top down, each printed only when the report has something to say in it.
void render_text(const Report &r, const Analysis &a, const TextOptions &opt, std::ostream &out) {
    Style st{opt.color};
    print_who(out, st, r);
    print_what_happened(out, st, r, a);
    print_numbers(out, st, r);
    if (a.tensor.present) print_tensor_view(out, st, r, a, opt);  // PyTorch's allocator leads
    if (r.failed) print_failed_request(out, st, r, *r.failed);
    if (!r.by_stack.empty()) print_holders(out, st, r, a, opt);
    if (!r.peak_by_stack.empty() && r.peak()) print_peak(out, st, r);
    if (r.cudnn) print_cudnn(out, st, r, *r.cudnn);
    if (shows_container_processes(r)) print_container_processes(out, st, r);
    if (!a.advice.empty()) print_advice(out, st, a.advice);
    // The summary's bound on its replays (whatif::Answers::kVerdict) said in one line where it applies.
    if (a.what_if && a.what_if->reach == whatif::WhatIf::Reach::kNothing)
        out << st.dim() << "What-if: " << a.what_if->unanswered << st.reset() << "\n\n";
    out << st.dim() << "More: gpuguard report --html report.html " << r.name << "   (flame graph, timeline, tables)"
        << st.reset() << "\n";
}

}  // namespace gg::report
