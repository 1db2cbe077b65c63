// The soak supervisor (`make soak`, tests/soak/run.sh): runs PROCS soak workers (soak_worker.cpp) of
// THREADS threads each under the shim, sharing one ledger and one limit, for MINUTES; SIGKILLs,
// SIGTERMs and restarts them at random, sends them the report signal, and checks all the while.
// Issue 18's traffic: request sizes up to twice the limit and near SIZE_MAX, one worker in four in a
// PID namespace of its own (where root may unshare: pods sharing /dev/shm), and one incarnation in
// four exec'ing itself with its memory allocated. Checked:
//   - the test driver's ground truth (FAKE_CUDA_TRUTH) of bytes held by live processes never passes
//     the limit (bytes left by killed processes, read from the truth's per-process table, are
//     subtracted);
//   - no worker crashes (any death other than our SIGKILL or a clean exit), stalls, gets an error
//     other than out-of-memory, or trips a sanitizer (their logs land in the work folder);
//   - written reports load in `gpuguard report`;
// and at the end, with every worker gone: the truth holds nothing but what killed (or exec'd) images
// left, the ledger is back at zero with no slot left but free or reclaimed, and its peak never passed
// the limit. Prints a table; exits 1 on failure.
//
//   soak WORKDIR   with SOAK_* settings in the environment (run.sh documents them)
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../fake/fake_truth.h"
#include "common/ledger/ledger.h"
#include "common/units/human.h"
#include "common/units/size_spec.h"
#include "journal.h"

extern char **environ;

namespace {

using Clock = std::chrono::steady_clock;

std::string env_or(const char *name, const char *def) {
    const char *v = getenv(name);
    return v && *v ? v : def;
}
long env_long(const char *name, long def) {
    return strtol(env_or(name, std::to_string(def).c_str()).c_str(), nullptr, 0);
}

struct Worker {
    int id = 0;
    pid_t pid = 0;  // the supervisor's child: the worker, or the parent of a PID namespace it is init of
    bool in_namespace = false;
    std::string journal_path;
    soak::Journal *journal = nullptr;
    bool killed = false, terminated = false;
    uint64_t last_ops = 0;
    Clock::time_point last_progress, started;
};

struct Totals {
    uint64_t starts = 0, kills = 0, kills_in_call = 0, terms = 0, signals = 0, allocs = 0, frees = 0, oom = 0,
             errors = 0, crashes = 0, stalls = 0, bad_exits = 0, reports = 0, reports_checked = 0, reports_bad = 0,
             violations = 0, exit_window = 0, samples = 0, huge = 0, execs = 0, ns_starts = 0;
    uint64_t max_over = 0;                  // the most bytes live processes ever held over the limit
    uint64_t leaked_lo = 0, leaked_hi = 0;  // bytes killed processes left in the truth
    uint64_t max_live = 0;                  // highest truth minus leaked_hi seen
    uint64_t max_exit_overshoot = 0;        // the most over the limit while a worker was exiting cleanly
    std::vector<std::string> problems;
};

std::string g_work, g_bin, g_cli;
std::string g_ledger_path, g_limit_text;  // watched, to say which process an excess was in
uint64_t g_limit;
bool g_allow_exit_window;
fake::Truth *g_truth = nullptr;  // the test driver's ground truth (FAKE_CUDA_TRUTH)
bool g_namespaces;               // whether this machine lets the supervisor make PID namespaces
std::vector<std::string> g_worker_env;
std::vector<Worker> g_workers;
Totals T;

void problem(const std::string &what) {
    if (T.problems.size() < 40) T.problems.push_back(what);
    fprintf(stderr, "soak: %s\n", what.c_str());
}

soak::Journal *map_journal(const std::string &path) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, sizeof(soak::Journal)) != 0) return nullptr;
    void *p = mmap(nullptr, sizeof(soak::Journal), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? nullptr : static_cast<soak::Journal *>(p);
}

// Whether a PID namespace (and a mount namespace for its /proc) can be made here: root, usually.
bool namespaces_work() {
    pid_t pid = fork();
    if (pid == 0) _exit(unshare(CLONE_NEWPID | CLONE_NEWNS) == 0 ? 0 : 1);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The pid to signal a worker by: the worker itself, also when it is init of a namespace of its own
// (then its pid in our namespace, once its parent has written it; 0 until then).
pid_t target(const Worker &w) { return w.in_namespace ? w.journal->outer_pid.load() : w.pid; }
// The pid the truth's table knows the worker by: the same (the test driver is told it in a namespace,
// fake_truth.h, truth_pid).

void start(Worker &w, int threads, uint64_t max_alloc, std::mt19937_64 &rng) {
    memset(static_cast<void *>(w.journal), 0, sizeof(soak::Journal));  // a fresh incarnation
    std::string t = std::to_string(threads), m = std::to_string(max_alloc), s = std::to_string(rng() % 1000000007);
    // One incarnation in four execs itself (with its memory allocated) after half a second to five.
    std::string exec_after = std::to_string(rng() % 4 == 0 ? 500 + rng() % 4500 : 0);
    w.in_namespace = g_namespaces && w.id % 4 == 3;
    std::string worker = g_bin + "/soak_worker";
    std::vector<std::string> env = g_worker_env;
    // Every third worker also sees injected driver failures (the shim's rollback path).
    if (w.id % 3 == 2) env.push_back("FAKE_CUDA_FAIL_EVERY=" + std::to_string(50 + rng() % 100));
    if (w.id % 2) env.push_back("GPUGUARD_REPORT_ON_EXIT=1");
    // In a namespace the worker is pid 1: the test driver is told its pid outside (written below,
    // once known), and its entry of the truth is made by its parent, which sees every pid.
    char truth_pid[64] = "FAKE_CUDA_TRUTH_PID=";
    std::vector<char *> envp, argv;
    for (std::string &e : env) envp.push_back(e.data());
    if (w.in_namespace) envp.push_back(truth_pid);
    envp.push_back(nullptr);
    argv = {worker.data(), w.journal_path.data(), t.data(), m.data(), s.data(), exec_after.data(), nullptr};
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        // Its own process group, so that ^C reaches the supervisor alone (which then stops every
        // worker cleanly), and death with the supervisor, so that no worker outlives a killed one.
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        int null = open("/dev/null", O_WRONLY);  // the shim's one-line refusals, thousands of them
        if (null >= 0) dup2(null, STDERR_FILENO), dup2(null, STDOUT_FILENO);
        if (w.in_namespace) {
            // This process stays in our namespace and waits; its child is init of a new one, with a
            // /proc of its own, as `unshare --pid --fork --mount-proc` makes it. The child's status
            // is passed on as this process's own.
            if (unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) _exit(127);
            pid_t inner = fork();
            if (inner == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                while (!w.journal->outer_pid.load()) usleep(1000);
                snprintf(truth_pid, sizeof truth_pid, "FAKE_CUDA_TRUTH_PID=%d:%d", (int)getpid(),
                         (int)w.journal->outer_pid.load());
                if (mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
                    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
                    _exit(127);
                execve(worker.c_str(), argv.data(), envp.data());
                _exit(127);
            }
            if (inner < 0) _exit(127);
            fake::truth_proc(g_truth, inner, true);
            w.journal->outer_pid.store(inner);
            int status = 0;
            while (waitpid(inner, &status, 0) < 0 && errno == EINTR) {}
            if (WIFSIGNALED(status)) {
                signal(WTERMSIG(status), SIG_DFL);
                prctl(PR_SET_DUMPABLE, 0);  // no core file for a re-raised fault
                kill(getpid(), WTERMSIG(status));
            }
            _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 127);
        }
        execve(worker.c_str(), argv.data(), envp.data());
        _exit(127);
    }
    if (w.in_namespace) T.ns_starts++;
    w.pid = pid;
    w.killed = w.terminated = false;
    w.last_ops = 0;
    w.started = w.last_progress = Clock::now();
    T.starts++;
}

// What a worker may hold in the driver right now, by its journal: its bytes and its calls in flight.
uint64_t journal_bytes(const soak::Journal &j) {
    uint64_t b = j.held.load();
    for (const auto &t : j.thread)
        if (t.phase.load() != soak::kIdle) b += t.size.load();
    return b;
}

// What process `pid` holds in the driver by the truth's own per-process table: exact, whatever it
// holds (allocations, its pools' reserve, graph memory), where the journal knows allocations only.
uint64_t truth_of(int pid) {
    if (pid <= 0) return 0;  // a namespace's worker that died before its pid outside was known
    for (const fake::TruthProc &p : g_truth->proc)
        if (p.pid.load() == pid) return p.bytes[0].load();
    return 0;
}

// A worker ended: add up what it did, and what it left in the driver if it was killed.
void reaped(Worker &w, int status) {
    soak::Journal &j = *w.journal;
    T.allocs += j.allocs.load();
    T.frees += j.frees.load();
    T.oom += j.oom.load();
    T.errors += j.errors.load();
    T.huge += j.huge.load();
    T.execs += j.execs.load();
    // What it left in the driver's truth, read once it is gone: all it held when killed, what its
    // exec'd images left (a real driver would have freed it) in either case. Exact, whatever it held
    // (allocations, its pools' reserve, graph memory), where the journal knows allocations only.
    uint64_t left_by_it = truth_of(target(w));
    T.leaked_lo += left_by_it;
    T.leaked_hi += left_by_it;
    if (j.errors.load())
        problem("worker " + std::to_string(w.pid) + ": " + std::to_string(j.errors.load()) +
                " driver errors other than out-of-memory, the first " +
                std::string(j.first_error, strnlen(j.first_error, sizeof j.first_error)));
    if (w.killed) {
        if (journal_bytes(j) != j.held.load()) T.kills_in_call++;
        if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
            T.bad_exits++;
            problem("worker " + std::to_string(w.pid) + " died otherwise before our SIGKILL (status " +
                    std::to_string(status) + ")");
        }
    } else if (WIFSIGNALED(status)) {
        T.crashes++;
        problem("worker " + std::to_string(w.pid) + " died of signal " + std::to_string(WTERMSIG(status)) + " (" +
                strsignal(WTERMSIG(status)) + ")");
    } else if (WEXITSTATUS(status) != 0) {
        T.bad_exits++;
        problem("worker " + std::to_string(w.pid) + " exited with status " + std::to_string(WEXITSTATUS(status)) +
                (WEXITSTATUS(status) == 66 ? " (a sanitizer report)" : ""));
    } else if (!w.terminated) {
        T.bad_exits++;
        problem("worker " + std::to_string(w.pid) + " exited on its own");
    }
    w.pid = 0;
}

uint64_t truth_now(fake::Truth *t) { return t->dev[0].current.load(); }

// A clean stop: the request in the journal (an image that has not installed its SIGTERM handler yet,
// just started or just exec'd, sees it there and exits), and SIGTERM once the image can take it
// (before, SIGTERM would kill it instead: seen 4 of 86 times in a 20-minute run).
void stop(Worker &w) {
    w.terminated = true;
    w.journal->term_requested.store(1);
    if (w.journal->ready.load() && target(w)) kill(target(w), SIGTERM);
}

// The workers' ledger, mapped live (a read-only open takes a snapshot), with their limit (another
// would replace an idle ledger by one of its own); the supervisor only reads it. Its slot is given
// back (close_ledger_view) before the end's checks of the slots.
gg::ledger::Ledger *g_view = nullptr;
bool g_view_tried = false;
gg::ledger::Ledger *ledger_view() {
    if (!g_view_tried) {
        g_view_tried = true;
        std::string error, notice;
        g_view = gg::ledger::Ledger::open({g_ledger_path, g_limit_text, -1, false}, &error, &notice);
        if (!g_view) problem("cannot open the ledger to watch it: " + error);
    }
    return g_view;
}
void close_ledger_view() {
    delete g_view;
    g_view = nullptr;
}

// Every worker stopped (SIGSTOP) while it lives, and let go (SIGCONT) after: a process between its
// charge and its driver call holds less than it is charged, one between its driver's free and its
// release too, and neither moves while the figures are read.
struct Freeze {
    std::vector<pid_t> stopped;
    Freeze() {
        for (const Worker &w : g_workers)
            if (w.pid && target(w) && kill(target(w), SIGSTOP) == 0) stopped.push_back(target(w));
        usleep(50000);
    }
    ~Freeze() {
        for (pid_t p : stopped) kill(p, SIGCONT);
    }
};

// After an excess sample: each live worker whose driver holdings (the truth's table) pass what the
// ledger charges it, by kind. Admission charges before the driver takes and a free gives back after
// it does, so a process holding more than it is charged is where the excess is. Read one after the
// other while they run: a line may be a moment's skew, a repeated one is not.
void say_who_is_over() {
    gg::ledger::Ledger *l = ledger_view();
    if (!l) return;
    Freeze freeze;  // a process then holding more than it is charged is short in the ledger, not in flight
    uint64_t cur = truth_now(g_truth), left = T.leaked_hi;
    for (const Worker &w : g_workers)
        if (w.pid) left += w.journal->exec_left.load();
    problem("  with every worker stopped: live processes hold " + std::to_string(cur > left ? cur - left : 0) +
            " bytes in the driver; the ledger counts " + std::to_string(l->container_used(0)));
    // The ledger read before and after the truth: an allocation between the readings is in the second.
    std::vector<gg::ledger::Ledger::ProcessView> before = l->processes();
    std::vector<uint64_t> driver(before.size());
    std::vector<int> outside(before.size());
    for (size_t i = 0; i < before.size(); i++) {
        const auto &p = before[i];
        // A namespace's worker is known to the ledger by its pid inside, to the truth by the one outside.
        outside[i] = p.other_namespace ? 0 : p.pid;
        for (const Worker &w : g_workers)
            if (w.pid && w.in_namespace && p.other_namespace &&
                p.command.find(w.journal_path + " ") != std::string::npos)
                outside[i] = target(w);
        driver[i] = truth_of(outside[i]);
        for (const Worker &w : g_workers)  // less what its exec'd images left (as sample() does)
            if (w.pid && target(w) == outside[i]) driver[i] -= std::min(driver[i], w.journal->exec_left.load());
    }
    std::vector<gg::ledger::Ledger::ProcessView> after = l->processes();
    for (size_t i = 0; i < before.size(); i++) {
        const auto &p = before[i];
        if (!p.alive || p.bytes.empty() || !outside[i]) continue;
        uint64_t charged = p.bytes[0];
        for (const auto &q : after)
            if (q.slot == p.slot && q.pid == p.pid && !q.bytes.empty()) charged = std::max(charged, q.bytes[0]);
        if (driver[i] <= charged) continue;
        const auto &k = p.kinds[0];
        problem("  pid " + std::to_string(outside[i]) + " holds " + std::to_string(driver[i] - charged) +
                " bytes more in the driver than the ledger charges it: driver " + std::to_string(driver[i]) +
                ", ledger " + std::to_string(charged) + " (context " + std::to_string(k[gg::ledger::kContext]) +
                ", graphs " + std::to_string(k[gg::ledger::kGraphs]) + ", pools " +
                std::to_string(k[gg::ledger::kPools]) + ")");
    }
}

// The ledger over the limit: admission never passes it, but a cost learnt after the fact (the first
// context's measurement) or a reading of a pool that grew more than it was charged may; the first
// time it holds with every worker stopped, say by which process and kind.
void check_ledger() {
    static bool said = false;
    gg::ledger::Ledger *l = ledger_view();
    if (said || !l || l->devices().empty()) return;
    uint64_t used = l->container_used(0);
    if (used <= g_limit) return;
    // An admission adds its bytes to its slot before it compares the sum with the limit, and takes
    // them off when they do not fit (Ledger::try_charge): a reading in between sees the sum over the
    // limit for an instant (up to twice the limit: the soak's largest requests). So the ledger is
    // read again with every worker stopped, and only that reading counts.
    // A worker may be stopped inside such an admission too: what the admissions under way may have
    // added (each request, rounded up to a pool's or a graph pool's 2 MiB chunk) is allowed for.
    Freeze freeze;
    uint64_t frozen = l->container_used(0), listed = 0, in_flight = 0;
    std::vector<gg::ledger::Ledger::ProcessView> all = l->processes();
    for (const auto &p : all) listed += p.bytes.empty() ? 0 : p.bytes[0];
    for (const Worker &w : g_workers) {
        if (!w.pid) continue;
        for (const soak::ThreadRecord &t : w.journal->thread) {
            uint64_t size = t.phase.load() == soak::kAllocating ? t.size.load() : 0, other = t.admitting.load();
            // A request over the limit is refused before anything is added.
            if (size && size <= g_limit) in_flight += size + (2u << 20);
            if (other && other <= g_limit) in_flight += other + (2u << 20);
        }
    }
    if (frozen <= g_limit + in_flight) return;
    said = true;
    problem("the ledger counts " + std::to_string(used) + " bytes, over the limit; with every worker stopped " +
            std::to_string(frozen) + " (admissions under way: at most " + std::to_string(in_flight) +
            "), its slots listed " + std::to_string(listed) + "; by process:");
    for (const auto &p : all) {
        if (p.bytes.empty() || !p.bytes[0]) continue;
        const auto &k = p.kinds[0];
        problem("  pid " + std::to_string(p.pid) + (p.other_namespace ? " (another namespace)" : "") +
                (p.reclaimed ? " (RECLAIMED)"
                 : p.alive   ? ""
                             : " (dead, not reclaimed yet)") +
                " slot " + std::to_string(p.slot) + ": ledger " + std::to_string(p.bytes[0]) + " (context " +
                std::to_string(k[gg::ledger::kContext]) + ", graphs " + std::to_string(k[gg::ledger::kGraphs]) +
                ", pools " + std::to_string(k[gg::ledger::kPools]) + "), driver " +
                (p.other_namespace ? std::string("?") : std::to_string(truth_of(p.pid))));
    }
}

void sample(fake::Truth *t) {
    if (T.samples % 64 == 0) check_ledger();
    uint64_t cur = truth_now(t);
    uint64_t left = T.leaked_hi;
    for (const Worker &w : g_workers)
        if (w.pid) left += w.journal->exec_left.load();  // exec'd images of workers still running
    uint64_t live = cur > left ? cur - left : 0;
    T.samples++;
    T.max_live = std::max(T.max_live, live);
    if (live <= g_limit) return;
    // A process exiting cleanly leaves the ledger (its atexit handler) before the driver gives its
    // memory back (the driver's teardown, later still on a real GPU): its siblings may be admitted on
    // bytes it still holds. Such samples are told apart from any other excess.
    uint64_t exiting = 0;
    for (const Worker &w : g_workers)
        if (w.pid && w.terminated) exiting += truth_of(target(w));
    if (live - g_limit <= exiting) {
        T.exit_window++;
        T.max_exit_overshoot = std::max(T.max_exit_overshoot, live - g_limit);
        if (!g_allow_exit_window && T.exit_window <= 3)
            problem("live processes hold " + std::to_string(live) + " bytes in the driver, over the limit of " +
                    std::to_string(g_limit) + ", while workers exiting cleanly hold " + std::to_string(exiting));
        return;
    }
    T.violations++;
    T.max_over = std::max(T.max_over, live - g_limit);
    if (T.violations <= 5) {
        problem("live processes hold " + std::to_string(live) + " bytes in the driver, over the limit of " +
                std::to_string(g_limit));
        say_who_is_over();
    }
}

std::vector<std::string> list(const std::string &dir, const char *prefix) {
    std::vector<std::string> out;
    if (DIR *d = opendir(dir.c_str())) {
        while (dirent *e = readdir(d))
            if (!strncmp(e->d_name, prefix, strlen(prefix))) out.push_back(dir + "/" + e->d_name);
        closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
}

// Loads one written report in `gpuguard report` (the ASan build too) and removes them all, so that
// hours of signals do not fill the disk.
void check_reports() {
    std::vector<std::string> reports = list(g_work + "/reports", "gpuguard-");
    if (reports.empty()) return;
    T.reports += reports.size();
    const std::string &r = reports[reports.size() / 2];
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, STDOUT_FILENO);
        execl(g_cli.c_str(), g_cli.c_str(), "report", "--json", r.c_str(), (char *)nullptr);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    T.reports_checked++;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        T.reports_bad++;
        std::string keep = g_work + "/bad-report-" + std::to_string(T.reports_bad) + ".json";
        rename(r.c_str(), keep.c_str());
        problem("gpuguard report failed on a written report (status " + std::to_string(status) + "), kept as " + keep);
    }
    for (const std::string &f : reports) unlink(f.c_str());
}

std::string gib(uint64_t b) { return gg::human_bytes(b); }

volatile sig_atomic_t g_interrupted = 0;
void on_interrupt(int) { g_interrupted = 1; }

}  // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: soak WORKDIR (settings: SOAK_* variables, see tests/soak/run.sh)\n");
        return 2;
    }
    g_work = argv[1];
    g_bin = env_or("SOAK_BIN", ".");
    g_cli = env_or("SOAK_CLI", "gpuguard");
    double minutes = atof(env_or("SOAK_MINUTES", "120").c_str());
    int procs = (int)env_long("SOAK_PROCS", 6), threads = (int)env_long("SOAK_THREADS", 4);
    double kill_every = atof(env_or("SOAK_KILL_EVERY", "3").c_str());      // seconds, on average
    double signal_every = atof(env_or("SOAK_SIGNAL_EVERY", "2").c_str());  // seconds, on average
    std::string limit_text = g_limit_text = env_or("SOAK_LIMIT", "1GiB");
    g_allow_exit_window = env_long("SOAK_ALLOW_EXIT_WINDOW", 0) != 0;
    double term_share = atof(env_or("SOAK_TERM_SHARE", "0.25").c_str());  // stops that are clean exits
    std::string why;
    if (!gg::parse_size(limit_text, &g_limit, &why)) {
        fprintf(stderr, "soak: SOAK_LIMIT=%s: %s\n", limit_text.c_str(), why.c_str());
        return 2;
    }
    uint64_t max_alloc = g_limit / 4;
    std::mt19937_64 rng((uint64_t)env_long("SOAK_SEED", (long)time(nullptr)));
    mkdir((g_work + "/reports").c_str(), 0700);
    std::string truth_path = g_work + "/truth", ledger_path = g_ledger_path = g_work + "/ledger";
    fake::Truth *truth = g_truth = fake::truth_map(truth_path.c_str(), true);
    if (!truth) {
        fprintf(stderr, "soak: cannot map %s\n", truth_path.c_str());
        return 2;
    }
    // The workers' environment: ours without anything gpuguard or the test driver reads, then the
    // soak's settings. Only the workers preload the shim (SOAK_PRELOAD), never the supervisor.
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "GPUGUARD_", 9) && strncmp(*e, "FAKE_CUDA_", 10) && strncmp(*e, "CUDA_", 5) &&
            strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "LD_LIBRARY_PATH=", 16))
            g_worker_env.push_back(*e);
    g_worker_env.push_back("LD_PRELOAD=" + env_or("SOAK_PRELOAD", ""));
    g_worker_env.push_back("SOAK_USAGE=" + env_or("SOAK_USAGE", "0"));
    // With usage traffic, a context costs what the quota must measure and count (issue 19).
    if (env_or("SOAK_USAGE", "0") == "1") g_worker_env.push_back("FAKE_CUDA_CTX_BYTES=" + std::to_string(48ull << 20));
    g_worker_env.push_back("LD_LIBRARY_PATH=" + env_or("SOAK_LIBRARY_PATH", ""));
    for (std::string v :
         {"GPUGUARD_MEM_LIMIT=" + limit_text, "GPUGUARD_LEDGER=" + ledger_path, "FAKE_CUDA_TRUTH=" + truth_path,
          // Physical memory far above the limit: bytes that killed processes leave in
          // the test driver must never make it refuse (journal.h).
          std::string("FAKE_CUDA_MEM=") + std::to_string(64ull << 40), std::string("GPUGUARD_REPORT_SIGNAL=USR2"),
          "GPUGUARD_REPORT_DIR=" + g_work + "/reports", std::string("GPUGUARD_MAX_REPORTS=2")})
        g_worker_env.push_back(v);

    g_namespaces = env_long("SOAK_NAMESPACES", 1) != 0 && namespaces_work();
    if (!g_namespaces) fprintf(stderr, "soak: no PID namespaces here (unshare needs root): every worker in ours\n");
    std::vector<Worker> &workers = g_workers;
    workers.resize((size_t)procs);
    for (int i = 0; i < procs; i++) {
        Worker &w = workers[(size_t)i];
        w.id = i;
        w.journal_path = g_work + "/journal." + std::to_string(i);
        if (!(w.journal = map_journal(w.journal_path))) {
            fprintf(stderr, "soak: cannot map %s\n", w.journal_path.c_str());
            return 2;
        }
        start(w, threads, max_alloc, rng);
    }

    fprintf(stderr, "soak: %d processes x %d threads, limit %s, %.1f minutes, work folder %s\n", procs, threads,
            gib(g_limit).c_str(), minutes, g_work.c_str());
    Clock::time_point begin = Clock::now(), end = begin + std::chrono::duration_cast<Clock::duration>(
                                                              std::chrono::duration<double>(minutes * 60));
    Clock::time_point next_report_check = begin + std::chrono::seconds(20),
                      next_status = begin + std::chrono::minutes(1);
    std::exponential_distribution<double> kill_gap(1 / kill_every), signal_gap(1 / signal_every);
    auto after = [](double s) {
        return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
    };
    Clock::time_point next_kill = after(kill_gap(rng)), next_signal = after(signal_gap(rng));
    signal(SIGINT, on_interrupt);  // ^C or SIGTERM: stop early, with the end checks and the table
    signal(SIGTERM, on_interrupt);
    while (Clock::now() < end && !g_interrupted) {
        // Sampling the truth is what catches an over-limit moment: every millisecond, between the
        // supervisor's other chores (a kill is reaped and accounted before the next sample).
        sample(truth);
        usleep(1000);
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (Worker &w : workers)
                if (w.pid == pid) {
                    reaped(w, status);
                    start(w, threads, max_alloc, rng);
                }
        }
        Clock::time_point now = Clock::now();
        if (now >= next_kill) {
            next_kill = after(kill_gap(rng));
            Worker &w = workers[rng() % workers.size()];
            if (w.pid && !w.killed && !w.terminated && target(w)) {
                // Most stops are SIGKILL (anywhere, even inside a hook); SOAK_TERM_SHARE are clean exits.
                if (std::uniform_real_distribution<double>(0, 1)(rng) >= term_share) {
                    w.killed = true;
                    T.kills++;
                    kill(target(w), SIGKILL);
                    waitpid(w.pid, &status, 0);  // accounted before the next sample
                    reaped(w, status);
                    start(w, threads, max_alloc, rng);
                } else {
                    stop(w);
                    T.terms++;
                }
            }
        }
        if (now >= next_signal) {
            next_signal = after(signal_gap(rng));
            Worker &w = workers[rng() % workers.size()];
            // Only once the shim is set up in the worker's image (its first hooked call installs the
            // handler; an image exec'd since has none yet).
            if (w.pid && w.journal->ready.load() && target(w) && !w.killed) {
                kill(target(w), SIGUSR2);
                T.signals++;
            }
        }
        for (Worker &w : workers) {
            uint64_t ops = w.journal->ops.load();
            if (ops != w.last_ops) w.last_ops = ops, w.last_progress = now;
            if (w.pid && now - w.last_progress > std::chrono::seconds(60)) {
                T.stalls++;
                std::string stacks = g_work + "/stall." + std::to_string(w.pid) + ".txt";
                problem("worker " + std::to_string(w.pid) + " made no driver call for 60 s: its threads' stacks in " +
                        stacks);
                w.killed = true;  // counted as a kill: what it held stays in the truth
                // Every thread's stack, by gdb when there is one (a sanitizer busy with a report may be
                // the very thing that hangs), then SIGABRT for the sanitizer's own account.
                pid_t t = target(w) ? target(w) : w.pid;
                std::string gdb = "command -v gdb >/dev/null && timeout 60 gdb -p " + std::to_string(t) +
                                  " -batch -ex 'thread apply all bt' > '" + stacks + "' 2>&1";
                if (system(gdb.c_str()) != 0) problem("no gdb to take the stalled worker's stacks");
                kill(t, SIGABRT);
                // Time for the sanitizer to write the report (run.sh symbolizes it afterwards).
                for (int i = 0; i < 100 && waitpid(w.pid, &status, WNOHANG) == 0; i++) usleep(100000);
                kill(t, SIGKILL);
                if (kill(w.pid, SIGKILL) == 0) waitpid(w.pid, &status, 0);
                reaped(w, status);
                start(w, threads, max_alloc, rng);
            }
        }
        if (now >= next_report_check) {
            next_report_check = now + std::chrono::seconds(20);
            check_reports();
        }
        if (now >= next_status) {
            next_status = now + std::chrono::minutes(1);
            fprintf(stderr,
                    "soak: %.0f min: %llu starts, %llu kills, %llu allocations, live max %s of %s, %zu problems\n",
                    std::chrono::duration<double>(now - begin).count() / 60, (unsigned long long)T.starts,
                    (unsigned long long)T.kills, (unsigned long long)(T.allocs), gib(T.max_live).c_str(),
                    gib(g_limit).c_str(), T.problems.size());
        }
    }

    close_ledger_view();
    // The end: every worker stopped cleanly, then nothing may remain but what killed ones left.
    for (Worker &w : workers)
        if (w.pid && !w.terminated) stop(w);
    for (Worker &w : workers) {
        if (!w.pid) continue;
        int status = 0;
        pid_t done = 0;
        for (int i = 0; i < 600 && (done = waitpid(w.pid, &status, WNOHANG)) == 0; i++) sample(truth), usleep(100000);
        if (done == 0) {
            T.stalls++;
            problem("worker " + std::to_string(w.pid) + " did not exit within 60 s of SIGTERM");
            w.killed = true;
            if (target(w)) kill(target(w), SIGKILL);
            kill(w.pid, SIGKILL);
            waitpid(w.pid, &status, 0);
        }
        reaped(w, status);
    }
    check_reports();
    uint64_t left = truth_now(truth);
    bool truth_ok = left >= T.leaked_lo && left <= T.leaked_hi;
    if (!truth_ok)
        problem("the driver holds " + std::to_string(left) + " bytes after every worker exited; killed ones left " +
                std::to_string(T.leaked_lo) + ".." + std::to_string(T.leaked_hi));
    // The ledger, as the next process would find it: dead processes reclaimed, nothing counted (what
    // admission counts, not only the live processes' bytes), and every slot free or reclaimed: a slot
    // left claiming, live or reclaiming by a killed process is one leaked for good.
    std::string error, notice;
    uint64_t ledger_used = UINT64_MAX, ledger_peak = UINT64_MAX, leaked_slots = 0, slots_used = 0;
    if (gg::ledger::Ledger *l = gg::ledger::Ledger::open({ledger_path, limit_text, -1, false}, &error, &notice)) {
        l->reclaim_dead(false);
        for (const auto &d : l->devices()) ledger_used = l->container_used(d.index), ledger_peak = d.peak;
        for (const auto &p : l->processes()) {
            slots_used++;
            if (!p.self && !p.reclaimed) leaked_slots++;
        }
        delete l;
    } else {
        problem("cannot open the ledger at the end: " + error);
    }
    if (ledger_used != 0) problem("the ledger counts " + std::to_string(ledger_used) + " bytes with every worker gone");
    if (leaked_slots) problem(std::to_string(leaked_slots) + " slots of the ledger were neither free nor reclaimable");
    if (ledger_peak > g_limit) problem("the ledger's peak " + std::to_string(ledger_peak) + " passed the limit");
    std::vector<std::string> san = list(g_work, "sanitizer.");
    for (const std::string &f : san) problem("sanitizer report: " + f);

    double ran = std::chrono::duration<double>(Clock::now() - begin).count();
    bool ok = T.problems.empty();
    auto row = [](const char *what, const std::string &value) { printf("  %-44s %s\n", what, value.c_str()); };
    auto n = [](uint64_t v) { return std::to_string(v); };
    printf("\nsoak summary (%d processes x %d threads, limit %s, %.1f min%s, seed %s)\n", procs, threads,
           gib(g_limit).c_str(), ran / 60, g_interrupted ? ", interrupted" : "", env_or("SOAK_SEED", "?").c_str());
    row("worker starts (in a PID namespace of their own)", n(T.starts) + " (" + n(T.ns_starts) + ")");
    row("SIGKILLs (inside a driver call)", n(T.kills) + " (" + n(T.kills_in_call) + ")");
    row("clean stops (SIGTERM)", n(T.terms));
    row("allocations / frees", n(T.allocs) + " / " + n(T.frees));
    row("requests near SIZE_MAX (all refused)", n(T.huge));
    row("execs with memory allocated", n(T.execs));
    row("out-of-memory answers (quota + injected)", n(T.oom));
    row("other driver errors", n(T.errors));
    row("report signals sent", n(T.signals));
    row("reports written / loaded by gpuguard report",
        n(T.reports) + " / " + n(T.reports_checked - T.reports_bad) + " of " + n(T.reports_checked));
    row("truth samples", n(T.samples));
    row("max bytes held by live processes", gib(T.max_live) + " (limit " + gib(g_limit) + ")");
    row("samples over the limit (most bytes over)", n(T.violations) + " (" + n(T.max_over) + ")");
    row("samples over it during a clean exit (max)",
        n(T.exit_window) + " (" + gib(T.max_exit_overshoot) + ")" + (g_allow_exit_window ? ", tolerated" : ""));
    row("left in the driver by killed and exec'd images",
        gib(T.leaked_lo) + (T.leaked_hi != T.leaked_lo ? " .. " + gib(T.leaked_hi) : ""));
    row("driver holds at the end", gib(left) + (truth_ok ? " (all of it left by killed processes)" : " (MISMATCH)"));
    row("ledger used at the end / its peak", (ledger_used == UINT64_MAX ? "?" : gib(ledger_used)) + " / " +
                                                 (ledger_peak == UINT64_MAX ? "?" : gib(ledger_peak)));
    row("ledger slots used / leaked", n(slots_used) + " / " + n(leaked_slots));
    row("crashes / stalls / bad exits", n(T.crashes) + " / " + n(T.stalls) + " / " + n(T.bad_exits));
    row("sanitizer reports", n(san.size()));
    for (const std::string &p : T.problems) printf("  problem: %s\n", p.c_str());
    printf("soak: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
