#include "shim/core/config.h"

#include <atomic>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <grp.h>

#include "common/ledger/ledger.h"
#include "common/base/log.h"
#include "shim/base/race_once.h"

namespace gg {
namespace {

// An empty variable is an unset one (GPUGUARD_MEM_LIMIT excepted: see load_limit).
const char *env(const EnvLookup &getenv, const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : nullptr;
}

// An integer variable within [lo, hi]; a bad value keeps the default and says so.
int env_int(const EnvLookup &getenv, const char *name, int def, int lo, int hi) {
    const char *v = env(getenv, name);
    if (!v) return def;
    char *end = nullptr;
    long n = strtol(v, &end, 10);
    if (*end != '\0' || n < lo || n > hi) {
        log_error("%s=%s is not a whole number from %d to %d; using %d", name, v, lo, hi, def);
        return def;
    }
    return (int)n;
}

bool env_bool(const EnvLookup &getenv, const char *name, bool def) {
    const char *v = env(getenv, name);
    if (!v) return def;
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on")) return true;
    if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off")) return false;
    log_error("%s=%s is not 0 or 1; using %d", name, v, def ? 1 : 0);
    return def;
}

int signal_number(const char *v) {
    if (!strncasecmp(v, "SIG", 3)) v += 3;
    static const struct { const char *name; int sig; } known[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP},
                                                                  {"QUIT", SIGQUIT}, {"PWR", SIGPWR}};
    for (const auto &k : known)
        if (!strcasecmp(v, k.name)) return k.sig;
    char *end = nullptr;
    long n = strtol(v, &end, 10);
    if (*end == '\0' && n >= SIGRTMIN && n <= SIGRTMAX) return (int)n;
    return 0;
}

// HAMi-core's per-device variables, CUDA_DEVICE_MEMORY_LIMIT_<i>, folded into one spec text.
std::string hami_per_device_limits(const EnvLookup &getenv) {
    std::string spec;
    for (int i = 0; i < 64; i++) {
        std::string name = "CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(i);
        if (const char *v = env(getenv, name.c_str())) spec += (spec.empty() ? "" : ",") + std::to_string(i) + "=" + v;
    }
    return spec;
}

void load_limit(const EnvLookup &getenv, Config &c) {
    std::string text, source;
    if (const char *v = getenv("GPUGUARD_MEM_LIMIT")) {
        text = v;
        source = "GPUGUARD_MEM_LIMIT";
    } else {
        // HAMi-core's names, so that users can switch; GPUGUARD_MEM_LIMIT wins when both are set.
        std::string all = env(getenv, "CUDA_DEVICE_MEMORY_LIMIT") ? env(getenv, "CUDA_DEVICE_MEMORY_LIMIT") : "";
        std::string per = hami_per_device_limits(getenv);
        text = all.empty() ? per : per.empty() ? all : all + "," + per;
        source = all.empty() && !per.empty() ? "CUDA_DEVICE_MEMORY_LIMIT_<i>" : "CUDA_DEVICE_MEMORY_LIMIT";
    }
    if (text.empty()) {
        if (getenv("GPUGUARD_MEM_LIMIT")) {  // set but empty: a mistake, not "no limit"
            log_error("GPUGUARD_MEM_LIMIT is set but empty; refusing every device allocation (unset it for no limit)");
            c.fail_closed = true;
            c.limit_source = source;
        }
        return;
    }
    std::string why;
    if (!parse_limit_spec(text, &c.limit, &why)) {
        log_error("%s=%s is not a valid limit: %s; refusing every device allocation until it is fixed", source.c_str(),
                  text.c_str(), why.c_str());
        c.fail_closed = true;
    }
    c.limit_text = text;
    c.limit_source = source;
}

void load_ledger(const EnvLookup &getenv, Config &c) {
    const char *v = env(getenv, "GPUGUARD_LEDGER");
    if (!v) v = env(getenv, "CUDA_DEVICE_MEMORY_SHARED_CACHE");  // HAMi-core's name
    if (!v) {
        c.ledger_path = ledger::default_path();
    } else if (!strcasecmp(v, "none") || !strcasecmp(v, "off") || !strcasecmp(v, "process")) {
        c.ledger_path.clear();
    } else {
        c.ledger_path = v;
    }
    if (const char *g = env(getenv, "GPUGUARD_LEDGER_GROUP")) {
        char *end = nullptr;
        long gid = strtol(g, &end, 10);
        // Past INT_MAX the cast would wrap onto another group (4294967296 -> 0, root's): refused.
        if (*end == '\0' && gid >= 0 && gid <= INT_MAX) {
            c.ledger_group = (int)gid;
        } else if (struct group *gr = getgrnam(g)) {
            c.ledger_group = (int)gr->gr_gid;
        } else {
            log_error("GPUGUARD_LEDGER_GROUP=%s is not a group; the ledger stays private to its user (mode 0600)", g);
        }
    }
}

void load_cudnn_cap(const EnvLookup &getenv, Config &c) {
    const char *v = env(getenv, "GPUGUARD_CUDNN_WORKSPACE_LIMIT");
    if (!v || !strcasecmp(v, "auto")) {
        c.cudnn_cap = Config::kCapAuto;
        return;
    }
    if (!strcasecmp(v, "off") || !strcasecmp(v, "none")) {
        c.cudnn_cap = Config::kCapOff;
        return;
    }
    std::string why;
    if (parse_size(v, &c.cudnn_cap_bytes, &why)) {
        c.cudnn_cap = Config::kCapBytes;
    } else {
        log_error("GPUGUARD_CUDNN_WORKSPACE_LIMIT=%s is not a size, 'auto' or 'off' (%s); using auto", v, why.c_str());
    }
}

}  // namespace

Config parse_config(const EnvLookup &getenv) {
    Config c;
    c.debug = debug_enabled();
    load_limit(getenv, c);
    load_ledger(getenv, c);
    if (const char *v = env(getenv, "GPUGUARD_REPORT_DIR")) c.report_dir = v;
    c.max_reports = env_int(getenv, "GPUGUARD_MAX_REPORTS", 8, 0, 100000);
    c.top_n = env_int(getenv, "GPUGUARD_TOP_N", 20, 0, 100000);
    c.report_on_exit = env_bool(getenv, "GPUGUARD_REPORT_ON_EXIT", false);
    if (const char *v = env(getenv, "GPUGUARD_REPORT_SIGNAL")) {
        c.report_signal = signal_number(v);
        if (!c.report_signal) log_error("GPUGUARD_REPORT_SIGNAL=%s is not a signal (try USR2); no handler installed", v);
    }
    if (const char *v = env(getenv, "GPUGUARD_WARN_AT")) {
        char *end = nullptr;
        double f = strtod(v, &end);
        if (*end == '%') f /= 100, end++;
        if (*end != '\0' || !(f > 0) || f > 1)
            log_error("GPUGUARD_WARN_AT=%s is not a fraction of the limit like 0.9 or 90%%; no warning report", v);
        else
            c.warn_at = f;
    }
    c.stack_depth = env_int(getenv, "GPUGUARD_STACK_DEPTH", 48, 0, 128);
    if (const char *v = env(getenv, "GPUGUARD_STACK_MIN_BYTES")) {
        std::string why;
        if (!parse_size(v, &c.stack_min_bytes, &why))
            log_error("GPUGUARD_STACK_MIN_BYTES=%s is not a size (%s); stacks are captured for every allocation", v,
                      why.c_str());
    }
    c.python_stacks = env_bool(getenv, "GPUGUARD_PYTHON_STACKS", true);
    c.stack_reuse = env_bool(getenv, "GPUGUARD_STACK_REUSE", true);
    load_cudnn_cap(getenv, c);
    if (const char *v = env(getenv, "GPUGUARD_REAL_LIBCUDA")) c.real_libcuda = v;
    return c;
}

Config load_config() {
    return parse_config([](const char *name) -> const char * { return ::getenv(name); });
}

const Config &config() {
    // Never destroyed: the report thread and hooks still read it while exit() runs the static
    // destructors (a destroyed Config was read by a signal report during exit: found by the soak).
    // Not a C++ static: a fork() in another thread while it is made would leave the child waiting on
    // its guard forever (shim/core/state.cpp builds again in such a child); see shim/base/race_once.h.
    static std::atomic<const Config *> c{nullptr};
    return race_once(c, load_config);
}

}  // namespace gg
