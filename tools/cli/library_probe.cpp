#include "tools/cli/library_probe.h"

#include <sys/wait.h>
#include <unistd.h>
#include <climits>
#include <sstream>

#include "common/settings/settings.h"
#include "tools/cli/preload.h"
#include "tools/cli/process.h"

namespace gg::tool {
namespace {

std::string field(const std::string &out, const std::string &key) {
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line))
        if (line.compare(0, key.size() + 1, key + " ") == 0) return line.substr(key.size() + 1);
    return "";
}

std::string trim(const std::string &s) {
    size_t b = s.find_first_not_of(" \n\t"), e = s.find_last_not_of(" \n\t");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

ProbeVerdict probe_library_as_preload(const std::string &lib, LibraryProbe *probe, std::string *why) {
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        *why = lib + ": cannot check that it loads (/proc/self/exe unreadable)";
        return ProbeVerdict::kUnchecked;
    }
    self[n] = '\0';
    std::vector<std::string> env = environment_with("LD_PRELOAD", preload_with(lib, settings::env("LD_PRELOAD")));
    Finished f;
    std::string started;
    if (!run_captured({self, "doctor", "--probe-library", lib}, &env, 30, true, &f, &started)) {
        *why = lib + ": cannot check that it loads: " + started;
        return ProbeVerdict::kUnchecked;
    }
    probe->out = f.out;
    probe->preloaded = field(f.out, "preloaded");
    probe->dlopen = field(f.out, "dlopen");
    probe->shim = field(f.out, "shim");
    probe->unwind_beside = field(f.out, "unwind beside");
    probe->unwind_system = field(f.out, "unwind system");
    if (!WIFEXITED(f.status) || WEXITSTATUS(f.status) != 0) {
        *why = lib + ": a program preloading it " + describe_status(f.status);
        return ProbeVerdict::kNotShim;
    }
    if (probe->preloaded != "1" || probe->dlopen != "ok") {
        std::string dl = probe->dlopen;
        *why = lib + " does not load: " + (dl.empty() || dl == "ok" ? trim(f.out) : dl);
        return ProbeVerdict::kNotShim;
    }
    if (probe->shim != "1") {
        *why = lib + " is not gpuguard's library (it does not export gpuguard_report)";
        return ProbeVerdict::kNotShim;
    }
    return ProbeVerdict::kShim;
}

}  // namespace gg::tool
