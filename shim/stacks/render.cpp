// Report time: a stored stack (shim/stacks/words.h) as a report's frames, innermost first, native
// and Python merged (merge.h), native frames symbolized (symbols.h, cached). Never on the hot path.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/report/schema.h"
#include "shim/python/frames.h"
#include "shim/stacks/merge.h"
#include "shim/stacks/stacks.h"
#include "shim/stacks/symbols.h"
#include "shim/stacks/table.h"
#include "shim/stacks/words.h"

namespace gg::stacks {
namespace {

namespace key = schema::key;
namespace value = schema::value;

std::string hex_addr(uintptr_t v) {
    char buf[24];
    snprintf(buf, sizeof(buf), "0x%zx", size_t(v));
    return buf;
}

nlohmann::json native_json(uintptr_t ip, const symbols::Native &s) {
    return {{key::kind, value::kNative}, {key::ip, hex_addr(ip)},
            {key::module, s.module},     {key::offset, hex_addr(s.module.empty() ? 0 : ip - s.base)},
            {key::build_id, s.build_id}, {key::symbol, s.symbol}};
}

nlohmann::json python_json(const uintptr_t *w) {
    const char *file = reinterpret_cast<const char *>(w[0]);
    const char *function = reinterpret_cast<const char *>(w[1]);
    return {{key::kind, value::kPython},
            {key::file, file ? file : ""},
            {key::function, function ? function : ""},
            {key::line, int(uint32_t(w[2] >> 1))}};
}

}  // namespace

nlohmann::json frames_json(StackId id) {
    nlohmann::json out = nlohmann::json::array();
    std::vector<uintptr_t> words;
    uint32_t n_native = 0;
    if (!table::get(id, &words, &n_native)) return out;
    size_t n_py = (words.size() - n_native) / kPyWords;

    std::vector<symbols::Native> natives;
    std::vector<uintptr_t> ips;
    for (uint32_t i = 0; i < n_native; ++i) {
        symbols::Native s = symbols::resolve(words[i]);
        // Leading frames inside libgpuguard.so (hooks the caller's `skip` did not cover): a report
        // should start at the program's call.
        if (ips.empty() && s.self) continue;
        natives.push_back(std::move(s));
        ips.push_back(words[i]);
    }
    std::vector<bool> is_eval(ips.size()), entry(n_py);
    const uintptr_t *py = words.data() + n_native;
    for (size_t j = 0; j < n_py; ++j) entry[j] = py[j * kPyWords + 2] & 1;
    if (n_py)
        for (size_t i = 0; i < ips.size(); ++i) is_eval[i] = py::is_eval_loop(ips[i]);

    for (const Placed &p : merge_order(is_eval, entry))
        out.push_back(p.python ? python_json(py + p.index * kPyWords) : native_json(ips[p.index], natives[p.index]));
    return out;
}

std::vector<uintptr_t> native_frames(StackId id) {
    std::vector<uintptr_t> words;
    uint32_t n_native = 0;
    if (!table::get(id, &words, &n_native)) return {};
    words.resize(n_native);
    return words;
}

}  // namespace gg::stacks
