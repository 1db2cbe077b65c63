#include "shim/stacks/symbols.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <unistd.h>
#include <atomic>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "shim/base/race_once.h"

namespace gg::stacks::symbols {
namespace {

struct Module {
    uintptr_t lo = 0, hi = 0;  // span of its PT_LOAD segments
    uintptr_t base = 0;
    std::string path, build_id;
    bool self = false;
};

struct Symbol {
    int module;  // index into the module cache, -1 when no module holds the ip
    std::string name;
};

// One lock for both caches; held only for lookups and inserts, never across dl_iterate_phdr or
// dladdr (which take the loader's lock: a thread inside dlopen must not wait on us).
std::mutex g_mu;
// Never destroyed (shim/base/race_once.h): a report may be written while exit() runs static destructors.
struct Caches {
    std::vector<Module> modules;
    std::unordered_map<uintptr_t, Symbol> symbols;
};
std::atomic<Caches *> g_caches_made{nullptr};
Caches &caches() { return never_destroyed(g_caches_made); }
constexpr size_t kMaxCachedSymbols = 1 << 16;  // bounds the cache; beyond it, resolve without caching

std::string hex(const unsigned char *p, size_t n) {
    static const char digits[] = "0123456789abcdef";
    std::string s(2 * n, '0');
    for (size_t i = 0; i < n; ++i) s[2 * i] = digits[p[i] >> 4], s[2 * i + 1] = digits[p[i] & 15];
    return s;
}

std::string build_id_of(const dl_phdr_info *info) {
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr) &ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_NOTE) continue;
        // Notes are 4-aligned, except in segments aligned to 8 (.note.gnu.property).
        size_t align = ph.p_align == 8 ? 8 : 4;
        auto up = [align](size_t n) { return (n + align - 1) & ~(align - 1); };
        const char *p = reinterpret_cast<const char *>(info->dlpi_addr + ph.p_vaddr);
        const char *end = p + ph.p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const auto *nh = reinterpret_cast<const ElfW(Nhdr) *>(p);
            const char *name = p + sizeof(ElfW(Nhdr));
            const char *desc = name + up(nh->n_namesz);
            if (desc + nh->n_descsz > end) break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0)
                return hex(reinterpret_cast<const unsigned char *>(desc), nh->n_descsz);
            p = desc + up(nh->n_descsz);
        }
    }
    return "";
}

std::string main_program_path() {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

struct Search {
    uintptr_t ip;
    bool found = false;
    Module m;
};

int find_in_phdrs(dl_phdr_info *info, size_t, void *arg) {
    auto *s = static_cast<Search *>(arg);
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr) &ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD) continue;
        uintptr_t a = info->dlpi_addr + ph.p_vaddr;
        lo = a < lo ? a : lo, hi = a + ph.p_memsz > hi ? a + ph.p_memsz : hi;
    }
    if (s->ip < lo || s->ip >= hi) return 0;
    bool is_main = !info->dlpi_name || !info->dlpi_name[0];
    s->m.lo = lo, s->m.hi = hi, s->m.base = info->dlpi_addr;
    s->m.path = is_main ? main_program_path() : info->dlpi_name;
    s->m.build_id = build_id_of(info);
    // Frames of the shim itself are dropped from reports; when the shim's code is linked into a
    // program (unit tests), "itself" would be the whole program, so only a shared object counts.
    uintptr_t here = reinterpret_cast<uintptr_t>(&find_in_phdrs);
    s->m.self = !is_main && here >= lo && here < hi;
    s->found = true;
    return 1;
}

int module_index(uintptr_t ip) {
    {
        std::lock_guard<std::mutex> lock(g_mu);
        for (size_t i = 0; i < caches().modules.size(); ++i)
            if (ip >= caches().modules[i].lo && ip < caches().modules[i].hi) return int(i);
    }
    Search s;
    s.ip = ip;
    dl_iterate_phdr(find_in_phdrs, &s);
    if (!s.found) return -1;
    std::lock_guard<std::mutex> lock(g_mu);
    for (size_t i = 0; i < caches().modules.size(); ++i)  // another thread may have added it meanwhile
        if (caches().modules[i].lo == s.m.lo && caches().modules[i].path == s.m.path) return int(i);
    caches().modules.push_back(std::move(s.m));
    return int(caches().modules.size() - 1);
}

std::string symbol_name(uintptr_t ip) {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void *>(ip - 1), &info) || !info.dli_sname) return "";
    int status = 0;
    char *d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    std::string name = status == 0 && d ? d : info.dli_sname;
    free(d);
    return name;
}

}  // namespace

Native resolve(uintptr_t ip) {
    Symbol sym;
    bool cached = false;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        auto it = caches().symbols.find(ip);
        if (it != caches().symbols.end()) sym = it->second, cached = true;
    }
    if (!cached) {
        sym = {module_index(ip), symbol_name(ip)};
        std::lock_guard<std::mutex> lock(g_mu);
        if (caches().symbols.size() < kMaxCachedSymbols) caches().symbols.emplace(ip, sym);
    }
    Native n;
    n.symbol = std::move(sym.name);
    if (sym.module >= 0) {
        std::lock_guard<std::mutex> lock(g_mu);
        const Module &m = caches().modules[size_t(sym.module)];
        n.module = m.path, n.base = m.base, n.build_id = m.build_id, n.self = m.self;
    }
    return n;
}

void lock_for_fork() { g_mu.lock(); }
void unlock_after_fork() { g_mu.unlock(); }

}  // namespace gg::stacks::symbols
