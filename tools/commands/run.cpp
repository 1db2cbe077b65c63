// `gpuguard run`: the wrapper for `docker run`, Kubernetes and plain shells. It sets the shim's
// environment, puts libgpuguard.so first in LD_PRELOAD, creates the ledger with the limit, and then
// either exec()s the command (so its exit status and signals are the command's own) or, as PID 1 or
// with --init, supervises it like tini: forwards signals, reaps orphans, exits with the child's status.
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
#include "common/units/size_spec.h"
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

}  // namespace

int cmd_run(int argc, char **argv) {
    std::string limit, ledger_opt, report_dir, cudnn;
    bool have_limit = false, have_ledger = false, have_report = false, have_cudnn = false, init = false;
    Args a("run", argc, argv);
    while (!a.done()) {
        if (a.flag("--")) break;
        if (a.next()[0] != '-') break;  // the command: options after it are its own
        if (a.flag("-h") || a.flag("--help")) {
            fputs(usage().c_str(), stdout);
            return 0;
        }
        if (a.flag("--init")) {
            init = true;
        } else if (a.option("--limit", "a value", &limit)) {
            have_limit = true;
        } else if (a.option("--ledger", "a value", &ledger_opt)) {
            have_ledger = true;
        } else if (a.option("--report-dir", "a value", &report_dir)) {
            have_report = true;
        } else if (a.option("--cudnn-workspace", "a value", &cudnn)) {
            have_cudnn = true;
        } else {
            return a.usage_error("unknown option '" + a.next() + "'");
        }
        if (a.failed()) return a.usage_error();
    }
    if (a.done()) return a.usage_error("no command given");
    char **cmd = a.rest();

    std::string why;
    std::string lib = gg::tool::find_library(&why);
    if (lib.empty()) return fail(127, why);
    if (lib.find_first_of(" :\t") != std::string::npos)
        return fail(2, "the library path " + lib + " holds a space or a colon, which LD_PRELOAD cannot carry");
    // The program would run with no quota at all under a library that is not the shim or does not
    // preload (GPUGUARD_LIBRARY pointing at another library, or at no library): refused, as a
    // malformed limit is (fail closed), after one start of this command with it preloaded.
    // A library the check could not even try (no /proc/self/exe, no process to start) is used as found.
    gg::tool::LibraryProbe probe;
    gg::tool::ProbeVerdict verdict = gg::tool::probe_library_as_preload(lib, &probe, &why);
    if (verdict == gg::tool::ProbeVerdict::kNotShim)
        return fail(127, why + "; the program was not started (it would run with no quota)");
    if (verdict == gg::tool::ProbeVerdict::kUnchecked) fprintf(stderr, "gpuguard: %s\n", why.c_str());

    // The limit, checked here so that a typo stops the container at once with one clear line instead
    // of every process refusing every allocation (what the shim does with a malformed limit).
    std::string limit_text;
    if (have_limit) {
        gg::LimitSpec spec;
        if (limit.empty()) return a.usage_error("--limit is empty (leave it out for no limit)");
        if (!gg::parse_limit_spec(limit, &spec, &why))
            return fail(2, "--limit " + limit + " is not a valid limit: " + why);
        if (std::string note = gg::si_spelling_note(limit); !note.empty())
            fprintf(stderr, "gpuguard: note: --limit %s\n", note.c_str());
        setenv("GPUGUARD_MEM_LIMIT", limit.c_str(), 1);
        limit_text = limit;
    } else {
        gg::settings::LimitSetting s = gg::settings::read_limit(gg::settings::process_env());
        gg::LimitSpec spec;
        if (s.set_but_empty) return fail(2, "GPUGUARD_MEM_LIMIT is set but empty (unset it for no limit)");
        if (!s.text.empty() && !gg::parse_limit_spec(s.text, &spec, &why))
            return fail(2, s.source + "=" + s.text + " is not a valid limit: " + why);
        if (std::string note = gg::si_spelling_note(s.text); !note.empty())
            fprintf(stderr, "gpuguard: note: %s: %s\n", s.source.c_str(), note.c_str());
        limit_text = s.text;
    }

    const gg::settings::Lookup env = gg::settings::process_env();
    if (std::optional<std::string> set = gg::settings::value(env, Id::kCudnnWorkspaceLimit); have_cudnn || set) {
        std::string v = have_cudnn ? cudnn : *set;
        const char *what = have_cudnn ? "--cudnn-workspace " : "GPUGUARD_CUDNN_WORKSPACE_LIMIT=";
        std::string problem = v.empty() ? "" : gg::settings::problem(Id::kCudnnWorkspaceLimit, v);
        if (!problem.empty()) return fail(2, what + v + " is " + problem);
        if (have_cudnn) setenv("GPUGUARD_CUDNN_WORKSPACE_LIMIT", v.c_str(), 1);
    }

    // Reports: the folder is created now (a volume's subfolder need not exist) and made absolute,
    // since the command may change its working directory before it runs out of memory.
    if (std::optional<std::string> set = gg::settings::value(env, Id::kReportDir); !have_report && set) {
        report_dir = *set;
        have_report = true;
    }
    if (have_report) {
        if (report_dir.empty()) return a.usage_error("--report-dir is empty");
        report_dir = gg::tool::absolute_path(report_dir);
        if (!gg::tool::make_dirs(report_dir, &why) || !gg::tool::dir_writable(report_dir, &why))
            return fail(2, "report directory: " + why);
        setenv("GPUGUARD_REPORT_DIR", report_dir.c_str(), 1);
    }

    std::string resolved;
    int code = gg::tool::locate_command(cmd[0], &resolved, &why);
    if (code) return fail(code, why);

    // The ledger, created now with the limit so that the limit is the container's from the first
    // allocation on, whichever process makes it. Its path is passed on explicitly (and absolute):
    // the default depends on the user id, which a command that drops privileges would change.
    std::string ledger_path;
    if (have_ledger) {
        if (ledger_opt.empty()) return a.usage_error("--ledger is empty (use --ledger none for a per-process quota)");
        ledger_path = gg::settings::is_per_process_ledger(ledger_opt) ? "" : gg::tool::absolute_path(ledger_opt);
        setenv("GPUGUARD_LEDGER", ledger_path.empty() ? "none" : ledger_path.c_str(), 1);
    } else {
        ledger_path = gg::settings::read_ledger_path(env);
        if (!ledger_path.empty()) {
            ledger_path = gg::tool::absolute_path(ledger_path);
            setenv("GPUGUARD_LEDGER", ledger_path.c_str(), 1);
        }
    }
    if (!ledger_path.empty()) {
        std::string problem;
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
    }

    setenv("LD_PRELOAD", gg::tool::preload_with(lib, gg::settings::env("LD_PRELOAD")).c_str(), 1);

    if (init || getpid() == 1) return supervise(cmd);
    exec_or_die(cmd);
}
