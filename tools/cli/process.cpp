#include "tools/cli/process.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "common/settings/settings.h"

extern char **environ;

namespace gg::tool {
namespace {

// 0 when `path` is an executable file; 127 when nothing is there; 126 otherwise, with *why.
int check_file(const std::string &path, const std::string &name, std::string *why) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return 127;
    if (S_ISDIR(st.st_mode)) {
        *why = "cannot execute " + name + ": it is a directory";
        return 126;
    }
    if (access(path.c_str(), X_OK) != 0) {
        *why = "cannot execute " + name + ": " + strerror(errno);
        return 126;
    }
    return 0;
}

uint64_t now_ms() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

}  // namespace

int locate_command(const std::string &name, std::string *path, std::string *why) {
    if (name.empty()) {
        *why = "command not found: '' (an empty name)";
        return 127;
    }
    if (name.find('/') != std::string::npos) {
        int rc = check_file(name, name, why);
        if (rc == 127) *why = "command not found: " + name + " (no such file)";
        if (rc == 0) *path = name;
        return rc;
    }
    const char *env_path = settings::env("PATH");
    std::string dirs = env_path ? env_path : "/usr/local/bin:/usr/bin:/bin";
    int first = 127;
    std::string first_why;
    size_t start = 0;
    while (start <= dirs.size()) {
        size_t end = dirs.find(':', start);
        if (end == std::string::npos) end = dirs.size();
        std::string dir = dirs.substr(start, end - start);
        std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
        std::string w;
        int rc = check_file(candidate, name, &w);
        if (rc == 0) {
            *path = candidate;
            return 0;
        }
        if (rc == 126 && first == 127) first = 126, first_why = w;  // execvp goes on looking, so do we
        start = end + 1;
    }
    *why = first == 127 ? "command not found: " + name : first_why;
    return first;
}

std::vector<std::string> environment_with(const std::string &name, const std::string &value) {
    std::vector<std::string> env;
    bool done = false;
    for (char **e = environ; *e; e++) {
        if (!strncmp(*e, name.c_str(), name.size()) && (*e)[name.size()] == '=') {
            env.push_back(name + "=" + value);
            done = true;
        } else {
            env.push_back(*e);
        }
    }
    if (!done) env.push_back(name + "=" + value);
    return env;
}

bool run_captured(const std::vector<std::string> &argv, const std::vector<std::string> *env, double timeout_s,
                  bool merge_stderr, Finished *result, std::string *why) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        *why = std::string("pipe: ") + strerror(errno);
        return false;
    }
    std::vector<char *> args, envp;
    for (const auto &a : argv) args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    if (env) {
        for (const auto &e : *env) envp.push_back(const_cast<char *>(e.c_str()));
        envp.push_back(nullptr);
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    if (merge_stderr) posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
    pid_t pid;
    int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), env ? envp.data() : environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        *why = "cannot start " + argv[0] + ": " + strerror(rc);
        return false;
    }
    result->out.clear();
    result->timed_out = false;
    uint64_t deadline = now_ms() + (uint64_t)(timeout_s * 1000);
    for (;;) {
        uint64_t now = now_ms();
        if (now >= deadline) {
            result->timed_out = true;
            kill(pid, SIGKILL);
            break;
        }
        pollfd p{fds[0], POLLIN, 0};
        int r = poll(&p, 1, (int)(deadline - now));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        char buf[4096];
        ssize_t n = read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;  // end of output: the program exited (or closed it)
        if (result->out.size() < (1u << 20)) result->out.append(buf, (size_t)n);
    }
    close(fds[0]);
    // A program that closed its output but lives on is given until the deadline, then killed.
    for (;;) {
        pid_t w = waitpid(pid, &result->status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) {
            result->status = 0;
            break;
        }
        if (!result->timed_out && now_ms() >= deadline) {
            result->timed_out = true;
            kill(pid, SIGKILL);
        }
        usleep(5000);
    }
    return true;
}

std::string describe_status(int status) {
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        static const struct {
            int sig;
            const char *name;
        } names[] = {{SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
                     {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"},
                     {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"}, {SIGPIPE, "SIGPIPE"},
                     {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}};
        for (const auto &n : names)
            if (n.sig == WTERMSIG(status)) return std::string("killed by ") + n.name;
        return "killed by signal " + std::to_string(WTERMSIG(status));
    }
    return "stopped";
}

}  // namespace gg::tool
