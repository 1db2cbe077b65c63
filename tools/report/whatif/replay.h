// `gpuguard report --what-if`: the block events a report recorded (tensor_view.events) replayed through
// the model of PyTorch's caching allocator (allocator_model.h) to answer, for the run that ran out of
// memory:
//   a. whether the model follows PyTorch here (its reserved bytes against PyTorch's at each event, and
//      whether it refuses the same request under the same budget): whether to trust b to d;
//   b. whether expandable_segments:True would have avoided the out-of-memory under the same budget;
//   c. the smallest budget the run needed: the allocated peak (no allocator does with less), and the
//      smallest at which the allocator as configured, and with expandable segments, replays through;
//   d. which max_split_size_mb values would have avoided it under the same budget.
// The budget is what the quota left to PyTorch: the limit (or the device's total without a quota)
// minus other processes' bytes on the device (a container-wide quota) and minus this process's own
// device memory outside PyTorch's allocator (both counted against the quota, neither reusable by c10).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "tools/report/model.h"
#include "tools/report/whatif/allocator_model.h"

namespace gg::whatif {

// The allocator's settings a replay varies.
struct Config {
    bool expandable = false;
    uint64_t max_split_size = kNoMaxSplit;
};
// "expandable_segments:True,max_split_size_mb:128"; "defaults" when neither is set.
std::string describe(const Config &c);

// The recorded history of one device, as the replay uses it.
struct Trace {
    struct Op {
        char action = 'a';  // 'a' a block handed out, 'f' taken back, 'o' a request refused
        uint64_t address = 0, bytes = 0;
        uint64_t allocated = 0, reserved = 0;  // PyTorch's totals after it
    };
    std::vector<Op> ops;
    // Blocks live when the recorded events start (address, bytes; by address): freed in the events
    // without being handed out there, or listed live in the report and never named by an event.
    std::vector<std::pair<uint64_t, uint64_t>> seeds;
    // The segments PyTorch held when the events start (address, bytes; by address), where blocks were
    // live before them, without expandable segments: the report's segments, less those the events got,
    // plus those they gave back; PyTorch's segments among them are those holding a block, and then
    // those that make up the rest of PyTorch's reserved bytes (given back in the events, else got with
    // cudaMalloc). The replay starts from them, with the seeds at their addresses.
    std::vector<std::pair<uint64_t, uint64_t>> cache;
    // With expandable segments: the range of each pool PyTorch held when the events start, its pages
    // mapped then (address, bytes; by address) and its first page's address; the replay of expandable
    // segments starts from them, with the seeds at their addresses.
    struct Range {
        bool small = false;
        uint64_t base = 0;
        std::vector<std::pair<uint64_t, uint64_t>> mapped;
    };
    std::vector<Range> ranges;
    // The address range c10 reserves for each expandable segment: 9/8 of the device memory it is told
    // of (the process's limit, as the shim tells it); 0 when the report names neither.
    uint64_t range_bytes = 0;
    uint64_t pages_inferred = 0;  // of the pages mapped then, those holding no seed: inferred from the reserved bytes
    uint64_t cache_free = 0;      // of them, segments that held no block: inferred from the reserved bytes
    uint64_t cache_unknown = 0;   // PyTorch's reserved bytes then that no segment of the report accounts for
    // torch.cuda.empty_cache() as the segment events show it: before each of these ops (indices of
    // `ops`, ascending), PyTorch gave back segments of its own with no request refused for it.
    std::vector<size_t> empty_cache_before;
    // Runs of segments given back that a segment got follows, which would not have fitted the budget
    // before them: c10's give-back on a refused cudaMalloc, or an empty_cache() before a request that
    // needed a new segment. Recorded with neither max_split_size_mb nor expandable segments, the two
    // leave the cache alike (c10 gives back every whole free segment on a refusal), so a replay of those
    // settings under the same budget (`given_back_budget`) empties its cache there; other settings or
    // budgets, which would have refused elsewhere, do not.
    std::vector<size_t> given_back_before;
    uint64_t given_back_budget = kNoLimit;
    // A refused request the events do not hold (tensor_view.oom, else the failed request), tried last.
    std::optional<uint64_t> final_request;
    uint64_t dropped = 0;  // events before the first one replayed
    bool approximate = false;
    std::vector<std::string> caveats;  // why it is approximate, one sentence each
};

// At most this many events are replayed (the newest); older ones count as dropped. Bounds the work
// of a report whose ring was configured huge: the search below replays the events some 50 times.
constexpr size_t kMaxReplayEvents = 1u << 20;

// Why a report cannot be replayed, one line without the file's name; "" when it can.
std::string cannot_replay(const report::Report &r);
Trace trace_of(const report::Report &r);

// Where a replay first could not serve a request.
constexpr size_t kAtSeeds = SIZE_MAX - 1;  // a block live before the events
constexpr size_t kNowhere = SIZE_MAX;

// The first op after which the model's reserved bytes were more than 2 MiB from PyTorch's: where to
// look when the model does not follow a run.
struct Departure {
    size_t op = 0;  // of Trace::ops
    char action = 'a';
    uint64_t bytes = 0, model_reserved = 0, pytorch_reserved = 0;
};

struct Replay {
    bool ok = true;                                      // every recorded block and every refused request served
    size_t failed_at = kNowhere;                         // the op (ops.size(): the final request; kAtSeeds)
    uint64_t failed_bytes = 0;                           // that request
    bool failed_at_refusal = false;                      // one PyTorch refused too (else PyTorch served it)
    uint64_t failed_allocated = 0, failed_reserved = 0;  // the model's totals then
    size_t blocks_not_served = 0;                        // recorded blocks the model could not hand out
    size_t refusals = 0, refused_too = 0;                // requests PyTorch refused, and those the model refused too
    bool last_refusal_refused = false;
    uint64_t peak_allocated = 0, peak_reserved = 0;  // up to where it ended
    uint64_t smallest_refused = UINT64_MAX;          // CachingAllocatorModel::smallest_refused_by_limit
    // The model's reserved against PyTorch's after each op.
    size_t compared = 0, within = 0;  // within 2 MiB
    uint64_t largest_difference = 0;
    std::optional<Departure> first_departure;
};

// Replays `trace` through the model with `config`, reserved bytes never past `limit`; `stop` ends at
// the first request not served (what the limit search needs).
Replay replay(const Trace &trace, const Config &config, uint64_t limit, bool stop);

// The smallest limit (a multiple of 2 MiB, the unit of every segment and page) at which the replay
// serves everything, searched by bisection from `at_least` up to the peak reserved of a replay
// without a limit (which serves everything by construction). The model chooses the same under every
// limit from a replay's peak reserved up to below the smallest growth that limit refused, so a probe in
// that range of an earlier replay takes its answer instead of replaying: the same answers as plain
// bisection, with far fewer replays where the budget is loose. Bisection assumes that more
// memory never hurts, which holds for the caching allocator but for rare orders of events. Unknown when nothing serves
// it (a request larger than any device).
std::optional<uint64_t> smallest_limit(const Trace &trace, const Config &config, uint64_t at_least);

struct Budget {
    uint64_t bytes = 0;  // what PyTorch's allocator could reserve
    std::string scope;   // "container", "process" (the quota's scope) or "device" (no quota)
    std::optional<uint64_t> limit, device_total;
    uint64_t others = 0;   // other processes' bytes on the device (a container quota)
    uint64_t outside = 0;  // this process's device memory outside PyTorch's allocator
};
std::optional<Budget> budget_of(const report::Report &r);

struct Outcome {  // one setting under the budget
    Config config;
    bool avoids = false;            // serves every block and every refused request
    bool runs_out_earlier = false;  // fails at a block PyTorch served
    uint64_t failed_bytes = 0, failed_allocated = 0, failed_reserved = 0;
    uint64_t peak_reserved = 0;  // when it avoids it
};

struct WhatIf {
    // How far what_if() went: every answer; those of the summary's verdict (all but the searches of
    // the smallest budget); the model check only (the summary, whose verdict would say nothing: the
    // model does not follow the run, or there is no budget); no replay at all (the summary, of a
    // report listing more event rows than the shim writes: an edited or crafted one).
    enum class Reach { kAll, kVerdict, kCheck, kNothing } reach = Reach::kAll;
    std::string unanswered;  // why it stopped short of kAll, one sentence naming `gpuguard report --what-if`
    std::string report;      // the file's name
    std::string allocator_conf;
    Config recorded;
    size_t events = 0, seeded = 0;
    uint64_t dropped = 0;
    bool approximate = false;
    std::vector<std::string> caveats;
    std::optional<Budget> budget;
    std::optional<uint64_t> refused_request;  // the last request PyTorch refused
    struct Check {
        size_t compared = 0, within = 0;
        uint64_t largest_difference = 0;
        std::optional<Departure> first_departure;
        std::optional<bool> reproduces_oom;  // unknown without a budget or a refusal
        bool trusted = false;
        std::string why;  // one sentence
    } check;
    std::optional<Outcome> expandable;  // b: unknown without a budget
    std::vector<Outcome> max_split;     // d: 32 MiB to 1 GiB; empty without a budget
    uint64_t needed = 0;                // c: PyTorch's allocated peak, with the refused request
    std::optional<uint64_t> smallest_configured, smallest_expandable;
};

// What a setting that avoids the OOM should leave spare under the budget before the answer is "yes"
// rather than "only just": a rerun does not repeat the recorded requests exactly (threads interleave
// differently, libraries size their workspaces from what is free). On the H200, a DDP run that the
// replay said max_split_size_mb:256 would serve with 50 MiB to spare asked for more in its rerun and
// ran out (docs/platform-facts.md). 64 MiB or 2% of the budget, as the quota's own tolerance.
uint64_t spare_needed(uint64_t budget);
inline bool comfortably(const Outcome &o, uint64_t budget) {
    return o.avoids && o.peak_reserved <= budget && budget - o.peak_reserved >= spare_needed(budget);
}

// The max_split_size_mb values tried (c10 requires more than 20).
constexpr uint64_t kSplitSizesMb[] = {32, 64, 128, 256, 512, 1024};

// What a caller needs of what_if(): every answer (`gpuguard report --what-if`), or those the summary's
// verdict uses (the summary, --json, --html): the model check first, and nothing more when the verdict
// would say nothing, and never the searches of the smallest budget (the verdict then says where to get
// it); no replay at all of a report that lists more event rows than the shim ever writes
// (report_limits::kMaxEventRows). The summary replays at most 8 times, at most that many events each.
// kVerdictOfFailure: the text summary's. Its text shows nothing of the what-if without a failure but the
// line of a report not replayed (Reach::kNothing), so analyze() asks kVerdict's answers of a report
// of a failure, and of one without only where they cost no replay (summary_replays() false); what_if()
// answers it as kVerdict.
enum class Answers { kAll, kVerdict, kVerdictOfFailure };

// Whether what_if() replays anything for the summary: not for a report that lists more event rows than
// the shim writes.
bool summary_replays(const report::Report &r);

// The answer; the report must be replayable (cannot_replay(r) empty).
WhatIf what_if(const report::Report &r, Answers answers = Answers::kAll);

nlohmann::json to_json(const WhatIf &w);
// A few lines a person reads in ten seconds.
void render_text(const WhatIf &w, bool color, std::ostream &out);

// The replay's answer as one piece of advice for the report's summary (tools/report/analysis.cpp):
// a title naming the option that avoids the OOM (or none) and a detail with the numbers. Empty when
// the model does not follow the run (not trusted) or there was no budget: then it says nothing.
struct Verdict {
    std::string title, detail;
};
std::optional<Verdict> verdict(const WhatIf &w);

}  // namespace gg::whatif
