#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cstdlib>

#include "tools/commands/doctor/checks.h"

namespace gg::doctor {

std::string version_text(int v) {  // 13000 -> "13.0"
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// Where a loaded library came from.
std::string where(void *handle) {
    struct link_map *map = nullptr;
    if (handle && dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) return map->l_name;
    return "?";
}

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
    return s;
}

std::string real_path(const std::string &p) {
    char buf[PATH_MAX];
    return realpath(p.c_str(), buf) ? std::string(buf) : p;
}

}  // namespace gg::doctor
