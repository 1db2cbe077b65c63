// The advice of a report: what to change (tools/report/analysis/parts.h).
#include <algorithm>
#include <cmath>

#include "tools/report/analysis/parts.h"

namespace gg::report::analysis {

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
void phase_advice(Analysis &a, uint64_t total) {
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
        case Phase::KvCache: break;  // kv_cache_advice(), whichever phase is largest
        case Phase::Other: break;
    }
}

// The largest 1/n not above `share` (0 < share < 1), as people say it: "half", "a third", "1/12".
std::string fraction_words(long double share) {
    static const char *const words[] = {"half", "a third", "a quarter", "a fifth"};
    uint64_t n = std::max<uint64_t>(2, static_cast<uint64_t>(std::ceil(1.0L / share)));
    return n - 2 < sizeof words / sizeof *words ? words[n - 2] : "1/" + std::to_string(n);
}

// At what size the KV cache would have let this failure pass, from the report's own numbers: what the
// process may use, what it held beside the cache, and the cache with the failed request when that
// request was the cache growing. The cache is batch × tokens × a constant, so the share of it that
// fits is the share of batch × tokens that fits. The report knows neither the batch nor the tokens:
// it gives the share. Other holders are taken as they were; a smaller batch shrinks its activations
// too, so the share errs low.
std::string kv_cache_fit(const Report &r, const Facts &f, const Analysis &a, uint64_t kv) {
    if (!a.failure) return "No allocation failed in this report, so there is no size the cache had to fit under.";
    const TensorFacts &t = a.tensor;
    // In the measure of the holders: tensors (beside what the process holds outside PyTorch), or
    // the driver's allocations.
    uint64_t outside = t.present && f.live > t.reserved ? f.live - t.reserved : 0;
    uint64_t may_use = memory_for_process(r, f, a, t.present ? t.reserved : f.live);
    if (may_use == 0)
        return "The report holds neither the limit that refused the request nor the device's free memory, so it "
               "cannot say at what size the cache would fit.";
    uint64_t request = t.present && t.request ? t.request : f.request;
    bool cache_asked = a.failed_phase == Phase::KvCache;  // the failed request was the cache growing
    uint64_t cache = kv + (cache_asked ? request : 0);
    uint64_t rest = f.held_total - kv + (cache_asked ? 0 : request) + outside;
    if (rest >= may_use)
        return "Even with no KV cache the rest (" + human_bytes(rest) + ") would not fit in the " +
               human_bytes(may_use) + " this process may use: a smaller cache alone does not make this run fit.";
    uint64_t room = may_use - rest;
    if (room >= cache)
        return "The cache and the rest (" + human_bytes(cache + rest) + ") fit in the " + human_bytes(may_use) +
               " this process may use: its size is not what failed here.";
    long double share = static_cast<long double>(room) / cache;
    std::string fits = std::to_string(static_cast<int>(share * 100)) + "%";
    return "The run fits with at most " + human_bytes(room) + " of cache beside the other " + human_bytes(rest) +
           " held, in the " + human_bytes(may_use) + " this process may use: " + fits + " of the " +
           human_bytes(cache) + " the cache needed" + (cache_asked ? " with the failed request" : "") +
           ", so batch × tokens within " + fits + " of what they were when it failed (" + fraction_words(share) +
           " the batch at the same length, say). The report knows neither the batch nor the tokens: it can give "
           "only this share.";
}

// The KV cache, whenever it holds a tenth of what is held: how much, the frame that grows it, what
// shrinks it, and at what size the run would fit.
void kv_cache_advice(const Report &r, const Facts &f, Analysis &a) {
    uint64_t kv = a.phase_bytes[static_cast<int>(Phase::KvCache)];
    if (kv == 0 || f.held_total == 0 || percent(kv, f.held_total) < 10) return;
    std::string at;
    for (const StackBytes &sb : a.tensor.present ? r.tensor->by_stack : r.by_stack)
        if (const Stack *s = r.stack(sb.stack))
            if (const Frame *fr = kv_cache_frame(*s)) {
                at = " at " + frame_label(*fr);
                break;
            }
    a.advice.push_back(
        {"kv-cache",
         "The KV cache" + at + " holds " + human_bytes(kv) + " (" + std::to_string(percent(kv, f.held_total)) + "% " +
             (a.tensor.present ? "of the tensors" : "of live memory") + ")",
         "It grows with every token, for every sequence of the batch: batch size × (prompt length + "
         "max_new_tokens). A smaller batch, a shorter prompt or max_new_tokens shrink it; a quantized cache "
         "(generate(..., cache_implementation=\"quantized\"), QuantizedCache) keeps keys and values in 4 or 2 "
         "bits; a static cache (cache_implementation=\"static\") takes its whole length at the start, so a run "
         "too long fails before the work, not after it. " +
             kv_cache_fit(r, f, a, kv)});
}

}  // namespace

void advise(const Report &r, const Facts &f, Analysis &a) {
    const uint64_t live = f.live, request = f.request, ledger_total = f.ledger_total, held_total = f.held_total;
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
    phase_advice(a, held_total);
    kv_cache_advice(r, f, a);

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
}

// Declared, and said, in parts.h.
uint64_t memory_for_process(const Report &r, const Facts &f, const Analysis &a, uint64_t holds) {
    if (a.kind == "quota" && r.limit_bytes) {
        uint64_t others = r.limit_scope == "process" || f.container < f.live ? 0 : f.container - f.live;
        return *r.limit_bytes > others ? *r.limit_bytes - others : 0;
    }
    return a.kind == "physical" && r.device_free ? *r.device_free + holds : 0;
}

}  // namespace gg::report::analysis
