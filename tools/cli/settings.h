// The GPUGUARD_* settings as the command sees them: `run` passes them on to the shim, `top` finds the
// ledger with them and `doctor` checks them. The shim reads the same variables in shim/core/config.cpp;
// what is here must agree with it (same names, same fallbacks, same HAMi-core aliases), since the
// command decides before the shim does (the ledger's limit, the library it preloads).
#pragma once
#include <string>
#include <vector>

namespace gg::tool {

// The limit the shim will use: GPUGUARD_MEM_LIMIT, else HAMi-core's CUDA_DEVICE_MEMORY_LIMIT and
// CUDA_DEVICE_MEMORY_LIMIT_<i> folded into one spec. `source` names the variable(s); both are empty
// when no limit is set.
struct LimitSetting {
    std::string text, source;
    bool set_but_empty = false;  // GPUGUARD_MEM_LIMIT= : the shim refuses every allocation
};
LimitSetting limit_from_env();

// GPUGUARD_LEDGER, else CUDA_DEVICE_MEMORY_SHARED_CACHE, else the default path. Returns "" for a
// per-process ledger (GPUGUARD_LEDGER=none, off or process).
std::string ledger_path_from_env();
bool is_per_process_ledger(const std::string &value);  // "none", "off", "process"

// GPUGUARD_LEDGER_GROUP as a gid, -1 when unset; false with *why when it names no group.
bool ledger_group_from_env(int *gid, std::string *why);

// The preload library: GPUGUARD_LIBRARY, else libgpuguard.so beside this executable (the build
// folder), else ../lib/libgpuguard.so (an install: $PREFIX/bin and $PREFIX/lib). Returns an absolute
// path, or "" with *why naming the places looked at.
std::string find_library(std::string *why);

// LD_PRELOAD with `lib` first and what was there kept in order; any other copy of libgpuguard.so
// is dropped, since two shims in one process would both count every allocation.
std::string preload_with(const std::string &lib, const char *existing);

// mkdir -p. False with *why ("cannot create DIR: reason").
bool make_dirs(const std::string &dir, std::string *why);
std::string absolute_path(const std::string &path);
// Whether a file can be created in `dir` (tries one, then removes it). False with *why.
bool dir_writable(const std::string &dir, std::string *why);

// One variable that the shim or the command reads, as set now, with what is wrong with it ("" when
// nothing is). `known` is false for a GPUGUARD_* name that nothing reads (a typo).
struct Variable {
    std::string name, value, problem;
    bool known = true;
    bool warning = false;  // the problem is worth saying but breaks nothing (an alias that loses, a typo)
};
std::vector<Variable> variables_in_effect();

// Checks of single values, shared by `run`'s options and `doctor`.
bool valid_cudnn_workspace(const std::string &v, std::string *why);  // a size, "auto" or "off"

}  // namespace gg::tool
