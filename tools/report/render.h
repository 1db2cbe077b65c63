// The renderers of `gpuguard report`, one file each:
//   tools/report/render/text.cpp        the summary a person reads in ten seconds (the default)
//   tools/report/render/html.cpp        one self-contained HTML page (page, script and style from tools/report/web/)
//   tools/report/render/folded.cpp      Brendan Gregg's folded stacks (flamegraph.pl, speedscope, inferno)
//   tools/report/render/speedscope.cpp  speedscope's own file format
//   tools/report/render/perfetto.cpp    Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing)
//   tools/report/render/memory_viz.cpp  a PyTorch memory snapshot pickle (pytorch.org/memory_viz,
//                                       torch.cuda._memory_viz)
//   tools/report/render/diff.cpp        what grew between two reports
//   tools/report/render/stacks.cpp      which stacks the stack exports weigh: tensors or segments
#pragma once

#include "tools/report/analysis.h"
#include "tools/report/model.h"

#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>

namespace gg::report {

struct TextOptions {
    bool color = false;
    size_t top = 10;  // holders and allocations listed
};

void render_text(const Report &r, const Analysis &a, const TextOptions &opt, std::ostream &out);
// Written as it is made: at 64 MiB, the page is the size of the report.
void render_html(const Report &r, const Analysis &a, std::ostream &out);
// Whose stacks the stack exports (folded, speedscope, perfetto) weigh, as the HTML page's switch: the
// tensors (PyTorch's live blocks, each by the stack that allocated it: what memory_allocated() counts)
// or the segments (the driver allocations: what memory_reserved() and nvidia-smi count).
enum class Stacks { kTensors, kSegments };
// Tensors when the report has PyTorch's tensor view (tensor_view.source "c10"), else segments.
Stacks default_stacks(const Report &r);
// Live bytes by stack in that view, at the report or at the peak (the report's list when the peak has
// none). Segments' whenever the report has no tensor view.
const std::vector<StackBytes> &stack_bytes(const Report &r, Stacks stacks, bool at_peak);

// Live bytes by stack, or the stacks at the peak when `at_peak` (and the report has them).
std::string render_folded(const Report &r, bool at_peak, Stacks stacks);
nlohmann::json render_speedscope(const Report &r, Stacks stacks);
// The timeline and the failure; the live bytes by stack as instant events at the report (and at the peak).
nlohmann::json render_perfetto(const Report &r, const Analysis &a, Stacks stacks);
std::string render_memory_viz(const Report &r);  // binary: a pickle, protocol 2

// diff: B compared with A.
nlohmann::json diff(const Report &a, const Report &b);
void render_diff_text(const nlohmann::json &d, const TextOptions &opt, std::ostream &out);

// Terminal styling shared by the text renderers; every function returns "" when colour is off.
struct Style {
    bool on = false;
    const char *bold() const { return on ? "\033[1m" : ""; }
    const char *dim() const { return on ? "\033[2m" : ""; }
    const char *red() const { return on ? "\033[1;31m" : ""; }
    const char *yellow() const { return on ? "\033[33m" : ""; }
    const char *green() const { return on ? "\033[32m" : ""; }
    const char *cyan() const { return on ? "\033[36m" : ""; }
    const char *reset() const { return on ? "\033[0m" : ""; }
};

// A horizontal bar of `width` cells, filled to part/whole with eighth blocks.
std::string text_bar(uint64_t part, uint64_t whole, int width);

}  // namespace gg::report

namespace gg::tool {
// A file of tools/report/web/ by base name, embedded at build time by tools/report/embed.sh ("" when absent).
std::string_view web_asset(const char *name);
}  // namespace gg::tool
