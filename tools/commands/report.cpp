// `gpuguard report`: the offline report viewer. Parses options, loads the report(s), and hands them
// to the renderers (tools/report/render.h). Exit codes: 0 done, 1 an output file could not be written,
// 2 bad usage or an input file that is not a readable gpuguard report.
#include "tools/commands/commands.h"
#include "tools/report/render.h"
#include "tools/report/symbolize.h"
#include "tools/report/whatif/replay.h"

#include "common/base/log.h"
#include "common/settings/settings.h"
#include "tools/cli/args.h"
#include "tools/cli/reports.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

using namespace gg::report;
using gg::tool::Args;

namespace {

const char kUsage[] =
    "usage: gpuguard report [options] FILE|FOLDER...\n"
    "       gpuguard report diff [options] A B\n"
    "\n"
    "Reads a report that libgpuguard.so wrote (a failed allocation, exit, request or signal) and says\n"
    "what failed, why, who holds the memory and what to do. With no output option it prints a summary.\n"
    "Given several reports, or a folder (its gpuguard-*.json), it reads the newest and says which;\n"
    "--all reads each in turn, oldest first.\n"
    "\n"
    "options:\n"
    "  --top N            how many holders to list (default 10)\n"
    "  --no-color         plain text (colour is used only on a terminal, and never with NO_COLOR set)\n"
    "  --json             print the diagnosis and advice as JSON instead of the summary\n"
    "  --html OUT         write one self-contained HTML page: timeline, flame graph, tables\n"
    "  --folded OUT       write folded stacks of live bytes, for flamegraph.pl, speedscope or inferno\n"
    "  --peak             with --folded: the stacks at the peak instead of at the report\n"
    "  --speedscope OUT   write a speedscope profile (open it at https://www.speedscope.app)\n"
    "  --perfetto OUT     write a Chrome trace-event file (ui.perfetto.dev, chrome://tracing)\n"
    "  --memory-viz OUT   write a PyTorch memory snapshot pickle (pytorch.org/memory_viz)\n"
    "  --stacks WHOSE     the stacks --folded, --speedscope and --perfetto weigh: 'tensors' (PyTorch's live\n"
    "                     blocks, by the stack that allocated each) or 'segments' (the driver allocations,\n"
    "                     what nvidia-smi counts); default tensors when the report has PyTorch's tensor\n"
    "                     view, else segments\n"
    "  --what-if          replay PyTorch's allocator from the report's block events (tensor_view): does\n"
    "                     the model follow PyTorch, would expandable_segments:True or max_split_size_mb\n"
    "                     have avoided the OOM under the same limit, the smallest limit the run needed\n"
    "                     (with --json: the answers as JSON)\n"
    "  --text             print the summary too when writing files\n"
    "  --no-symbolize     leave native frames as module+offset (by default they are named from the\n"
    "                     module's debug info, read with elfutils' libdw.so.1 when it is installed)\n"
    "  --debug-dir DIR    where separate debug files are, as DIR/.build-id/xx/yyyy.debug\n"
    "                     (default /usr/lib/debug)\n"
    "  --all              every report given, oldest first, not only the newest: summaries under their\n"
    "                     file names, or with --json one JSON document a line\n"
    "  -h, --help         this help\n"
    "\n"
    "OUT may be '-' for standard output. Several outputs may be written at once.\n"
    "Exit status: 0 done, 1 an output file could not be written, 2 bad usage or an unreadable report.\n";

const char kDiffUsage[] =
    "usage: gpuguard report diff [options] A B\n"
    "\n"
    "Compares two reports of the same program: total live bytes, the peak, and live bytes by stack,\n"
    "largest growth first. When both have PyTorch's tensor view, also its allocated and reserved totals\n"
    "and live tensor bytes by stack, growth first. Stacks are matched by their frames (files, functions,\n"
    "lines, symbols), not by address, so reports of two different runs compare.\n"
    "\n"
    "options:\n"
    "  --top N      how many stacks to list in each direction (default 10)\n"
    "  --json       print the comparison as JSON\n"
    "  --no-color   plain text\n"
    "  --no-symbolize, --debug-dir DIR   as for gpuguard report\n"
    "  -h, --help   this help\n";

bool colour_wanted(bool no_color) {
    if (no_color) return false;
    const char *nc = gg::settings::env("NO_COLOR");
    if (nc && *nc) return false;
    const char *term = gg::settings::env("TERM");
    if (term && !strcmp(term, "dumb")) return false;
    return isatty(STDOUT_FILENO);
}

bool parse_top(const std::string &s, size_t &top) {
    char *end = nullptr;
    errno = 0;
    long v = strtol(s.c_str(), &end, 10);
    if (s.empty() || *end || errno || v < 0) return false;
    top = static_cast<size_t>(v);
    return true;
}

// Writes what `write` writes to `path` ("-" is standard output). Prints the reason naming the file on
// failure.
bool write_output(const std::string &path, const std::function<void(std::ostream &)> &write, const char *what) {
    if (path == "-") {
        write(std::cout);
        std::cout.flush();
        return static_cast<bool>(std::cout);
    }
    errno = 0;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (f) write(f);
    if (f) f.close();
    if (!f) {
        gg::log_error("cannot write %s: %s", path.c_str(), errno ? strerror(errno) : "write failed");
        return false;
    }
    gg::log_error("wrote %s (%s)", path.c_str(), what);
    return true;
}
bool write_output(const std::string &path, const std::string &data, const char *what) {
    return write_output(
        path, [&](std::ostream &out) { out.write(data.data(), static_cast<std::streamsize>(data.size())); }, what);
}

// How native frames are named after loading; `off` with --no-symbolize.
struct Naming {
    bool off = false;
    SymbolizeOptions options;
};

// `keep`: Keep::kText only for the outputs that embed the document (--html).
bool load_or_say(const std::string &path, Report &r, Keep keep) {
    LoadError err;
    if (load(path, r, err, Limits(), keep)) return true;
    gg::log_error("%s", err.message.c_str());
    return false;
}

// Names the native frames once, in the model, before anything renders: every view then shows them.
void name_frames(Report &r, const Naming &naming) {
    if (naming.off) return;
    for (const std::string &note : symbolize(r, naming.options)) gg::log_error("%s", note.c_str());
}

// --no-symbolize and --debug-dir, for both forms of the command. False when the option was not one.
bool naming_option(Args &a, Naming &naming) {
    if (a.flag("--no-symbolize")) return naming.off = true;
    return a.option("--debug-dir", "a folder", &naming.options.debug_dir);
}

int run_diff(int argc, char **argv) {
    TextOptions opt;
    bool no_color = false, as_json = false;
    Naming naming;
    std::vector<std::string> files;
    Args a("report diff", argc, argv);
    while (!a.done()) {
        std::string v;
        if (a.flag("-h") || a.flag("--help")) {
            fputs(kDiffUsage, stdout);
            return 0;
        } else if (naming_option(a, naming)) {
            if (a.failed()) return a.usage_error();
        } else if (a.flag("--no-color") || a.flag("--no-colour")) {
            no_color = true;
        } else if (a.flag("--json")) {
            as_json = true;
        } else if (a.option("--top", "a number", &v)) {
            if (a.failed()) return a.usage_error();
            if (!parse_top(v, opt.top)) return a.usage_error("--top wants a number, not '" + v + "'");
        } else if (a.next().size() > 1 && a.next()[0] == '-') {
            return a.usage_error("unknown option '" + a.next() + "'");
        } else {
            files.push_back(a.take());
        }
    }
    if (files.size() != 2) return a.usage_error("needs two reports, A and B");
    Report before, after;
    if (!load_or_say(files[0], before, Keep::kModelOnly) || !load_or_say(files[1], after, Keep::kModelOnly)) return 2;
    name_frames(before, naming);
    name_frames(after, naming);
    json d = diff(before, after);
    if (as_json) {
        std::cout << d.dump(2) << "\n";
        return std::cout ? 0 : 1;
    }
    opt.color = colour_wanted(no_color);
    render_diff_text(d, opt, std::cout);
    return std::cout ? 0 : 1;
}

// What `gpuguard report` was asked, beside the files: the same for each report it reads.
struct Request {
    TextOptions opt;
    Naming naming;
    bool no_color = false, as_json = false, also_text = false, at_peak = false, what_if = false, all = false;
    std::string html, folded, speedscope, perfetto, memory_viz;  // files to write ("-": standard output)
    std::string stacks;                                          // --stacks as given ("" for the default)

    std::vector<const std::string *> outputs() const { return {&html, &folded, &speedscope, &perfetto, &memory_viz}; }
    bool any_output() const {
        for (const std::string *o : outputs())
            if (!o->empty()) return true;
        return false;
    }
    int to_stdout() const {
        int n = 0;
        for (const std::string *o : outputs()) n += *o == "-";
        return n;
    }
};

int report_one(const std::string &file, const Request &q, bool one_line);

}  // namespace

int cmd_report(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "diff")) return run_diff(argc - 1, argv + 1);

    Request q;
    std::vector<std::string> files;
    Args a("report", argc, argv);
    const char *file_name = "a file name (or '-' for standard output)";
    while (!a.done()) {
        std::string v;
        if (a.flag("-h") || a.flag("--help")) {
            fputs(kUsage, stdout);
            return 0;
        } else if (a.flag("--no-color") || a.flag("--no-colour")) {
            q.no_color = true;
        } else if (naming_option(a, q.naming)) {
            if (a.failed()) return a.usage_error();
        } else if (a.flag("--json")) {
            q.as_json = true;
        } else if (a.flag("--text")) {
            q.also_text = true;
        } else if (a.flag("--peak")) {
            q.at_peak = true;
        } else if (a.flag("--what-if")) {
            q.what_if = true;
        } else if (a.flag("--all")) {
            q.all = true;
        } else if (a.option("--top", "a number", &v)) {
            if (a.failed()) return a.usage_error();
            if (!parse_top(v, q.opt.top)) return a.usage_error("--top wants a number, not '" + v + "'");
        } else if (a.option("--html", file_name, &q.html) || a.option("--folded", file_name, &q.folded) ||
                   a.option("--speedscope", file_name, &q.speedscope) ||
                   a.option("--perfetto", file_name, &q.perfetto) ||
                   a.option("--memory-viz", file_name, &q.memory_viz)) {
            if (a.failed()) return a.usage_error();
        } else if (a.option("--stacks", "tensors or segments", &q.stacks)) {
            if (a.failed()) return a.usage_error();
            if (q.stacks != "tensors" && q.stacks != "segments")
                return a.usage_error("--stacks wants tensors or segments, not '" + q.stacks + "'");
        } else if (a.next() == "-") {
            files.push_back(a.take());
        } else if (a.next().size() > 1 && a.next()[0] == '-') {
            return a.usage_error("unknown option '" + a.next() + "'");
        } else {
            files.push_back(a.take());
        }
    }
    if (files.empty()) return a.usage_error("no report file given");
    std::string why;
    if (!gg::tool::expand_reports(files, &files, &why)) return gg::tool::fail(2, why);
    if (q.to_stdout() > 1) return a.usage_error("only one output can go to standard output");
    if (q.at_peak && q.folded.empty()) return a.usage_error("--peak applies to --folded");
    if (!q.stacks.empty() && q.folded.empty() && q.speedscope.empty() && q.perfetto.empty())
        return a.usage_error("--stacks applies to --folded, --speedscope and --perfetto");
    if (q.what_if && q.to_stdout())
        return a.usage_error("--what-if prints to standard output: write the other outputs to files");
    if (q.all && q.any_output())
        return a.usage_error("--all prints summaries or --json: write files one report at a time");
    if (files.size() > 1 && !q.all) {
        fprintf(stderr, "gpuguard: %zu reports given; reading the newest, %s (--all reads each)\n", files.size(),
                files.back().c_str());
        files.erase(files.begin(), files.end() - 1);
    }
    int status = 0;
    for (size_t i = 0; i < files.size(); i++) {
        // Several summaries each under their file's name; several JSON documents one per line (JSON Lines).
        if (files.size() > 1 && !q.as_json) std::cout << (i ? "\n" : "") << "== " << files[i] << "\n";
        status = std::max(status, report_one(files[i], q, files.size() > 1));
    }
    return status;
}

namespace {

// The stacks the stack exports weigh for this report: as asked ("" for the default), segments when
// tensors were asked of a report without PyTorch's tensor view (and a line says so).
Stacks stacks_for(const Report &r, const std::string &asked) {
    if (asked.empty()) return default_stacks(r);
    if (asked == "segments") return Stacks::kSegments;
    if (default_stacks(r) != Stacks::kTensors)
        fprintf(stderr, "gpuguard: %s has no tensor view (PyTorch's blocks): the stacks written are the segments'\n",
                r.name.c_str());
    return default_stacks(r);
}

// Writes the outputs asked of one report, then prints its summary, JSON or what-if.
int report_one(const std::string &file, const Request &q, bool one_line) {
    Report r;
    if (!load_or_say(file, r, q.html.empty() ? Keep::kModelOnly : Keep::kText)) return 2;
    if (q.what_if) {
        std::string why = gg::whatif::cannot_replay(r);
        if (!why.empty()) return gg::tool::fail(2, r.name + " " + why);
    }
    name_frames(r, q.naming);
    // --json and the page show the summary's what-if whatever the report; the text, only with a failure.
    using gg::whatif::Answers;
    Analysis an = analyze(r, q.what_if                      ? Answers::kAll
                             : q.as_json || !q.html.empty() ? Answers::kVerdict
                                                            : Answers::kVerdictOfFailure);
    const Stacks stacks = stacks_for(r, q.stacks);

    int status = 0;
    if (!q.html.empty() && !write_output(
                               q.html, [&](std::ostream &out) { render_html(r, an, out); }, "HTML viewer"))
        status = 1;
    if (!q.folded.empty() && !write_output(q.folded, render_folded(r, q.at_peak, stacks), "folded stacks")) status = 1;
    if (!q.speedscope.empty() &&
        !write_output(q.speedscope, render_speedscope(r, stacks).dump() + "\n", "speedscope profile"))
        status = 1;
    if (!q.perfetto.empty() && !write_output(q.perfetto, render_perfetto(r, an, stacks).dump() + "\n", "Chrome trace"))
        status = 1;
    if (!q.memory_viz.empty() && !write_output(q.memory_viz, render_memory_viz(r), "PyTorch memory snapshot"))
        status = 1;

    bool color = colour_wanted(q.no_color) && q.to_stdout() == 0;
    if (q.what_if) {
        const gg::whatif::WhatIf &w = *an.what_if;  // cannot_replay(r) was empty: analyze replayed it
        if (q.as_json) std::cout << gg::whatif::to_json(w).dump(one_line ? -1 : 2) << "\n";
        else gg::whatif::render_text(w, color, std::cout);
    } else if (q.as_json) {
        json j = {{"report", r.path}, {"analysis", to_json(an)}};
        std::cout << j.dump(one_line ? -1 : 2) << "\n";
    } else if (!q.any_output() || q.also_text) {
        TextOptions opt = q.opt;
        opt.color = color;
        render_text(r, an, opt, std::cout);
    }
    std::cout.flush();
    if (!std::cout) status = 1;
    return status;
}

}  // namespace
