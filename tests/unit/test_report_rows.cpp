// The report reader's arrays of rows (tools/report/streamed_rows.h): read as they are parsed, they
// must give the model the document gave when it was read whole first. Rows the reader cannot use are
// left out as before, a later key of the same name replaces an earlier one as in any JSON document,
// and a file broken inside its rows is refused with the same line.
#include <doctest/doctest.h>

#include <string>

#include "tools/report/model.h"

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
