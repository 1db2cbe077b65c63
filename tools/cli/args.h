// The arguments of one subcommand, read left to right, and the one shape of a usage error. Every
// subcommand parses with this, so `--name VALUE` and `--name=VALUE` work alike everywhere and every
// usage error reads "gpuguard: CMD: what is wrong (try 'gpuguard CMD --help')", exit status 2.
//
//   Args a("top", argc, argv);             // argv[0] is the subcommand's own name
//   while (!a.done()) {
//       if (a.flag("--once")) once = true;
//       else if (a.option("--ledger", "a path", &path)) {}
//       else return a.usage_error("unknown argument '" + a.next() + "'");
//       if (a.failed()) return a.usage_error();
//   }
#pragma once
#include <string>
#include <vector>

namespace gg::tool {

class Args {
public:
    // `command` names the subcommand in messages ("run", "report diff").
    Args(const char *command, int argc, char **argv);

    bool done() const { return i_ >= argc_; }
    // The current argument, not consumed ("" when done).
    std::string next() const { return done() ? std::string() : argv_[i_]; }
    // The arguments from the current one on, for a command line that follows ("--" or a program).
    char **rest() const { return argv_ + i_; }
    int rest_count() const { return argc_ - i_; }

    // True, consuming it, when the current argument is exactly `name`.
    bool flag(const char *name);
    // True, consuming it and its value, when the current argument is `name VALUE` or `name=VALUE`.
    // A missing value is an error ("--top needs a number", `what` being "a number"): failed() says so.
    bool option(const char *name, const char *what, std::string *value);
    // The current argument, consumed.
    std::string take();

    bool failed() const { return !error_.empty(); }
    // Prints the error (the last option's, or `message`) as a usage error and returns 2. When the
    // current argument is an option none of the names tried at it matches, the hint names the closest
    // of them (`--limt`: "did you mean --limit?") in place of the pointer to --help.
    int usage_error(const std::string &message = "") const;

private:
    std::string command_;
    int argc_;
    char **argv_;
    int i_ = 1;
    std::string error_;
    // The names flag() and option() compared with argument i_, the known options a typo is near.
    std::vector<std::string> tried_;
    int tried_at_ = -1;

    void note_tried(const char *name);
    std::string closest_tried(const std::string &arg) const;
};

// The number of single-character edits (insert, delete, substitute) that turn `a` into `b`.
size_t edit_distance(const std::string &a, const std::string &b);

// Prints "gpuguard: MESSAGE" on stderr and returns `status`.
int fail(int status, const std::string &message);

}  // namespace gg::tool
