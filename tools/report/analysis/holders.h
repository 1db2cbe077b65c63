// Holders a reader can tell apart. A holder's line names one frame (where_label, model.h); when two
// holders name the same one (a helper every allocation goes through, as `device_alloc` in
// examples/demo_without_gpu.py), the lines would read alike and only one of them may be the leak. Such
// lines go on through the callers, innermost first, up to the first frame that differs:
//   device_alloc (examples/demo_without_gpu.py:13) ← Model.forward.<locals>.<listcomp> (…:25)
// The text summary's holders and "At the peak", and `report diff`, label their stacks with this.
//
// It lives beside the analysis (tools/report/analysis/) because the renderers and the analysis both
// read it, and the unit tests link this folder.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tools/report/model.h"

namespace gg::report {

// A chain longer than this many frames shows its first frames, "…", and the frame that differs.
constexpr size_t kChainCap = 6;

// The frames a holder's line may show, innermost first, as frame_label() names them: the best frame
// (model.h), then the callers of the same kind outward (the Python frames under a Python frame; the
// native frames outside the driver, the runtime and the shim under a native one). Empty when the
// stack has no best frame.
std::vector<std::string> caller_chain(const Stack &s);

// For each chain, the shortest run of its frames that tells it from every other chain with the same
// first frame, joined by " ← ": one frame when no other chain shares it, else up to the first frame
// where it differs from each of them. Chains equal to it are not counted: nothing tells them apart,
// so they keep the text they share. A run longer than `cap` (at least 3) frames keeps its first cap - 2, then
// "…", then its last frame, the one that differs. "" for an empty chain.
std::vector<std::string> tell_apart(const std::vector<std::vector<std::string>> &chains, size_t cap = kChainCap);

// tell_apart() in two steps: how many frames of each chain tell it apart (0 for an empty chain), and
// the text of that many.
std::vector<size_t> frames_to_tell_apart(const std::vector<std::vector<std::string>> &chains);
std::string chain_text(const std::vector<std::string> &chain, size_t needed, size_t cap = kChainCap);

// Labels of holders told apart: `labels` as where_label() gave them, and each holder's caller_chain().
// A label that two or more holders share becomes tell_apart()'s text of the holder's chain, followed
// by the program's own frame that where_label() named under a library frame ("best ← caller") when
// the chain stops short of it. The others stay as they are.
std::vector<std::string> told_apart(std::vector<std::string> labels,
                                    const std::vector<std::vector<std::string>> &chains);

// told_apart() for a list of holders (stack ids of `r`), in its order.
std::vector<std::string> holder_labels(const Report &r, const std::vector<std::string> &stack_ids);

}  // namespace gg::report
