// The HTML viewer: tools/report/web/report.html with tools/report/web/report.css and tools/report/web/report.js inlined
// and the data embedded as JSON, so the page is one file that opens offline (no CDN, no fetch). The page's logic lives
// in tools/report/web/report.js; this file only prepares the data it draws: the report itself, the analysis, and each
// stack's frames already labelled (so the text summary and the page name frames the same way).
#include "common/base/version.h"
#include "tools/report/render.h"
#include "tools/report/whatif/replay.h"

namespace gg::report {

namespace {

std::string frame_kind(const Frame &f) {
    if (f.python) {
        bool library = f.file.find("site-packages/") != std::string::npos ||
                       f.file.find("dist-packages/") != std::string::npos ||
                       f.file.find("/lib/python") != std::string::npos || (!f.file.empty() && f.file[0] == '<');
        return library ? "pylib" : "python";
    }
    return is_plumbing(f) ? "plumbing" : "native";
}

std::string frame_detail(const Frame &f) {
    if (f.python) return f.file + (f.line ? ":" + std::to_string(*f.line) : "");
    std::string d = f.module;
    if (!f.offset.empty()) d += "+" + f.offset;
    if (!f.symbol.empty() && short_symbol(f.symbol) != f.symbol) d = f.symbol + "\n" + d;
    return d;
}

json view_of(const Report &r, const Analysis &a) {
    json stacks = json::object();
    for (const auto &[id, s] : r.stacks) {
        json frames = json::array();
        const Frame *best = best_frame(s);
        for (const Frame *f : frames_outermost_first(s))
            frames.push_back({{"label", frame_label(*f)},
                              {"key", frame_key(*f)},
                              {"kind", frame_kind(*f)},
                              {"detail", frame_detail(*f)},
                              {"best", f == best}});
        Phase p = classify(s);
        stacks[id] = {{"frames", frames},
                      {"best", where_label(r, id)},
                      {"phase", p == Phase::Other ? json(nullptr) : json(phase_name(p))},
                      {"caching_allocator", through_caching_allocator(s)}};
    }
    json v = {{"name", r.name},
              {"command", r.command_line()},
              {"stacks", stacks},
              {"gpuguard", std::string("gpuguard ") + GPUGUARD_VERSION_STRING},
              {"live_bytes", r.live_bytes()}};
    Bytes pk = r.peak();
    v["peak_bytes"] = pk ? json(*pk) : json(nullptr);
    v["time"] = r.time_unix_ns ? json(human_time_unix_ns(*r.time_unix_ns)) : json(nullptr);
    // The what-if replay's answers, when the report has PyTorch's block events (tools/report/whatif/).
    v["what_if"] = a.what_if ? whatif::to_json(*a.what_if) : json(nullptr);
    return v;
}

// JSON inside <script type="application/json">: every '<' becomes \u003c, so neither "</script>" nor
// "<!--" can end or change the script element, whatever strings the report holds.
std::string script_safe_json(const json &j) {
    std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
    std::string out;
    out.reserve(s.size() + 64);
    for (char c : s) {
        if (c == '<') out += "\\u003c";
        else out += c;
    }
    return out;
}

std::string html_escape(const std::string &s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

}  // namespace

std::string render_html(const Report &r, const Analysis &a) {
    std::string_view page = gg::tool::web_asset("report.html");
    json data = {{"report", r.raw}, {"analysis", to_json(a)}, {"view", view_of(r, a)}};
    std::string title = "gpuguard · " + a.headline + (r.command_line().empty() ? "" : " · " + r.command_line());

    // One pass over the template: inserted text is never scanned again, so a report string that
    // happens to contain "{{DATA}}" stays text.
    std::string out;
    out.reserve(page.size() + 4096);
    size_t i = 0;
    while (i < page.size()) {
        size_t open = page.find("{{", i);
        if (open == std::string_view::npos) {
            out.append(page.substr(i));
            break;
        }
        size_t close = page.find("}}", open);
        if (close == std::string_view::npos) {
            out.append(page.substr(i));
            break;
        }
        out.append(page.substr(i, open - i));
        std::string_view token = page.substr(open + 2, close - open - 2);
        if (token == "STYLE") out.append(gg::tool::web_asset("report.css"));
        else if (token == "SCRIPT") out.append(gg::tool::web_asset("report.js"));
        else if (token == "DATA") out += script_safe_json(data);
        else if (token == "TITLE") out += html_escape(title);
        else out.append(page.substr(open, close + 2 - open));
        i = close + 2;
    }
    return out;
}

}  // namespace gg::report
