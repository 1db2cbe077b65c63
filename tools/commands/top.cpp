// `gpuguard top`: the container's own nvidia-smi, read from the shared ledger. It maps the ledger
// read-only and never reclaims or writes anything, so watching can never change what it shows.
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/base/log.h"
#include "common/base/printable.h"
#include "common/ledger/ledger.h"
#include "common/settings/settings.h"
#include "common/units/human.h"
#include "common/units/size_spec.h"
#include "tools/cli/args.h"

namespace {

using gg::ledger::Ledger;
using gg::tool::Args;

const char kUsage[] =
    "usage: gpuguard top [--ledger PATH] [--once] [--json] [--interval SEC]\n"
    "\n"
    "Shows the GPU memory of the container as its shared ledger counts it: per device the limit,\n"
    "the bytes held, the peak and the physical total; per process its bytes, peak and state. Bytes\n"
    "held are split by kind: allocations, CUDA contexts and modules (CTX), graphs' memory (GRAPHS)\n"
    "and what stream-ordered pools keep beyond their allocations (POOLS); GPUGUARD_COUNT_CONTEXT=0\n"
    "counts allocations only.\n"
    "On a terminal the view refreshes until q or Ctrl-C; otherwise it prints once.\n"
    "\n"
    "options:\n"
    "  --ledger PATH    the ledger (default GPUGUARD_LEDGER, else /dev/shm/gpuguard-<uid>.ledger)\n"
    "  --once           print one table and exit\n"
    "  --json           print one JSON document and exit (fields below)\n"
    "  --interval SEC   seconds between refreshes (default 1; at least 0.1)\n"
    "  -h, --help       this help\n"
    "\n"
    "Process states: alive; dead (exited, exec'd or killed: its bytes are not in USED, but admission\n"
    "counts them until another process of the ledger reclaims them, within a second of its next\n"
    "allocation); reclaimed (bytes given back). A pid marked * is in another PID namespace.\n"
    "\n"
    "JSON: {\"version\": 1, \"ledger\", \"limit_spec\" (null for none), \"time_unix_ns\",\n"
    "  \"devices\": [{\"index\", \"uuid\", \"name\", \"limit_bytes\" (null for none), \"used_bytes\",\n"
    "               \"peak_bytes\", \"physical_total_bytes\", \"by_kind\", \"context_cost_bytes\" (null\n"
    "               while unmeasured)}],\n"
    "  \"processes\": [{\"slot\", \"pid\", \"pid_namespace\" (same|other), \"command\",\n"
    "                 \"state\" (alive|dead|reclaimed), \"bytes\", \"devices\": [{\"index\", \"bytes\",\n"
    "                 \"peak_bytes\", \"by_kind\"}]}]}\n"
    "by_kind: {\"allocations\", \"context_and_modules\", \"graphs\", \"pool_reserve\"}, in bytes.\n"
    "Device indexes are the ledger's (the same GPU has the same index for every process, whatever\n"
    "its CUDA_VISIBLE_DEVICES), not CUDA ordinals: match devices by uuid.\n"
    "\n"
    "Exit status: 0 shown; 1 no ledger at that path (or it cannot be read); 2 bad usage or a file\n"
    "that is not a valid ledger.\n";

struct Snapshot {
    std::string path, limit_spec;
    std::vector<Ledger::DeviceView> devices;
    std::vector<Ledger::ProcessView> processes;
    uint64_t time_unix_ns = 0;
};

const char *state_of(const Ledger::ProcessView &p) { return p.alive ? "alive" : p.reclaimed ? "reclaimed" : "dead"; }
int state_rank(const Ledger::ProcessView &p) { return p.alive ? 0 : p.reclaimed ? 2 : 1; }

uint64_t total_bytes(const Ledger::ProcessView &p) {
    uint64_t t = 0;
    for (uint64_t b : p.bytes) t += b;
    return t;
}

// Opens the ledger read-only. On failure *code is 1 when there is nothing readable at the path and
// 2 when there is a file but it is not a ledger this gpuguard reads.
std::unique_ptr<Ledger> open_ledger(const std::string &path, std::string *error, int *code) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) {
        *code = 1;
        *error = errno == ENOENT ? "no ledger at " + path +
                                       ": no process has used the GPU under gpuguard with it yet (--ledger or "
                                       "GPUGUARD_LEDGER names another)"
                                 : "cannot read ledger " + path + ": " + strerror(errno);
        return nullptr;
    }
    gg::ledger::OpenOptions o;
    o.path = path;
    o.read_only = true;
    std::string notice;
    std::unique_ptr<Ledger> l(Ledger::open(o, error, &notice));
    if (!l) *code = S_ISREG(st.st_mode) && access(path.c_str(), R_OK) != 0 ? 1 : 2;
    return l;
}

Snapshot take(const Ledger &l) {
    Snapshot s;
    s.path = gg::printable(l.path());
    s.limit_spec = l.limit_spec();
    s.devices = l.devices();
    s.processes = l.processes();
    std::stable_sort(s.processes.begin(), s.processes.end(), [](const auto &a, const auto &b) {
        if (state_rank(a) != state_rank(b)) return state_rank(a) < state_rank(b);
        return total_bytes(a) > total_bytes(b);
    });
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s.time_unix_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    return s;
}

std::string limit_text(uint64_t limit) { return limit == gg::ledger::kNoLimit ? "none" : gg::human_bytes(limit); }

// The allocations of a total: what the other kinds do not account for.
uint64_t allocations(uint64_t total, const std::array<uint64_t, gg::ledger::kKinds> &k) {
    uint64_t others = k[gg::ledger::kContext] + k[gg::ledger::kGraphs] + k[gg::ledger::kPools];
    return total > others ? total - others : 0;
}

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

// A bar of `width` cells for used/limit (or used/total without a limit).
std::string bar(uint64_t used, uint64_t of, int width) {
    int fill = of ? (int)std::min<double>(width, (double)used * width / (double)of + 0.5) : 0;
    return "[" + std::string(fill, '#') + std::string(width - fill, '.') + "]";
}

std::string render_table(const Snapshot &s, bool live) {
    std::string out;
    time_t now = (time_t)(s.time_unix_ns / 1000000000ull);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&now));
    int alive = 0, dead = 0, reclaimed = 0;
    for (const auto &p : s.processes) (p.alive ? alive : p.reclaimed ? reclaimed : dead)++;
    out += format("gpuguard top   ledger %s   limit %s   %s\n", s.path.c_str(),
                  s.limit_spec.empty() ? "none" : s.limit_spec.c_str(), when);
    out += format("processes: %d alive, %d dead not yet reclaimed, %d reclaimed\n\n", alive, dead, reclaimed);

    out += format("%-3s %-20s %-40s %11s %11s %11s %11s\n", "#", "NAME", "UUID", "USED", "LIMIT", "PEAK", "TOTAL");
    if (s.devices.empty()) out += "    (no device registered yet: no process has allocated under this ledger)\n";
    for (const auto &d : s.devices) {
        out += format("%-3d %-20.20s %-40s %11s %11s %11s %11s", d.index, d.name.c_str(), d.uuid.c_str(),
                      gg::human_bytes(d.used).c_str(), limit_text(d.limit).c_str(), gg::human_bytes(d.peak).c_str(),
                      gg::human_bytes(d.physical_total).c_str());
        uint64_t of = d.limit != gg::ledger::kNoLimit ? d.limit : d.physical_total;
        if (live && of) out += format("  %s %3.0f%%", bar(d.used, of, 20).c_str(), 100.0 * (double)d.used / (double)of);
        out += "\n";
        out += format("    allocations %s, contexts and modules %s, graphs %s, pool reserve %s; a context costs %s\n",
                      gg::human_bytes(allocations(d.used, d.kinds)).c_str(),
                      gg::human_bytes(d.kinds[gg::ledger::kContext]).c_str(),
                      gg::human_bytes(d.kinds[gg::ledger::kGraphs]).c_str(),
                      gg::human_bytes(d.kinds[gg::ledger::kPools]).c_str(),
                      d.context_cost ? gg::human_bytes(d.context_cost).c_str() : "(not measured yet)");
    }

    out += format("\n%8s %-10s %3s %11s %11s %11s %11s %11s %11s  %s\n", "PID", "STATE", "#", "BYTES", "ALLOC", "CTX",
                  "GRAPHS", "POOLS", "PEAK", "COMMAND");
    if (s.processes.empty()) out += "    (no process has joined this ledger)\n";
    bool foreign = false;
    for (const auto &p : s.processes) {
        // A pid of another PID namespace (a container sharing /dev/shm) names nothing here.
        std::string pid = std::to_string(p.pid) + (p.other_namespace ? "*" : "");
        foreign |= p.other_namespace;
        bool any = false;
        for (const auto &d : s.devices) {
            size_t i = (size_t)d.index;
            if (i >= p.bytes.size() || (!p.bytes[i] && !p.peak[i])) continue;
            const auto &k = p.kinds[i];
            out += format(
                "%8s %-10s %3d %11s %11s %11s %11s %11s %11s  %s\n", pid.c_str(), state_of(p), d.index,
                gg::human_bytes(p.bytes[i]).c_str(), gg::human_bytes(allocations(p.bytes[i], k)).c_str(),
                gg::human_bytes(k[gg::ledger::kContext]).c_str(), gg::human_bytes(k[gg::ledger::kGraphs]).c_str(),
                gg::human_bytes(k[gg::ledger::kPools]).c_str(), gg::human_bytes(p.peak[i]).c_str(), p.command.c_str());
            any = true;
        }
        if (!any)
            out += format("%8s %-10s %3s %11s %11s %11s %11s %11s %11s  %s\n", pid.c_str(), state_of(p), "-", "0 B",
                          "0 B", "0 B", "0 B", "0 B", "0 B", p.command.c_str());
    }
    if (foreign) out += "(* a pid in another PID namespace: it names no process here)\n";
    return out;
}

nlohmann::ordered_json kinds_json(uint64_t total, const std::array<uint64_t, gg::ledger::kKinds> &k) {
    return {{"allocations", allocations(total, k)},
            {"context_and_modules", k[gg::ledger::kContext]},
            {"graphs", k[gg::ledger::kGraphs]},
            {"pool_reserve", k[gg::ledger::kPools]}};
}

std::string render_json(const Snapshot &s) {
    using json = nlohmann::ordered_json;
    json devices = json::array(), processes = json::array();
    for (const auto &d : s.devices)
        devices.push_back({{"index", d.index},
                           {"uuid", d.uuid},
                           {"name", d.name},
                           {"limit_bytes", d.limit == gg::ledger::kNoLimit ? json(nullptr) : json(d.limit)},
                           {"used_bytes", d.used},
                           {"peak_bytes", d.peak},
                           {"physical_total_bytes", d.physical_total},
                           {"by_kind", kinds_json(d.used, d.kinds)},
                           {"context_cost_bytes", d.context_cost ? json(d.context_cost) : json(nullptr)}});
    for (const auto &p : s.processes) {
        json per = json::array();
        for (const auto &d : s.devices) {
            size_t i = (size_t)d.index;
            if (i < p.bytes.size() && (p.bytes[i] || p.peak[i]))
                per.push_back({{"index", d.index},
                               {"bytes", p.bytes[i]},
                               {"peak_bytes", p.peak[i]},
                               {"by_kind", kinds_json(p.bytes[i], p.kinds[i])}});
        }
        processes.push_back({{"slot", p.slot},
                             {"pid", p.pid},
                             {"pid_namespace", p.other_namespace ? "other" : "same"},
                             {"command", p.command},
                             {"state", state_of(p)},
                             {"bytes", total_bytes(p)},
                             {"devices", per}});
    }
    json doc = {{"version", 1},
                {"ledger", s.path},
                {"limit_spec", s.limit_spec.empty() ? json(nullptr) : json(s.limit_spec)},
                {"time_unix_ns", s.time_unix_ns},
                {"devices", devices},
                {"processes", processes}};
    // Commands come from /proc/<pid>/cmdline and may hold any bytes: replace, never throw.
    return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

// ---- the live view -------------------------------------------------------------------------------

volatile sig_atomic_t g_quit = 0, g_resized = 0;
void on_quit(int) { g_quit = 1; }
void on_winch(int) { g_resized = 1; }

// The terminal as we found it, put back however the view ends.
class Screen {
public:
    Screen() {
        raw_ = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0;
        if (raw_) {
            termios t = saved_;
            t.c_lflag &= ~(ICANON | ECHO);  // keys without Enter, not echoed; ISIG stays: Ctrl-C is SIGINT
            t.c_cc[VMIN] = 0;
            t.c_cc[VTIME] = 0;
            tcsetattr(STDIN_FILENO, TCSANOW, &t);
        }
        put("\033[?1049h\033[?25l");  // the alternate screen, cursor hidden
    }
    ~Screen() {
        put("\033[?25h\033[?1049l");
        if (raw_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    }
    void put(const std::string &s) {
        size_t off = 0;
        while (off < s.size()) {
            ssize_t n = write(STDOUT_FILENO, s.data() + off, s.size() - off);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return;
            off += (size_t)n;
        }
    }
    bool keys() const { return raw_; }

private:
    termios saved_{};
    bool raw_ = false;
};

// Clips the text to the window so that a long table never scrolls the view.
std::string clip(const std::string &text, int cols, int rows) {
    std::string out;
    int row = 0;
    size_t start = 0;
    while (start < text.size() && row < rows) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(start, end - start);
        if ((int)line.size() > cols) line.resize((size_t)cols);
        out += line + "\033[K\n";
        row++;
        start = end + 1;
    }
    return out;
}

int live(const std::string &path, double interval) {
    struct sigaction sa {};
    sa.sa_handler = on_quit;  // no SA_RESTART: poll() returns at once
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, nullptr);
    Screen screen;
    bool keys = screen.keys();
    while (!g_quit) {
        winsize ws{};
        int cols = 120, rows = 40;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) cols = ws.ws_col, rows = ws.ws_row;
        // Opened afresh each time: a run that finds the ledger idle replaces the file with a new one.
        std::string error, text;
        int code = 0;
        std::unique_ptr<Ledger> l = open_ledger(path, &error, &code);
        text = l ? render_table(take(*l), true) : "gpuguard top: " + error + "\n";
        text += keys ? "\nq: quit\n" : "\nCtrl-C: quit\n";
        screen.put("\033[H" + clip(text, cols, rows - 1) + "\033[J");
        g_resized = 0;
        // Wait for the interval, a key or a signal.
        timespec end;
        clock_gettime(CLOCK_MONOTONIC, &end);
        uint64_t deadline = (uint64_t)end.tv_sec * 1000 + (uint64_t)end.tv_nsec / 1000000 + (uint64_t)(interval * 1000);
        while (!g_quit && !g_resized) {
            timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            uint64_t ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
            if (ms >= deadline) break;
            pollfd pfd{STDIN_FILENO, POLLIN, 0};
            int r = poll(&pfd, keys ? 1 : 0, (int)(deadline - ms));
            if (r > 0 && pfd.revents) {
                char buf[64];
                ssize_t n = (pfd.revents & POLLIN) ? read(STDIN_FILENO, buf, sizeof buf) : 0;
                for (ssize_t i = 0; i < n; i++)
                    if (buf[i] == 'q' || buf[i] == 'Q' || buf[i] == 3) g_quit = 1;
                if (n <= 0) keys = false;  // the terminal hung up: keep refreshing until a signal
            }
        }
    }
    return 0;
}

}  // namespace

int cmd_top(int argc, char **argv) {
    std::string path;
    bool once = false, as_json = false, have_path = false;
    double interval = 1.0;
    Args a("top", argc, argv);
    while (!a.done()) {
        std::string v;
        if (a.flag("-h") || a.flag("--help")) {
            fputs(kUsage, stdout);
            return 0;
        } else if (a.flag("--once")) {
            once = true;
        } else if (a.flag("--json")) {
            as_json = true;
        } else if (a.option("--ledger", "a path", &v)) {
            if (a.failed() || v.empty()) return a.usage_error("--ledger needs a path");
            path = v;
            have_path = true;
        } else if (a.option("--interval", "a number", &v)) {
            char *end = nullptr;
            interval = strtod(v.c_str(), &end);
            if (a.failed() || v.empty() || *end || !(interval >= 0.1) || interval > 86400)
                return a.usage_error("--interval needs a number of seconds from 0.1 to 86400");
        } else {
            return a.usage_error("unknown argument '" + a.next() + "'");
        }
    }
    if (!have_path) {
        path = gg::settings::read_ledger_path(gg::settings::process_env());
        if (path.empty()) {
            std::optional<std::string> set =
                gg::settings::value(gg::settings::process_env(), gg::settings::Id::kLedger);
            return a.usage_error("GPUGUARD_LEDGER=" + (set ? *set : std::string("none")) +
                                 " means a per-process quota with no shared ledger to show; pass --ledger PATH");
        }
    }

    std::string error;
    int code = 0;
    std::unique_ptr<Ledger> l = open_ledger(path, &error, &code);
    if (!l) {
        gg::log_error("%s", error.c_str());
        return code;
    }
    if (as_json) {
        fputs(render_json(take(*l)).c_str(), stdout);
        return 0;
    }
    if (once || !isatty(STDOUT_FILENO)) {
        fputs(render_table(take(*l), false).c_str(), stdout);
        return 0;
    }
    l.reset();
    return live(path, interval);
}
