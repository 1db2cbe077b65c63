// The HTML viewer: tools/report/web/report.html with tools/report/web/report.css and tools/report/web/report.js inlined
// and the data embedded as JSON, so the page is one file that opens offline (no CDN, no fetch). The page's logic lives
// in tools/report/web/report.js; this file only prepares the data it draws: the report itself, the analysis, and each
// stack's frames already labelled (so the text summary and the page name frames the same way).
#include "common/base/version.h"
#include "tools/report/render.h"
#include "tools/report/scanned_rows.h"
#include "tools/report/whatif/replay.h"

#include <algorithm>
#include <map>
#include <ostream>
#include <string_view>

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
void write_script_safe(std::ostream &out, const json &j) {
    std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
    size_t run = 0;  // the first byte not yet written
    for (size_t lt = s.find('<'); lt != std::string::npos; lt = s.find('<', run)) {
        out.write(s.data() + run, std::streamsize(lt - run)) << "\\u003c";
        run = lt + 1;
    }
    out.write(s.data() + run, std::streamsize(s.size() - run));
}

// The same for JSON text the loader has parsed, written as it is: a '<' can only be inside a string
// there (JSON escapes no '<' with a backslash), and the text is valid UTF-8 (nlohmann's parser refuses
// any other). The whitespace between tokens is left out, as dump() writes none. The runs between are
// written straight from the text: at 64 MiB, making the page in memory first took 0.3 CPU s more.
void write_script_safe(std::ostream &out, std::string_view text) {
    size_t run = 0;  // the first byte not yet written
    auto replace = [&](size_t i, const char *with) {
        out.write(text.data() + run, std::streamsize(i - run)) << with;
        run = i + 1;
    };
    bool in_string = false;
    for (size_t i = 0; i < text.size(); i++) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') i++;  // the escaped character goes with it
            else if (c == '"') in_string = false;
            else if (c == '<') replace(i, "\\u003c");
        } else if (c == '"') {
            in_string = true;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            replace(i, "");
        }
    }
    out.write(text.data() + run, std::streamsize(text.size() - run));
}

using Path = std::vector<std::string>;
using Spans = std::map<Path, std::string_view>;

bool same_path(const std::vector<const char *> &path, const Path &keys) {
    if (path.size() != keys.size()) return false;
    for (size_t i = 0; i < path.size(); i++)
        if (keys[i] != path[i]) return false;
    return true;
}

// The text of each array of rows (row_array_paths()) in the report's text, already parsed by the loader:
// the last one at each path, the one the document holds, as a later key of the same name replaces an
// earlier one. One pass; keys are decoded only near the root, where the paths are.
Spans row_spans(std::string_view text) {
    size_t deepest = 0;
    for (const auto &p : row_array_paths()) deepest = std::max(deepest, p.size());
    struct Open {
        bool object, rows;
        size_t begin;
    };
    std::vector<Open> open;
    Path keys;  // the key of each open object, while every open container is an object
    Spans spans;
    for (size_t i = 0; i < text.size(); i++) {
        char c = text[i];
        if (c == '"') {
            size_t end = json_string_end(text, i);  // the loader parsed the text: every string ends
            size_t colon = text.find_first_not_of(" \t\r\n", end);
            if (!keys.empty() && open.size() == keys.size() && colon < text.size() && text[colon] == ':')
                json_key(text.substr(i, end - i), keys.back());
            i = end - 1;
        } else if (c == '{' || c == '[') {
            bool rows = false;
            if (c == '[' && open.size() == keys.size())
                for (const auto &p : row_array_paths()) rows = rows || same_path(p, keys);
            if (c == '{' && open.size() == keys.size() && open.size() < deepest) keys.emplace_back();
            open.push_back({c == '{', rows, i});
        } else if (c == '}' || c == ']') {
            if (open.back().rows) spans[keys] = text.substr(open.back().begin, i + 1 - open.back().begin);
            if (open.size() == keys.size()) keys.pop_back();
            open.pop_back();
        }
    }
    return spans;
}

bool leads_to_rows(const Path &path, const Spans &spans) {
    for (const auto &[p, text] : spans)
        if (p.size() > path.size() && std::equal(path.begin(), path.end(), p.begin())) return true;
    return false;
}

// The document as dump() writes it (its keys in the same order), with each array of rows the document
// holds empty written from the text instead (Keep::kText).
void write_document(std::ostream &out, const json &j, Path &path, const Spans &spans) {
    if (!j.is_object() || !leads_to_rows(path, spans)) return write_script_safe(out, j);
    out << '{';
    const char *comma = "";
    for (const auto &[k, v] : j.items()) {
        out << comma;
        comma = ",";
        write_script_safe(out, json(k));
        out << ':';
        path.push_back(k);
        auto rows = spans.find(path);
        if (rows != spans.end() && v.is_array()) write_script_safe(out, rows->second);
        else write_document(out, v, path, spans);
        path.pop_back();
    }
    out << '}';
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

void render_html(const Report &r, const Analysis &a, std::ostream &out) {
    std::string_view page = gg::tool::web_asset("report.html");
    // {"report": ..., "analysis": ..., "view": ...}, without copying the report's document into a new one.
    auto data = [&] {
        out << "{\"report\":";
        Path root;
        write_document(out, r.raw, root, r.text.empty() ? Spans() : row_spans(r.text));
        out << ",\"analysis\":";
        write_script_safe(out, to_json(a));
        out << ",\"view\":";
        write_script_safe(out, view_of(r, a));
        out << '}';
    };
    std::string title = "gpuguard · " + a.headline + (r.command_line().empty() ? "" : " · " + r.command_line());

    // One pass over the template: inserted text is never scanned again, so a report string that
    // happens to contain "{{DATA}}" stays text.
    size_t i = 0;
    while (i < page.size()) {
        size_t open = page.find("{{", i);
        if (open == std::string_view::npos) {
            out << page.substr(i);
            break;
        }
        size_t close = page.find("}}", open);
        if (close == std::string_view::npos) {
            out << page.substr(i);
            break;
        }
        out << page.substr(i, open - i);
        std::string_view token = page.substr(open + 2, close - open - 2);
        if (token == "STYLE") out << gg::tool::web_asset("report.css");
        else if (token == "SCRIPT") out << gg::tool::web_asset("report.js");
        else if (token == "DATA") data();
        else if (token == "TITLE") out << html_escape(title);
        else out << page.substr(open, close + 2 - open);
        i = close + 2;
    }
}

}  // namespace gg::report
