// The what-if's answers as JSON (`gpuguard report --what-if --json`, the HTML page) and as a few lines of
// text (`gpuguard report --what-if`).
#include "tools/report/render.h"
#include "tools/report/whatif/replay.h"

#include <algorithm>
#include <string>

namespace gg::whatif {

using json = nlohmann::json;
using report::human_bytes;
using report::Style;

namespace {

json maybe(const std::optional<uint64_t> &v) { return v ? json(*v) : json(nullptr); }

json departure_json(const std::optional<Departure> &d) {
    if (!d) return nullptr;
    return {{"event", d->op + 1},
            {"action", std::string(1, d->action)},
            {"bytes", d->bytes},
            {"model_reserved_bytes", d->model_reserved},
            {"pytorch_reserved_bytes", d->pytorch_reserved}};
}

// "a 82.00 MiB block handed out"
std::string op_label(const Departure &d) {
    const char *what = d.action == 'a'   ? " block handed out"
                       : d.action == 'f' ? " block taken back"
                                         : " request refused";
    return "a " + human_bytes(d.bytes) + what;
}

json config_json(const Config &c) {
    return {{"expandable_segments", c.expandable},
            {"max_split_size_bytes", c.max_split_size == kNoMaxSplit ? json(nullptr) : json(c.max_split_size)}};
}

json outcome_json(const Outcome &o, uint64_t budget) {
    json j = {{"settings", describe(o.config)}, {"avoids_oom", o.avoids}};
    if (o.avoids) {
        j["peak_reserved_bytes"] = o.peak_reserved;
        j["spare_bytes"] = budget > o.peak_reserved ? budget - o.peak_reserved : 0;
        j["comfortably"] = comfortably(o, budget);
    } else {
        j["runs_out_earlier"] = o.runs_out_earlier;
        j["failed_request_bytes"] = o.failed_bytes;
        j["allocated_bytes_then"] = o.failed_allocated;
        j["reserved_bytes_then"] = o.failed_reserved;
    }
    return j;
}

// Why a setting could not serve a request: fragmentation when what is live and the request fit in the budget.
std::string why_not(const Outcome &o, uint64_t budget) {
    std::string held = human_bytes(o.failed_allocated) + " allocated, " + human_bytes(o.failed_reserved) + " reserved";
    if (o.failed_allocated <= budget && o.failed_bytes <= budget - o.failed_allocated)
        return held + ": the free memory lies in " + (o.config.expandable ? "pages" : "segments") +
               " that hold live blocks";
    return held + ": the live blocks and the request alone need more than the budget";
}

std::string outcome_line(const Outcome &o, const WhatIf &w, const Style &s) {
    uint64_t budget = w.budget ? w.budget->bytes : 0;
    if (o.avoids && !comfortably(o, budget))
        return std::string(s.yellow()) + "only just" + s.reset() + ": it serves every block" +
               (w.refused_request ? " and the " + human_bytes(*w.refused_request) + " request" : std::string()) +
               " with " + human_bytes(budget - std::min(budget, o.peak_reserved)) +
               " to spare, less than a rerun's requests vary";
    if (o.avoids)
        return std::string(s.green()) + "yes" + s.reset() + ": it serves every block" +
               (w.refused_request ? " and the " + human_bytes(*w.refused_request) + " request" : std::string()) +
               ", reserving at most " + human_bytes(o.peak_reserved) + " of " + human_bytes(budget);
    if (o.runs_out_earlier)
        return std::string(s.red()) + "no" + s.reset() + ": it runs out earlier, at a " + human_bytes(o.failed_bytes) +
               " block PyTorch served (" + why_not(o, budget) + ")";
    return std::string(s.red()) + "no" + s.reset() + ": it refuses the " + human_bytes(o.failed_bytes) +
           " request too (" + why_not(o, budget) + ")";
}

}  // namespace

json to_json(const WhatIf &w) {
    json j;
    j["report"] = w.report;
    // Only where the summary stopped short (what_if(r, Answers::kVerdict)): what it did not compute is
    // null, and --what-if's document stays as it was.
    if (w.reach != WhatIf::Reach::kAll) j["unanswered"] = w.unanswered;
    j["allocator_conf"] = w.allocator_conf;
    j["recorded"] = config_json(w.recorded);
    if (w.reach == WhatIf::Reach::kNothing) j["events"] = nullptr;
    else
        j["events"] = {{"replayed", w.events},
                       {"seeded_blocks", w.seeded},
                       {"dropped", w.dropped},
                       {"approximate", w.approximate},
                       {"caveats", w.caveats}};
    if (w.budget) {
        const Budget &b = *w.budget;
        j["budget"] = {{"bytes", b.bytes},
                       {"scope", b.scope},
                       {"limit_bytes", maybe(b.limit)},
                       {"device_total_bytes", maybe(b.device_total)},
                       {"other_processes_bytes", b.others},
                       {"outside_allocator_bytes", b.outside}};
    } else {
        j["budget"] = nullptr;
    }
    j["refused_request_bytes"] = maybe(w.refused_request);
    if (w.reach == WhatIf::Reach::kNothing) {
        for (const char *unknown : {"model_check", "expandable_segments", "max_split_size_mb", "smallest_budget"})
            j[unknown] = nullptr;
        return j;
    }
    const WhatIf::Check &c = w.check;
    j["model_check"] = {{"compared", c.compared},
                        {"within_2mib", c.within},
                        {"share_within_2mib", c.compared ? double(c.within) / double(c.compared) : 0.0},
                        {"largest_difference_bytes", c.largest_difference},
                        {"first_departure", departure_json(c.first_departure)},
                        {"reproduces_oom", c.reproduces_oom ? json(*c.reproduces_oom) : json(nullptr)},
                        {"trusted", c.trusted},
                        {"why", c.why}};
    const uint64_t budget = w.budget ? w.budget->bytes : 0;
    j["expandable_segments"] = w.expandable ? outcome_json(*w.expandable, budget) : json(nullptr);
    json splits = json::array();
    for (const Outcome &o : w.max_split) {
        json s = outcome_json(o, budget);
        s["mb"] = o.config.max_split_size >> 20;
        splits.push_back(s);
    }
    j["max_split_size_mb"] = w.reach == WhatIf::Reach::kCheck ? json(nullptr) : splits;
    j["smallest_budget"] = {{"allocated_peak_bytes", w.needed},
                            {"as_configured_bytes", maybe(w.smallest_configured)},
                            {"expandable_segments_bytes", maybe(w.smallest_expandable)}};
    return j;
}

std::optional<Verdict> verdict(const WhatIf &w) {
    if (!w.check.trusted || !w.budget || !w.expandable) return std::nullopt;
    const uint64_t budget = w.budget->bytes;
    std::string avoiding, just;  // the max_split_size_mb values that avoid it, comfortably or only just
    for (const Outcome &o : w.max_split) {
        std::string mb = std::to_string(o.config.max_split_size >> 20);
        if (comfortably(o, budget)) avoiding += (avoiding.empty() ? "" : ", ") + mb;
        else if (o.avoids) just += (just.empty() ? "" : ", ") + mb;
    }
    auto last = [](const std::string &list) { return list.substr(list.rfind(' ') + 1); };
    Verdict v;
    const Outcome &e = *w.expandable;
    if (comfortably(e, budget) && !w.recorded.expandable)
        v.title = "Replayed: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True avoids this OOM";
    else if (!avoiding.empty())
        v.title = "Replayed: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:" + last(avoiding) + " avoids this OOM";
    else if ((e.avoids && !w.recorded.expandable) || !just.empty())
        v.title = "Replayed: an allocator option avoids this OOM only just, with too little to spare";
    else v.title = "Replayed: no allocator option avoids this OOM";
    v.detail = "A model of PyTorch's caching allocator replays this run's " + std::to_string(w.events) +
               " block events and follows it (reserved within 2 MiB of PyTorch's at " +
               std::to_string(report::percent(w.check.within, w.check.compared)) + "% of them" +
               (w.check.reproduces_oom == true ? ", the same request refused" : "") + "). Under the same " +
               human_bytes(budget) + " for PyTorch, expandable segments ";
    if (w.recorded.expandable) v.detail += "(already on) ";
    if (e.avoids)
        v.detail += "serve every block, reserving at most " + human_bytes(e.peak_reserved) +
                    (comfortably(e, budget) ? "" : " (too little to spare: a rerun's requests vary more)");
    else
        v.detail +=
            std::string(e.runs_out_earlier ? "run out earlier" : "refuse it too") + " (" + why_not(e, budget) + ")";
    v.detail += "; max_split_size_mb ";
    if (!avoiding.empty())
        v.detail += avoiding + " avoid" + (avoiding.find(',') == std::string::npos ? "s" : "") + " it";
    if (!just.empty())
        v.detail += (avoiding.empty() ? "" : ", ") + just + " only just, with less than " +
                    human_bytes(spare_needed(budget)) + " to spare";
    if (avoiding.empty() && just.empty()) v.detail += "avoids it at none of 32 to 1024";
    if (w.reach == WhatIf::Reach::kAll) {
        v.detail += ". The run needs at least " +
                    (w.smallest_configured ? human_bytes(*w.smallest_configured) : std::string("more than tried")) +
                    " for PyTorch as configured";
        if (w.smallest_expandable && !w.recorded.expandable)
            v.detail += ", " + human_bytes(*w.smallest_expandable) + " with expandable segments";
        if (w.budget->others || w.budget->outside)
            v.detail += " (a quota needs " + human_bytes(w.budget->others + w.budget->outside) +
                        " more, for other processes and this process's memory outside PyTorch)";
    } else {
        v.detail += ". `gpuguard report --what-if` gives the smallest budget the run needs";
    }
    v.detail += "; no allocator does with less than its " + human_bytes(w.needed) + " allocated peak.";
    if (w.approximate) v.detail += " Approximate: the ring had dropped older events.";
    return v;
}

void render_text(const WhatIf &w, bool color, std::ostream &out) {
    Style s{color};
    // Labels padded to the longest, "expandable_segments:True", so that the answers line up.
    auto heading = [&](std::string label) {
        label.resize(std::max<size_t>(label.size(), 24), ' ');
        return std::string("  ") + s.bold() + label + s.reset() + "  ";
    };
    const std::string indent(28, ' ');
    out << s.bold() << "what-if" << s.reset() << " for " << w.report << ": " << w.events
        << " block events replayed through a model of PyTorch's caching allocator (" << describe(w.recorded)
        << (w.allocator_conf.empty() ? "" : ", from PYTORCH_CUDA_ALLOC_CONF") << ")\n";

    const WhatIf::Check &c = w.check;
    out << heading("model check") << (c.trusted ? s.green() : s.yellow()) << (c.trusted ? "trusted" : "NOT trusted")
        << s.reset() << ": reserved within 2 MiB of PyTorch's at " << report::percent(c.within, c.compared) << "% of "
        << c.compared << " events (largest gap " << human_bytes(c.largest_difference) << ")";
    if (!c.trusted) out << "; " << c.why;
    else if (c.reproduces_oom == true) out << "; it refuses the same request under the same budget";
    out << "\n";
    if (const std::optional<Departure> &d = c.first_departure)
        out << indent << "first apart after block event " << d->op + 1 << " (" << op_label(*d)
            << "): the model reserved " << human_bytes(d->model_reserved) << ", PyTorch "
            << human_bytes(d->pytorch_reserved) << "\n";

    out << heading("budget");
    if (!w.budget) {
        out << "unknown (no quota, no device size in the report): the questions under a budget are skipped\n";
    } else {
        const Budget &b = *w.budget;
        out << human_bytes(b.bytes) << " for PyTorch: "
            << (b.limit ? "the " + human_bytes(*b.limit) + " " + b.scope + " limit"
                        : "no quota, the device's " + human_bytes(b.device_total.value_or(0)));
        if (b.others) out << " - " << human_bytes(b.others) << " of other processes";
        if (b.outside) out << " - " << human_bytes(b.outside) << " of this process outside PyTorch's allocator";
        out << "\n";
    }

    if (w.expandable) {
        out << heading("expandable_segments:True");
        if (w.recorded.expandable) out << "already on; ";
        out << outcome_line(*w.expandable, w, s) << "\n";
    }
    if (!w.max_split.empty()) {
        const uint64_t budget = w.budget ? w.budget->bytes : 0;
        std::string avoid, just, all;
        size_t n = 0;
        for (const Outcome &o : w.max_split) {
            std::string mb = std::to_string(o.config.max_split_size >> 20);
            all += (all.empty() ? "" : ", ") + mb;
            if (comfortably(o, budget)) {
                avoid += (avoid.empty() ? "" : ", ") + mb;
                n++;
            } else if (o.avoids) {
                just += (just.empty() ? "" : ", ") + mb;
            }
        }
        out << heading("max_split_size_mb");
        if (n == w.max_split.size()) out << s.green() << "each of " << all << " avoids it" << s.reset();
        else if (n) out << s.green() << avoid << s.reset() << " avoid" << (n == 1 ? "s" : "") << " it";
        else if (just.empty()) out << "none of " << all << " avoids it";
        if (!just.empty())
            out << (n ? "; " : "") << s.yellow() << just << s.reset() << " only just (less than "
                << human_bytes(spare_needed(budget)) << " to spare)";
        if (n && n < w.max_split.size()) out << " (of " << all << ")";
        out << "\n";
    }

    out << heading("smallest budget") << human_bytes(w.needed) << " allocated peak (no allocator does with less) · "
        << (w.smallest_configured ? human_bytes(*w.smallest_configured) : std::string("none")) << " as configured · "
        << (w.smallest_expandable ? human_bytes(*w.smallest_expandable) : std::string("none"))
        << " with expandable segments\n";
    if (w.budget && (w.budget->others || w.budget->outside))
        out << indent << "(as a quota: " << human_bytes(w.budget->others + w.budget->outside)
            << " more, for other processes and this process's memory outside PyTorch)\n";
    for (const std::string &caveat : w.caveats)
        out << "  " << s.yellow() << "approximate" << s.reset() << ": " << caveat << "\n";
}

}  // namespace gg::whatif
