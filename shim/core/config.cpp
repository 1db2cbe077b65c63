#include "shim/core/config.h"

#include <atomic>

#include "common/base/log.h"
#include "shim/base/race_once.h"

namespace gg {
namespace {

using settings::Id;

// Keeps the problem a reader found, if any.
void note(Config &c, std::string &problem) {
    if (!problem.empty()) c.problems.push_back(problem);
    problem.clear();
}

// A malformed limit fails closed: a typo is seen at once instead of a run going unlimited.
void load_limit(const settings::Lookup &env, Config &c) {
    settings::CheckedLimit l = settings::check_limit(settings::read_limit(env));
    c.limit_source = l.setting.source;
    c.limit_text = l.setting.text;
    c.limit = l.spec;
    if (!l.ok()) {
        c.problems.push_back(l.problem + "; " + settings::row(Id::kMemLimit).when_bad);
        c.fail_closed = true;
    }
}

}  // namespace

Config parse_config(const settings::Lookup &env) {
    Config c;
    std::string problem;
    c.debug = debug_enabled();
    // Spaces around a value ('none ' made a file named so): read without them, and said once.
    for (const settings::Row &r : settings::rows()) {
        const char *raw = env(r.name);
        std::string spaces = raw ? settings::spaces_problem(raw) : "";
        if (!spaces.empty()) c.problems.push_back(std::string(r.name) + "='" + raw + "' " + spaces);
    }
    load_limit(env, c);
    c.ledger_path = settings::read_ledger_path(env, &problem);
    note(c, problem);
    c.ledger_group = settings::read_ledger_group(env, &problem);
    note(c, problem);
    if (std::optional<std::string> v = settings::value(env, Id::kReportDir)) c.report_dir = *v;
    c.max_reports = (int)settings::read_count(env, Id::kMaxReports, &problem);
    note(c, problem);
    c.top_n = (int)settings::read_count(env, Id::kTopN, &problem);
    note(c, problem);
    c.report_on_exit = settings::read_switch(env, Id::kReportOnExit, &problem);
    note(c, problem);
    c.report_signal = settings::read_signal(env, Id::kReportSignal, &problem);
    note(c, problem);
    c.warn_at = settings::read_fraction(env, Id::kWarnAt, &problem);
    note(c, problem);
    c.stack_depth = (int)settings::read_count(env, Id::kStackDepth, &problem);
    note(c, problem);
    c.stack_min_bytes = settings::read_size(env, Id::kStackMinBytes, &problem);
    note(c, problem);
    c.python_stacks = settings::read_switch(env, Id::kPythonStacks, &problem);
    note(c, problem);
    c.stack_reuse = settings::read_switch(env, Id::kStackReuse, &problem);
    note(c, problem);
    c.tensor_view = settings::read_switch(env, Id::kTensorView, &problem);
    note(c, problem);
    c.tensor_events = (size_t)settings::read_count(env, Id::kTensorEvents, &problem);
    note(c, problem);
    c.count_mode = settings::read_count_mode(env, &problem);
    note(c, problem);
    c.cudnn_cap = settings::read_cudnn_cap(env, &problem);
    note(c, problem);
    if (std::optional<std::string> v = settings::value(env, Id::kRealLibcuda)) c.real_libcuda = *v;
    return c;
}

const Config &config() {
    // Never destroyed: the report thread and hooks still read it while exit() runs the static
    // destructors (a destroyed Config was read by a signal report during exit: found by the soak).
    // Not a C++ static: a fork() in another thread while it is made would leave the child waiting on
    // its guard forever (shim/start/start.cpp builds again in such a child); see shim/base/race_once.h.
    static std::atomic<const Config *> c{nullptr};
    const Config &made = race_once(c, [] { return parse_config(settings::process_env()); });
    static std::atomic<bool> said{false};
    if (!said.load(std::memory_order_relaxed) && !said.exchange(true))
        for (const std::string &p : made.problems) log_error("%s", p.c_str());
    return made;
}

}  // namespace gg
