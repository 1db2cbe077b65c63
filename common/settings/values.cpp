// Reading and checking the value of a setting, by its type: the same rules for the shim (which
// reads them) and `gpuguard doctor` (which checks them).
#include <grp.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "common/settings/settings.h"

namespace gg::settings {
namespace {

bool parse_count(const char *v, long lo, long hi, long *out) {
    char *end = nullptr;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (!*v || *end != '\0' || errno == ERANGE || n < lo || n > hi) return false;
    *out = n;
    return true;
}

// 1, true, yes, on -> 1; 0, false, no, off -> 0; anything else -> -1.
int parse_switch(const char *v) {
    for (const char *t : {"1", "true", "yes", "on"})
        if (!strcasecmp(v, t)) return 1;
    for (const char *f : {"0", "false", "no", "off"})
        if (!strcasecmp(v, f)) return 0;
    return -1;
}

int parse_signal(const char *v) {
    if (!strncasecmp(v, "SIG", 3)) v += 3;
    static const struct {
        const char *name;
        int sig;
    } known[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}, {"QUIT", SIGQUIT}, {"PWR", SIGPWR}};
    for (const auto &k : known)
        if (!strcasecmp(v, k.name)) return k.sig;
    char *end = nullptr;
    long n = strtol(v, &end, 10);
    if (*v && *end == '\0' && n >= SIGRTMIN && n <= SIGRTMAX) return (int)n;
    return 0;
}

bool parse_fraction(const char *v, double *out) {
    char *end = nullptr;
    double f = strtod(v, &end);
    if (*end == '%') f /= 100, end++;
    if (!*v || *end != '\0' || !(f > 0) || f > 1) return false;
    *out = f;
    return true;
}

bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

// A gid, or the gid of a group name; -1 when neither.
long group_id(const char *v) {
    char *end = nullptr;
    long gid = strtol(v, &end, 10);
    // Past INT_MAX a cast would wrap onto another group (4294967296 -> 0, root's): refused.
    if (*v && *end == '\0' && gid >= 0 && gid <= INT_MAX) return gid;
    if (struct group *gr = getgrnam(v)) return (long)gr->gr_gid;
    return -1;
}

const char *const kUnwinders[] = {"cfi", "libunwind", "libgcc", "none"};

const char kRelativeLedger[] =
    "a relative path: each working directory gets a ledger of its own, so processes started in another one do "
    "not share the quota (use an absolute path)";

// "NAME=VALUE is PROBLEM; WHEN_BAD": the shim's message for a malformed value.
std::string message(const Row &r, const char *value, const std::string &problem, const std::string &when_bad) {
    return std::string(r.name) + "=" + value + " is " + problem + (when_bad.empty() ? "" : "; " + when_bad);
}

std::string using_default(const Row &r) { return std::string("using ") + r.default_text; }

}  // namespace

// What is wrong with a value that has no spaces around it.
std::string problem_of(Id id, const std::string &value) {
    const Row &r = row(id);
    const char *v = value.c_str();
    std::string why;
    switch (r.type) {
        case Type::kLimit: {
            if (value.empty()) return "set but empty: the shim refuses every device allocation (unset it for no limit)";
            LimitSpec spec;
            return limit_problem(value, &spec);
        }
        case Type::kCount: {
            long n;
            return parse_count(v, r.min, r.max, &n)
                       ? ""
                       : "not a whole number from " + std::to_string(r.min) + " to " + std::to_string(r.max);
        }
        case Type::kSwitch: return parse_switch(v) >= 0 ? "" : "not 0 or 1";
        case Type::kSignal:
            return parse_signal(v) ? ""
                                   : "not a signal the shim accepts (USR1, USR2, HUP, QUIT, PWR or a real-time "
                                     "signal number)";
        case Type::kFraction: {
            double f;
            return parse_fraction(v, &f) ? "" : "not a fraction of the limit like 0.9 or 90%";
        }
        case Type::kSize: {
            uint64_t b;
            return parse_size(value, &b, &why) ? "" : "not a size: " + why;
        }
        case Type::kCudnnCap: {
            if (!strcasecmp(v, "auto") || !strcasecmp(v, "off") || !strcasecmp(v, "none")) return "";
            uint64_t b;
            return parse_size(value, &b, &why) ? "" : "not a size, 'auto' or 'off' (" + why + ")";
        }
        case Type::kGroup: return group_id(v) >= 0 ? "" : "not a group on this system";
        case Type::kDriverPath:
            // A name without a slash is looked up by the loader, as dlopen would.
            return value.find('/') == std::string::npos || is_file(v) ? "" : "no such file";
        case Type::kLibraryPath: return is_file(v) ? "" : "no such file";
        case Type::kUnwinderName:
            for (const char *u : kUnwinders)
                if (value == u) return "";
            return "not cfi, libunwind, libgcc or none";
        case Type::kCountMode: return parse_switch(v) >= 0 || !strcasecmp(v, "estimate") ? "" : "not 1, 0 or estimate";
        case Type::kLedgerPath:
            // Relative: one ledger per working directory, so processes started elsewhere (a launcher
            // that changes directory, a notebook) do not share the quota.
            return value.empty() || is_per_process_ledger(value) || value[0] == '/' ? "" : kRelativeLedger;
        case Type::kFolder:
        case Type::kFlag: return "";
    }
    return "";
}

std::string problem(Id id, const std::string &raw) {
    std::string spaces = spaces_problem(raw);
    size_t b = raw.find_first_not_of(' '), e = raw.find_last_not_of(' ');
    std::string p = problem_of(id, b == std::string::npos ? "" : raw.substr(b, e - b + 1));
    if (spaces.empty()) return p;
    return p.empty() ? spaces : spaces + "; and " + p;
}

long read_count(const Lookup &env, Id id, std::string *problem_out) {
    const Row &r = row(id);
    std::optional<std::string> text = value(env, id);
    const char *v = text ? text->c_str() : nullptr;
    long n = r.default_value;
    if (v && !parse_count(v, r.min, r.max, &n)) {
        *problem_out = message(r, v, problem(id, v), using_default(r));
        n = r.default_value;
    }
    return n;
}

bool read_switch(const Lookup &env, Id id, std::string *problem_out) {
    const Row &r = row(id);
    std::optional<std::string> text = value(env, id);
    const char *v = text ? text->c_str() : nullptr;
    if (!v) return r.default_value != 0;
    int s = parse_switch(v);
    if (s < 0) {
        *problem_out = message(r, v, problem(id, v), using_default(r));
        return r.default_value != 0;
    }
    return s == 1;
}

int read_signal(const Lookup &env, Id id, std::string *problem_out) {
    std::optional<std::string> text = value(env, id);
    const char *v = text ? text->c_str() : nullptr;
    if (!v) return 0;
    int sig = parse_signal(v);
    if (!sig) *problem_out = message(row(id), v, problem(id, v), row(id).when_bad);
    return sig;
}

double read_fraction(const Lookup &env, Id id, std::string *problem_out) {
    std::optional<std::string> text = value(env, id);
    const char *v = text ? text->c_str() : nullptr;
    double f = 0;
    if (v && !parse_fraction(v, &f)) {
        *problem_out = message(row(id), v, problem(id, v), row(id).when_bad);
        f = 0;
    }
    return f;
}

uint64_t read_size(const Lookup &env, Id id, std::string *problem_out) {
    std::optional<std::string> text = value(env, id);
    const char *v = text ? text->c_str() : nullptr;
    uint64_t b = 0;
    std::string why;
    if (v && !parse_size(v, &b, &why)) {
        *problem_out = message(row(id), v, problem(id, v), row(id).when_bad);
        b = 0;
    }
    return b;
}

bool read_flag(const Lookup &env, Id id) {
    std::optional<std::string> text = value(env, id);
    const char *v = text ? text->c_str() : nullptr;
    return v && strcmp(v, "0") != 0;
}

CudnnCap read_cudnn_cap(const Lookup &env, std::string *problem_out) {
    CudnnCap cap;
    std::optional<std::string> text = value(env, Id::kCudnnWorkspaceLimit);
    const char *v = text ? text->c_str() : nullptr;
    if (!v || !strcasecmp(v, "auto")) return cap;
    if (!strcasecmp(v, "off") || !strcasecmp(v, "none")) {
        cap.mode = CudnnCap::kOff;
        return cap;
    }
    std::string why;
    if (parse_size(v, &cap.bytes, &why)) {
        cap.mode = CudnnCap::kBytes;
    } else {
        const Row &r = row(Id::kCudnnWorkspaceLimit);
        *problem_out = message(r, v, problem(r.id, v), r.when_bad);
        cap.bytes = 0;
    }
    return cap;
}

CountMode read_count_mode(const Lookup &env, std::string *problem_out) {
    std::optional<std::string> text = value(env, Id::kCountContext);
    const char *v = text ? text->c_str() : nullptr;
    if (!v) return CountMode::kEverything;
    if (!strcasecmp(v, "estimate")) return CountMode::kEstimate;
    int s = parse_switch(v);
    if (s < 0) {
        const Row &r = row(Id::kCountContext);
        *problem_out = message(r, v, problem(r.id, v), r.when_bad);
        return CountMode::kEverything;
    }
    return s ? CountMode::kEverything : CountMode::kAllocations;
}

std::string read_unwinder(const Lookup &env, std::string *problem_out) {
    std::optional<std::string> text = value(env, Id::kUnwinder);
    const char *v = text ? text->c_str() : nullptr;
    if (!v) return "";
    for (const char *u : kUnwinders)
        if (!strcmp(v, u)) return v;
    const Row &r = row(Id::kUnwinder);
    *problem_out = message(r, v, problem(r.id, v), r.when_bad);
    return "";
}

LimitSetting read_limit(const Lookup &env) {
    LimitSetting s;
    // Spaces around a value are not part of it (spaces_problem says so); any other byte is the
    // parser's to judge, which refuses a control character anywhere.
    auto trim = [](const char *v) {
        std::string t = v;
        size_t b = t.find_first_not_of(' '), e = t.find_last_not_of(' ');
        return b == std::string::npos ? std::string() : t.substr(b, e - b + 1);
    };
    if (const char *v = env("GPUGUARD_MEM_LIMIT")) {  // set but empty is a mistake, not "no limit"
        s.text = trim(v);
        s.source = "GPUGUARD_MEM_LIMIT";
        s.set_but_empty = s.text.empty();
        return s;
    }
    // HAMi-core's names, so that users can switch: the default, then the per-device entries.
    auto set = [&env, &trim](const std::string &name) -> std::string {
        const char *v = env(name.c_str());
        return v ? trim(v) : "";
    };
    std::string all = set("CUDA_DEVICE_MEMORY_LIMIT"), per;
    for (int i = 0; i < 64; i++) {
        std::string v = set("CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(i));
        if (!v.empty()) per += (per.empty() ? "" : ",") + std::to_string(i) + "=" + v;
    }
    s.text = all.empty() ? per : per.empty() ? all : all + "," + per;
    if (!s.text.empty()) s.source = all.empty() ? "CUDA_DEVICE_MEMORY_LIMIT_<i>" : "CUDA_DEVICE_MEMORY_LIMIT";
    return s;
}

LimitSetting limit_option(const std::string &option, const std::string &text) {
    LimitSetting s;
    s.text = text;
    s.source = option;
    s.set_but_empty = text.empty();
    s.origin = LimitSetting::kOption;
    return s;
}

LimitSetting ledger_limit(const std::string &text) {
    LimitSetting s;
    s.text = text;  // empty: the ledger's creator gave none
    s.source = "the ledger's limit";
    s.origin = LimitSetting::kLedger;
    return s;
}

std::string limit_problem(const std::string &text, LimitSpec *spec) {
    std::string why;
    return parse_limit_spec(text, spec, &why) ? "" : "not a valid limit: " + why;
}

CheckedLimit check_limit(const LimitSetting &setting) {
    CheckedLimit c;
    c.setting = setting;
    const std::string &text = setting.text, &source = setting.source;
    if (setting.set_but_empty) {
        c.problem = setting.origin == LimitSetting::kOption ? source + " is empty (leave it out for no limit)"
                                                            : source + " is set but empty (unset it for no limit)";
        return c;
    }
    if (text.empty()) return c;
    std::string problem = limit_problem(text, &c.spec);
    if (problem.empty()) {
        c.note = si_spelling_note(text);
        return c;
    }
    std::string named = setting.origin == LimitSetting::kVariable ? source + "=" + text
                        : setting.origin == LimitSetting::kOption ? source + " " + text
                                                                  : source + " '" + text + "'";
    c.problem = named + " is " + problem;
    return c;
}

bool is_per_process_ledger(const std::string &v) {
    return !strcasecmp(v.c_str(), "none") || !strcasecmp(v.c_str(), "off") || !strcasecmp(v.c_str(), "process");
}

// Where the ledger is when GPUGUARD_LEDGER is not set: the container's private /dev/shm, one per
// user id (outside a container that makes it per user), or /tmp when /dev/shm is missing.
std::string default_ledger_path() {
    struct stat st;
    const char *dir =
        (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0) ? "/dev/shm" : "/tmp";
    return std::string(dir) + "/gpuguard-" + std::to_string(getuid()) + ".ledger";
}

std::string read_ledger_path(const Lookup &env, std::string *problem_out) {
    std::optional<std::string> text = value(env, Id::kLedger);
    const char *name = row(Id::kLedger).name;
    if (!text) {  // HAMi-core's name
        const char *alias = env("CUDA_DEVICE_MEMORY_SHARED_CACHE");
        std::string a = alias ? alias : "";
        size_t b = a.find_first_not_of(' '), e = a.find_last_not_of(' ');
        if (b != std::string::npos) text = a.substr(b, e - b + 1), name = "CUDA_DEVICE_MEMORY_SHARED_CACHE";
    }
    if (!text) return default_ledger_path();
    if (is_per_process_ledger(*text)) return "";
    if (problem_out && (*text)[0] != '/') *problem_out = std::string(name) + "=" + *text + " is " + kRelativeLedger;
    return *text;
}

int read_ledger_group(const Lookup &env, std::string *problem_out) {
    std::optional<std::string> text = value(env, Id::kLedgerGroup);
    const char *v = text ? text->c_str() : nullptr;
    if (!v) return -1;
    long gid = group_id(v);
    if (gid < 0)
        *problem_out = message(row(Id::kLedgerGroup), v, problem(Id::kLedgerGroup, v), row(Id::kLedgerGroup).when_bad);
    return (int)gid;
}

}  // namespace gg::settings
