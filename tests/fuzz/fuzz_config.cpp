// Fuzz target: every environment variable the shim and the command read. The input is an
// environment, one NAME=VALUE per line. The shim's parser (shim/core/config.cpp) sees it through a lookup;
// the command's (tools/cli/settings.cpp: `gpuguard run` and `doctor`) reads the real environment, so the
// gpuguard variables of the input are also set there for the duration of one run.
//
// Promises checked beyond "no crash, no undefined behaviour":
//   - a malformed or set-but-empty limit sets fail_closed, a good one never does (README: a typo is
//     seen at once instead of a run going unlimited);
//   - every number lands in its documented range, a bad value keeps the default;
//   - a numeric GPUGUARD_LEDGER_GROUP is that group or refused, never another one (a gid that
//     wrapped around int would share the ledger with a group nobody named);
//   - the command agrees with the shim on the limit, the ledger and the group, and `doctor` flags a
//     problem whenever the shim fails closed.
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "shim/core/config.h"
#include "tools/cli/settings.h"
#include "common/units/size_spec.h"
#include "fuzz_require.h"

extern char **environ;

namespace {

bool read_by_gpuguard(const std::string &name) {
    return name.compare(0, 9, "GPUGUARD_") == 0 || name.compare(0, 19, "CUDA_DEVICE_MEMORY_") == 0;
}

// Unsets every variable gpuguard reads, so that each run starts from the fuzzer's own environment
// without them (and a GPUGUARD_LEDGER of the shell that started the fuzzer changes nothing).
void clear_gpuguard_env() {
    std::vector<std::string> names;
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        std::string name = eq ? std::string(*e, size_t(eq - *e)) : std::string(*e);
        if (read_by_gpuguard(name)) names.push_back(name);
    }
    for (const std::string &n : names) unsetenv(n.c_str());
}

// The expected fail_closed, computed from the documented rules rather than from the code's helpers.
bool expect_fail_closed(const std::map<std::string, std::string> &env) {
    auto it = env.find("GPUGUARD_MEM_LIMIT");
    std::string text;
    if (it != env.end()) {
        if (it->second.empty()) return true;
        text = it->second;
    } else {
        auto set = [&](const std::string &n) {
            auto v = env.find(n);
            return v != env.end() && !v->second.empty() ? v->second : std::string();
        };
        text = set("CUDA_DEVICE_MEMORY_LIMIT");
        for (int i = 0; i < 64; i++) {
            std::string v = set("CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(i));
            if (!v.empty()) text += (text.empty() ? "" : ",") + std::to_string(i) + "=" + v;
        }
        if (text.empty()) return false;
    }
    gg::LimitSpec spec;
    std::string why;
    return !gg::parse_limit_spec(text, &spec, &why);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    clear_gpuguard_env();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // The environment cannot hold a NUL: a line ends at one, as getenv would see it.
    std::map<std::string, std::string> env;
    std::string text(reinterpret_cast<const char *>(data), size);
    for (size_t start = 0; start < text.size();) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(start, end - start);
        start = end + 1;
        line = line.substr(0, strnlen(line.c_str(), line.size()));
        size_t eq = line.find('=');
        if (eq == std::string::npos || eq == 0) continue;  // setenv refuses an empty name too
        env[line.substr(0, eq)] = line.substr(eq + 1);
    }

    gg::Config c = gg::parse_config([&](const char *name) -> const char * {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
    });

    FUZZ_REQUIRE(c.fail_closed == expect_fail_closed(env));
    if (!c.fail_closed && !c.limit_text.empty()) FUZZ_REQUIRE(!c.limit.empty());
    FUZZ_REQUIRE(c.max_reports >= 0 && c.max_reports <= 100000);
    FUZZ_REQUIRE(c.top_n >= 0 && c.top_n <= 100000);
    FUZZ_REQUIRE(c.stack_depth >= 0 && c.stack_depth <= 128);
    FUZZ_REQUIRE(c.warn_at >= 0 && c.warn_at <= 1);
    FUZZ_REQUIRE(c.report_signal == 0 || (c.report_signal > 0 && c.report_signal <= SIGRTMAX));
    FUZZ_REQUIRE(c.ledger_group >= -1);
    auto group = env.find("GPUGUARD_LEDGER_GROUP");
    if (group != env.end() && !group->second.empty() && c.ledger_group >= 0) {
        const std::string &g = group->second;
        char *end = nullptr;
        errno = 0;
        long long n = strtoll(g.c_str(), &end, 10);
        if (*end == '\0' && errno == 0) FUZZ_REQUIRE(n == c.ledger_group);
    }

    // The command's view of the same environment.
    for (const auto &[name, value] : env)
        if (read_by_gpuguard(name)) setenv(name.c_str(), value.c_str(), 1);
    gg::tool::LimitSetting limit = gg::tool::limit_from_env();
    FUZZ_REQUIRE(limit.text == c.limit_text);
    FUZZ_REQUIRE(limit.set_but_empty == (env.count("GPUGUARD_MEM_LIMIT") && env["GPUGUARD_MEM_LIMIT"].empty()));
    FUZZ_REQUIRE(gg::tool::ledger_path_from_env() == c.ledger_path);
    int gid = -2;
    std::string why;
    if (gg::tool::ledger_group_from_env(&gid, &why)) FUZZ_REQUIRE(gid == c.ledger_group);
    else FUZZ_REQUIRE(c.ledger_group == -1 && !why.empty());
    bool doctor_objects = false;
    for (const gg::tool::Variable &v : gg::tool::variables_in_effect())
        if (!v.problem.empty() && !v.warning) doctor_objects = true;
    if (c.fail_closed) FUZZ_REQUIRE(doctor_objects);
    std::string cudnn_why;
    if (const char *v = getenv("GPUGUARD_CUDNN_WORKSPACE_LIMIT"); v && *v)
        FUZZ_REQUIRE(gg::tool::valid_cudnn_workspace(v, &cudnn_why) == (c.cudnn_cap != gg::Config::kCapAuto || !strcasecmp(v, "auto")));
    clear_gpuguard_env();
    return 0;
}
