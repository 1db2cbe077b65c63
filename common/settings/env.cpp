// The process environment, read here and nowhere else in gpuguard (tests/integration/t_lint.sh
// checks), so that every variable goes through the table of settings.
#include <cstdlib>

#include "common/settings/settings.h"

namespace gg::settings {

const char *env(const char *name) { return ::getenv(name); }

Lookup process_env() {
    return [](const char *name) -> const char * { return ::getenv(name); };
}

std::optional<std::string> value(const Lookup &env, Id id) {
    const char *v = env(row(id).name);
    if (!v) return std::nullopt;
    std::string s = v;
    size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
    if (b == std::string::npos) return std::nullopt;
    return s.substr(b, e - b + 1);
}

std::string spaces_problem(const std::string &raw) {
    size_t b = raw.find_first_not_of(' '), e = raw.find_last_not_of(' ');
    if (raw.empty() || (b == 0 && e == raw.size() - 1)) return "";
    std::string trimmed = b == std::string::npos ? "" : raw.substr(b, e - b + 1);
    return "has spaces at its start or end (read as '" + trimmed + "')";
}

}  // namespace gg::settings
