// Where Python frames stand among native frames. Internal to the stacks module; a pure function so
// that the rule is tested without an interpreter.
#pragma once
#include <cstddef>
#include <vector>

namespace gg::stacks {

struct Placed {
    bool python;  // which list `index` refers to
    size_t index;
};

// native_is_eval[i]: native frame i (innermost first) lies in the interpreter's eval loop.
// py_entry[j]: Python frame j (innermost first) is the outermost frame of one eval-loop run.
// Walking native frames inward to outward, each eval-loop frame is preceded by the Python frames it
// ran: the next ones up to and including the next entry frame. Python frames left over (no eval loop
// seen, or the native stack was cut by its depth) go after the native frames.
inline std::vector<Placed> merge_order(const std::vector<bool> &native_is_eval, const std::vector<bool> &py_entry) {
    std::vector<Placed> out;
    out.reserve(native_is_eval.size() + py_entry.size());
    size_t p = 0;
    for (size_t i = 0; i < native_is_eval.size(); ++i) {
        if (native_is_eval[i])
            while (p < py_entry.size()) {
                out.push_back({true, p});
                if (py_entry[p++]) break;
            }
        out.push_back({false, i});  // the eval-loop frame is kept: it shows where C entered Python
    }
    while (p < py_entry.size()) out.push_back({true, p++});
    return out;
}

}  // namespace gg::stacks
