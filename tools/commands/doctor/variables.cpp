// Every GPUGUARD_* (and HAMi-core) variable in effect, checked by the table of settings
// (common/settings/settings.def): the same rules the shim reads them by.
#include <unistd.h>

#include <cstring>

#include "common/settings/settings.h"
#include "common/units/size_spec.h"
#include "tools/commands/doctor/checks.h"

extern char **environ;

namespace gg::doctor {
namespace {

using settings::Id;

// One variable as set now, with what is wrong with it ("" when nothing is).
struct Variable {
    std::string name, value, problem;
    bool warning = false;  // worth saying but breaks nothing (an alias that loses, a typo)
};

// HAMi-core's CUDA_DEVICE_MEMORY_LIMIT and CUDA_DEVICE_MEMORY_LIMIT_<i> (i from 0 to 63): each value
// is one limit; GPUGUARD_MEM_LIMIT wins over them.
bool hami_limit(Variable &v, bool gpuguard_limit) {
    bool all = v.name == "CUDA_DEVICE_MEMORY_LIMIT";
    if (!all && v.name.compare(0, 25, "CUDA_DEVICE_MEMORY_LIMIT_") != 0) return false;
    if (!all) {
        std::string index = v.name.substr(25);
        char *end = nullptr;
        long i = strtol(index.c_str(), &end, 10);
        if (index.empty() || *end || i < 0 || i > 63) return false;
    }
    Limit l;
    std::string why;
    if (!v.value.empty() && !parse_limit(v.value, &l, &why)) v.problem = "not a valid limit: " + why;
    else if (gpuguard_limit) v.problem = "ignored: GPUGUARD_MEM_LIMIT is set and wins", v.warning = true;
    return true;
}

std::vector<Variable> variables_in_effect() {
    std::vector<Variable> out;
    bool gpuguard_limit = settings::env("GPUGUARD_MEM_LIMIT") != nullptr;
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        Variable v;
        v.name.assign(*e, eq - *e);
        v.value = eq + 1;
        bool ours = v.name.compare(0, 9, "GPUGUARD_") == 0;
        bool hami = v.name.compare(0, 19, "CUDA_DEVICE_MEMORY_") == 0;
        if (!ours && !hami) continue;
        if (const settings::Row *r = settings::find(v.name)) {
            // As in the shim, an empty variable is an unset one, except the limit.
            if (!v.value.empty() || r->id == Id::kMemLimit) v.problem = settings::problem(r->id, v.value);
            if (!v.problem.empty() && r->type == settings::Type::kLimit)
                v.problem += " (the shim refuses every allocation)";
        } else if (!hami_limit(v, gpuguard_limit) && v.name != "CUDA_DEVICE_MEMORY_SHARED_CACHE") {
            v.problem = "not a variable gpuguard reads (a typo?)", v.warning = true;
        }
        out.push_back(std::move(v));
    }
    return out;
}

}  // namespace

void check_variables(Checks &c) {
    std::vector<Variable> vars = variables_in_effect();
    if (vars.empty()) {
        c.line(kInfo, "variables", "no GPUGUARD_* variable set: the defaults apply");
        return;
    }
    for (const auto &v : vars) {
        std::string t = v.name + "=" + v.value;
        if (v.problem.empty()) c.line(kOk, "variable", t);
        else if (v.warning) c.line(kWarn, "variable", t + ": " + v.problem);
        else c.line(kFail, "variable", t + ": " + v.problem, "correct or unset " + v.name);
    }
}

}  // namespace gg::doctor
