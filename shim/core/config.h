// Every environment variable the shim reads, read once at the first hooked call and parsed into one
// struct. A malformed value is reported with the variable's name and value; for the memory limit the
// shim then fails closed (every device allocation is refused) so that a typo is seen at once instead
// of a run going unlimited.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

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

    // cuDNN workspace cap: kCapAuto (remaining quota), kCapOff, or bytes.
    enum CudnnCap { kCapAuto, kCapOff, kCapBytes } cudnn_cap = kCapAuto;
    uint64_t cudnn_cap_bytes = 0;

    std::string real_libcuda;  // GPUGUARD_REAL_LIBCUDA, "" for libcuda.so.1
    bool debug = false;
};

// Parses an environment given as a lookup (a name -> its value, or null when unset), so that the
// fuzz target (tests/fuzz/fuzz_config.cpp) can feed it any environment without touching the real
// one. Errors are printed (one line each) as they are found. GPUGUARD_DEBUG is the exception: it is
// read once per process by common/base/log.cpp, whatever the lookup says.
using EnvLookup = std::function<const char *(const char *name)>;
Config parse_config(const EnvLookup &getenv);

// parse_config of the process's environment.
Config load_config();

// The one configuration of this process, loaded on first use.
const Config &config();

}  // namespace gg
