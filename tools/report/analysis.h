// What a report means: the diagnosis (what failed, and why) and the advice that follows from the data.
// The text summary and the HTML page both show this, so it is computed once, here.
//
// Each piece of advice is given only when the report's numbers support it: an empty advice list is a
// normal outcome, not a gap.
#pragma once

#include "tools/report/model.h"
#include "tools/report/phases.h"
#include "tools/report/tensor.h"
#include "tools/report/whatif/replay.h"

#include <string>
#include <vector>

namespace gg::report {

struct Advice {
    std::string id;      // stable name: "raise-limit", "caching-allocator", "optimizer", ... (tests, HTML)
    std::string title;   // one line
    std::string detail;  // one or two sentences, with the numbers
};

struct Holder {  // a process of the container's ledger that holds memory on the report's device
    int64_t pid = 0;
    std::string command;
    uint64_t bytes = 0;
    bool alive = true;
};

struct Analysis {
    std::string kind;               // "quota" | "physical" | "exit" | "request" | "signal" | "warn" | "unknown"
    bool failure = false;           // a refused or failed allocation
    std::string headline;           // "OUT OF MEMORY (quota): cudaMalloc of 512.00 MiB on device 0 was refused"
    std::vector<std::string> why;   // the lines under the headline
    std::optional<Holder> sibling;  // another process holds most of the container's usage
    uint64_t caching_allocator_bytes = 0;
    Mode mode = Mode::Unknown;           // training or inference, from the stacks
    uint64_t phase_bytes[kPhases] = {};  // indexed by Phase: tensors when the report has a tensor view
    std::optional<Phase> failed_phase;
    TensorFacts tensor;          // the tensor view's facts (tensor.present false without one)
    bool fragmentation = false;  // the request would fit the memory left, but no free block
    // The what-if replay (tools/report/whatif/), when the report has PyTorch's block events.
    std::optional<whatif::WhatIf> what_if;
    std::vector<Advice> advice;
};

// `what_if`: the replay's answers it computes (whatif::Answers): those of the summary's verdict unless
// every one is asked (`gpuguard report --what-if`).
Analysis analyze(const Report &r, whatif::Answers what_if = whatif::Answers::kVerdict);
nlohmann::json to_json(const Analysis &a);

}  // namespace gg::report
