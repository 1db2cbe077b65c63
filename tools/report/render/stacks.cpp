// Which live bytes by stack the stack exports weigh (render.h, Stacks).
#include "tools/report/render.h"

namespace gg::report {

namespace {
bool has_tensor_view(const Report &r) { return r.tensor && r.tensor->from_blocks(); }
}  // namespace

Stacks default_stacks(const Report &r) { return has_tensor_view(r) ? Stacks::kTensors : Stacks::kSegments; }

const std::vector<StackBytes> &stack_bytes(const Report &r, Stacks stacks, bool at_peak) {
    const bool tensors = stacks == Stacks::kTensors && has_tensor_view(r);
    const std::vector<StackBytes> &live = tensors ? r.tensor->by_stack : r.by_stack;
    const std::vector<StackBytes> &peak = tensors ? r.tensor->peak_by_stack : r.peak_by_stack;
    return at_peak && !peak.empty() ? peak : live;
}

}  // namespace gg::report
