#include "tools/cli/args.h"

#include "common/base/log.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace gg::tool {

Args::Args(const char *command, int argc, char **argv) : command_(command), argc_(argc), argv_(argv) {}

bool Args::flag(const char *name) {
    note_tried(name);
    if (done() || strcmp(argv_[i_], name) != 0) return false;
    i_++;
    return true;
}

bool Args::option(const char *name, const char *what, std::string *value) {
    note_tried(name);
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

void Args::note_tried(const char *name) {
    if (tried_at_ != i_) tried_.clear();
    tried_at_ = i_;
    tried_.emplace_back(name);
}

// A typo is at most two edits from the option meant; farther, a guess would mislead more than help.
std::string Args::closest_tried(const std::string &arg) const {
    constexpr size_t kMaxEdits = 2;
    if (tried_at_ != i_ || arg.rfind("--", 0) != 0) return "";
    std::string name = arg.substr(0, arg.find('='));
    std::string best;
    size_t best_distance = kMaxEdits + 1;
    for (const std::string &known : tried_) {
        size_t d = edit_distance(name, known);
        if (d > 0 && d < best_distance) best = known, best_distance = d;
    }
    return best;
}

int Args::usage_error(const std::string &message) const {
    const std::string &m = message.empty() ? error_ : message;
    std::string suggestion = closest_tried(next());
    if (!suggestion.empty()) log_error("%s: %s (did you mean %s?)", command_.c_str(), m.c_str(), suggestion.c_str());
    else log_error("%s: %s (try 'gpuguard %s --help')", command_.c_str(), m.c_str(), command_.c_str());
    return 2;
}

size_t edit_distance(const std::string &a, const std::string &b) {
    // One row of the Levenshtein table at a time: row[j] is the distance from a[0..i) to b[0..j).
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++) row[j] = j;
    for (size_t i = 1; i <= a.size(); i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); j++) {
            size_t substitute = diagonal + (a[i - 1] != b[j - 1]);
            diagonal = row[j];
            row[j] = std::min({substitute, row[j] + 1, row[j - 1] + 1});
        }
    }
    return row[b.size()];
}

int fail(int status, const std::string &message) {
    log_error("%s", message.c_str());
    return status;
}

}  // namespace gg::tool
