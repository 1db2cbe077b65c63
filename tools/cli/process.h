// Starting other programs from the command: finding them on PATH the way execvp will, and running a
// helper with a timeout while reading what it prints.
#pragma once
#include <string>
#include <vector>

namespace gg::tool {

// Where execvp would find `name`. Returns 0 and *path when it is there and executable; else the
// status a shell gives (127 not found, 126 not executable) with *why, one line naming `name`.
int locate_command(const std::string &name, std::string *path, std::string *why);

// Runs argv (looked up on PATH) with `env` (null: this process's environment), standard output read
// into `out` (standard error too when `merge_stderr`), standard input from /dev/null. Kills it after
// `timeout_s` seconds. Returns false with *why when it could not be started.
struct Finished {
    int status = 0;  // as waitpid gives it
    bool timed_out = false;
    std::string out;
};
bool run_captured(const std::vector<std::string> &argv, const std::vector<std::string> *env, double timeout_s,
                  bool merge_stderr, Finished *result, std::string *why);

// The environment as NAME=VALUE strings, with `name` set to `value` (added or replaced).
std::vector<std::string> environment_with(const std::string &name, const std::string &value);

// "exited with status 3", "killed by SIGKILL".
std::string describe_status(int status);

}  // namespace gg::tool
