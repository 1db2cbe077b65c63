// The diagnosis of a report: what failed, and why (tools/report/analysis/parts.h).
#include "tools/report/analysis/parts.h"

namespace gg::report::analysis {

namespace {

constexpr uint64_t MiB = 1024ull * 1024;

// A report's message can be a program's whole gpuguard_report() text (up to 4 KiB, many lines): the
// summary gives its first line, cut at about 200 characters (on a UTF-8 boundary) with an ellipsis,
// so that the advice stays a summary; the report's JSON keeps all of it.
std::string message_line(const std::string &message) {
    constexpr size_t kMaxChars = 200;
    size_t last = message.find_last_not_of(" \n\r\t");  // a trailing newline cuts nothing
    std::string whole = message.substr(0, last == std::string::npos ? 0 : last + 1);
    std::string line = whole.substr(0, whole.find('\n'));
    size_t end = std::min(line.size(), kMaxChars);
    while (end > 0 && end < line.size() && (static_cast<unsigned char>(line[end]) & 0xC0) == 0x80) end--;
    bool cut = end < whole.size();
    line.resize(end);
    return cut ? line + "…" : line;
}

// The lines a tensor view adds under the headline: PyTorch's allocated and reserved bytes, the free
// holes against the request, and whether the out-of-memory is fragmentation: the request would fit in
// what the limit leaves beside the live tensors, but no free block is that large and the segments
// that hold the free memory cannot be released (live tensors lie in them).
void tensor_diagnosis(const Report &r, const Facts &f, Analysis &a) {
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
    uint64_t avail = memory_for_process(r, f, a, t.reserved);
    a.fragmentation = avail > 0 && t.allocated + t.request <= avail && t.largest_free < t.request && t.pinned_free > 0;
    if (a.fragmentation)
        a.why.push_back("this is fragmentation: the tensors (" + human_bytes(t.allocated) + ") and the request (" +
                        human_bytes(t.request) + ") fit in the " + human_bytes(avail) +
                        " this process may use, but the free memory is split over " +
                        std::to_string(t.pinned_segments) + (t.expandable ? " pages" : " segments") +
                        " that live tensors keep from going back to the driver");
}

// The limit refused the request: the limit, what was held against it, and this process's part.
void diagnose_quota(const Report &r, const Facts &f, Analysis &a) {
    a.kind = "quota";
    a.failure = true;
    a.headline = "OUT OF MEMORY (quota): " + f.api + " of " + human_bytes(f.request) + f.on_device + " was refused";
    if (!r.limit_bytes) {
        if (!r.message.empty()) a.why.push_back(message_line(r.message));
        return;
    }
    bool per_process = r.limit_scope == "process";
    uint64_t held = per_process ? f.live : f.container;
    std::string src = r.limit_source.empty() ? "" : r.limit_source + (r.limit_spec.empty() ? "" : "=" + r.limit_spec);
    a.why.push_back("the " + std::string(per_process ? "per-process" : "container") + " limit is " +
                    human_bytes(*r.limit_bytes) + (src.empty() ? "" : " (" + src + ")") + "; " +
                    (per_process ? "this process" : "the container") + " held " + human_bytes(held) +
                    ", so the request would have made " + human_bytes(held + f.request));
    if (!per_process && r.container_bytes && *r.container_bytes != f.live)
        a.why.push_back("this process held " + human_bytes(f.live) + " of the container's " + human_bytes(f.container));
}

// The driver had no memory left: what the device had free, that the quota was not the cause, and how
// much of the device is held outside the ledger.
void diagnose_driver_oom(const Report &r, const Facts &f, Analysis &a) {
    a.kind = "physical";
    a.failure = true;
    a.headline = "OUT OF MEMORY (physical memory): " + f.api + " of " + human_bytes(f.request) + f.on_device +
                 " failed in the driver";
    if (r.device_total && r.device_free)
        a.why.push_back("the device had " + human_bytes(*r.device_free) + " free of " + human_bytes(*r.device_total) +
                        (r.device_name.empty() ? "" : " (" + r.device_name + ")"));
    if (r.limit_bytes)
        a.why.push_back("the quota was not the cause: the container held " + human_bytes(f.container) + " of its " +
                        human_bytes(*r.limit_bytes) + " limit");
    else a.why.push_back("no gpuguard quota was set on this device");
    if (r.device_total && r.device_free && *r.device_total > *r.device_free) {
        uint64_t used = *r.device_total - *r.device_free;
        if (used > f.container + used / 10 && used - f.container > 256 * MiB)
            a.why.push_back("about " + human_bytes(used - f.container) +
                            " of the device is held outside this container's ledger (other containers, or "
                            "the driver's own context memory)");
    }
}

// The headline and the reasons of a report that no failure caused.
void diagnose_other(const Report &r, const Facts &f, Analysis &a) {
    const std::string &reason = r.reason;
    if (reason == "exit") {
        a.kind = "exit";
        a.headline = "Report at exit: no allocation failed";
        a.why.push_back("the process still held " + human_bytes(f.live) + " when it exited" +
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
            a.why.push_back("the container held " + human_bytes(f.container) + " of its " +
                            human_bytes(*r.limit_bytes) + " limit (" +
                            std::to_string(percent(f.container, *r.limit_bytes)) + "%)");
    } else {
        a.kind = "unknown";
        a.headline = "Report (reason '" + (reason.empty() ? std::string("unknown") : reason) + "')";
    }
}

// PyTorch's own limit refused a request that no driver call saw.
void diagnose_allocator_oom(const Facts &f, Analysis &a) {
    a.kind = "allocator";
    a.failure = true;
    a.headline = "OUT OF MEMORY (PyTorch's allocator): a request of " + human_bytes(a.tensor.request) + f.on_device +
                 " was refused without a driver call failing";
    a.why.push_back(
        "PyTorch's own limit refused it (torch.cuda.set_per_process_memory_fraction), not the "
        "driver nor a gpuguard quota");
}

// The other processes of the container: a sibling that holds most, and those that exited but are
// still counted.
void process_notes(const Report &r, const Facts &f, Analysis &a) {
    if (a.sibling)
        a.why.push_back("a sibling process holds most of it: " + process_desc(*a.sibling) + " holds " +
                        human_bytes(a.sibling->bytes) + ", " +
                        std::to_string(percent(a.sibling->bytes, f.ledger_total)) + "% of the container's usage" +
                        (a.sibling->alive ? "" : " (and it is no longer running)"));
    for (const LedgerProcess &p : r.ledger_processes)
        if (!p.alive && p.bytes > 0 && !(a.sibling && a.sibling->pid == p.pid))
            a.why.push_back("pid " + std::to_string(p.pid) + " has exited but is still counted for " +
                            human_bytes(p.bytes));
}

}  // namespace

void diagnose(const Report &r, const Facts &f, Analysis &a) {
    if (r.reason == "quota") diagnose_quota(r, f, a);
    else if (r.reason == "driver_oom") diagnose_driver_oom(r, f, a);
    else diagnose_other(r, f, a);
    if (r.reason == "allocator_oom") diagnose_allocator_oom(f, a);
    tensor_diagnosis(r, f, a);
    // The shim's message says again what the exit line says; for the other reasons it is the news.
    if (!a.failure && a.kind != "exit" && !r.message.empty()) a.why.push_back(message_line(r.message));
    process_notes(r, f, a);
    if (a.failed_phase && *a.failed_phase != Phase::Other)
        a.why.push_back(std::string("the failed request was made in the ") + phase_name(*a.failed_phase));
}

}  // namespace gg::report::analysis
