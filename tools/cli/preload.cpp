#include "tools/cli/preload.h"

#include <sys/stat.h>
#include <unistd.h>
#include <climits>

#include "common/settings/settings.h"
#include "tools/cli/files.h"

namespace gg::tool {
namespace {

bool is_file(const std::string &path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::string find_library(std::string *why) {
    if (std::optional<std::string> text = settings::value(settings::process_env(), settings::Id::kLibrary)) {
        const char *v = text->c_str();
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
    // Beside the command (a build, the wheel), PREFIX/lib (make install), PREFIX/lib/gpuguard (the .deb:
    // a folder of its own, where its libunwind.so.8 is no other program's).
    std::string beside = bin + "/libgpuguard.so", lib = dirname_of(bin) + "/lib/libgpuguard.so",
                own = dirname_of(bin) + "/lib/gpuguard/libgpuguard.so";
    for (const std::string *p : {&beside, &lib, &own})
        if (is_file(*p)) return *p;
    *why = "cannot find libgpuguard.so (looked at " + beside + ", " + lib + " and " + own +
           "); set GPUGUARD_LIBRARY to its path";
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
        if (*p == ' ' || *p == ':' || *p == '\t') flush();
        else cur += *p;
    }
    flush();
    return out;
}

}  // namespace gg::tool
