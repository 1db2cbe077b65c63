// The limit as the shim will resolve it per GPU, the ledger, and the report folder.
#include <sys/stat.h>
#include <unistd.h>

#include <memory>

#include "common/ledger/ledger.h"
#include "common/settings/settings.h"
#include "common/units/human.h"
#include "common/units/size_spec.h"
#include "tools/cli/files.h"
#include "tools/commands/doctor/checks.h"

namespace gg::doctor {

namespace {

// The limit of the environment, resolved for each GPU here.
void check_limit(Checks &c, const std::vector<Gpu> &gpus, const settings::CheckedLimit &l) {
    const settings::LimitSetting &s = l.setting;
    const gg::LimitSpec &spec = l.spec;
    if (!l.ok()) {
        c.line(kFail, "limit", l.problem + "; every device allocation is refused",
               "set it to a size like 8GiB or a share like 50%, or unset it for no limit");
    } else if (s.text.empty()) {
        c.line(kInfo, "limit",
               "none set: allocations are tracked and reported but not limited "
               "(GPUGUARD_MEM_LIMIT or gpuguard run --limit sets one)");
    } else {
        std::string per;
        uint64_t smallest = UINT64_MAX;
        for (const Gpu &g : gpus) {
            gg::Limit l = spec.for_device(g.ordinal, g.uuid);
            uint64_t b = l.resolve(g.total);
            smallest = std::min(smallest, b);
            per += ", gpu " + std::to_string(g.ordinal) + ": " + (b == UINT64_MAX ? "none" : gg::human_bytes(b));
        }
        // An entry that selects no GPU here limits nothing (the shim says so too).
        std::vector<std::string> uuids;
        for (const Gpu &g : gpus) uuids.push_back(g.uuid);
        for (const std::string &e : gg::unmatched_entries(spec, uuids))
            c.line(kFail, "limit",
                   "the entry '" + e + "' of " + s.source + " selects no device of the " + std::to_string(gpus.size()) +
                       " here, so it limits nothing",
                   "use an ordinal from 0 or a UUID prefix of a GPU listed above");
        // A number without a unit is bytes: "8" is almost always a forgotten "GiB".
        if (smallest < (1u << 20))
            c.line(kWarn, "limit",
                   s.text + " from " + s.source + per + ": under 1 MiB, nothing will fit (a unit missing? 8GiB)");
        else c.line(kOk, "limit", s.text + " from " + s.source + per);
        if (!l.note.empty()) c.line(kInfo, "limit", l.note);
    }
}

// The shared ledger: where it is, whether it opens, its devices, and a limit of its own that stands
// over the environment's.
void check_ledger(Checks &c, const settings::CheckedLimit &limit) {
    const settings::LimitSetting &s = limit.setting;
    std::string why;
    std::string path = settings::read_ledger_path(settings::process_env());
    if (path.empty()) {
        c.line(kInfo, "ledger", "none (GPUGUARD_LEDGER=none): each process has its own quota");
        return;
    }
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) {
        std::string dir = path.substr(0, path.rfind('/') == std::string::npos ? 0 : path.rfind('/'));
        if (dir.empty()) dir = path.find('/') == 0 ? "/" : ".";
        if (gg::tool::dir_writable(dir, &why))
            c.line(kOk, "ledger", path + " not created yet (gpuguard run or the first guarded process creates it)");
        else
            c.line(kFail, "ledger", path + " cannot be created: " + why,
                   "set GPUGUARD_LEDGER to a path in a writable folder shared by the container's processes");
        return;
    }
    gg::ledger::OpenOptions o;
    o.path = path;
    o.read_only = true;
    std::string error, notice;
    std::unique_ptr<gg::ledger::Ledger> l(gg::ledger::Ledger::open(o, &error, &notice));
    if (!l) {
        c.line(kFail, "ledger", error, "remove " + path + " once no process uses it (rm " + path + ")");
        return;
    }
    if (access(path.c_str(), R_OK | W_OK) != 0)
        c.line(kFail, "ledger", path + " is not writable by this user (uid " + std::to_string(getuid()) + ")",
               "run as its owner, share it with GPUGUARD_LEDGER_GROUP, or use another GPUGUARD_LEDGER");
    int alive = 0, dead = 0, reclaimed = 0;
    for (const auto &p : l->processes()) (p.alive ? alive : p.reclaimed ? reclaimed : dead)++;
    std::string theirs = l->limit_spec();
    c.line(kOk, "ledger",
           path + ": limit " + (theirs.empty() ? "none" : theirs) + ", " + std::to_string(l->devices().size()) +
               " device(s), processes " + std::to_string(alive) + " alive, " + std::to_string(dead) +
               " dead not yet reclaimed, " + std::to_string(reclaimed) + " reclaimed (gpuguard top shows them)");
    for (const auto &d : l->devices())
        c.line(kInfo, "  #" + std::to_string(d.index),
               d.name + " " + d.uuid + ": " + gg::human_bytes(d.used) + " used of " +
                   (d.limit == gg::ledger::kNoLimit ? std::string("no limit") : gg::human_bytes(d.limit)) + ", peak " +
                   gg::human_bytes(d.peak));
    if (limit.ok() && theirs != s.text && alive > 0)
        c.line(kWarn, "ledger",
               "its limit '" + (theirs.empty() ? std::string("none") : theirs) + "' stands while " +
                   std::to_string(alive) + " process(es) use it; this environment's '" +
                   (s.text.empty() ? std::string("none") : s.text) + "' applies once they have exited");
}

}  // namespace

void check_limit_and_ledger(Checks &c, const std::vector<Gpu> &gpus) {
    settings::CheckedLimit l = settings::check_limit(settings::read_limit(settings::process_env()));
    check_limit(c, gpus, l);
    check_ledger(c, l);
}

void check_reports(Checks &c) {
    std::optional<std::string> text = settings::value(settings::process_env(), settings::Id::kReportDir);
    const char *v = text ? text->c_str() : nullptr;
    std::string dir = v ? v : ".", why;
    std::string shown = v ? dir : "the working directory (" + gg::tool::absolute_path(".") + " here)";
    if (gg::tool::dir_writable(dir, &why)) c.line(kOk, "reports", shown + " is writable");
    else
        c.line(kFail, "reports", "reports cannot be written: " + why,
               "create it or mount a writable volume there (gpuguard run --report-dir creates it)");
}

}  // namespace gg::doctor
