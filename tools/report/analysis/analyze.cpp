// What a report means: see tools/report/analysis.h; the pieces: tools/report/analysis/parts.h.
#include "tools/report/analysis/parts.h"

namespace gg::report {

Analysis analyze(const Report &r, whatif::Answers what_if) {
    Analysis a;
    const uint64_t live = r.live_bytes();
    const uint64_t container = r.container_bytes.value_or(live);
    const uint64_t request = r.failed && r.failed->bytes ? *r.failed->bytes : 0;
    const std::string api = r.failed && !r.failed->api.empty()          ? r.failed->api
                            : r.failed && !r.failed->driver_api.empty() ? r.failed->driver_api
                                                                        : std::string("an allocation");
    std::string on_device;
    if (r.failed && r.failed->device) on_device = " on device " + std::to_string(*r.failed->device);
    else if (r.device_ordinal) on_device = " on device " + std::to_string(*r.device_ordinal);

    // ---- the container's other processes --------------------------------------------------------
    uint64_t others = 0;
    Holder top_other;
    for (const LedgerProcess &p : r.ledger_processes) {
        if (p.self) continue;
        others += p.bytes;
        if (p.bytes > top_other.bytes) top_other = Holder{p.pid, p.command, p.bytes, p.alive};
    }
    uint64_t ledger_total = container;
    if (!r.container_bytes) {
        ledger_total = 0;
        for (const LedgerProcess &p : r.ledger_processes) ledger_total += p.bytes;
    }
    if (others > 0 && ledger_total > 0 && others * 2 > ledger_total) a.sibling = top_other;

    // ---- by phase and allocator: tensors when PyTorch reported its blocks, else the segments --------
    a.mode = mode_of(r);
    a.tensor = tensor_facts(r);
    const std::vector<StackBytes> &holders = a.tensor.present ? r.tensor->by_stack : r.by_stack;
    for (const StackBytes &sb : holders) {
        const Stack *s = r.stack(sb.stack);
        if (!s) {
            a.phase_bytes[static_cast<int>(Phase::Other)] += sb.bytes;
            continue;
        }
        a.phase_bytes[static_cast<int>(classify(*s, a.mode))] += sb.bytes;
    }
    for (const StackBytes &sb : r.by_stack)
        if (const Stack *s = r.stack(sb.stack); s && through_caching_allocator(*s))
            a.caching_allocator_bytes += sb.bytes;
    if (r.failed)
        if (const Stack *s = r.stack(r.failed->stack)) a.failed_phase = classify(*s, a.mode);
    uint64_t held_total = 0;  // what the phases divide: tensor bytes, or live segment bytes
    for (const StackBytes &sb : holders) held_total += sb.bytes;

    analysis::Facts f{live, container, ledger_total, request, held_total, api, on_device};
    analysis::diagnose(r, f, a);
    const bool shown =
        what_if != whatif::Answers::kVerdictOfFailure || a.failure || (r.tensor && !whatif::summary_replays(r));
    if (r.tensor && whatif::cannot_replay(r).empty() && shown) a.what_if = whatif::what_if(r, what_if);
    analysis::advise(r, f, a);
    return a;
}

nlohmann::json to_json(const Analysis &a) {
    json j;
    j["kind"] = a.kind;
    j["failure"] = a.failure;
    j["headline"] = a.headline;
    j["why"] = a.why;
    if (a.sibling)
        j["sibling"] = {{"pid", a.sibling->pid}, {"command", a.sibling->command}, {"bytes", a.sibling->bytes}};
    else j["sibling"] = nullptr;
    j["caching_allocator_bytes"] = a.caching_allocator_bytes;
    json phases = json::object();
    for (int p = 0; p < kPhases; p++) phases[phase_id(static_cast<Phase>(p))] = a.phase_bytes[p];
    j["phase_bytes"] = phases;
    j["mode"] = a.mode == Mode::Training ? "training" : a.mode == Mode::Inference ? "inference" : "unknown";
    j["fragmentation"] = a.fragmentation;
    if (a.tensor.present)
        j["tensor"] = {{"allocated_bytes", a.tensor.allocated},       {"reserved_bytes", a.tensor.reserved},
                       {"unallocated_bytes", a.tensor.unallocated},   {"requested_bytes", a.tensor.request},
                       {"largest_free_bytes", a.tensor.largest_free}, {"holes", a.tensor.holes},
                       {"pinned_segments", a.tensor.pinned_segments}, {"pinned_free_bytes", a.tensor.pinned_free},
                       {"releasable_bytes", a.tensor.releasable}};
    else j["tensor"] = nullptr;
    j["what_if"] = a.what_if ? whatif::to_json(*a.what_if) : json(nullptr);
    j["failed_phase"] = a.failed_phase ? json(phase_name(*a.failed_phase)) : json(nullptr);
    json adv = json::array();
    for (const Advice &x : a.advice) adv.push_back({{"id", x.id}, {"title", x.title}, {"detail", x.detail}});
    j["advice"] = adv;
    return j;
}

}  // namespace gg::report
