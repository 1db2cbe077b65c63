// Fuzz target: every environment variable the shim and the command read. The input is an
// environment, one NAME=VALUE per line, given to the shim's parser (shim/core/config.cpp) through a
// lookup.
//
// Promises checked beyond "no crash, no undefined behaviour":
//   - a malformed or set-but-empty limit sets fail_closed, a good one never does (README: a typo is
//     seen at once instead of a run going unlimited);
//   - every number lands in its documented range, a bad value keeps the default;
//   - a numeric GPUGUARD_LEDGER_GROUP is that group or refused, never another one (a gid that
//     wrapped around int would share the ledger with a group nobody named);
//   - the shim complains about a variable exactly when `doctor`'s check of it (settings::problem)
//     finds a problem, so `doctor` flags whatever the shim will refuse or ignore (issue 18: spaces
//     around a value, a relative ledger path, a control byte in a limit, alike on both sides).
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "common/settings/settings.h"
#include "common/units/size_spec.h"
#include "fuzz_require.h"
#include "shim/core/config.h"

namespace {

// Spaces around a value are not part of it (documented: a line says so).
std::string trimmed(const std::string &v) {
    size_t b = v.find_first_not_of(' '), e = v.find_last_not_of(' ');
    return b == std::string::npos ? "" : v.substr(b, e - b + 1);
}

// The expected fail_closed, computed from the documented rules rather than from the code's helpers.
bool expect_fail_closed(const std::map<std::string, std::string> &env) {
    auto it = env.find("GPUGUARD_MEM_LIMIT");
    std::string text;
    if (it != env.end()) {
        if (trimmed(it->second).empty()) return true;
        text = trimmed(it->second);
    } else {
        auto set = [&](const std::string &n) {
            auto v = env.find(n);
            return v != env.end() ? trimmed(v->second) : std::string();
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

    // The shim's complaints and doctor's checks come from one table: each set variable of the table
    // that Config reads is complained about exactly when its check finds a problem.
    for (const gg::settings::Row &r : gg::settings::rows()) {
        auto it = env.find(r.name);
        if (it == env.end() || it->second.empty()) continue;  // unset (an empty limit: fail_closed above)
        // Not read by Config: the driver's path is tried by dlopen, the library by the command, the
        // unwinder by the stacks module.
        if (r.type == gg::settings::Type::kDriverPath || r.type == gg::settings::Type::kLibraryPath ||
            r.id == gg::settings::Id::kUnwinder)
            continue;
        bool complained = false;
        for (const std::string &p : c.problems)
            if (p.compare(0, strlen(r.name) + 1, std::string(r.name) + "=") == 0) complained = true;
        std::string problem = gg::settings::problem(r.id, it->second);
        // GPUGUARD_MEM_LIMIT wins over HAMi-core's names, so its check alone decides fail_closed;
        // spaces around it are a line of their own, not a malformed limit.
        if (r.id == gg::settings::Id::kMemLimit) {
            FUZZ_REQUIRE(gg::settings::problem(r.id, trimmed(it->second)).empty() == !c.fail_closed);
            if (!gg::settings::spaces_problem(it->second).empty()) FUZZ_REQUIRE(complained);
        } else {
            FUZZ_REQUIRE(problem.empty() == !complained);
        }
    }
    return 0;
}
