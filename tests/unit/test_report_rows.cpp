// The report reader's arrays of rows (tools/report/streamed_rows.h): read as they are parsed, they
// must give the model the document gave when it was read whole first. Rows the reader cannot use are
// left out as before, a later key of the same name replaces an earlier one as in any JSON document,
// and a file broken inside its rows is refused with the same line.
#include <doctest/doctest.h>

#include <string>

#include "tools/report/model.h"
#include "tools/report/scanned_rows.h"

using gg::report::Keep;
using gg::report::LoadError;
using gg::report::Report;
using gg::report::TensorEvent;

namespace {

const std::string kHead = R"({"schema": "gpuguard.report", "version": 1, "reason": "request", )";

// The report of `body` read both ways; the model must not depend on whether the document keeps its rows.
Report read(const std::string &body) {
    Report kept, model_only;
    LoadError err;
    REQUIRE_MESSAGE(gg::report::parse(kHead + body + "}", "rows.json", kept, err), err.message);
    REQUIRE_MESSAGE(
        gg::report::parse(kHead + body + "}", "rows.json", model_only, err, gg::report::Limits(), Keep::kModelOnly),
        err.message);
    REQUIRE(kept.tensor.has_value() == model_only.tensor.has_value());
    if (kept.tensor) {
        const auto &a = kept.tensor->events, &b = model_only.tensor->events;
        REQUIRE(a.size() == b.size());
        for (size_t i = 0; i < a.size(); i++) {
            CHECK(a[i].t_ns == b[i].t_ns);
            CHECK(a[i].action == b[i].action);
            CHECK(a[i].address == b[i].address);
            CHECK(a[i].bytes == b[i].bytes);
            CHECK(a[i].device == b[i].device);
        }
        CHECK(kept.tensor->blocks.size() == model_only.tensor->blocks.size());
        CHECK(kept.tensor->segments.size() == model_only.tensor->segments.size());
        CHECK(kept.tensor->timeline.size() == model_only.tensor->timeline.size());
    }
    CHECK(kept.timeline == model_only.timeline);
    return kept;
}

std::string refusal(const std::string &text) {
    Report r;
    LoadError err;
    CHECK_FALSE(gg::report::parse(text, "rows.json", r, err, gg::report::Limits(), Keep::kModelOnly));
    return err.message;
}

}  // namespace

TEST_CASE("report reader: event rows it cannot use are left out, the others read in order") {
    Report r = read(R"("tensor_view": {"source": "c10", "events": {"recorded": 11, "rows": [
        [1, "a", 4096, 512, 512, 2097152, 0],
        "not a row",
        {"t_ns": 2},
        [2, "x", 4096, 512, 512, 2097152, 0],
        [3, "a", -1, 512, 512, 2097152, 0],
        [4, "a", 4096, 512],
        [4611686018427387904, "a", 4096, 512, 512, 2097152, 0],
        [5, "f", 4096.0, 512, 0, 2097152, 1],
        [6, "a", 8192, -0, 0, 2097152, [1]],
        [7, "a", 8192, 1024, 1024, 2097152, 70],
        [8, "aa", 8192, 1024, 1024, 2097152, 0]
    ]}, "device": 3})");
    REQUIRE(r.tensor);
    const auto &e = r.tensor->events;
    REQUIRE(e.size() == 4);
    CHECK(e[0].t_ns == 1);
    CHECK(e[0].device == 0);
    CHECK(e[1].t_ns == 5);  // an address written as a float
    CHECK(e[1].action == TensorEvent::kFree);
    CHECK(e[1].address == 4096);
    CHECK(e[1].device == 1);
    CHECK(e[2].t_ns == 6);  // -0 bytes is 0; a device that is no number is the view's, given after the rows
    CHECK(e[2].bytes == 0);
    CHECK(e[2].device == 3);
    CHECK(e[3].device == 3);  // no device the shim could write (under 64): the view's
    CHECK(r.tensor->events_recorded == 11);
}

TEST_CASE("report reader: blocks, segments, mappings and timelines read from their rows") {
    Report r = read(R"("timeline": {"points": [[1, 100], [2.5, 200], ["x", 1], [-1, 5], [3, -7], [4, [1]], 9]},
        "tensor_view": {"source": "c10",
            "blocks": {"count": 3, "list": [[4096, 512, "s1", 10], "junk", [8192, 1024, 7, 4611686018427387904]]},
            "segments": [[2097152, 2097152, "s2", "cuMemAlloc_v2"], [4096, null]],
            "mappings": [[8388608, 2097152], [1]],
            "timeline": {"points": [[3, 512, 2097152], [1, 0, 0], [2, -5, 0]]}})");
    CHECK(r.timeline == std::vector<std::pair<int64_t, uint64_t>>{{1, 100}, {2, 200}, {3, 0}});
    REQUIRE(r.tensor);
    const gg::report::TensorView &t = *r.tensor;
    REQUIRE(t.blocks.size() == 2);  // largest first
    CHECK(t.blocks[0].address == 8192);
    CHECK(t.blocks[0].stack.empty());
    CHECK_FALSE(t.blocks[0].age_ns);  // 2^62 is past every time the reader keeps
    CHECK(t.blocks[1].stack == "s1");
    CHECK(t.blocks[1].age_ns == 10);
    CHECK(t.block_count == 3);
    REQUIRE(t.segments.size() == 1);
    CHECK(t.segments[0].api == "cuMemAlloc_v2");
    CHECK(t.mappings == std::vector<std::pair<uint64_t, uint64_t>>{{8388608, 2097152}});
    REQUIRE(t.timeline.size() == 2);  // by time
    CHECK(t.timeline[0].t_ns == 1);
    CHECK(t.timeline[1].reserved == 2097152);
}

TEST_CASE("report reader: a later key of the same name replaces the rows of an earlier one") {
    const std::string a = R"([1, "a", 4096, 512, 512, 2097152, 0])", b = R"([2, "f", 4096, 512, 0, 2097152, 0])";
    auto events = [&](const std::string &view) {
        Report r = read(R"("tensor_view": )" + view);
        REQUIRE(r.tensor);
        return r.tensor->events;
    };
    auto rows = events(R"({"source": "c10", "events": {"rows": [)" + a + R"(], "rows": [)" + b + "]}}");
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].t_ns == 2);
    CHECK(events(R"({"source": "c10", "events": {"rows": [)" + a + R"(]}, "events": {"capacity": 8}})").empty());
    CHECK(events(R"({"source": "c10", "events": {"rows": [)" + a + R"(], "rows": 5}})").empty());
    CHECK(events(R"({"source": "c10", "events": {"rows": [)" + a + R"(], "rows": null}})").empty());
    // A tensor view given twice: the second, without rows, is the report's.
    Report r = read(R"("tensor_view": {"source": "c10", "events": {"rows": [)" + a + R"(]}}, "tensor_view": {})");
    REQUIRE(r.tensor);
    CHECK(r.tensor->events.empty());
    // Rows at another place are not the events'.
    r = read(R"("events": {"rows": [)" + a + R"(]}, "tensor_view": {"source": "c10", "x": {"events": {"rows": [)" + a +
             "]}}}");
    REQUIRE(r.tensor);
    CHECK(r.tensor->events.empty());
}

TEST_CASE("report reader: the document keeps its rows only when asked (--html embeds it)") {
    const std::string text = kHead + R"("tensor_view": {"source": "c10", "events": {"capacity": 8, "rows": [
        [1, "a", 4096, 512, 512, 2097152, 0], "junk", [2, "f", 4096, 512, 0, 2097152, 0]]}}})";
    Report kept, model_only;
    LoadError err;
    REQUIRE(gg::report::parse(text, "rows.json", kept, err));
    REQUIRE(gg::report::parse(text, "rows.json", model_only, err, gg::report::Limits(), Keep::kModelOnly));
    const auto &whole = kept.raw["tensor_view"]["events"];
    REQUIRE(whole["rows"].size() == 3);
    CHECK(whole["rows"][1] == "junk");
    CHECK(whole["rows"][2][1] == "f");
    CHECK(model_only.raw["tensor_view"]["events"]["rows"] == nlohmann::json::array());
    CHECK(model_only.raw["tensor_view"]["events"]["capacity"] == 8);
    CHECK(model_only.tensor->events.size() == 2);
}

TEST_CASE("report reader: a file broken inside its rows is refused with one line, as before") {
    const std::string rows = kHead + R"("tensor_view": {"source": "c10", "events": {"rows": [[1, "a", 4096, 512, 512)";
    CHECK(refusal(rows) == "rows.json: truncated or malformed JSON, not a complete gpuguard report");
    CHECK(refusal(rows + ", 2097152, 0]]}}} trailing") ==
          "rows.json: truncated or malformed JSON, not a complete gpuguard report");
    CHECK(refusal(rows + ",, 2097152, 0]]}}}") ==
          "rows.json: truncated or malformed JSON, not a complete gpuguard report");
    std::string deep =
        kHead + R"("tensor_view": {"events": {"rows": [)" + std::string(70, '[') + std::string(70, ']') + "]}}}";
    CHECK(refusal(deep) == "rows.json: nested more than 64 levels deep, which no gpuguard report is; not read");
    // Rows under a root that is not an object: no report.
    CHECK(refusal(R"([{"tensor_view": {"events": {"rows": [[1, "a", 4096, 512, 512, 2097152, 0]]}}}])") ==
          "rows.json: not a gpuguard report (the JSON is not an object)");
}

namespace {

// Each row an array of rows hands its reader, written as its cells' kinds and values.
void note_row(void *rows, const gg::report::Row &row) {
    std::string s;
    for (size_t i = 0; i < row.size(); i++) {
        const gg::report::Cell &c = row[i];
        s += std::to_string(int(c.kind)) + ":";
        if (c.kind == gg::report::Cell::kUnsigned) s += std::to_string(c.u);
        if (c.kind == gg::report::Cell::kSigned) s += std::to_string(c.i);
        if (c.kind == gg::report::Cell::kFloat) s += std::to_string(c.f);
        if (c.kind == gg::report::Cell::kString) s += c.s;
        s += " ";
    }
    static_cast<std::vector<std::string> *>(rows)->push_back(s);
}

std::vector<gg::report::RowArray> rows_at_points(std::vector<std::string> &rows) {
    return {{{"timeline", "points"},
             &rows,
             [](void *r) { static_cast<std::vector<std::string> *>(r)->clear(); },
             note_row}};
}

// The rows the scanner reads from `text`, with what it leaves to nlohmann's parser; false when it
// leaves the whole text to it.
bool scanned(const std::string &text, std::vector<std::string> &rows, std::string &rest, int max_depth = 64) {
    return gg::report::RowScanner(text, rows_at_points(rows)).scan(max_depth, rest);
}

// The rows nlohmann's SAX parser hands the same reader (tools/report/streamed_rows.h).
std::vector<std::string> parsed(const std::string &text) {
    std::vector<std::string> rows;
    nlohmann::json d;
    gg::report::StreamedRows handler(d, rows_at_points(rows), false);
    REQUIRE(nlohmann::json::sax_parse(text, &handler));
    return rows;
}

}  // namespace

TEST_CASE("report reader: the scanner of rows reads each value as nlohmann's parser reads it") {
    const std::string text = R"({"timeline": {"t0": 1, "points": [ [0, 1, 18446744073709551615, 18446744073709551616],
        [-0, -1, -9223372036854775808, -9223372036854775809, 1234567890123456789, 12345678901234567890],
        [1.5, -2.5e3, 1E2, 0.0, "plain", "tab\tbreak\nq\"\u00e9", "\u00e9t\u00e9", true, false, null] ,
        "not a row", 7, null, [], [ ] ]}, "ro\u0077s": [[1]], "points": [[2]]})";
    std::vector<std::string> rows;
    std::string rest;
    REQUIRE(scanned(text, rows, rest));
    CHECK(rows == parsed(text));
    REQUIRE(rows.size() == 5);
    CHECK(rows[0] == "1:0 1:1 1:18446744073709551615 3:18446744073709551616.000000 ");
    CHECK(rows[1] ==
          "2:0 2:-1 2:-9223372036854775808 3:-9223372036854775808.000000 1:1234567890123456789 "
          "1:12345678901234567890 ");
    CHECK(rows[2] ==
          "3:1.500000 3:-2500.000000 3:100.000000 3:0.000000 4:plain 4:tab\tbreak\nq\"\xc3\xa9 "
          "4:\xc3\xa9t\xc3\xa9 0: 0: 0: ");
    CHECK(rows[3] == "");
    // The array written [], the rest as it was, for nlohmann's parser to make the document of.
    CHECK(rest == R"({"timeline": {"t0": 1, "points": []}, "ro\u0077s": [[1]], "points": [[2]]})");
}

TEST_CASE("report reader: a later array of rows at the same place replaces the scanner's rows too") {
    std::vector<std::string> rows;
    std::string rest;
    REQUIRE(scanned(R"({"timeline": {"points": [[1]], "p\u006fints": [[2], [3]]}})", rows, rest));
    CHECK(rows == std::vector<std::string>{"1:2 ", "1:3 "});
    CHECK(rest == R"({"timeline": {"points": [], "p\u006fints": []}})");
    // At another place (inside an array, deeper, under another key) an array is no row array.
    rows.clear();
    rest.clear();
    const std::string elsewhere = R"({"x": [{"timeline": {"points": [[1]]}}], "timeline": {"y": {"points": [[2]]}}})";
    REQUIRE(scanned(elsewhere, rows, rest));
    CHECK(rows.empty());
    CHECK(rest == elsewhere);
}

TEST_CASE("report reader: what the scanner of rows does not read is left whole to nlohmann's parser") {
    for (std::string points : {"[[1, [2]]]", "[[1, {}]]", "[{\"t\": 1}]", "[[01]]", "[[1.]]", "[[-]]", "[[tru]]",
                               "[[1 2]]", "[[1],]", "[,[1]]", "[[1]", "[[\"\x01\"]]", "[[\"\\x\"]]", "[[\"\xff\"]]"}) {
        CAPTURE(points);
        std::vector<std::string> rows;
        std::string rest;
        CHECK_FALSE(scanned(std::string(R"({"timeline": {"points": )") + points + "}}", rows, rest));
    }
    std::vector<std::string> rows;
    std::string rest;
    CHECK_FALSE(scanned(R"({"a": [}])", rows, rest));              // brackets that do not pair
    CHECK_FALSE(scanned(R"({"a": "open)", rows, rest));            // a string the text ends in
    CHECK_FALSE(scanned(R"({"\q": {"points": 1}})", rows, rest));  // a key that is no JSON string
    // Nesting: a row is one level deeper than its array; past the limit, nlohmann's path refuses it.
    CHECK(scanned(R"({"timeline": {"points": [[1]]}})", rows, rest, 4));
    CHECK_FALSE(scanned(R"({"timeline": {"points": [[1]]}})", rows, rest, 3));
    CHECK(scanned(R"({"timeline": {"points": []}})", rows, rest, 3));
}

TEST_CASE("report reader: a report whose rows the scanner reads gives the model and refusals of before") {
    // Escaped and non-ASCII strings, floats and wide integers: the scanner hands them to nlohmann one
    // by one; read() compares the model with the one the document gives (Keep::kDocument, no scanner).
    Report r = read(R"("tensor_view": {"source": "c10", "device": 2, "events": {"r\u006fws": [
        [1, "\u0061", 4096, 512, 512, 2097152, 0],
        [2, "f", 4096.0, 512, 0, 2.097152e6, 18446744073709551616],
        [3, "a", 8192, 1024, 1024, 2097152, -1], "junk", null
    ]}, "blocks": {"list": [[4096, 512, "s\u00e9", 10], [8192, 1024, "s2"]]},
        "segments": [[0, 2097152, "s2", "cuMemAlloc_v2"]], "mappings": [[8388608, 2097152]],
        "timeline": {"points": [[3, 512, 2097152], [1, 0, 0]]}},
        "timeline": {"points": [[2, 100], [1, 1e2], [1.5, 7]]})");
    REQUIRE(r.tensor);
    REQUIRE(r.tensor->events.size() == 3);
    CHECK(r.tensor->events[0].action == TensorEvent::kAlloc);
    CHECK(r.tensor->events[1].reserved == 2097152);
    CHECK(r.tensor->events[1].device == 2);  // no device under 64: the view's
    CHECK(r.tensor->blocks[1].stack == "s\xc3\xa9");
    CHECK(r.timeline == std::vector<std::pair<int64_t, uint64_t>>{{1, 100}, {1, 7}, {2, 100}});
    // A file broken inside its rows, where the scanner stops: refused with nlohmann's line.
    const std::string rows = kHead + R"("timeline": {"points": [[1, 2])";
    for (std::string end : {"", ", [01]]}}", ", [1,]]}}", ", [\"\x01\"]]}}", ", [tru]]}}"}) {
        CAPTURE(end);
        CHECK(refusal(rows + end) == "rows.json: truncated or malformed JSON, not a complete gpuguard report");
    }
}
