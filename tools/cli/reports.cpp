#include "tools/cli/reports.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace gg::tool {
namespace {

struct Found {
    std::string path;
    int64_t mtime_ns;
};

int64_t mtime_ns(const struct stat &st) { return (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec; }

bool is_report_name(const char *name) {
    size_t n = strlen(name);
    return strncmp(name, "gpuguard-", 9) == 0 && n > 14 && strcmp(name + n - 5, ".json") == 0;
}

}  // namespace

bool expand_reports(const std::vector<std::string> &args, std::vector<std::string> *files, std::string *why) {
    std::vector<Found> found;
    for (const std::string &a : args) {
        struct stat st;
        // Standard input, and a path that cannot be read (the reader names its problem), stay as given.
        if (a == "-" || stat(a.c_str(), &st) != 0) {
            found.push_back({a, 0});
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            found.push_back({a, mtime_ns(st)});
            continue;
        }
        DIR *d = opendir(a.c_str());
        if (!d) {
            *why = a + ": cannot read the folder: " + strerror(errno);
            return false;
        }
        size_t before = found.size();
        std::string dir = a.back() == '/' ? a : a + "/";
        while (dirent *e = readdir(d)) {
            struct stat fst;
            std::string path = dir + e->d_name;
            if (is_report_name(e->d_name) && stat(path.c_str(), &fst) == 0 && S_ISREG(fst.st_mode))
                found.push_back({path, mtime_ns(fst)});
        }
        closedir(d);
        if (found.size() == before) {
            *why = a + ": no report in this folder (reports are named gpuguard-*.json)";
            return false;
        }
    }
    std::stable_sort(found.begin(), found.end(), [](const Found &x, const Found &y) {
        return x.mtime_ns != y.mtime_ns ? x.mtime_ns < y.mtime_ns : x.path < y.path;
    });
    files->clear();
    for (Found &f : found) files->push_back(std::move(f.path));
    return true;
}

}  // namespace gg::tool
