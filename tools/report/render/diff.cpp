// `gpuguard report diff A B`: what grew from A to B. Stacks are matched by their frames' content
// (files, functions, lines, modules and symbols, never addresses or the report's own "s17" ids), so
// two runs of the same program line up even though ASLR moved everything.
//
// Two lists of stacks are compared: the driver allocations (by_stack, always), and when both reports
// have a tensor view, PyTorch's live blocks (tensor_view.by_stack) with its allocated and reserved
// totals. For a PyTorch program the second says which tensors grew; the first only which code made
// the caching allocator ask the driver for more.
#include "tools/report/render.h"

#include "tools/report/analysis/holders.h"

#include <algorithm>
#include <cstdint>
#include <map>

namespace gg::report {

namespace {

struct Side {
    uint64_t bytes = 0, count = 0;
};
struct Row {
    std::string where;
    std::vector<std::string> frames, chain;  // chain: caller_chain(), to tell rows of one `where` apart
    Side a, b;
};

void collect(const Report &r, const std::vector<StackBytes> &list, bool second, std::map<std::string, Row> &rows) {
    for (const StackBytes &sb : list) {
        const Stack *s = r.stack(sb.stack);
        std::string key = s ? stack_key(*s) : "\x01unknown";
        Row &row = rows[key];
        if (row.where.empty()) {
            row.where = where_label(r, sb.stack);
            if (s) {
                for (const Frame *f : frames_outermost_first(*s)) row.frames.push_back(frame_label(*f));
                row.chain = caller_chain(*s);
            }
        }
        Side &side = second ? row.b : row.a;
        side.bytes += sb.bytes;
        side.count += sb.count;
    }
}

// Rows of two stacks that name the same place (a helper that every allocation goes through) read alike:
// each such row's `where` goes on through its callers up to the one that tells it apart
// (tools/report/analysis/holders.h).
void tell_rows_apart(std::map<std::string, Row> &rows) {
    std::vector<std::string> wheres;
    std::vector<std::vector<std::string>> chains;
    for (const auto &kv : rows) {
        wheres.push_back(kv.second.where);
        chains.push_back(kv.second.chain);
    }
    wheres = told_apart(std::move(wheres), chains);
    size_t i = 0;
    for (auto &kv : rows) kv.second.where = wheres[i++];
}

json side_json(const Report &r) {
    json j = {{"file", r.path}, {"reason", r.reason}, {"live_bytes", r.live_bytes()}};
    Bytes pk = r.peak();
    j["peak_bytes"] = pk ? json(*pk) : json(nullptr);
    j["live_allocations"] = r.live_allocations ? json(*r.live_allocations) : json(nullptr);
    return j;
}

// Saturated: sizes read from a report may be anything up to 2^64 - 1, and negating a difference of
// 2^63 overflowed (found by fuzz_report).
int64_t signed_delta(uint64_t before, uint64_t after) {
    uint64_t d = after >= before ? after - before : before - after;
    int64_t m = d > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(d);
    return after >= before ? m : -m;
}

// The stacks of two lists, matched by content, largest growth first.
json compare_stacks(const Report &a, const std::vector<StackBytes> &in_a, const Report &b,
                    const std::vector<StackBytes> &in_b) {
    std::map<std::string, Row> rows;
    collect(a, in_a, false, rows);
    collect(b, in_b, true, rows);
    tell_rows_apart(rows);
    std::vector<const Row *> order;
    for (const auto &kv : rows) order.push_back(&kv.second);
    std::stable_sort(order.begin(), order.end(), [](const Row *x, const Row *y) {
        return signed_delta(x->a.bytes, x->b.bytes) > signed_delta(y->a.bytes, y->b.bytes);
    });
    json stacks = json::array();
    for (const Row *r : order) {
        int64_t d = signed_delta(r->a.bytes, r->b.bytes);
        const char *status = r->a.bytes == 0 && r->b.bytes > 0   ? "new"
                             : r->b.bytes == 0 && r->a.bytes > 0 ? "gone"
                             : d > 0                             ? "grew"
                             : d < 0                             ? "shrank"
                                                                 : "same";
        stacks.push_back({{"where", r->where},
                          {"frames", r->frames},
                          {"before", r->a.bytes},
                          {"after", r->b.bytes},
                          {"delta", d},
                          {"count_before", r->a.count},
                          {"count_after", r->b.count},
                          {"status", status}});
    }
    return stacks;
}

json bytes_json(const Bytes &b) { return b ? json(*b) : json(nullptr); }
json delta_json(const Bytes &before, const Bytes &after) {
    return before && after ? json(signed_delta(*before, *after)) : json(nullptr);
}

json tensor_side_json(const TensorView &t) {
    return {{"source", t.source},
            {"allocated_bytes", bytes_json(t.allocated)},
            {"reserved_bytes", bytes_json(t.reserved)},
            {"peak_allocated_bytes", bytes_json(t.peak_allocated)},
            {"peak_reserved_bytes", bytes_json(t.peak_reserved)},
            {"blocks", t.block_count}};
}

}  // namespace

json diff(const Report &a, const Report &b) {
    json j = {{"a", side_json(a)}, {"b", side_json(b)}};
    j["live_bytes_delta"] = signed_delta(a.live_bytes(), b.live_bytes());
    Bytes pa = a.peak(), pb = b.peak();
    j["peak_bytes_delta"] = pa && pb ? json(signed_delta(*pa, *pb)) : json(nullptr);
    j["stacks"] = compare_stacks(a, a.by_stack, b, b.by_stack);
    if (a.tensor && b.tensor) {
        const TensorView &ta = *a.tensor, &tb = *b.tensor;
        j["tensor"] = {{"a", tensor_side_json(ta)},
                       {"b", tensor_side_json(tb)},
                       {"allocated_bytes_delta", delta_json(ta.allocated, tb.allocated)},
                       {"reserved_bytes_delta", delta_json(ta.reserved, tb.reserved)},
                       {"peak_allocated_bytes_delta", delta_json(ta.peak_allocated, tb.peak_allocated)},
                       {"stacks", compare_stacks(a, ta.by_stack, b, tb.by_stack)}};
    }
    return j;
}

namespace {

uint64_t bytes_of(const json &v) { return v.is_number() ? v.get<uint64_t>() : 0; }

// One total of both reports, A → B, and the change coloured by its sign.
void print_total(std::ostream &out, const Style &st, const char *name, const json &va, const json &vb,
                 const json &delta) {
    out << "  " << st.dim() << name << st.reset() << "  " << (va.is_number() ? human_bytes(bytes_of(va)) : "unknown")
        << " → " << (vb.is_number() ? human_bytes(bytes_of(vb)) : "unknown");
    if (delta.is_number()) {
        int64_t dv = delta.get<int64_t>();
        out << "  " << (dv > 0 ? st.red() : dv < 0 ? st.green() : "") << human_delta(dv) << st.reset();
    }
    out << "\n";
}

// The two files, then the live bytes, the peak, and PyTorch's totals when both have a tensor view.
void print_totals(std::ostream &out, const Style &st, const json &d, const json *tensor) {
    const json &a = d["a"], &b = d["b"];
    out << st.bold() << "gpuguard report diff" << st.reset() << st.dim() << "  " << a["file"].get<std::string>()
        << " → " << b["file"].get<std::string>() << st.reset() << "\n\n";
    print_total(out, st, "live bytes", a["live_bytes"], b["live_bytes"], d["live_bytes_delta"]);
    print_total(out, st, "peak      ", a["peak_bytes"], b["peak_bytes"], d["peak_bytes_delta"]);
    if (tensor) {
        const json &ta = (*tensor)["a"], &tb = (*tensor)["b"];
        print_total(out, st, "allocated ", ta["allocated_bytes"], tb["allocated_bytes"],
                    (*tensor)["allocated_bytes_delta"]);
        print_total(out, st, "reserved  ", ta["reserved_bytes"], tb["reserved_bytes"],
                    (*tensor)["reserved_bytes_delta"]);
        out << "  " << st.dim() << "(allocated and reserved: PyTorch's memory_allocated() and memory_reserved())"
            << st.reset() << "\n";
    }
    out << "\n";
}

// One list of stacks: growth first, then shrinkage, then how many did not change. `heading` and `what`
// name the list ("" for the driver allocations of reports without tensor views, as before); `noun`
// counts a stack's entries.
class ChangeList {
public:
    ChangeList(std::ostream &out, const Style &st, const TextOptions &opt, const char *noun)
        : out_(out), st_(st), opt_(opt), noun_(noun) {}

    // True when the output ends with an empty line.
    bool print(const json &stacks, const std::string &heading, const std::string &what) {
        size_t grew = 0, shrank = 0, same = 0;
        for (const json &s : stacks) {
            int64_t dv = s["delta"].get<int64_t>();
            if (dv > 0) ++grew;
            else if (dv < 0) ++shrank;
            else ++same;
        }
        if (grew) print_grew(stacks, heading, grew);
        else out_ << (what.empty() ? "No stack grew" : "No stack of " + what + " grew") << ".\n\n";
        if (shrank) print_shrank(stacks, heading, shrank);
        if (same)
            out_ << st_.dim() << same << " stack" << (same == 1 ? "" : "s") << (what.empty() ? "" : " of " + what)
                 << " unchanged" << st_.reset() << "\n";
        return same == 0;
    }

private:
    void print_row(const json &s) {
        int64_t dv = s["delta"].get<int64_t>();
        std::string status = s["status"].get<std::string>();
        out_ << "  " << (dv > 0 ? st_.red() : st_.green()) << human_delta(dv) << st_.reset() << "  " << st_.dim()
             << human_bytes(bytes_of(s["before"])) << " → " << human_bytes(bytes_of(s["after"])) << ", "
             << bytes_of(s["count_before"]) << " → " << bytes_of(s["count_after"]) << " " << noun_
             << (status == "new" || status == "gone" ? ", " + status : "") << st_.reset() << "\n      "
             << s["where"].get<std::string>() << "\n";
    }

    void print_grew(const json &stacks, const std::string &heading, size_t grew) {
        out_ << st_.bold() << (heading.empty() ? "Grew" : heading + " grew") << st_.reset() << st_.dim() << "  " << grew
             << " stack" << (grew == 1 ? "" : "s") << ", largest growth first" << st_.reset() << "\n";
        size_t n = 0;
        for (const json &s : stacks)
            if (s["delta"].get<int64_t>() > 0 && n++ < opt_.top) print_row(s);
        if (grew > opt_.top)
            out_ << "  " << st_.dim() << "… " << grew - opt_.top << " more (--top N)" << st_.reset() << "\n";
        out_ << "\n";
    }

    void print_shrank(const json &stacks, const std::string &heading, size_t shrank) {
        out_ << st_.bold() << (heading.empty() ? "Shrank" : heading + " shrank") << st_.reset() << st_.dim() << "  "
             << shrank << " stack" << (shrank == 1 ? "" : "s") << st_.reset() << "\n";
        std::vector<const json *> list;
        for (const json &s : stacks)
            if (s["delta"].get<int64_t>() < 0) list.push_back(&s);
        std::reverse(list.begin(), list.end());  // largest decrease first
        for (size_t i = 0; i < list.size() && i < opt_.top; ++i) print_row(*list[i]);
        out_ << "\n";
    }

    std::ostream &out_;
    const Style &st_;
    const TextOptions &opt_;
    const char *noun_;
};

}  // namespace

void render_diff_text(const json &d, const TextOptions &opt, std::ostream &out) {
    Style st{opt.color};
    const json *tensor = d.contains("tensor") ? &d["tensor"] : nullptr;
    print_totals(out, st, d, tensor);
    if (tensor) {
        if (!ChangeList(out, st, opt, "tensors").print((*tensor)["stacks"], "Tensors", "tensors")) out << "\n";
        ChangeList(out, st, opt, "allocations").print(d["stacks"], "Driver allocations", "driver allocations");
    } else {
        ChangeList(out, st, opt, "allocations").print(d["stacks"], "", "");
    }
}

}  // namespace gg::report
