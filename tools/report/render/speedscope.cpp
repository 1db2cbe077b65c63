// speedscope's file format (https://www.speedscope.app/file-format-schema.json): frames shared by
// all profiles, and "sampled" profiles whose samples are stacks of frame indices, outermost first,
// each weighted by its live bytes (of PyTorch's tensors or of the driver allocations: render.h, Stacks).
// One profile for now, one for the peak when the report has it.
#include "common/base/version.h"
#include "tools/report/render.h"

#include <unordered_map>

namespace gg::report {

namespace {

struct FrameTable {
    json frames = json::array();
    std::unordered_map<std::string, size_t> index;  // frame_key -> position

    size_t add(const Frame &f) {
        std::string key = frame_key(f);
        auto it = index.find(key);
        if (it != index.end()) return it->second;
        json fr = {{"name", frame_label(f)}};
        if (f.python) {
            if (!f.file.empty()) fr["file"] = f.file;
            if (f.line) fr["line"] = *f.line;
        } else if (!f.module.empty()) {
            fr["file"] = f.module;
        }
        frames.push_back(fr);
        index.emplace(key, frames.size() - 1);
        return frames.size() - 1;
    }
    size_t unknown() {
        Frame f;
        f.ip = "[unknown stack]";
        return add(f);
    }
};

json profile(const Report &r, const std::vector<StackBytes> &list, const std::string &name, FrameTable &table) {
    json samples = json::array(), weights = json::array();
    uint64_t total = 0;
    for (const StackBytes &sb : list) {
        if (sb.bytes == 0) continue;
        json sample = json::array();
        if (const Stack *s = r.stack(sb.stack))
            for (const Frame *f : frames_outermost_first(*s)) sample.push_back(table.add(*f));
        if (sample.empty()) sample.push_back(table.unknown());
        samples.push_back(sample);
        weights.push_back(sb.bytes);
        total += sb.bytes;
    }
    return {{"type", "sampled"}, {"name", name},       {"unit", "bytes"},   {"startValue", 0},
            {"endValue", total}, {"samples", samples}, {"weights", weights}};
}

}  // namespace

json render_speedscope(const Report &r, Stacks stacks) {
    FrameTable table;
    std::string who = r.command_line().empty() ? r.name : r.command_line();
    const std::vector<StackBytes> &live = stack_bytes(r, stacks, false), &peak = stack_bytes(r, stacks, true);
    const bool tensors = &live != &r.by_stack;  // the report may have had no tensor view to show
    json profiles = json::array();
    profiles.push_back(
        profile(r, live, (tensors ? "live tensors at the report: " : "live GPU memory at the report: ") + who, table));
    if (&peak != &live)
        profiles.push_back(profile(
            r, peak, (tensors ? "tensors at the peak of allocated: " : "GPU memory at the peak: ") + who, table));
    return {{"$schema", "https://www.speedscope.app/file-format-schema.json"},
            {"name", "gpuguard: " + who},
            {"exporter", std::string("gpuguard ") + GPUGUARD_VERSION_STRING},
            {"activeProfileIndex", 0},
            {"shared", {{"frames", table.frames}}},
            {"profiles", profiles}};
}

}  // namespace gg::report
