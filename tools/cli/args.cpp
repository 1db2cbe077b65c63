#include "tools/cli/args.h"

#include "common/base/log.h"

#include <cstdio>
#include <cstring>

namespace gg::tool {

Args::Args(const char *command, int argc, char **argv) : command_(command), argc_(argc), argv_(argv) {}

bool Args::flag(const char *name) {
    if (done() || strcmp(argv_[i_], name) != 0) return false;
    i_++;
    return true;
}

bool Args::option(const char *name, const char *what, std::string *value) {
    if (done()) return false;
    const char *a = argv_[i_];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return false;
    if (a[n] == '=') {
        *value = a + n + 1;
        i_++;
        return true;
    }
    if (a[n] != '\0') return false;
    if (i_ + 1 >= argc_) {
        error_ = std::string(name) + " needs " + what;
        i_++;
        return true;
    }
    *value = argv_[i_ + 1];
    i_ += 2;
    return true;
}

std::string Args::take() { return done() ? std::string() : std::string(argv_[i_++]); }

int Args::usage_error(const std::string &message) const {
    const std::string &m = message.empty() ? error_ : message;
    log_error("%s: %s (try 'gpuguard %s --help')", command_.c_str(), m.c_str(), command_.c_str());
    return 2;
}

int fail(int status, const std::string &message) {
    log_error("%s", message.c_str());
    return status;
}

}  // namespace gg::tool
