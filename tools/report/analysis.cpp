// The diagnosis and the advice of a report: see tools/report/analysis.h.
#include "tools/report/analysis.h"

#include <algorithm>

namespace gg::report {

namespace {

constexpr uint64_t MiB = 1024ull * 1024;
constexpr uint64_t GiB = 1024ull * MiB;

// A GPUGUARD_MEM_LIMIT value at least `bytes`, in the units people write: "2.75GiB", "768MiB".
std::string limit_spec_at_least(uint64_t bytes) {
    char buf[32];
    if (bytes >= GiB) {
        uint64_t quarters = (bytes + GiB / 4 - 1) / (GiB / 4);
        if (quarters % 4 == 0) snprintf(buf, sizeof buf, "%lluGiB", static_cast<unsigned long long>(quarters / 4));
        else snprintf(buf, sizeof buf, "%.2fGiB", static_cast<double>(quarters) / 4.0);
        std::string s = buf;
        if (s.find('.') != std::string::npos && s[s.find("GiB") - 1] == '0') s.erase(s.find("GiB") - 1, 1);
        return s;
    }
    uint64_t sixteens = (bytes + 16 * MiB - 1) / (16 * MiB);
    snprintf(buf, sizeof buf, "%lluMiB", static_cast<unsigned long long>(sixteens * 16));
    return buf;
}

std::string mib_spec(uint64_t bytes) {
    if (bytes >= GiB && bytes % GiB == 0) return std::to_string(bytes / GiB) + "GiB";
    return std::to_string(bytes / MiB) + "MiB";
}

std::string process_desc(const Holder &h) {
    std::string s = "pid " + std::to_string(h.pid);
    if (!h.command.empty()) s += " (" + h.command + ")";
    return s;
}

// The lines a tensor view adds under the headline: PyTorch's allocated and reserved bytes, the free
// holes against the request, and whether the out-of-memory is fragmentation: the request would fit in
// what the limit leaves beside the live tensors, but no free block is that large and the segments
// that hold the free memory cannot be released (live tensors lie in them).
void tensor_diagnosis(const Report &r, Analysis &a) {
    if (r.tensor && r.tensor->backend == "cudaMallocAsync")
        a.why.push_back(
            "PyTorch's cudaMallocAsync backend: every tensor is a driver allocation, so the holders "
            "below are its tensors (the segment view is the tensor view)");
    const TensorFacts &t = a.tensor;
    if (!t.present || !a.failure) return;  // the tensor view's section says it for other reports
    std::string line = "PyTorch held " + human_bytes(t.reserved) + " reserved: " + human_bytes(t.allocated) +
                       " allocated to tensors, " + human_bytes(t.unallocated) + " reserved but free";
    if (t.holes)
        line += " (" + std::to_string(t.holes) + " holes between live tensors, the largest " +
                human_bytes(t.largest_free) + ")";
    a.why.push_back(line);
    if (!t.request) return;
    a.why.push_back("PyTorch asked for " + human_bytes(t.request) + "; its largest free block " +
                    (t.request <= (1u << 20) ? "for small tensors " : "") + "was " + human_bytes(t.largest_free));
    // What the memory left to this process allows: the quota minus the other processes' bytes, or the
    // device's free memory plus what PyTorch holds.
    uint64_t avail = 0;
    if (r.limit_bytes) {
        uint64_t container = r.container_bytes.value_or(0), mine = r.process_bytes.value_or(0);
        uint64_t others = container > mine ? container - mine : 0;
        avail = *r.limit_bytes > others ? *r.limit_bytes - others : 0;
    } else if (r.device_free) {
        avail = *r.device_free + t.reserved;
    }
    a.fragmentation = avail > 0 && t.allocated + t.request <= avail && t.largest_free < t.request && t.pinned_free > 0;
    if (a.fragmentation)
        a.why.push_back("this is fragmentation: the tensors (" + human_bytes(t.allocated) + ") and the request (" +
                        human_bytes(t.request) + ") fit in the " + human_bytes(avail) +
                        " this process may use, but the free memory is split over " +
                        std::to_string(t.pinned_segments) + (t.expandable ? " pages" : " segments") +
                        " that live tensors keep from going back to the driver");
}

// Whether the what-if replay has a verdict for this failure (its model follows the run).
bool replay_speaks(const Analysis &a) { return a.failure && a.what_if && whatif::verdict(*a.what_if); }

// The tensors that pin the fragmented segments, and what to change.
void fragmentation_advice(const Report &r, Analysis &a) {
    const TensorFacts &t = a.tensor;
    std::string pins;
    for (size_t i = 0; i < t.pins.size() && i < 3; i++) {
        const Pin &p = t.pins[i];
        pins += (i ? "; " : "") + where_label(r, p.stack) + ": " + std::to_string(p.blocks) + " tensor" +
                (p.blocks == 1 ? "" : "s") + " (" + human_bytes(p.bytes) + ") in " + std::to_string(p.segments) +
                (t.expandable ? " page" : " segment") + (p.segments == 1 ? "" : "s") + " holding " +
                human_bytes(p.free_held) + " free";
    }
    a.advice.push_back(
        {"fragmentation",
         "Fragmentation: " + human_bytes(t.pinned_free) + " free inside PyTorch's " +
             (t.expandable ? "pages" : "segments") + ", none of it in one piece of " + human_bytes(t.request),
         "The free memory lies between live tensors, and a " + std::string(t.expandable ? "page" : "segment") +
             " goes back to the driver only when nothing in it lives. The tensors that keep them: " + pins +
             ". Give those tensors one lifetime (free them together, or keep the survivors in one preallocated "
             "buffer), or allocate the large tensor before them" +
             (replay_speaks(a) ? std::string(".")
                               : "; `gpuguard report --what-if` replays the run to say whether an allocator option "
                                 "or a larger limit would do.")});
}

// What the replay found, as advice: only where its model follows this run (whatif::verdict).
void replay_advice(Analysis &a) {
    if (!replay_speaks(a)) return;
    whatif::Verdict v = *whatif::verdict(*a.what_if);
    a.advice.push_back({"what-if", v.title, v.detail});
}

// Advice by where the memory is held: the largest phase, when it holds at least 30%.
void phase_advice(const Report &r, Analysis &a, uint64_t total) {
    if (total == 0) return;
    int best = -1;
    for (int p = 0; p < kPhases; ++p)
        if (static_cast<Phase>(p) != Phase::Other && (best < 0 || a.phase_bytes[p] > a.phase_bytes[best])) best = p;
    uint64_t held = best >= 0 ? a.phase_bytes[best] : 0;
    if (held == 0 || percent(held, total) < 30) return;
    std::string what = a.tensor.present ? "of the tensors" : "of live memory";
    std::string share = human_bytes(held) + " (" + std::to_string(percent(held, total)) + "% " + what + ")";
    switch (static_cast<Phase>(best)) {
        case Phase::Optimizer:
            a.advice.push_back({"optimizer", "The optimizer step holds " + share,
                                "Optimizer state (Adam keeps two tensors per parameter) was allocated under "
                                "torch/optim: consider a lighter or 8-bit optimizer, foreach=False (fewer temporaries "
                                "during the step), or sharding the state (ZeRO, FSDP)."});
            break;
        case Phase::Backward:
            a.advice.push_back({"backward", "Autograd backward holds " + share,
                                "Gradients and backward temporaries: try activation checkpointing "
                                "(torch.utils.checkpoint), a smaller micro-batch with gradient accumulation, "
                                "mixed precision, or zero_grad(set_to_none=True)."});
            break;
        case Phase::Forward:
            a.advice.push_back({"forward", "The forward pass holds " + share,
                                "Mostly activations kept for backward: activation checkpointing "
                                "(torch.utils.checkpoint), a smaller batch or sequence, mixed precision "
                                "(torch.autocast), or torch.no_grad() where no backward follows."});
            break;
        case Phase::Inference:
            a.advice.push_back({"inference", "Inference holds " + share,
                                "Nothing is kept for a backward pass here: these are the forward's own values at "
                                "this batch and sequence length. A smaller batch or shorter sequences, a lower "
                                "precision (bfloat16), or torch.inference_mode() where it is not used yet."});
            break;
        case Phase::Weights:
            a.advice.push_back({"weights", "The model's weights hold " + share,
                                "Moved to the GPU by Module.to/.cuda or loaded from a checkpoint: a lower precision "
                                "(bfloat16), quantized weights, or sharding the model (FSDP, tensor parallelism)."});
            break;
        case Phase::Communication:
            a.advice.push_back({"communication", "Communication buffers hold " + share,
                                "Process groups, DDP's gradient buckets and NCCL's buffers: a smaller "
                                "bucket_cap_mb, gradient_as_bucket_view=True (buckets share the gradients' "
                                "memory), or NCCL_BUFFSIZE for NCCL's own."});
            break;
        case Phase::KvCache: {
            std::string at;
            for (const StackBytes &sb : a.tensor.present ? r.tensor->by_stack : r.by_stack)
                if (const Stack *s = r.stack(sb.stack))
                    if (const Frame *f = kv_cache_frame(*s)) {
                        at = " at " + frame_label(*f);
                        break;
                    }
            a.advice.push_back({"kv-cache", "The KV cache" + at + " holds " + share,
                                "It grows with every generated token, for every sequence of the batch: cap "
                                "max_new_tokens or the batch size, or use a static, quantized or offloaded cache "
                                "(transformers' cache_implementation)."});
            break;
        }
        case Phase::Other: break;
    }
}

}  // namespace

Analysis analyze(const Report &r) {
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
    if (r.tensor && whatif::cannot_replay(r).empty()) a.what_if = whatif::what_if(r);
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

    // ---- diagnosis ------------------------------------------------------------------------------
    const std::string &reason = r.reason;
    if (reason == "quota") {
        a.kind = "quota";
        a.failure = true;
        a.headline = "OUT OF MEMORY (quota): " + api + " of " + human_bytes(request) + on_device + " was refused";
        if (r.limit_bytes) {
            bool per_process = r.limit_scope == "process";
            uint64_t held = per_process ? live : container;
            std::string src =
                r.limit_source.empty() ? "" : r.limit_source + (r.limit_spec.empty() ? "" : "=" + r.limit_spec);
            a.why.push_back("the " + std::string(per_process ? "per-process" : "container") + " limit is " +
                            human_bytes(*r.limit_bytes) + (src.empty() ? "" : " (" + src + ")") + "; " +
                            (per_process ? "this process" : "the container") + " held " + human_bytes(held) +
                            ", so the request would have made " + human_bytes(held + request));
            if (!per_process && r.container_bytes && *r.container_bytes != live)
                a.why.push_back("this process held " + human_bytes(live) + " of the container's " +
                                human_bytes(container));
        } else if (!r.message.empty()) {
            a.why.push_back(r.message);
        }
    } else if (reason == "driver_oom") {
        a.kind = "physical";
        a.failure = true;
        a.headline = "OUT OF MEMORY (physical memory): " + api + " of " + human_bytes(request) + on_device +
                     " failed in the driver";
        if (r.device_total && r.device_free)
            a.why.push_back("the device had " + human_bytes(*r.device_free) + " free of " +
                            human_bytes(*r.device_total) + (r.device_name.empty() ? "" : " (" + r.device_name + ")"));
        if (r.limit_bytes)
            a.why.push_back("the quota was not the cause: the container held " + human_bytes(container) + " of its " +
                            human_bytes(*r.limit_bytes) + " limit");
        else a.why.push_back("no gpuguard quota was set on this device");
        if (r.device_total && r.device_free && *r.device_total > *r.device_free) {
            uint64_t used = *r.device_total - *r.device_free;
            if (used > container + used / 10 && used - container > 256 * MiB)
                a.why.push_back("about " + human_bytes(used - container) +
                                " of the device is held outside this container's ledger (other containers, or "
                                "the driver's own context memory)");
        }
    } else if (reason == "exit") {
        a.kind = "exit";
        a.headline = "Report at exit: no allocation failed";
        a.why.push_back("the process still held " + human_bytes(live) + " when it exited" +
                        (r.live_allocations ? " in " + std::to_string(*r.live_allocations) + " allocations" : ""));
    } else if (reason == "request") {
        a.kind = "request";
        a.headline = "Report requested by the program";
    } else if (reason == "signal") {
        a.kind = "signal";
        a.headline = "Report written on a signal";
    } else if (reason == "warn_at") {
        a.kind = "warn";
        a.headline = "WARNING: GPU memory crossed the warning threshold";
        if (r.limit_bytes)
            a.why.push_back("the container held " + human_bytes(container) + " of its " + human_bytes(*r.limit_bytes) +
                            " limit (" + std::to_string(percent(container, *r.limit_bytes)) + "%)");
    } else {
        a.kind = "unknown";
        a.headline = "Report (reason '" + (reason.empty() ? std::string("unknown") : reason) + "')";
    }
    if (reason == "allocator_oom") {
        a.kind = "allocator";
        a.failure = true;
        a.headline = "OUT OF MEMORY (PyTorch's allocator): a request of " + human_bytes(a.tensor.request) + on_device +
                     " was refused without a driver call failing";
        a.why.push_back(
            "PyTorch's own limit refused it (torch.cuda.set_per_process_memory_fraction), not the "
            "driver nor a gpuguard quota");
    }
    tensor_diagnosis(r, a);
    // The shim's message says again what the exit line says; for the other reasons it is the news.
    if (!a.failure && a.kind != "exit" && !r.message.empty()) a.why.push_back(r.message);
    if (a.sibling)
        a.why.push_back("a sibling process holds most of it: " + process_desc(*a.sibling) + " holds " +
                        human_bytes(a.sibling->bytes) + ", " + std::to_string(percent(a.sibling->bytes, ledger_total)) +
                        "% of the container's usage" + (a.sibling->alive ? "" : " (and it is no longer running)"));
    for (const LedgerProcess &p : r.ledger_processes)
        if (!p.alive && p.bytes > 0 && !(a.sibling && a.sibling->pid == p.pid))
            a.why.push_back("pid " + std::to_string(p.pid) + " has exited but is still counted for " +
                            human_bytes(p.bytes));
    if (a.failed_phase && *a.failed_phase != Phase::Other)
        a.why.push_back(std::string("the failed request was made in the ") + phase_name(*a.failed_phase));

    // ---- advice ---------------------------------------------------------------------------------
    if (a.sibling) {
        a.advice.push_back({"sibling", "Another process of this container holds most of its GPU memory",
                            process_desc(*a.sibling) + " holds " + human_bytes(a.sibling->bytes) +
                                " of the container's " + human_bytes(ledger_total) +
                                ". Free it there (a finished evaluation or data-loading process, a cache it keeps), "
                                "run the two one after the other, or give each its own per-process limit."});
    }

    Bytes peak = r.peak();
    if (r.limit_bytes) {
        uint64_t limit = *r.limit_bytes;
        uint64_t needed = std::max<uint64_t>(peak.value_or(0), a.failure && a.kind == "quota" ? live + request : 0);
        if (request > limit) {
            a.advice.push_back({"request-exceeds-limit", "The failed request alone is larger than the limit",
                                "It asked for " + human_bytes(request) + " while the whole limit is " +
                                    human_bytes(limit) +
                                    ": no amount of freeing helps; raise GPUGUARD_MEM_LIMIT to at least " +
                                    limit_spec_at_least(live + request) + " or make the allocation smaller."});
        } else if (needed > limit && !a.sibling) {
            bool asked_more = a.failure && a.kind == "quota" && live + request >= peak.value_or(0);
            std::string what = asked_more ? "held " + human_bytes(live) + " and asked for " + human_bytes(request) +
                                                " more (" + human_bytes(live + request) + ")"
                                          : "held " + human_bytes(*peak) + " at its peak";
            if (asked_more && peak && *peak > limit) what += ", and held " + human_bytes(*peak) + " at its peak";
            a.advice.push_back({"raise-limit", "The limit is smaller than this program needs",
                                "This process alone " + what + ", more than the " + human_bytes(limit) +
                                    " limit: raise GPUGUARD_MEM_LIMIT to at least " + limit_spec_at_least(needed) +
                                    ", or reduce what it holds (below)."});
        }
    }

    // Generic words about PyTorch's cache only where there is no tensor view: with one, the diagnosis
    // above says what the cache really holds, and the what-if replay says which option would help.
    if (!r.tensor && a.caching_allocator_bytes > 0 && live > 0 && percent(a.caching_allocator_bytes, live) >= 25) {
        a.advice.push_back(
            {"caching-allocator",
             "PyTorch's caching allocator holds " + human_bytes(a.caching_allocator_bytes) + " (" +
                 std::to_string(percent(a.caching_allocator_bytes, live)) + "% of this process)",
             "Its segments can be cached but unused or fragmented. Try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
             "(less fragmentation), and torch.cuda.empty_cache() after a phase that peaks (evaluation, a larger batch)"
             " so that memory goes back to the driver" +
                 std::string(a.sibling ? " and to the other processes." : ".")});
    }

    if (a.fragmentation) fragmentation_advice(r, a);
    replay_advice(a);
    phase_advice(r, a, held_total);

    if (r.cudnn && r.cudnn->largest_workspace_requested_bytes && *r.cudnn->largest_workspace_requested_bytes > 0) {
        const Cudnn &c = *r.cudnn;
        uint64_t largest = *c.largest_workspace_requested_bytes;
        uint64_t ref = r.limit_bytes ? *r.limit_bytes : r.device_total.value_or(0);
        bool failed_in_cudnn = false;
        if (r.failed)
            for (const CudnnStack &cs : c.requests_by_stack)
                if (!cs.stack.empty() && cs.stack == r.failed->stack) failed_in_cudnn = true;
        uint64_t suggestion = 64 * MiB;
        while (ref > 0 && suggestion * 2 <= ref / 16) suggestion *= 2;
        bool big = ref > 0 && largest * 8 >= ref;
        bool capped_below = c.workspace_cap_bytes && *c.workspace_cap_bytes <= suggestion;
        if ((big || failed_in_cudnn) && !capped_below && largest > suggestion) {
            a.advice.push_back(
                {"cudnn-workspace", "cuDNN asked for workspaces up to " + human_bytes(largest),
                 std::string(failed_in_cudnn ? "The failed request was a cuDNN workspace. " : "") +
                     "Cap them with GPUGUARD_CUDNN_WORKSPACE_LIMIT=" + mib_spec(suggestion) +
                     ": cuDNN then picks algorithms that fit, usually a little slower" +
                     (c.workspace_cap_bytes ? " (the cap is now " + human_bytes(*c.workspace_cap_bytes) + ")" : "") +
                     "."});
        }
    }
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
