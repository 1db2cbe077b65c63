// Fuzz target: the report reader of `gpuguard report` (tools/report/model.cpp) and every renderer
// behind it. Reports are files people pass around and edit; a report from another version, a cut-down
// fixture or a hostile file must give a one-line refusal or a rendering, never a crash, a hang or an
// uncaught exception (which would end `gpuguard report` with std::terminate). So every input that
// loads goes through the analysis and all renderers, as `gpuguard report --json --html - --folded ...`
// and `gpuguard report diff` would run them.
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

}  // namespace

// Structure-aware mutation: byte-level mutation of a 30 KB report rarely yields another report, so
// most of the time one value of the parsed document is replaced, removed or duplicated instead.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed) {
    std::mt19937 rng(seed);
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
    if (!parse(text, "fuzz.json", r, err)) {
        // A refusal is one line that names the file.
        FUZZ_REQUIRE(err.message.rfind("fuzz.json: ", 0) == 0 && err.message.find('\n') == std::string::npos);
        return 0;
    }
    Analysis a = analyze(r);
    (void)to_json(a).dump(2);
    for (bool color : {false, true}) {
        std::ostringstream out;
        TextOptions opt;
        opt.color = color;
        opt.top = color ? 0 : 10;
        render_text(r, a, opt, out);
    }
    (void)render_html(r, a);
    (void)render_folded(r, false);
    (void)render_folded(r, true);
    (void)render_speedscope(r).dump();
    (void)render_perfetto(r, a).dump();
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
