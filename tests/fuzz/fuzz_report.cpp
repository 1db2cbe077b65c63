// Fuzz target: the report reader of `gpuguard report` (tools/report/model.cpp) and every renderer
// behind it. Reports are files people pass around and edit; a report from another version, a cut-down
// fixture or a hostile file must give a one-line refusal or a rendering, never a crash, a hang or an
// uncaught exception (which would end `gpuguard report` with std::terminate). So every input that
// loads goes through the analysis and all renderers, as `gpuguard report --json --html - --folded ...`
// and `gpuguard report diff` would run them.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_require.h"
#include "tools/report/render.h"

using namespace gg::report;

extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

namespace {

void collect(json &v, std::vector<json *> &out) {
    out.push_back(&v);
    if (v.is_structured())
        for (json &child : v) collect(child, out);
}

// A value a report field may hold after a hand edit, another version, or malice: the edges of every
// integer type the reader converts to, fractions and exponents where integers are expected, wrong types.
json odd_value(std::mt19937 &rng) {
    static const char *const kJson[] = {"0",
                                        "-1",
                                        "1",
                                        "1.5",
                                        "-0.5",
                                        "1e300",
                                        "-1e300",
                                        "1e19",
                                        "4294967296",
                                        "2147483648",
                                        "-2147483649",
                                        "18446744073709551615",
                                        "9223372036854775807",
                                        "-9223372036854775808",
                                        "9223372036854775808",
                                        "null",
                                        "true",
                                        "\"\"",
                                        "\"x\"",
                                        "\"GPU-\"",
                                        "\"<frozen>\"",
                                        "\"\u00e9\u00e9\"",
                                        "\"(anonymous namespace)\"",
                                        "\"operator()\"",
                                        "\"a<b<c>>::d(int)\"",
                                        "\"site-packages/\"",
                                        "\"/\"",
                                        "[]",
                                        "{}",
                                        "[[]]",
                                        "[0]",
                                        "[1e300, 1e300]",
                                        "[-1, -1]",
                                        "[\"a\", 1]",
                                        "{\"stack\": \"s1\"}",
                                        "{\"kind\": \"python\"}"};
    return json::parse(kJson[rng() % (sizeof kJson / sizeof *kJson)]);
}

// What this target reads a report with: the reader's depth limit, and a size limit small enough for
// inputs to cross it (the real one is 64 MiB).
const Limits kLimits = {48 << 10, 64};

// Issue 18, defect 8: a depth or size mutation. A value of the document becomes itself nested in
// `levels` arrays or objects (around the depth limit, or far past it: 100,000 levels overflowed the
// stack of every recursive walk), or the text is padded past the size limit.
size_t depth_or_size(uint8_t *data, size_t size, size_t max_size, std::mt19937 &rng) {
    std::string text(reinterpret_cast<const char *>(data), size);
    if (rng() % 3 == 0) {
        size_t pad = kLimits.max_bytes + rng() % 64 - 32;
        if (pad > size && pad <= max_size) text.append(pad - size, ' ');
    } else {
        size_t levels = rng() % 2 ? 56 + rng() % 16 : 1 + rng() % 100000;
        bool arrays = rng() % 2;
        size_t per = arrays ? 2 : 6;
        if (levels * per + size > max_size) levels = max_size > size ? (max_size - size) / per : 0;
        size_t at = text.find(':', rng() % (text.size() + 1));  // just after a key, else at the end
        if (at == std::string::npos) at = text.size();
        else at++;
        std::string open, close;
        for (size_t i = 0; i < levels; i++) open += arrays ? "[" : "{\"a\":", close += arrays ? "]" : "}";
        size_t end = at;
        // The value after the key: a number, a string or a literal (a structured one is wrapped whole
        // only when it happens to be short; wrapping nothing is fine too).
        while (end < text.size() && text[end] != ',' && text[end] != '}' && text[end] != ']') end++;
        text = text.substr(0, at) + open + text.substr(at, end - at) + close + text.substr(end);
    }
    if (text.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
    memcpy(data, text.data(), text.size());
    return text.size();
}

// The nesting of the text, counted independently of the reader's own count (strings skipped).
int depth_of(const std::string &text) {
    int depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
        if ((c == ']' || c == '}') && depth > 0) depth--;
    }
    return deepest;
}

// The model's rows, read as they are parsed (tools/report/streamed_rows.h), are the same whether the
// document keeps them (Keep::kDocument) or not (the scanner of tools/report/scanned_rows.h reads them).
bool same_rows(const Report &a, const Report &b) {
    if (a.timeline != b.timeline || a.tensor.has_value() != b.tensor.has_value()) return false;
    if (!a.tensor) return true;
    const TensorView &x = *a.tensor, &y = *b.tensor;
    auto same_event = [](const TensorEvent &e, const TensorEvent &f) {
        return e.t_ns == f.t_ns && e.action == f.action && e.address == f.address && e.bytes == f.bytes &&
               e.allocated == f.allocated && e.reserved == f.reserved && e.device == f.device;
    };
    auto same_block = [](const TensorBlock &b, const TensorBlock &c) {
        return b.address == c.address && b.bytes == c.bytes && b.stack == c.stack && b.age_ns == c.age_ns;
    };
    auto same_segment = [](const TensorSegment &s, const TensorSegment &t) {
        return s.address == t.address && s.bytes == t.bytes && s.stack == t.stack && s.api == t.api;
    };
    auto same_point = [](const TensorView::Point &p, const TensorView::Point &q) {
        return p.t_ns == q.t_ns && p.allocated == q.allocated && p.reserved == q.reserved;
    };
    return std::equal(x.events.begin(), x.events.end(), y.events.begin(), y.events.end(), same_event) &&
           std::equal(x.blocks.begin(), x.blocks.end(), y.blocks.begin(), y.blocks.end(), same_block) &&
           std::equal(x.segments.begin(), x.segments.end(), y.segments.begin(), y.segments.end(), same_segment) &&
           x.mappings == y.mappings &&
           std::equal(x.timeline.begin(), x.timeline.end(), y.timeline.begin(), y.timeline.end(), same_point);
}

}  // namespace

// Structure-aware mutation: byte-level mutation of a 30 KB report rarely yields another report, so
// most of the time one value of the parsed document is replaced, removed or duplicated instead.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed) {
    std::mt19937 rng(seed);
    if (rng() % 8 == 0) return depth_or_size(data, size, max_size, rng);
    // The mutator's own walks recurse: a document past the reader's depth limit is mutated bytewise.
    if (depth_of(std::string(reinterpret_cast<const char *>(data), size)) > kLimits.max_depth)
        return LLVMFuzzerMutate(data, size, max_size);
    json d = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
    if (d.is_discarded() || !d.is_structured() || rng() % 8 == 0) return LLVMFuzzerMutate(data, size, max_size);
    for (int edits = 1 + rng() % 3; edits > 0; edits--) {
        std::vector<json *> nodes;
        collect(d, nodes);
        json &v = *nodes[rng() % nodes.size()];
        switch (rng() % 4) {
            case 0:
                if (v.is_object() && !v.empty()) {
                    auto it = v.begin();
                    std::advance(it, rng() % v.size());
                    v.erase(it);
                    break;
                }
                [[fallthrough]];
            case 1:
                if (v.is_array() && !v.empty()) {
                    json copy = v[rng() % v.size()];
                    v.push_back(copy);
                    break;
                }
                [[fallthrough]];
            default:
                if (&v != &d) v = odd_value(rng);
                break;
        }
    }
    std::string out = d.dump(-1, ' ', false, json::error_handler_t::replace);
    if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
    memcpy(data, out.data(), out.size());
    return out.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::string text(reinterpret_cast<const char *>(data), size);
    Report r;
    LoadError err;
    bool too_large = text.size() > kLimits.max_bytes, too_deep = !too_large && depth_of(text) > kLimits.max_depth;
    if (!parse(text, "fuzz.json", r, err, kLimits)) {
        // A refusal is one line that names the file; one past a limit says which.
        FUZZ_REQUIRE(err.message.rfind("fuzz.json: ", 0) == 0 && err.message.find('\n') == std::string::npos);
        if (too_large) FUZZ_REQUIRE(err.message.find("larger than") != std::string::npos);
        if (too_deep) FUZZ_REQUIRE(err.message.find("nested more than") != std::string::npos);
        // Read by the scanner of rows (tools/report/scanned_rows.h), the file is refused the same way.
        Report lean;
        LoadError lean_err;
        FUZZ_REQUIRE(!parse(text, "fuzz.json", lean, lean_err, kLimits, Keep::kModelOnly) &&
                     lean_err.message == err.message);
        return 0;
    }
    FUZZ_REQUIRE(!too_large && !too_deep);
    Report lean;
    FUZZ_REQUIRE(parse(text, "fuzz.json", lean, err, kLimits, Keep::kModelOnly) && same_rows(r, lean));
    Analysis a = analyze(r);
    (void)to_json(a).dump(2);
    for (bool color : {false, true}) {
        std::ostringstream out;
        TextOptions opt;
        opt.color = color;
        opt.top = color ? 0 : 10;
        render_text(r, a, opt, out);
    }
    {
        std::ostringstream page;
        render_html(r, a, page);
    }
    for (Stacks stacks : {Stacks::kTensors, Stacks::kSegments}) {
        (void)render_folded(r, false, stacks);
        (void)render_folded(r, true, stacks);
        (void)render_speedscope(r, stacks).dump();
        (void)render_perfetto(r, a, stacks).dump();
    }
    (void)render_memory_viz(r);
    nlohmann::json d = diff(r, r);
    (void)d.dump(2);
    std::ostringstream out;
    render_diff_text(d, TextOptions(), out);
    // Against the smallest report that loads as well: growth from nothing, and shrinking to nothing.
    Report empty;
    FUZZ_REQUIRE(parse(R"({"schema": "gpuguard.report", "version": 1})", "empty.json", empty, err));
    (void)diff(empty, r).dump();
    (void)diff(r, empty).dump();
    return 0;
}
