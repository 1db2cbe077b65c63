// The diagnosis and the advice of a report: see tools/report/analysis.h.
#include "tools/report/analysis.h"

#include <algorithm>

namespace gg::report {

namespace {

constexpr uint64_t MiB = 1024ull * 1024;
constexpr uint64_t GiB = 1024ull * MiB;

bool contains(const std::string &s, const char *needle) { return s.find(needle) != std::string::npos; }

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

}  // namespace

const char *phase_name(Phase p) {
    switch (p) {
        case Phase::Optimizer: return "optimizer step";
        case Phase::Backward: return "autograd backward";
        case Phase::Forward: return "forward pass";
        case Phase::Other: break;
    }
    return "other";
}

Phase classify(const Stack &s) {
    bool python = false;
    for (const Frame &f : s.frames) {
        if (f.python) {
            python = true;
            if (contains(f.file, "torch/optim/")) return Phase::Optimizer;
        }
    }
    for (const Frame &f : s.frames) {
        if (f.python && contains(f.file, "torch/autograd/")) return Phase::Backward;
        // Backward mostly runs on the autograd engine's own threads, where no Python frame is left.
        if (!f.python && (contains(f.symbol, "torch::autograd::Engine") || contains(f.symbol, "autograd::generated")))
            return Phase::Backward;
    }
    // Under PyTorch's Python code, neither in the optimizer nor in autograd: the forward computation,
    // which is where the activations that backward needs are allocated. Other Python libraries
    // (CuPy, JAX, Numba) have no such phases: they stay Other.
    if (python)
        for (const Frame &f : s.frames)
            if (f.python && contains(f.file, "torch/")) return Phase::Forward;
    return Phase::Other;
}

bool through_caching_allocator(const Stack &s) {
    for (const Frame &f : s.frames) {
        if (f.python) continue;
        if (contains(f.symbol, "c10::cuda::CUDACachingAllocator")) return true;
        if (base_name(f.module).rfind("libc10_cuda", 0) == 0) return true;
    }
    return false;
}

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

    // ---- by phase and allocator --------------------------------------------------------------
    for (const StackBytes &sb : r.by_stack) {
        const Stack *s = r.stack(sb.stack);
        if (!s) {
            a.phase_bytes[static_cast<int>(Phase::Other)] += sb.bytes;
            continue;
        }
        a.phase_bytes[static_cast<int>(classify(*s))] += sb.bytes;
        if (through_caching_allocator(*s)) a.caching_allocator_bytes += sb.bytes;
    }
    if (r.failed)
        if (const Stack *s = r.stack(r.failed->stack)) a.failed_phase = classify(*s);

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

    if (a.caching_allocator_bytes > 0 && live > 0 && percent(a.caching_allocator_bytes, live) >= 25) {
        a.advice.push_back(
            {"caching-allocator",
             "PyTorch's caching allocator holds " + human_bytes(a.caching_allocator_bytes) + " (" +
                 std::to_string(percent(a.caching_allocator_bytes, live)) + "% of this process)",
             "Its segments can be cached but unused or fragmented. Try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
             "(less fragmentation), and torch.cuda.empty_cache() after a phase that peaks (evaluation, a larger batch)"
             " so that memory goes back to the driver" +
                 std::string(a.sibling ? " and to the other processes." : ".")});
    }

    if (live > 0) {
        int best = -1;
        for (int p = 0; p < 3; ++p)
            if (best < 0 || a.phase_bytes[p] > a.phase_bytes[best]) best = p;
        uint64_t held = a.phase_bytes[best];
        if (held > 0 && percent(held, live) >= 30) {
            std::string share = human_bytes(held) + " (" + std::to_string(percent(held, live)) + "% of live memory)";
            switch (static_cast<Phase>(best)) {
                case Phase::Optimizer:
                    a.advice.push_back(
                        {"optimizer", "The optimizer step holds " + share,
                         "Optimizer state (Adam keeps two tensors per parameter) was allocated under torch/optim: "
                         "consider a lighter or 8-bit optimizer, foreach=False (fewer temporaries during "
                         "the step), or sharding the state (ZeRO, FSDP)."});
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
                case Phase::Other: break;
            }
        }
    }

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
    j["phase_bytes"] = {{"optimizer", a.phase_bytes[0]},
                        {"backward", a.phase_bytes[1]},
                        {"forward", a.phase_bytes[2]},
                        {"other", a.phase_bytes[3]}};
    j["failed_phase"] = a.failed_phase ? json(phase_name(*a.failed_phase)) : json(nullptr);
    json adv = json::array();
    for (const Advice &x : a.advice) adv.push_back({{"id", x.id}, {"title", x.title}, {"detail", x.detail}});
    j["advice"] = adv;
    return j;
}

}  // namespace gg::report
