#include "tools/cli/settings.h"

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ledger/ledger.h"
#include "common/units/size_spec.h"

extern char **environ;

namespace gg::tool {
namespace {

// As shim/core/config.cpp: an empty variable is an unset one (GPUGUARD_MEM_LIMIT excepted).
const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : nullptr;
}

std::string dirname_of(const std::string &path) {
    size_t slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

bool is_file(const std::string &path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string check_int(const std::string &v, long lo, long hi) {
    char *end = nullptr;
    long n = strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < lo || n > hi)
        return "not a whole number from " + std::to_string(lo) + " to " + std::to_string(hi);
    return "";
}

std::string check_bool(const std::string &v) {
    static const char *const ok[] = {"1", "0", "true", "false", "yes", "no", "on", "off"};
    for (const char *o : ok)
        if (!strcasecmp(v.c_str(), o)) return "";
    return "not 0 or 1";
}

std::string check_signal(const std::string &text) {
    std::string v = strncasecmp(text.c_str(), "SIG", 3) ? text : text.substr(3);
    static const char *const names[] = {"USR1", "USR2", "HUP", "QUIT", "PWR"};
    for (const char *n : names)
        if (!strcasecmp(v.c_str(), n)) return "";
    char *end = nullptr;
    long n = strtol(v.c_str(), &end, 10);
    if (!v.empty() && *end == '\0' && n >= SIGRTMIN && n <= SIGRTMAX) return "";
    return "not a signal the shim accepts (USR1, USR2, HUP, QUIT, PWR or a real-time signal number)";
}

std::string check_fraction(const std::string &v) {
    char *end = nullptr;
    double f = strtod(v.c_str(), &end);
    if (*end == '%') f /= 100, end++;
    if (v.empty() || *end != '\0' || !(f > 0) || f > 1) return "not a fraction of the limit like 0.9 or 90%";
    return "";
}

std::string check_limit_spec(const std::string &v) {
    if (v.empty()) return "set but empty: the shim refuses every device allocation (unset it for no limit)";
    LimitSpec spec;
    std::string why;
    return parse_limit_spec(v, &spec, &why) ? "" : "not a valid limit: " + why + " (the shim refuses every allocation)";
}

std::string check_group(const std::string &v) {
    char *end = nullptr;
    long gid = strtol(v.c_str(), &end, 10);
    if (!v.empty() && *end == '\0' && gid >= 0 && gid <= INT_MAX) return "";
    return getgrnam(v.c_str()) ? "" : "not a group on this system (the ledger stays mode 0600)";
}

std::string check_size(const std::string &v) {
    uint64_t b;
    std::string why;
    return parse_size(v, &b, &why) ? "" : "not a size: " + why;
}

// Every variable either side reads, with its check ("" = anything goes).
struct Known {
    const char *name;
    std::string (*check)(const std::string &);
};
const Known kKnown[] = {
    {"GPUGUARD_MEM_LIMIT", check_limit_spec},
    {"GPUGUARD_LEDGER", nullptr},
    {"GPUGUARD_LEDGER_GROUP", check_group},
    {"GPUGUARD_REPORT_DIR", nullptr},
    {"GPUGUARD_MAX_REPORTS", [](const std::string &v) { return check_int(v, 0, 100000); }},
    {"GPUGUARD_TOP_N", [](const std::string &v) { return check_int(v, 0, 100000); }},
    {"GPUGUARD_REPORT_ON_EXIT", check_bool},
    {"GPUGUARD_REPORT_SIGNAL", check_signal},
    {"GPUGUARD_WARN_AT", check_fraction},
    {"GPUGUARD_STACK_DEPTH", [](const std::string &v) { return check_int(v, 0, 128); }},
    {"GPUGUARD_STACK_MIN_BYTES", check_size},
    {"GPUGUARD_PYTHON_STACKS", check_bool},
    {"GPUGUARD_STACK_REUSE", check_bool},
    {"GPUGUARD_CUDNN_WORKSPACE_LIMIT",
     [](const std::string &v) {
         std::string why;
         return valid_cudnn_workspace(v, &why) ? std::string() : why;
     }},
    {"GPUGUARD_REAL_LIBCUDA",
     [](const std::string &v) {
         // A name without a slash is looked up by the loader, as dlopen would.
         return v.find('/') == std::string::npos || is_file(v) ? std::string()
                                                                : "no such file (the shim falls back to libcuda.so.1)";
     }},
    {"GPUGUARD_DEBUG", nullptr},
    {"GPUGUARD_UNWINDER",
     [](const std::string &v) {
         return v == "libunwind" || v == "libgcc" || v == "none" ? std::string() : "not libunwind, libgcc or none";
     }},
    {"GPUGUARD_LIBRARY", [](const std::string &v) { return is_file(v) ? std::string() : "no such file"; }},
    {"CUDA_DEVICE_MEMORY_SHARED_CACHE", nullptr},
};

}  // namespace

LimitSetting limit_from_env() {
    LimitSetting s;
    if (const char *v = getenv("GPUGUARD_MEM_LIMIT")) {
        s.text = v;
        s.source = "GPUGUARD_MEM_LIMIT";
        s.set_but_empty = !*v;
        return s;
    }
    // HAMi-core's names, folded exactly as the shim folds them: the default, then per-device entries.
    std::string all = env("CUDA_DEVICE_MEMORY_LIMIT") ? env("CUDA_DEVICE_MEMORY_LIMIT") : "";
    std::string per;
    for (int i = 0; i < 64; i++) {
        std::string name = "CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(i);
        if (const char *v = env(name.c_str())) per += (per.empty() ? "" : ",") + std::to_string(i) + "=" + v;
    }
    s.text = all.empty() ? per : per.empty() ? all : all + "," + per;
    if (!s.text.empty()) s.source = all.empty() ? "CUDA_DEVICE_MEMORY_LIMIT_<i>" : "CUDA_DEVICE_MEMORY_LIMIT";
    return s;
}

bool is_per_process_ledger(const std::string &v) {
    return !strcasecmp(v.c_str(), "none") || !strcasecmp(v.c_str(), "off") || !strcasecmp(v.c_str(), "process");
}

std::string ledger_path_from_env() {
    const char *v = env("GPUGUARD_LEDGER");
    if (!v) v = env("CUDA_DEVICE_MEMORY_SHARED_CACHE");
    if (!v) return ledger::default_path();
    return is_per_process_ledger(v) ? "" : v;
}

bool ledger_group_from_env(int *gid, std::string *why) {
    *gid = -1;
    const char *g = env("GPUGUARD_LEDGER_GROUP");
    if (!g) return true;
    char *end = nullptr;
    long n = strtol(g, &end, 10);
    if (*end == '\0' && n >= 0 && n <= INT_MAX) {  // as the shim: never wrapped onto another group
        *gid = (int)n;
        return true;
    }
    if (struct group *gr = getgrnam(g)) {
        *gid = (int)gr->gr_gid;
        return true;
    }
    *why = std::string("GPUGUARD_LEDGER_GROUP=") + g + " is not a group";
    return false;
}

std::string absolute_path(const std::string &path) {
    if (path.empty() || path[0] == '/') return path;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return path;
    std::string p = path;
    while (p.compare(0, 2, "./") == 0) p = p.substr(2);
    return p == "." ? std::string(cwd) : std::string(cwd) + "/" + p;
}

std::string find_library(std::string *why) {
    if (const char *v = env("GPUGUARD_LIBRARY")) {
        if (is_file(v)) return absolute_path(v);
        *why = std::string("GPUGUARD_LIBRARY=") + v + ": no such file";
        return "";
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        *why = "cannot find libgpuguard.so: /proc/self/exe is unreadable; set GPUGUARD_LIBRARY";
        return "";
    }
    exe[n] = '\0';
    std::string bin = dirname_of(exe);
    std::string beside = bin + "/libgpuguard.so", lib = dirname_of(bin) + "/lib/libgpuguard.so";
    if (is_file(beside)) return beside;
    if (is_file(lib)) return lib;
    *why = "cannot find libgpuguard.so (looked at " + beside + " and " + lib + "); set GPUGUARD_LIBRARY to its path";
    return "";
}

std::string preload_with(const std::string &lib, const char *existing) {
    std::string out = lib;
    if (!existing) return out;
    // ld.so separates LD_PRELOAD entries with spaces or colons.
    std::string cur;
    auto flush = [&] {
        if (cur.empty()) return;
        size_t slash = cur.rfind('/');
        std::string base = slash == std::string::npos ? cur : cur.substr(slash + 1);
        if (base != "libgpuguard.so") out += ":" + cur;
        cur.clear();
    };
    for (const char *p = existing; *p; p++) {
        if (*p == ' ' || *p == ':' || *p == '\t')
            flush();
        else
            cur += *p;
    }
    flush();
    return out;
}

bool make_dirs(const std::string &dir, std::string *why) {
    if (dir.empty()) return true;
    struct stat st;
    if (stat(dir.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) return true;
        *why = "cannot create " + dir + ": it exists and is not a folder";
        return false;
    }
    std::string parent = dirname_of(dir);
    if (parent != dir && !make_dirs(parent, why)) return false;
    if (mkdir(dir.c_str(), 0775) != 0 && errno != EEXIST) {
        *why = "cannot create " + dir + ": " + strerror(errno);
        return false;
    }
    return true;
}

bool dir_writable(const std::string &dir, std::string *why) {
    struct stat st;
    if (stat(dir.c_str(), &st) != 0) {
        *why = dir + ": " + strerror(errno);
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        *why = dir + " is not a folder";
        return false;
    }
    std::string probe = dir + "/.gpuguard-probe." + std::to_string(getpid());
    int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        *why = "cannot create a file in " + dir + ": " + strerror(errno);
        return false;
    }
    close(fd);
    unlink(probe.c_str());
    return true;
}

bool valid_cudnn_workspace(const std::string &v, std::string *why) {
    if (!strcasecmp(v.c_str(), "auto") || !strcasecmp(v.c_str(), "off") || !strcasecmp(v.c_str(), "none")) return true;
    uint64_t b;
    std::string reason;
    if (parse_size(v, &b, &reason)) return true;
    *why = "not a size, 'auto' or 'off' (" + reason + ")";
    return false;
}

std::vector<Variable> variables_in_effect() {
    std::vector<Variable> out;
    bool gpuguard_limit = getenv("GPUGUARD_MEM_LIMIT") != nullptr;
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        Variable v;
        v.name.assign(*e, eq - *e);
        v.value = eq + 1;
        bool ours = v.name.compare(0, 9, "GPUGUARD_") == 0;
        bool hami = v.name.compare(0, 19, "CUDA_DEVICE_MEMORY_") == 0;
        if (!ours && !hami) continue;
        v.known = false;
        for (const Known &k : kKnown) {
            if (v.name != k.name) continue;
            v.known = true;
            // As in the shim, an empty variable is an unset one, except the limit.
            if (k.check && (!v.value.empty() || v.name == "GPUGUARD_MEM_LIMIT")) v.problem = k.check(v.value);
        }
        if (v.name == "CUDA_DEVICE_MEMORY_LIMIT" || v.name.compare(0, 25, "CUDA_DEVICE_MEMORY_LIMIT_") == 0) {
            v.known = v.name == "CUDA_DEVICE_MEMORY_LIMIT" || check_int(v.name.substr(25), 0, 63).empty();
            Limit l;
            std::string why;
            if (v.known && !v.value.empty() && !parse_limit(v.value, &l, &why)) v.problem = "not a valid limit: " + why;
            else if (v.known && gpuguard_limit) v.problem = "ignored: GPUGUARD_MEM_LIMIT is set and wins", v.warning = true;
        }
        if (!v.known) v.problem = "not a variable gpuguard reads (a typo?)", v.warning = true;
        out.push_back(std::move(v));
    }
    return out;
}

}  // namespace gg::tool
