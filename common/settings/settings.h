// The settings of gpuguard: the table of every variable (settings.def), the one place the process
// environment is read, and the readers that turn a value into what the shim and the command use.
// Both sides read through here, so they cannot disagree about a name, an alias, a range or a
// default.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/units/size_spec.h"

namespace gg::settings {

enum class Id {
#define SETTING(id, ...) id,
#include "common/settings/settings.def"
    kCount
};

enum class Type {
    kLimit,         // a limit spec (common/units/size_spec.h)
    kLedgerPath,    // a path, or none/off/process for a per-process ledger
    kGroup,         // a group name or gid
    kFolder,        // a folder (anything: checked where it is used)
    kCount,         // a whole number in [min, max]
    kSwitch,        // 1/0, true/false, yes/no, on/off
    kSignal,        // USR1, USR2, HUP, QUIT, PWR or a real-time signal number
    kFraction,      // 0 < f <= 1, as 0.9 or 90%
    kSize,          // a size (parse_size)
    kCudnnCap,      // a size, auto, or off/none
    kDriverPath,    // a library path, or a name the loader looks up
    kUnwinderName,  // cfi, libunwind, libgcc or none
    kFlag,          // on unless 0 (GPUGUARD_DEBUG)
    kLibraryPath,   // an existing file
    kCountMode,     // 1, 0 or estimate (GPUGUARD_COUNT_CONTEXT)
};

struct Row {
    Id id;
    const char *name;
    Type type;
    long min, max;
    long default_value;
    const char *default_text;
    const char *aliases;
    const char *run_option;
    const char *help;
    const char *when_bad;
};

// The table, constant-initialised (no guard: the shim reads it on a hook's path, and a fork while
// another thread held a guard would leave the child waiting on it forever).
struct Rows {
    const Row *first;
    size_t count;
    const Row *begin() const { return first; }
    const Row *end() const { return first + count; }
};
Rows rows();
const Row &row(Id id);
const Row *find(const std::string &name);  // null for a name no setting has

// ---- the environment ----------------------------------------------------------------------------

// A name -> its value, or null when unset. The process's own environment, or one a test or fuzz
// target makes up.
using Lookup = std::function<const char *(const char *name)>;
// The process's environment: the one place in gpuguard that reads it (tests/integration/t_lint.sh).
Lookup process_env();
// One variable of the process's environment, for the few that are not gpuguard's own (NO_COLOR,
// PATH, LD_PRELOAD): null when unset.
const char *env(const char *name);
// The setting's value without the spaces around it: nullopt when unset, empty or only spaces. (Spaces
// around a value are a problem of their own: spaces_problem.)
std::optional<std::string> value(const Lookup &env, Id id);
// Whether `raw` has spaces at its start or end: "" when not, else the words that say so, with what
// it is read as (other whitespace is a control character, which each type's reader refuses). `gpuguard doctor` fails on
// it; the shim says it in one line.
std::string spaces_problem(const std::string &raw);

// ---- checks and typed readers -------------------------------------------------------------------

// What is wrong with `value` for the setting: "" when nothing is, else the problem, as in
// "not a whole number from 0 to 128". The same words for the shim's message and `doctor`.
std::string problem(Id id, const std::string &value);

// The typed value of a setting, or its default when it is unset. A malformed value gives the
// default too, and *problem gets the message the shim prints: "NAME=VALUE is PROBLEM; WHEN_BAD".
long read_count(const Lookup &env, Id id, std::string *problem);
bool read_switch(const Lookup &env, Id id, std::string *problem);
int read_signal(const Lookup &env, Id id, std::string *problem);       // 0 when unset or malformed
double read_fraction(const Lookup &env, Id id, std::string *problem);  // 0 when unset or malformed
uint64_t read_size(const Lookup &env, Id id, std::string *problem);    // 0 when unset or malformed
bool read_flag(const Lookup &env, Id id);

// The cuDNN workspace cap: auto (the default), off, or bytes.
struct CudnnCap {
    enum Mode { kAuto, kOff, kBytes } mode = kAuto;
    uint64_t bytes = 0;
};
CudnnCap read_cudnn_cap(const Lookup &env, std::string *problem);

// GPUGUARD_COUNT_CONTEXT: what the quota counts.
enum class CountMode {
    kEverything,   // allocations, contexts and modules, graphs, pool reserve; NVML's view where it has one
    kAllocations,  // allocations only
    kEstimate,     // everything, without NVML's per-process view
};
CountMode read_count_mode(const Lookup &env, std::string *problem);

// GPUGUARD_UNWINDER: "cfi", "libunwind", "libgcc", "none", or "" for the default order.
std::string read_unwinder(const Lookup &env, std::string *problem);

// The limit: GPUGUARD_MEM_LIMIT, else HAMi-core's CUDA_DEVICE_MEMORY_LIMIT and
// CUDA_DEVICE_MEMORY_LIMIT_<i> folded into one spec (the default first, then the per-device entries).
// `source` names the variable(s); text and source are empty when no limit is set.
struct LimitSetting {
    // Where the text came from, which is how a problem names it: NAME=TEXT for a variable, --limit
    // TEXT for `gpuguard run`'s option, the ledger's limit 'TEXT' for the one a shared ledger holds.
    enum Origin { kVariable, kOption, kLedger };
    std::string text, source;
    bool set_but_empty = false;  // GPUGUARD_MEM_LIMIT= or --limit '': a mistake, not "no limit"
    Origin origin = kVariable;
};
LimitSetting read_limit(const Lookup &env);
LimitSetting limit_option(const std::string &option, const std::string &text);
LimitSetting ledger_limit(const std::string &text);

// The one check of a limit, wherever it comes from: the shim's configuration, the shim's reading of
// a shared ledger's limit, `gpuguard run` and `gpuguard doctor` accept the same texts and name a
// problem in the same words; each adds what it does about it.
struct CheckedLimit {
    LimitSetting setting;
    LimitSpec spec;       // empty for no limit, and when there is a problem
    std::string problem;  // "" when usable, else one line: "GPUGUARD_MEM_LIMIT=8XB is not a valid limit: ..."
    std::string note;     // si_spelling_note's note on an SI spelling; "" for none
    bool ok() const { return problem.empty(); }
};
CheckedLimit check_limit(const LimitSetting &setting);
// The check's words for a text on its own: "" for a valid spec (parsed into *spec), else "not a
// valid limit: WHY".
std::string limit_problem(const std::string &text, LimitSpec *spec);

// Where the ledger is when GPUGUARD_LEDGER is not set: /dev/shm (a container's own, or per user
// outside one), or /tmp when /dev/shm is missing or not writable.
std::string default_ledger_path();
// The ledger: GPUGUARD_LEDGER, else CUDA_DEVICE_MEMORY_SHARED_CACHE, else the default path; "" for a
// per-process ledger (none, off or process). A relative path is used as given (one ledger per
// working directory, almost never what was meant): *problem, when given, gets the line that says so.
std::string read_ledger_path(const Lookup &env, std::string *problem = nullptr);
bool is_per_process_ledger(const std::string &value);

// GPUGUARD_LEDGER_GROUP as a gid, -1 when unset or when it names no group (then *problem says so).
int read_ledger_group(const Lookup &env, std::string *problem);

// ---- for people ---------------------------------------------------------------------------------

// The README's table of variables, in Markdown (`gpuguard help variables --markdown`).
std::string markdown_table();

}  // namespace gg::settings
