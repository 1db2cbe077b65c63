// Which environment variables a report carries, and which of their values it hides: the same rule
// for the shim that writes reports and the command that shows them (a report written by an earlier
// version, which went by prefix, is shown by this rule too).
//
// Exact names, never a prefix: a prefix let NVIDIA_API_KEY, or any secret named CUDA_*, NCCL_*,
// PYTORCH_* or GPUGUARD_*, into reports and their HTML pages (issue 18). The names are gpuguard's own
// (every row of common/settings/settings.def and HAMi-core's aliases) and those that say how a GPU
// program was set up (devices, allocator and collective settings, ranks). A name on the list that
// looks like a key, token, secret, password or credential still has its value replaced.
#pragma once
#include <string>

namespace gg::report_env {

bool allowed(const std::string &name);
// Whether the value of an allowed name is shown: false for a name that looks like it holds a secret.
bool shown(const std::string &name);
// What a report holds for `value` of `name`, or false when the name is not carried at all.
bool carried(const std::string &name, const std::string &value, std::string *out);

constexpr const char *kRedacted = "<redacted>";

}  // namespace gg::report_env
