// Native frames named from debug info at report time (tools/report/symbolize.h).
#include "tools/report/symbolize.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>

namespace gg::report {

namespace {

// The libdw functions used, typed by elfutils' own header and found with dlsym: the command does not
// link libdw (see the header's comment), and a wrong call does not compile.
// clang-format off
#define GG_LIBDW_FUNCTIONS(X)                                                                            \
    X(dwfl_begin) X(dwfl_end) X(dwfl_report_begin) X(dwfl_report_elf) X(dwfl_report_end)                \
    X(dwfl_module_build_id) X(dwfl_module_getelf) X(dwfl_module_getdwarf) X(dwfl_module_getsymtab)       \
    X(dwfl_module_getsym_info) X(dwfl_module_getsrc) X(dwfl_lineinfo)
// clang-format on

struct Libdw {
#define GG_LIBDW_MEMBER(name) decltype(&::name) name = nullptr;
    GG_LIBDW_FUNCTIONS(GG_LIBDW_MEMBER)
#undef GG_LIBDW_MEMBER
};

// Loaded once per library name and kept loaded (its functions are used until exit); null when the
// library, or one of the functions, is not there.
const Libdw *load_libdw(const std::string &library) {
    static std::map<std::string, std::unique_ptr<Libdw>> loaded;
    auto it = loaded.find(library);
    if (it != loaded.end()) return it->second.get();
    std::unique_ptr<Libdw> dw;
    if (void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        dw = std::make_unique<Libdw>();
        bool all = true;
#define GG_LIBDW_RESOLVE(name)                                            \
    dw->name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name)); \
    all = all && dw->name;
        GG_LIBDW_FUNCTIONS(GG_LIBDW_RESOLVE)
#undef GG_LIBDW_RESOLVE
        if (!all) dw.reset(), dlclose(handle);
    }
    return (loaded[library] = std::move(dw)).get();
}

// Past this a file is no library anyone ships (CUDA's largest are under 1 GiB): refused unread.
constexpr off_t kMaxElfBytes = off_t(1) << 34;
// Distinct modules opened for one report; a hostile report may name a million.
constexpr size_t kMaxModules = 256;

// Opens `path` for libdw when it is a regular file holding an ELF executable or shared object; else -1
// with `why` said, and `not_here` set when there is no such file. stat() comes before open(): opening
// some device files acts (a watchdog starts, a tape rewinds), and a FIFO would block. The fstat()
// after open() catches a file swapped meanwhile.
int open_elf(const std::string &path, std::string &why, bool &not_here) {
    struct stat st {};
    not_here = false;
    if (stat(path.c_str(), &st) != 0) {
        not_here = errno == ENOENT || errno == ENOTDIR;
        why = strerror(errno);
        return -1;
    }
    int fd = S_ISREG(st.st_mode) ? open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY) : -1;
    if (!S_ISREG(st.st_mode) || fd < 0) {
        why = S_ISREG(st.st_mode) ? strerror(errno) : "not a regular file";
        return -1;
    }
    unsigned char head[18];  // e_ident and e_type, at the same place in 32- and 64-bit headers
    bool elf = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= off_t(sizeof(Elf64_Ehdr)) &&
               st.st_size <= kMaxElfBytes && pread(fd, head, sizeof head, 0) == ssize_t(sizeof head) &&
               memcmp(head, ELFMAG, SELFMAG) == 0;
    if (elf) {
        unsigned type = head[EI_DATA] == ELFDATA2MSB ? head[16] << 8 | head[17] : head[16] | head[17] << 8;
        elf = type == ET_EXEC || type == ET_DYN;  // an ET_REL would need its sections laid out first
    }
    if (!elf) {
        close(fd);
        why = "not an ELF executable or library";
        return -1;
    }
    return fd;
}

std::string hex(const unsigned char *p, size_t n) {
    static const char digits[] = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; ++i) s += digits[p[i] >> 4], s += digits[p[i] & 15];
    return s;
}

std::string lower(std::string s) {
    for (char &c : s) c = char(tolower(static_cast<unsigned char>(c)));
    return s;
}

// A symbol table's name as people read it: demangled, without the version a .symtab may carry
// ("__libc_start_main@@GLIBC_2.34"; dladdr, which the shim asks, never says it).
std::string demangled(const char *versioned) {
    std::string name(versioned, strcspn(versioned, "@"));
    int status = 0;
    char *d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
    std::string out = status == 0 && d ? d : name;
    free(d);
    return out;
}

// "0x1234" -> 0x1234; false for anything else (a report is input, not trusted).
bool parse_offset(const std::string &s, uint64_t &out) {
    if (s.size() < 3 || s.size() > 18 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return false;
    char *end = nullptr;
    out = strtoull(s.c_str() + 2, &end, 16);
    return *end == '\0';
}

// The callbacks libdw calls have no pointer of ours: the one symbolize() running says where to look.
const Libdw *g_dw = nullptr;
const std::string *g_debug_dir = nullptr;

// A separate debug file, by the module's build id as Debian's -dbgsym packages and `objcopy
// --only-keep-debug` installs lay them out. By build id only: nothing is fetched (no debuginfod).
int find_debuginfo_by_build_id(Dwfl_Module *mod, void **, const char *, Dwarf_Addr, const char *, const char *,
                               GElf_Word, char **debuginfo_file_name) {
    const unsigned char *bits = nullptr;
    GElf_Addr vaddr = 0;
    int n = g_dw->dwfl_module_build_id(mod, &bits, &vaddr);
    if (n < 2 || !g_debug_dir) return -1;
    std::string id = hex(bits, size_t(n)), why;
    std::string path = *g_debug_dir + "/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug";
    bool not_here = false;
    int fd = open_elf(path, why, not_here);
    if (fd >= 0) *debuginfo_file_name = strdup(path.c_str());
    return fd;
}

// Modules are reported with their files already open: libdw has nothing else to find.
int find_no_elf(Dwfl_Module *, void **, const char *, Dwarf_Addr, char **, Elf **) { return -1; }

const Dwfl_Callbacks kCallbacks = {find_no_elf, find_debuginfo_by_build_id, nullptr, nullptr};

struct Names {
    std::string symbol, file;
    std::optional<int64_t> line;
};

// Why a module's frames keep module + offset. Ordered as the notes are printed.
enum class Problem { kNone, kUnchecked, kNotHere, kNotElf, kOtherBuild, kNoDebugInfo, kTooMany };

// A function of a module's symbol table: where it starts and ends, and its name's index.
struct Function {
    GElf_Addr start = 0, end = 0;
    size_t name = 0;
};

struct Module {
    Dwfl *dwfl = nullptr;
    Dwfl_Module *mod = nullptr;
    Dwarf_Addr bias = 0;
    bool has_dwarf = false;
    Problem problem = Problem::kNone;
    std::string path, detail;   // detail: the reason the file could not be read, or the build ids
    bool left_unnamed = false;  // a frame of it kept module + offset
    std::unordered_map<std::string, Names> by_offset;
    // Sorted by start, made on the first lookup: libdw's dwfl_module_addrinfo scans the whole table on
    // each call, which took a minute for 100,000 frames of a large program.
    std::vector<Function> functions;
    std::vector<std::string> function_names;  // demangled
    bool functions_read = false;
};

class Symbolizer {
public:
    Symbolizer(const Libdw &dw, const SymbolizeOptions &opt) : dw_(dw), opt_(opt) {
        g_dw = &dw, g_debug_dir = &opt.debug_dir;
    }
    ~Symbolizer() {
        for (auto &[key, m] : modules_)
            if (m.dwfl) dw_.dwfl_end(m.dwfl);  // closes the files libdw was handed
        g_dw = nullptr, g_debug_dir = nullptr;
    }
    Symbolizer(const Symbolizer &) = delete;
    Symbolizer &operator=(const Symbolizer &) = delete;

    void name(Frame &f) {
        Module &m = module(f.module, f.build_id);
        const Names &n = names(m, f.offset);
        if (!n.symbol.empty()) f.symbol = n.symbol;
        if (!n.file.empty()) f.source_file = n.file, f.source_line = n.line;
        if (f.symbol.empty() && f.source_file.empty()) m.left_unnamed = true;
    }

    std::vector<std::string> notes() const;

private:
    Module &module(const std::string &path, const std::string &build_id) {
        std::string key = path + '\0' + lower(build_id);
        auto it = modules_.find(key);
        if (it != modules_.end()) return it->second;
        Module &m = modules_[key];
        m.path = path;
        if (opened_ == kMaxModules) m.problem = Problem::kTooMany;
        else open(m, lower(build_id)), opened_++;
        return m;
    }

    void open(Module &m, const std::string &build_id) {
        if (build_id.empty()) {
            // Nothing tells the file at the path from another build of it (the module had no build id,
            // or the report is hand-made): names from it could be wrong ones.
            m.problem = Problem::kUnchecked;
            return;
        }
        bool not_here = false;
        // The shim writes absolute paths; a relative one would be looked up wherever report runs.
        int fd = m.path[0] == '/' ? open_elf(m.path, m.detail, not_here) : -1;
        if (m.path[0] != '/') m.detail = "not an absolute path";
        if (fd < 0) {
            m.problem = not_here ? Problem::kNotHere : Problem::kNotElf;
            return;
        }
        m.dwfl = dw_.dwfl_begin(&kCallbacks);
        if (!m.dwfl) {
            close(fd);
            m.problem = Problem::kNotElf, m.detail = "libdw could not start";
            return;
        }
        dw_.dwfl_report_begin(m.dwfl);
        m.mod = dw_.dwfl_report_elf(m.dwfl, base_name(m.path).c_str(), m.path.c_str(), fd, 0, false);
        dw_.dwfl_report_end(m.dwfl, nullptr, nullptr);
        if (!m.mod) {
            close(fd);  // not taken by libdw when it refused the file
            m.problem = Problem::kNotElf, m.detail = "libdw could not read it";
            return;
        }
        const unsigned char *bits = nullptr;
        GElf_Addr vaddr = 0;
        int n = dw_.dwfl_module_build_id(m.mod, &bits, &vaddr);
        std::string here = n > 0 ? hex(bits, size_t(n)) : std::string();
        if (here != build_id) {
            // Another build at the same path: its names would be wrong ones, worse than none.
            m.problem = Problem::kOtherBuild;
            // A real build id is 40 hex digits; a report's may be anything, and stays one short line here.
            m.detail = "its build id is " + (here.empty() ? std::string("none") : here) + ", the report's " +
                       build_id.substr(0, 64) + (build_id.size() > 64 ? "..." : "");
            m.mod = nullptr;
            return;
        }
        Dwarf_Addr bias = 0;
        dw_.dwfl_module_getelf(m.mod, &bias);
        m.bias = bias;
        m.has_dwarf = dw_.dwfl_module_getdwarf(m.mod, &bias) != nullptr;
        if (!m.has_dwarf) m.problem = Problem::kNoDebugInfo;
    }

    const Names &names(Module &m, const std::string &offset) {
        auto [it, made] = m.by_offset.try_emplace(offset);
        uint64_t off = 0;
        if (!made || !m.mod || !parse_offset(offset, off) || off == 0) return it->second;
        // The offset is a return address: the call it returns from ends one byte before it.
        GElf_Addr address = off - 1 + m.bias;
        if (const std::string *function = function_at(m, address)) it->second.symbol = *function;
        if (Dwfl_Line *line = dw_.dwfl_module_getsrc(m.mod, address)) {
            int lineno = 0;
            if (const char *file = dw_.dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr)) {
                it->second.file = file;
                if (lineno > 0) it->second.line = lineno;
            }
        }
        return it->second;
    }

    // The function of the symbol table (.symtab, of the debug file when the module has one, else
    // .dynsym) that holds `address`; null when none does.
    const std::string *function_at(Module &m, GElf_Addr address) {
        if (!m.functions_read) read_functions(m);
        auto after = std::upper_bound(m.functions.begin(), m.functions.end(), address,
                                      [](GElf_Addr a, const Function &f) { return a < f.start; });
        if (after == m.functions.begin()) return nullptr;
        const Function &f = *(after - 1);
        return address < f.end ? &m.function_names[f.name] : nullptr;
    }

    void read_functions(Module &m) {
        m.functions_read = true;
        int count = dw_.dwfl_module_getsymtab(m.mod);
        for (int i = 1; i < count; i++) {  // entry 0 is the null symbol
            GElf_Sym sym{};
            GElf_Addr start = 0;
            GElf_Word section = 0;
            const char *name = dw_.dwfl_module_getsym_info(m.mod, i, &sym, &start, &section, nullptr, nullptr);
            int type = GELF_ST_TYPE(sym.st_info);
            if (!name || !*name || section == SHN_UNDEF || sym.st_size == 0 ||
                (type != STT_FUNC && type != STT_GNU_IFUNC))
                continue;
            m.functions.push_back({start, start + sym.st_size, m.function_names.size()});
            m.function_names.push_back(demangled(name));
        }
        // Aliases share a start: any of them names the code; the first one listed stays.
        std::stable_sort(m.functions.begin(), m.functions.end(),
                         [](const Function &a, const Function &b) { return a.start < b.start; });
    }

    const Libdw &dw_;
    const SymbolizeOptions &opt_;
    std::map<std::string, Module> modules_;
    size_t opened_ = 0;
};

// "a, b, c and 2 more"
std::string listed(const std::vector<std::string> &names) {
    constexpr size_t kShown = 4;
    std::string out;
    for (size_t i = 0; i < names.size() && i < kShown; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > kShown) out += " and " + std::to_string(names.size() - kShown) + " more";
    return out;
}

std::vector<std::string> Symbolizer::notes() const {
    std::map<Problem, std::vector<const Module *>> by_problem;
    for (const auto &[key, m] : modules_)
        if (m.left_unnamed && m.problem != Problem::kNone) by_problem[m.problem].push_back(&m);
    std::vector<std::string> out;
    auto stay = [](size_t modules) {
        return modules == 1 ? ": its frames stay as module+offset" : ": their frames stay as module+offset";
    };
    for (const auto &[problem, modules] : by_problem) {
        std::vector<std::string> names;
        switch (problem) {
            case Problem::kUnchecked:
                for (const Module *m : modules) names.push_back(base_name(m->path));
                out.push_back("the report has no build id for " + listed(names) +
                              ", so the file at its path cannot be checked" + stay(modules.size()));
                break;
            case Problem::kNotHere:
                for (const Module *m : modules) names.push_back(m->path);
                out.push_back("not on this machine: " + listed(names) + stay(modules.size()));
                break;
            case Problem::kNotElf:
                for (const Module *m : modules) names.push_back(m->path + " (" + m->detail + ")");
                out.push_back("cannot read " + listed(names) + stay(modules.size()));
                break;
            case Problem::kOtherBuild:
                // One line each: the two build ids are what a person compares.
                for (const Module *m : modules)
                    out.push_back(m->path + " is not the binary that wrote the report (" + m->detail + ")" + stay(1));
                break;
            case Problem::kNoDebugInfo:
                for (const Module *m : modules) names.push_back(base_name(m->path));
                out.push_back("no debug info for " + listed(names) + stay(modules.size()) +
                              " (build with -g, or install its debug package into " + opt_.debug_dir + "/.build-id/)");
                break;
            case Problem::kTooMany:
                out.push_back("the report names over " + std::to_string(kMaxModules) +
                              " modules; those past them are not read" + stay(2));
                break;
            case Problem::kNone: break;
        }
    }
    return out;
}

// The shim's own frames are dropped from every view (frames_outermost_first): not worth a lookup.
bool wants_name(const Frame &f) {
    return !f.python && !f.module.empty() && !f.offset.empty() && base_name(f.module).rfind("libgpuguard", 0) != 0;
}

}  // namespace

std::vector<std::string> symbolize(Report &r, const SymbolizeOptions &opt) {
    bool any = false;
    for (const auto &[id, stack] : r.stacks)
        for (const Frame &f : stack.frames) any = any || wants_name(f);
    if (!any) return {};
    const Libdw *dw = load_libdw(opt.library);
    if (!dw)
        return {opt.library + " is not installed: native frames stay as module+offset (apt-get install libdw1 " +
                "names them from debug info)"};
    Symbolizer s(*dw, opt);
    for (auto &[id, stack] : r.stacks)
        for (Frame &f : stack.frames)
            if (wants_name(f)) s.name(f);
    return s.notes();
}

}  // namespace gg::report
