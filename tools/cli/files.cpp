#include "tools/cli/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <climits>
#include <cstring>

namespace gg::tool {
std::string dirname_of(const std::string &path) {
    size_t slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
}

std::string absolute_path(const std::string &path) {
    if (path.empty() || path[0] == '/') return path;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return path;
    std::string p = path;
    while (p.compare(0, 2, "./") == 0) p = p.substr(2);
    return p == "." ? std::string(cwd) : std::string(cwd) + "/" + p;
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

}  // namespace gg::tool
