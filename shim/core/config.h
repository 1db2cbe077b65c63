// The shim's configuration: every setting it reads (common/settings/settings.def), read once at the
// first hooked call into one struct. A malformed value is reported with the variable's name and
// value; for the memory limit the shim then fails closed (every device allocation is refused) so
// that a typo is seen at once instead of a run going unlimited.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/settings/settings.h"
#include "common/units/size_spec.h"

namespace gg {

struct Config {
    // Quota.
    LimitSpec limit;
    std::string limit_text;    // as given, "" for none
    std::string limit_source;  // the variable it came from
    bool fail_closed = false;  // a malformed limit: refuse every device allocation

    // Ledger: "" means a private, per-process ledger (GPUGUARD_LEDGER=none).
    std::string ledger_path;
    int ledger_group = -1;

    // Reports.
    std::string report_dir = ".";
    int max_reports = 8;
    int top_n = 20;
    bool report_on_exit = false;
    int report_signal = 0;  // 0: none installed
    double warn_at = 0;     // fraction of the limit; 0: off

    // Stacks.
    int stack_depth = 48;
    uint64_t stack_min_bytes = 0;
    bool python_stacks = true;
    bool stack_reuse = true;  // reuse a Python call site's stack (shim/stacks/reuse.h)

    // The tensor view (shim/torch/view.h).
    bool tensor_view = true;
    size_t tensor_events = 65536;

    // What the quota counts beside allocations (shim/usage/): GPUGUARD_COUNT_CONTEXT.
    settings::CountMode count_mode = settings::CountMode::kEverything;
    bool count_all() const { return count_mode != settings::CountMode::kAllocations; }

    settings::CudnnCap cudnn_cap;  // GPUGUARD_CUDNN_WORKSPACE_LIMIT

    std::string real_libcuda;  // GPUGUARD_REAL_LIBCUDA, "" for libcuda.so.1
    bool debug = false;

    // One line for each malformed value, as the shim prints it: "NAME=VALUE is PROBLEM; WHAT_IT_DOES".
    std::vector<std::string> problems;
};

// Parses an environment given as a lookup, so that the fuzz target (tests/fuzz/fuzz_config.cpp)
// can feed it any environment without touching the real one; what is malformed goes into
// `problems`, printed by config(). GPUGUARD_DEBUG is the exception: it is read once per process by
// log.cpp, whatever the lookup says.
Config parse_config(const settings::Lookup &env);

// The one configuration of this process, read from its environment on first use; its problems are
// printed then, one line each.
const Config &config();

}  // namespace gg
