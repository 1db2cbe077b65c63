// `gpuguard run`: the wrapper for `docker run`, Kubernetes and plain shells. It sets the shim's
// environment, puts libgpuguard.so first in LD_PRELOAD, creates the ledger with the limit, and then
// either exec()s the command (so its exit status and signals are the command's own) or, as PID 1 or
// with --init, supervises it like tini: forwards signals, reaps orphans, exits with the child's status.
#include <strings.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/base/log.h"
#include "common/ledger/ledger.h"
#include "common/settings/settings.h"
#include "tools/cli/args.h"
#include "tools/cli/files.h"
#include "tools/cli/library_probe.h"
#include "tools/cli/preload.h"
#include "tools/cli/process.h"
#include "tools/cli/text.h"

namespace {

using gg::settings::Id;
using gg::tool::Args;
using gg::tool::fail;

// The options and their variables come from the table of settings (common/settings/settings.def).
std::string usage() {
    std::string u =
        "usage: gpuguard run [options] [--] COMMAND [ARGS...]\n"
        "\n"
        "Runs COMMAND with libgpuguard.so preloaded and the GPU memory quota in force for it and every\n"
        "process it starts. Meant as a container's entrypoint: ENTRYPOINT [\"gpuguard\", \"run\", \"--\"].\n"
        "\n"
        "options (each falls back to its variable, so `docker run -e GPUGUARD_MEM_LIMIT=8GiB` works):\n";
    for (const gg::settings::Row &r : gg::settings::rows()) {
        if (!*r.run_option) continue;
        std::string text =
            gg::tool::plain_text(r.help) + " (" + r.name + "; default: " + gg::tool::plain_text(r.default_text) + ")";
        u += "  " + gg::tool::pad_right(r.run_option, 22) + "  " + gg::tool::wrap_hanging(text, 100, 26) + "\n";
    }
    u += "  --init                  supervise COMMAND as PID 1 does (forward signals, reap zombies) even\n"
         "                          when not PID 1; as PID 1 this is automatic\n"
         "  -h, --help              this help\n"
         "\n"
         "The library is GPUGUARD_LIBRARY, else libgpuguard.so beside this program, else ../lib/.\n"
         "Every variable: gpuguard help variables.\n"
         "\n"
         "A ledger that live processes already use keeps its limit: a different --limit is reported\n"
         "with a warning and has no effect until they have all exited (the next run then sets it).\n"
         "\n"
         "Exit status: COMMAND's own status (128+N when it was killed by signal N); 2 bad usage or a bad\n"
         "option value, an unusable report directory or ledger; 126 COMMAND cannot be executed; 127 COMMAND\n"
         "or libgpuguard.so not found.\n";
    return u;
}

// The child's side of a failed exec: the same one line and status a shell would give.
[[noreturn]] void exec_or_die(char **cmd) {
    execvp(cmd[0], cmd);
    int e = errno;
    gg::log_error("%s %s: %s", e == ENOENT ? "command not found:" : "cannot execute", cmd[0], strerror(e));
    _exit(e == ENOENT ? 127 : 126);
}

// The signals a supervisor passes on. The synchronous ones (a fault in gpuguard itself) and the
// terminal stop signals are left alone, as tini does; SIGKILL and SIGSTOP cannot be caught anyway.
sigset_t forwarded_signals() {
    sigset_t set;
    sigfillset(&set);
    for (int s : {SIGFPE, SIGILL, SIGSEGV, SIGBUS, SIGABRT, SIGTRAP, SIGSYS, SIGTTIN, SIGTTOU}) sigdelset(&set, s);
    return set;
}

int status_to_exit(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

// PID 1 duty: without it, `docker stop` (SIGTERM to PID 1, which has no default action there) waits
// ten seconds and then kills everything, and orphaned processes pile up as zombies. The child gets
// its own process group and, when we hold the terminal, the terminal, so that Ctrl-C reaches it once
// (from the terminal) and not twice (from the terminal and from us).
int supervise(char **cmd) {
    // Orphans of the command are re-parented to us even when we are not PID 1 (--init).
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would reap the child before we could read its status
    sigset_t set = forwarded_signals(), old;
    sigprocmask(SIG_BLOCK, &set, &old);
    pid_t child = fork();
    if (child < 0) return fail(126, std::string("cannot start ") + cmd[0] + ": fork: " + strerror(errno));
    if (child == 0) {
        setpgid(0, 0);
        if (isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgid(getppid())) {
            signal(SIGTTOU, SIG_IGN);  // we are not yet the foreground group while taking the terminal
            tcsetpgrp(STDIN_FILENO, getpid());
            signal(SIGTTOU, SIG_DFL);
        }
        sigprocmask(SIG_SETMASK, &old, nullptr);
        exec_or_die(cmd);
    }
    for (;;) {
        siginfo_t info;
        int sig = sigwaitinfo(&set, &info);
        if (sig < 0) continue;  // EINTR
        if (sig != SIGCHLD) {
            // Sent to the child alone, not its group: the command decides what its own children get.
            kill(child, sig);
            continue;
        }
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
            if (pid == child) return status_to_exit(status);
    }
}

// The options given before the command. Each `have_` says the option was given (an empty value is
// then a mistake, not "unset").
struct RunOptions {
    std::string limit, ledger, report_dir, cudnn;
    bool have_limit = false, have_ledger = false, have_report = false, have_cudnn = false, init = false;
    bool help = false;
};

// Reads the options up to the command; 0, or the exit status of a usage error.
int read_options(Args &a, RunOptions *o) {
    while (!a.done()) {
        if (a.flag("--")) break;
        if (a.next()[0] != '-') break;  // the command: options after it are its own
        if (a.flag("-h") || a.flag("--help")) {
            o->help = true;
            return 0;
        }
        if (a.flag("--init")) {
            o->init = true;
        } else if (a.option("--limit", "a value", &o->limit)) {
            o->have_limit = true;
        } else if (a.option("--ledger", "a value", &o->ledger)) {
            o->have_ledger = true;
        } else if (a.option("--report-dir", "a value", &o->report_dir)) {
            o->have_report = true;
        } else if (a.option("--cudnn-workspace", "a value", &o->cudnn)) {
            o->have_cudnn = true;
        } else {
            return a.usage_error("unknown option '" + a.next() + "'");
        }
        if (a.failed()) return a.usage_error();
    }
    if (a.done()) return a.usage_error("no command given");
    return 0;
}

// `--limit 8 GB` unquoted makes GB the command, which the shell would report as "command not found: GB"
// with no word about the space; a bare number followed by a unit word is refused with the fix.
int refuse_split_limit(const RunOptions &o, const char *command) {
    static const char *const kUnits[] = {"B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"};
    bool bare_number = !o.limit.empty() && strspn(o.limit.c_str(), "0123456789.") == o.limit.size();
    if (!o.have_limit || !bare_number) return 0;
    for (const char *unit : kUnits)
        if (!strcasecmp(command, unit))
            return fail(2, "--limit " + o.limit + " " + command +
                               ": the limit and its unit must be one word: --limit " + o.limit + command);
    return 0;
}

// `%load_ext gpuguard` in a notebook of a virtual environment finds no module when the kernel is not
// the environment's Python (no kernelspec of its own); run can see that case before Jupyter starts.
void note_venv_kernel(const char *command) {
    const char *venv = gg::settings::env("VIRTUAL_ENV");
    const char *name = strrchr(command, '/') ? strrchr(command, '/') + 1 : command;
    if (!venv || !*venv || strncmp(name, "jupyter", 7) != 0) return;
    std::string kernel = std::string(venv) + "/share/jupyter/kernels/python3/kernel.json";
    if (access(kernel.c_str(), F_OK) == 0) return;
    fprintf(stderr,
            "gpuguard: note: the virtual environment %s has no Jupyter kernel of its own, so a notebook may "
            "start another Python, where %%load_ext gpuguard finds no module; add one with "
            "'python -m ipykernel install --sys-prefix'\n",
            venv);
}

// The shim to preload, checked: 0, or the exit status that refuses it.
int find_shim(std::string *lib) {
    std::string why;
    *lib = gg::tool::find_library(&why);
    if (lib->empty()) return fail(127, why);
    if (lib->find_first_of(" :\t") != std::string::npos)
        return fail(2, "the library path " + *lib + " holds a space or a colon, which LD_PRELOAD cannot carry");
    // The program would run with no quota at all under a library that is not the shim or does not
    // preload (GPUGUARD_LIBRARY pointing at another library, or at no library): refused, as a
    // malformed limit is (fail closed), after one start of this command with it preloaded.
    // A library the check could not even try (no /proc/self/exe, no process to start) is used as found.
    gg::tool::LibraryProbe probe;
    gg::tool::ProbeVerdict verdict = gg::tool::probe_library_as_preload(*lib, &probe, &why);
    if (verdict == gg::tool::ProbeVerdict::kNotShim)
        return fail(127, why + "; the program was not started (it would run with no quota)");
    if (verdict == gg::tool::ProbeVerdict::kUnchecked) fprintf(stderr, "gpuguard: %s\n", why.c_str());
    return 0;
}

// The limit, checked here so that a typo stops the container at once with one clear line instead
// of every process refusing every allocation (what the shim does with a malformed limit).
int set_limit(const Args &a, const RunOptions &o, std::string *limit_text) {
    gg::settings::CheckedLimit l =
        gg::settings::check_limit(o.have_limit ? gg::settings::limit_option("--limit", o.limit)
                                               : gg::settings::read_limit(gg::settings::process_env()));
    if (!l.ok()) return o.have_limit && o.limit.empty() ? a.usage_error(l.problem) : fail(2, l.problem);
    if (!l.note.empty())
        fprintf(stderr, "gpuguard: note: %s%s\n", o.have_limit ? "--limit " : (l.setting.source + ": ").c_str(),
                l.note.c_str());
    if (o.have_limit) setenv("GPUGUARD_MEM_LIMIT", o.limit.c_str(), 1);
    *limit_text = l.setting.text;
    return 0;
}

// The cuDNN workspace cap, checked; passed on when given as an option.
int set_cudnn_cap(const RunOptions &o, const gg::settings::Lookup &env) {
    if (std::optional<std::string> set = gg::settings::value(env, Id::kCudnnWorkspaceLimit); o.have_cudnn || set) {
        std::string v = o.have_cudnn ? o.cudnn : *set;
        const char *what = o.have_cudnn ? "--cudnn-workspace " : "GPUGUARD_CUDNN_WORKSPACE_LIMIT=";
        std::string problem = v.empty() ? "" : gg::settings::problem(Id::kCudnnWorkspaceLimit, v);
        if (!problem.empty()) return fail(2, what + v + " is " + problem);
        if (o.have_cudnn) setenv("GPUGUARD_CUDNN_WORKSPACE_LIMIT", v.c_str(), 1);
    }
    return 0;
}

// Reports: the folder is created now (a volume's subfolder need not exist) and made absolute,
// since the command may change its working directory before it runs out of memory.
int set_report_dir(const Args &a, RunOptions o, const gg::settings::Lookup &env) {
    std::string why;
    if (std::optional<std::string> set = gg::settings::value(env, Id::kReportDir); !o.have_report && set) {
        o.report_dir = *set;
        o.have_report = true;
    }
    if (o.have_report) {
        if (o.report_dir.empty()) return a.usage_error("--report-dir is empty");
        o.report_dir = gg::tool::absolute_path(o.report_dir);
        if (!gg::tool::make_dirs(o.report_dir, &why) || !gg::tool::dir_writable(o.report_dir, &why))
            return fail(2, "report directory: " + why);
        setenv("GPUGUARD_REPORT_DIR", o.report_dir.c_str(), 1);
    }
    return 0;
}

// A relative ledger path means one ledger per working directory, which the shim says in one line when
// it reads the variable; run pins the path to this directory, and says the same line for the option
// as for the variable, with the path it passes on.
void note_relative_ledger(const std::string &problem, const std::string &absolute) {
    if (!problem.empty()) fprintf(stderr, "gpuguard: note: %s; run passes on %s\n", problem.c_str(), absolute.c_str());
}

// The ledger's path: the option's, else the variable's, made absolute and passed on explicitly, since
// the default depends on the user id, which a command that drops privileges would change. "" for a
// per-process ledger; 0, or the exit status of a usage error.
int ledger_path_of(const Args &a, const RunOptions &o, const gg::settings::Lookup &env, std::string *path) {
    std::string problem;
    if (o.have_ledger) {
        if (o.ledger.empty()) return a.usage_error("--ledger is empty (use --ledger none for a per-process quota)");
        *path = gg::settings::is_per_process_ledger(o.ledger) ? "" : gg::tool::absolute_path(o.ledger);
        std::string relative = gg::settings::problem(Id::kLedger, o.ledger);
        if (!relative.empty()) problem = "--ledger " + o.ledger + " is " + relative;
    } else {
        *path = gg::settings::read_ledger_path(env, &problem);
        if (path->empty()) return 0;
        *path = gg::tool::absolute_path(*path);
    }
    note_relative_ledger(problem, *path);
    setenv("GPUGUARD_LEDGER", path->empty() ? "none" : path->c_str(), 1);
    return 0;
}

// The ledger, created now with the limit so that the limit is the container's from the first
// allocation on, whichever process makes it.
int create_ledger(const std::string &ledger_path, const std::string &limit_text, const gg::settings::Lookup &env) {
    std::string problem, why;
    int group = gg::settings::read_ledger_group(env, &problem);
    if (!problem.empty()) return fail(2, problem);
    size_t slash = ledger_path.rfind('/');
    if (slash != std::string::npos && slash > 0 && !gg::tool::make_dirs(ledger_path.substr(0, slash), &why))
        return fail(2, "ledger: " + why);
    gg::ledger::OpenOptions o;
    o.path = ledger_path;
    o.limit_spec = limit_text;
    o.group = group;
    std::string error, notice;
    gg::ledger::Ledger *l = gg::ledger::Ledger::open(o, &error, &notice);
    if (!l && (errno == ENOSPC || errno == EDQUOT)) {
        // A full /dev/shm: the command still runs, each of its processes under a quota of its own
        // (the shim would otherwise print the same line in every one of them).
        gg::log_error("warning: %s; each process of the command gets a quota of its own", error.c_str());
        setenv("GPUGUARD_LEDGER", "none", 1);
    } else if (!l) {
        return fail(2, error + " (remove it if no process uses it, or pass another --ledger)");
    }
    if (!notice.empty())
        gg::log_error("warning: %s: processes still use it; --limit takes effect once they have exited",
                      notice.c_str());
    delete l;  // the file stays; the command's processes map it
    return 0;
}

}  // namespace

int cmd_run(int argc, char **argv) {
    RunOptions o;
    Args a("run", argc, argv);
    if (int code = read_options(a, &o)) return code;
    if (o.help) {
        fputs(usage().c_str(), stdout);
        return 0;
    }
    char **cmd = a.rest();
    if (int code = refuse_split_limit(o, cmd[0])) return code;
    note_venv_kernel(cmd[0]);
    std::string lib, limit_text, resolved, ledger_path, why;
    if (int code = find_shim(&lib)) return code;
    if (int code = set_limit(a, o, &limit_text)) return code;
    const gg::settings::Lookup env = gg::settings::process_env();
    if (int code = set_cudnn_cap(o, env)) return code;
    if (int code = set_report_dir(a, o, env)) return code;
    if (int code = gg::tool::locate_command(cmd[0], &resolved, &why)) return fail(code, why);
    if (int code = ledger_path_of(a, o, env, &ledger_path)) return code;
    if (!ledger_path.empty())
        if (int code = create_ledger(ledger_path, limit_text, env)) return code;
    setenv("LD_PRELOAD", gg::tool::preload_with(lib, gg::settings::env("LD_PRELOAD")).c_str(), 1);
    if (o.init || getpid() == 1) return supervise(cmd);
    exec_or_die(cmd);
}
