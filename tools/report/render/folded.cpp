// Folded stacks, the input of Brendan Gregg's flamegraph.pl (also read by speedscope and inferno):
// one line per stack, "outer;...;inner bytes", outermost frame first. The weight is live bytes: of
// PyTorch's tensors, or of the driver allocations (render.h, Stacks).
#include "tools/report/render.h"

namespace gg::report {

namespace {

// ';' separates frames and the last space separates the weight: a frame name may hold spaces
// (flamegraph.pl splits on the last one) but no ';' and no newline.
std::string folded_name(const Frame &f) {
    std::string s = frame_label(f);
    for (char &c : s) {
        if (c == ';') c = ':';
        else if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    }
    return s;
}

}  // namespace

std::string render_folded(const Report &r, bool at_peak, Stacks stacks) {
    const std::vector<StackBytes> &list = stack_bytes(r, stacks, at_peak);
    std::string out;
    for (const StackBytes &sb : list) {
        if (sb.bytes == 0) continue;
        std::string line;
        if (const Stack *s = r.stack(sb.stack)) {
            for (const Frame *f : frames_outermost_first(*s)) {
                if (!line.empty()) line += ';';
                line += folded_name(*f);
            }
        }
        if (line.empty()) line = "[unknown stack]";
        out += line + ' ' + std::to_string(sb.bytes) + '\n';
    }
    return out;
}

}  // namespace gg::report
