// Python frames of the calling thread, read without the GIL (see shim/python/frames.h for why that is safe).
#include "shim/python/frames.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "common/base/hash_mix.h"
#include "common/base/hot.h"
#include "common/base/log.h"
#include "common/settings/settings.h"
#include "shim/base/race_once.h"
#include "shim/python/layout.h"
#include "shim/python/line_table.h"
#include "shim/python/strings.h"

namespace gg::py {
namespace {

// What detection found: the layout and the few interpreter entry points that are safe without the
// GIL. Py_IsInitialized and (_)Py_IsFinalizing only load a field of _PyRuntime;
// PyGILState_GetThisThreadState only reads the runtime's thread-specific key (pthread_getspecific).
// The thread-local that 3.12+ also keeps (_Py_tss_tstate) is cleared while the GIL is released, so
// it would read NULL exactly when we need it.
struct Runtime {
    const Layout *layout = nullptr;
    int (*is_initialized)() = nullptr;
    int (*is_finalizing)() = nullptr;
    void *(*this_thread_state)() = nullptr;
    uintptr_t code_type = 0, str_type = 0, bytes_type = 0;
    char version[16] = "";
};

// GPUGUARD_PYTHON_STACKS=0, read through the table of settings (a malformed value keeps Python
// frames on; the shim's configuration says so once). Read here, not from the shim's Config, because
// the Python-frame tests load this module into an interpreter without the rest of the shim.
bool env_off() {
    std::string ignored;
    return !settings::read_switch(settings::process_env(), settings::Id::kPythonStacks, &ignored);
}

// The running version: Py_Version (3.11+, a constant in the data segment), else the start of
// Py_GetVersion()'s static string ("3.10.12 (main, ..."), which needs no GIL either.
bool read_version(int *major, int *minor) {
    if (auto *hex = static_cast<const unsigned long *>(dlsym(RTLD_DEFAULT, "Py_Version"))) {
        *major = int((*hex >> 24) & 0xff);
        *minor = int((*hex >> 16) & 0xff);
        return true;
    }
    auto get = reinterpret_cast<const char *(*)()>(dlsym(RTLD_DEFAULT, "Py_GetVersion"));
    return get && std::sscanf(get(), "%d.%d", major, minor) == 2;
}

// The interpreter's own type sizes must match the table: PyCode_Type.tp_basicsize is
// offsetof(PyCodeObject, co_code_adaptive) and PyUnicode_Type's is sizeof(PyUnicodeObject)
// (Objects/codeobject.c, unicodeobject.c). A debug, trace-refs or free-threaded build, whose object
// header differs, fails here instead of being misread.
bool check_layout(const Layout &l, const Runtime &r) {
    auto name_is = [](uintptr_t type, const char *want) {
        return !std::strcmp(at<const char *>(type, kTypeName), want);
    };
    return name_is(r.code_type, "code") && name_is(r.str_type, "str") && name_is(r.bytes_type, "bytes") &&
           at<int64_t>(r.code_type, kTypeBasicSize) == l.code_adaptive &&
           at<int64_t>(r.str_type, kTypeBasicSize) == l.unicode_basicsize &&
           at<int64_t>(r.bytes_type, kTypeBasicSize) == kBytesData + 1;
}

Runtime detect() {
    Runtime r;
    r.is_initialized = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
    if (!r.is_initialized) return r;  // no Python in this process: the common case, not worth a line
    if (env_off()) {
        log_debug("python frames: off (GPUGUARD_PYTHON_STACKS)");
        return r;
    }
    int major = 0, minor = 0;
    if (!read_version(&major, &minor)) {
        log_debug("python frames: CPython found but its version could not be read; frames off");
        return r;
    }
    const Layout *l = find_layout(major, minor);
    if (!l) {
        log_debug("python frames: CPython %d.%d has no known frame layout (3.11-3.15 do); frames off", major, minor);
        return r;
    }
    r.is_finalizing =
        reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, minor >= 13 ? "Py_IsFinalizing" : "_Py_IsFinalizing"));
    r.this_thread_state = reinterpret_cast<void *(*)()>(dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState"));
    r.code_type = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyCode_Type"));
    r.str_type = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyUnicode_Type"));
    r.bytes_type = reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "PyBytes_Type"));
    if (!r.is_finalizing || !r.this_thread_state || !r.code_type || !r.str_type || !r.bytes_type) {
        log_debug("python frames: CPython %d.%d lacks an exported symbol we read; frames off", major, minor);
        return r;
    }
    if (!check_layout(*l, r)) {
        log_debug(
            "python frames: CPython %d.%d object sizes differ from the known layout "
            "(debug or free-threaded build?); frames off",
            major, minor);
        return r;
    }
    r.layout = l;
    std::snprintf(r.version, sizeof r.version, "%d.%d", major, minor);
    log_debug("python frames: CPython %s", r.version);
    return r;
}

// Not a C++ static: detect() takes the loader's lock (dlsym), see shim/base/race_once.h.
GG_HOT const Runtime &runtime() {
    static std::atomic<const Runtime *> r{nullptr};
    return race_once(r, detect);
}

// Per code object: its interned names, and the last instruction looked up with its line (a loop
// that allocates asks for the same call site again and again). A freed code object's address can
// be reused, so an entry is only trusted when the name objects are the same ones with the same text
// (their hash when computed; file names often never are hashed, so then their bytes), and the line
// table object and first line still match: a different function at a reused address would need
// the same names and a line table at the same place.
// All-zero is an empty entry (no code object is at 0, and serials start at 1), so that both tables
// are zero-initialized: in .bss, not 208 KiB of the library's .data between the hot path's globals.
struct CodeEntry {
    uintptr_t code = 0, filename = 0, qualname = 0, linetable = 0;
    int64_t filename_hash = 0, qualname_hash = 0;
    int firstlineno = 0;
    std::string_view file, function;  // interned: NUL-terminated, never freed
    long lasti = 0;
    int line = 0;
    uint64_t serial = 0;  // which filling of an entry this is: keys the LineEntry table
};

// The lines of instructions other than a code object's last one. A function that allocates from
// many lines (a model's forward, torch.nn.functional's long functions) moves its entry's `lasti`
// at every call, and finding a line walks the code object's location table from its start: 1.5 µs
// for a line 400 lines into a function, against 0.4 µs for a whole 30-frame capture (the pyprobe
// benchmarks, tests/integration/t_pyframes.sh). Keyed by the code entry's serial, so an entry
// refilled for another code object leaves no line of the old one that could be found.
struct LineEntry {
    uint64_t serial = 0;
    long lasti = 0;
    int line = 0;
};

constexpr int kCacheBits = 10;
constexpr int kLineCacheBits = 12;
constexpr int kMaxSteps = 4096;             // frames visited per capture, skipped ones included
constexpr int64_t kMaxLineTable = 1 << 20;  // bytes; a larger co_linetable is taken as damage

std::mutex g_lock;  // guards g_cache and g_names: captures from several threads share them
CodeEntry g_cache[1 << kCacheBits];
LineEntry g_lines[1 << kLineCacheBits];
uint64_t g_serials = 0;  // the last serial given to a code entry
// Never destroyed: frames returned by capture() point into it until the very end of the process.
Interner &g_names = *new Interner;

bool is_str(const Runtime &r, uintptr_t s) { return plausible(s) && at<uintptr_t>(s, kObType) == r.str_type; }

int64_t str_hash(const Runtime &r, uintptr_t s) { return is_str(r, s) ? at<int64_t>(s, kStrHash) : -1; }

std::string_view intern_str(const Runtime &r, uintptr_t s) {
    char buf[kMaxName * 4];
    long n = read_str(*r.layout, s, r.str_type, buf);
    return n < 0 ? "<?>" : g_names.intern(std::string_view(buf, size_t(n)));
}

// Whether the str at s still has the text interned from it. Caller checked it is the same object.
bool same_text(const Runtime &r, uintptr_t s, int64_t hash, int64_t cached_hash, std::string_view cached) {
    if (hash != -1 && cached_hash != -1) return hash == cached_hash;
    return ascii_equals(*r.layout, s, r.str_type, cached);
}

int line_of(const Runtime &r, uintptr_t code, uintptr_t linetable, int firstlineno, long lasti) {
    if (!plausible(linetable) || at<uintptr_t>(linetable, kObType) != r.bytes_type) return -1;
    int64_t len = at<int64_t>(linetable, kVarSize);
    // ob_size of a code object is its length in code units; an offset past it is not an instruction.
    if (len < 0 || len > kMaxLineTable || lasti >= at<int64_t>(code, kVarSize)) return -1;
    auto *table = reinterpret_cast<const uint8_t *>(linetable + kBytesData);
    return addr_to_line(table, size_t(len), firstlineno, int(lasti));
}

// Fills f's file, function and line for the code object at `code`. Caller holds g_lock.
void describe(const Runtime &r, uintptr_t code, long lasti, Frame *f) {
    const Layout &l = *r.layout;
    uintptr_t filename = at<uintptr_t>(code, l.code_filename);
    uintptr_t qualname = at<uintptr_t>(code, l.code_qualname);
    if (!is_str(r, qualname)) qualname = at<uintptr_t>(code, l.code_name);
    uintptr_t linetable = at<uintptr_t>(code, l.code_linetable);
    int firstlineno = at<int>(code, l.code_firstlineno);
    int64_t fh = str_hash(r, filename), qh = str_hash(r, qualname);

    uint64_t slot = (uint64_t(code) * 0x9E3779B97F4A7C15ull) >> (64 - kCacheBits);
    CodeEntry &e = g_cache[slot];
    bool hit = e.code == code && e.filename == filename && e.qualname == qualname && e.linetable == linetable &&
               e.firstlineno == firstlineno && same_text(r, filename, fh, e.filename_hash, e.file) &&
               same_text(r, qualname, qh, e.qualname_hash, e.function);
    if (!hit) {
        e = CodeEntry{code,
                      filename,
                      qualname,
                      linetable,
                      fh,
                      qh,
                      firstlineno,
                      intern_str(r, filename),
                      intern_str(r, qualname),
                      -1,
                      -1,
                      ++g_serials};
    }
    if (e.lasti != lasti) {
        e.lasti = lasti;
        uint64_t key = (e.serial * 0x9E3779B97F4A7C15ull + uint64_t(lasti)) * 0xBF58476D1CE4E5B9ull;
        LineEntry &le = g_lines[key >> (64 - kLineCacheBits)];
        if (le.serial != e.serial || le.lasti != lasti)
            le = LineEntry{e.serial, lasti, line_of(r, code, linetable, firstlineno, lasti)};
        e.line = le.line;
    }
    f->file = e.file.data();
    f->function = e.function.data();
    f->line = e.line;
    f->entry = false;
}

// The innermost _PyInterpreterFrame of the calling thread, or 0.
GG_HOT uintptr_t innermost_frame(const Runtime &r) {
    if (!r.is_initialized() || r.is_finalizing()) return 0;
    auto ts = reinterpret_cast<uintptr_t>(r.this_thread_state());
    if (!plausible(ts)) return 0;  // a thread that never ran Python has no thread state
    const Layout &l = *r.layout;
    if (l.tstate_cframe < 0) return at<uintptr_t>(ts, l.current_frame);
    uintptr_t cframe = at<uintptr_t>(ts, l.tstate_cframe);
    return plausible(cframe) ? at<uintptr_t>(cframe, l.current_frame) : 0;
}

}  // namespace

GG_HOT bool available() { return runtime().layout != nullptr; }

const char *version() { return runtime().version; }

int capture(Frame *out, int max) {
    const Runtime &r = runtime();
    if (!r.layout || !out || max <= 0) return 0;
    uintptr_t frame = innermost_frame(r);
    if (!frame) return 0;
    const Layout &l = *r.layout;
    int n = 0;
    int since_boundary = 0;  // frames written since the last eval-loop boundary
    // At a boundary between two eval-loop runs, the last frame written was its run's outermost.
    auto boundary = [&] {
        if (since_boundary) out[n - 1].entry = true;
        since_boundary = 0;
    };
    std::lock_guard<std::mutex> lock(g_lock);
    for (int steps = 0; frame && n < max; ++steps) {
        // A cycle or a damaged link ends the walk with what was read so far.
        if (steps == kMaxSteps || !plausible(frame)) return n;
        uintptr_t previous = at<uintptr_t>(frame, l.frame_previous);
        if (previous == frame) return n;
        int owner = at<char>(frame, l.frame_owner);
        if (l.frame_is_entry < 0 && owner == kOwnedByCStack) {
            // 3.12+: each _PyEval_EvalFrameDefault run links a shim frame of its own below the
            // first frame it runs (Python/ceval.c, entry_frame); it is no Python code.
            boundary();
            frame = previous;
            continue;
        }
        uintptr_t code = frame_executable(l, frame);
        // From 3.13 f_executable may be something other than a code object; such a frame is skipped.
        if (plausible(code) && at<uintptr_t>(code, kObType) == r.code_type) {
            auto instr = at<uintptr_t>(frame, l.frame_instr);
            long lasti = long(int64_t(instr - (code + l.code_adaptive)) / 2);  // 2-byte code units
            // An incomplete frame is still running its prologue (copying free variables, making
            // the generator): CPython's own walkers skip it (_PyFrame_IsIncomplete).
            bool incomplete = owner != kOwnedByGenerator && lasti < at<int>(code, l.code_firsttraceable);
            if (!incomplete) {
                describe(r, code, lasti, &out[n++]);
                ++since_boundary;
            }
        }
        // 3.11 marks the first frame of each eval-loop run itself.
        if (l.frame_is_entry >= 0 && at<uint8_t>(frame, l.frame_is_entry)) boundary();
        frame = previous;
    }
    if (!frame) boundary();  // the outermost frame was entered from C (Py_RunMain and the like)
    return n;
}

namespace {

// One frame's part of a site key: its code object, its instruction and how deep it stands, mixed on their
// own. The key is the sum of the parts. Folded frame after frame (hash_mix of the key so far), every frame
// waited for the one before it, a chain of about 16 cycles a frame: 300 ns on generate()'s 60-frame
// stacks, more than the walk. Parts that depend on nothing but their frame overlap in the CPU, and only
// the chase of `previous` pointers is left in series (BENCHMARKS.md, issue 28). A part is two multiplies,
// each followed by a shift that folds the high half into the low (one multiply fewer than the mix it
// replaced). The depth enters with the instruction (`depth` is the frame's number times an odd constant,
// reaching every bit), the code object by an xor, which carries nothing. Without the first shift the last
// multiply distributes over the sum, and a depth that only added to the high bits came out of it as a
// constant of the frame count: the same frames in another order gave the same key. Without the second a
// part's differences stay nearly additive: two frames of one code object swapped, or two instructions
// moved by +2 and -2 bytes, gave one key about once in 2^25 to 2^34 such pairs (reviews' catches and
// simulations; with both, none in 2^26 and 2^32; t_pyframes tests the order).
inline uint64_t frame_part(uint64_t code, uint64_t instr, uint64_t depth) {
    uint64_t x = (instr + depth) * 0xC2B2AE3D27D4EB4Full ^ code;
    x ^= x >> 32;
    x *= 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}
// The depth's step: odd, with bits everywhere.
constexpr uint64_t kDepthStep = 0xD6E8FEB86659FD93ull;

}  // namespace

GG_HOT uint64_t site_key(uint64_t seed, int max_frames, uintptr_t *beyond) {
    *beyond = 0;
    const Runtime &r = runtime();
    if (!r.layout) return 0;
    uintptr_t frame = innermost_frame(r);
    if (!frame) return 0;
    // The layout's offsets and tag mask held in registers for the walk. A tagged executable is hashed as
    // its bits untagged: the key only has to tell stacks apart, nothing here reads through it.
    const Layout &l = *r.layout;
    const int previous_at = l.frame_previous, code_at = l.frame_code, instr_at = l.frame_instr;
    const uintptr_t untagged = ~l.code_tags;
    // A key of the innermost max_frames (0 <= max_frames < kMaxSteps) says where it stopped; any other
    // count asks for every frame, at most kMaxSteps of them.
    const bool innermost_only = max_frames >= 0 && max_frames < kMaxSteps;
    const int limit = innermost_only ? max_frames : kMaxSteps;
    uint64_t sum = 0, depth = 0;
    int n = 0;
    while (plausible(frame)) {
        if (n == limit) {  // a frame further out: not read (its line is likely cold)
            if (innermost_only) *beyond = frame;
            break;
        }
        uintptr_t previous = at<uintptr_t>(frame, previous_at);
        if (previous == frame) break;
        // Every frame counts, shim frames and skipped ones too: the key only has to tell stacks apart.
        sum += frame_part(at<uintptr_t>(frame, code_at) & untagged, at<uintptr_t>(frame, instr_at), depth);
        depth += kDepthStep;
        ++n;
        frame = previous;
    }
    if (!n) return 0;
    uint64_t h = hash_mix(hash_mix(seed, sum), uint64_t(n) | (*beyond ? uint64_t(1) << 63 : 0));
    return h ? h : 1;
}

uint64_t site_key(uint64_t seed) {
    uintptr_t beyond;
    return site_key(seed, kMaxSteps, &beyond);
}

namespace {

struct Range {
    uintptr_t lo = 0, hi = 0;
    bool holds(uintptr_t ip) const { return ip >= lo && ip < hi; }
};

// The eval loop's symbol (dladdr1 reports its ELF size, so one range check answers for every ip) and
// the executable segment of the object that holds it, where any part of the loop found later must lie.
struct EvalLoop {
    Range symbol, object_code;
};

// The executable PT_LOAD segment, of whichever loaded object, that holds `address`.
struct SegmentSearch {
    uintptr_t address;
    Range found;
};
int find_code_segment(dl_phdr_info *info, size_t, void *arg) {
    auto *s = static_cast<SegmentSearch *>(arg);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) &ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
        Range r{info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz};
        if (r.holds(s->address)) {
            s->found = r;
            return 1;
        }
    }
    return 0;
}

// Found once, at the shim's warm-up (stacks::warm_up), before captures: dlsym, dladdr1 and
// dl_iterate_phdr take the loader's lock (shim/base/race_once.h), which a capture inside a driver's or
// cudart's lock should not wait on. (A capture on another thread while the warm-up runs finds it itself,
// as it finds the Python runtime: shim/start/start.cpp.)
const EvalLoop &eval_loop() {
    static std::atomic<const EvalLoop *> cached{nullptr};
    return race_once(cached, [] {
        EvalLoop loop;
        void *fn = available() ? dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault") : nullptr;
        Dl_info info;
        void *extra = nullptr;
        const ElfW(Sym) *sym = nullptr;
        if (fn && dladdr1(fn, &info, &extra, RTLD_DL_SYMENT)) sym = static_cast<const ElfW(Sym) *>(extra);
        if (sym && sym->st_size) {
            loop.symbol.lo = reinterpret_cast<uintptr_t>(fn);
            loop.symbol.hi = loop.symbol.lo + sym->st_size;
            SegmentSearch search{loop.symbol.lo, {}};
            dl_iterate_phdr(find_code_segment, &search);
            loop.object_code = search.found;
        } else if (fn) {
            log_debug("python frames: no size for _PyEval_EvalFrameDefault; native and Python frames not merged");
        }
        return loop;
    });
}

// The eval loop's parts outside its symbol (add_eval_loop_part): written under g_parts_mu, then
// published by the count, so a reader sees only whole ranges.
std::mutex g_parts_mu;
Range g_parts[kEvalLoopParts];
std::atomic<int> g_part_count{0};

bool in_learned_part(uintptr_t ip) {
    int n = g_part_count.load(std::memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (g_parts[i].holds(ip)) return true;
    return false;
}

}  // namespace

uintptr_t innermost_entry_frame() {
    const Runtime &r = runtime();
    if (!r.layout || r.layout->frame_is_entry >= 0) return 0;  // 3.11 keeps no entry frame on the C stack
    const Layout &l = *r.layout;
    uintptr_t frame = innermost_frame(r);
    for (int steps = 0; frame && steps < kMaxSteps && plausible(frame); ++steps) {
        if (at<char>(frame, l.frame_owner) == kOwnedByCStack) return frame;
        uintptr_t previous = at<uintptr_t>(frame, l.frame_previous);
        if (previous == frame) break;
        frame = previous;
    }
    return 0;
}

bool add_eval_loop_part(uintptr_t lo, uintptr_t hi) {
    // Only code of the segment that holds the loop's symbol, found at warm-up (no loader call here): a
    // range elsewhere is no part of the loop. (Where CPython is linked into the program, as Debian's and
    // Ubuntu's are, that segment is all of the interpreter: the finding itself is what is exact.)
    const Range &code = eval_loop().object_code;
    if (lo >= hi || lo < code.lo || hi > code.hi) return false;
    {
        std::lock_guard<std::mutex> lock(g_parts_mu);
        int n = g_part_count.load(std::memory_order_relaxed);
        for (int i = 0; i < n; i++)
            if (lo == g_parts[i].lo && hi == g_parts[i].hi) return true;
        if (n == kEvalLoopParts) return false;
        g_parts[n] = {lo, hi};
        g_part_count.store(n + 1, std::memory_order_release);
    }
    log_debug("python frames: the eval loop also runs in [%#lx, %#lx), outside its symbol", (unsigned long)lo,
              (unsigned long)hi);
    return true;
}

bool is_eval_loop(uintptr_t ip) { return eval_loop().symbol.holds(ip) || in_learned_part(ip); }

void lock_for_fork() {
    g_lock.lock();
    g_parts_mu.lock();
}
void unlock_after_fork() {
    g_parts_mu.unlock();
    g_lock.unlock();
}

}  // namespace gg::py
