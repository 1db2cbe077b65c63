// The process environment, read here and nowhere else in gpuguard (tests/integration/t_lint.sh
// checks), so that every variable goes through the table of settings.
#include <cstdlib>

#include "common/settings/settings.h"

namespace gg::settings {

const char *env(const char *name) { return ::getenv(name); }

Lookup process_env() {
    return [](const char *name) -> const char * { return ::getenv(name); };
}

const char *value(const Lookup &env, Id id) {
    const char *v = env(row(id).name);
    return v && *v ? v : nullptr;
}

}  // namespace gg::settings
