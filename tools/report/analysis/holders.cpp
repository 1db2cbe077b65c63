// Holders a reader can tell apart: see tools/report/analysis/holders.h.
#include "tools/report/analysis/holders.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace gg::report {

namespace {

size_t common_prefix(const std::vector<std::string> &a, const std::vector<std::string> &b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
}

// How many of chains[i]'s frames tell it from the other chains of `group` (those with its first
// frame): one past the longest prefix it shares with any of them, at most its whole length.
size_t frames_needed(const std::vector<std::vector<std::string>> &chains, const std::vector<size_t> &group, size_t i) {
    size_t needed = 1;
    for (size_t j : group)
        if (j != i && chains[j] != chains[i]) needed = std::max(needed, common_prefix(chains[i], chains[j]) + 1);
    return std::min(needed, chains[i].size());
}

// The text of the first `needed` frames of `chain`, and where_label's program frame under a library
// frame (`label`'s caller, "best ← caller") when those frames stop short of it: a line that named the
// program's own code keeps naming it.
std::string with_program_caller(const std::vector<std::string> &chain, size_t needed, const std::string &label) {
    std::string text = chain_text(chain, needed);
    size_t at = label.find(" ← ");
    if (at == std::string::npos) return text;
    auto caller = std::find(chain.begin() + 1, chain.end(), label.substr(at + strlen(" ← ")));
    size_t index = static_cast<size_t>(caller - chain.begin());
    if (caller == chain.end() || index < needed) return text;
    return text + (index > needed ? " ← …" : "") + " ← " + *caller;
}

}  // namespace

std::vector<std::string> caller_chain(const Stack &s) {
    std::vector<std::string> chain;
    const Frame *best = best_frame(s);
    if (!best) return chain;
    for (auto it = s.frames.begin() + (best - s.frames.data()); it != s.frames.end(); ++it)
        if (it->python == best->python && !is_plumbing(*it)) chain.push_back(frame_label(*it));
    return chain;
}

std::vector<size_t> frames_to_tell_apart(const std::vector<std::vector<std::string>> &chains) {
    std::map<std::string, std::vector<size_t>> by_first;
    for (size_t i = 0; i < chains.size(); ++i)
        if (!chains[i].empty()) by_first[chains[i].front()].push_back(i);
    std::vector<size_t> needed(chains.size(), 0);
    for (const auto &[first, group] : by_first)
        for (size_t i : group) needed[i] = frames_needed(chains, group, i);
    return needed;
}

std::string chain_text(const std::vector<std::string> &chain, size_t needed, size_t cap) {
    std::vector<std::string> shown(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(needed));
    if (cap >= 3 && needed > cap) {
        shown.resize(cap - 2);
        shown.push_back("…");
        shown.push_back(chain[needed - 1]);
    }
    std::string s;
    for (const std::string &f : shown) s += (s.empty() ? "" : " ← ") + f;
    return s;
}

std::vector<std::string> tell_apart(const std::vector<std::vector<std::string>> &chains, size_t cap) {
    std::vector<size_t> needed = frames_to_tell_apart(chains);
    std::vector<std::string> out;
    for (size_t i = 0; i < chains.size(); ++i) out.push_back(chain_text(chains[i], needed[i], cap));
    return out;
}

std::vector<std::string> told_apart(std::vector<std::string> labels,
                                    const std::vector<std::vector<std::string>> &chains) {
    std::map<std::string, std::vector<size_t>> by_label;
    for (size_t i = 0; i < labels.size(); ++i) by_label[labels[i]].push_back(i);
    for (const auto &[label, group] : by_label) {
        if (group.size() < 2) continue;
        std::vector<std::vector<std::string>> group_chains;
        for (size_t i : group) group_chains.push_back(chains[i]);
        std::vector<size_t> needed = frames_to_tell_apart(group_chains);
        for (size_t k = 0; k < group.size(); ++k)
            if (needed[k] > 1) labels[group[k]] = with_program_caller(group_chains[k], needed[k], label);
    }
    return labels;
}

std::vector<std::string> holder_labels(const Report &r, const std::vector<std::string> &stack_ids) {
    std::vector<std::string> labels;
    std::vector<std::vector<std::string>> chains;
    for (const std::string &id : stack_ids) {
        labels.push_back(where_label(r, id));
        const Stack *s = r.stack(id);
        chains.push_back(s ? caller_chain(*s) : std::vector<std::string>{});
    }
    return told_apart(std::move(labels), chains);
}

}  // namespace gg::report
