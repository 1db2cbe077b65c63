// The report model's own methods and the vocabulary every renderer shares: sizes that may be
// unknown, frame labels, and which frame explains a stack (tools/report/model.h).
#include "tools/report/model.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace gg::report {

bool TensorView::expandable_segments() const {
    return allocator_conf.find("expandable_segments:True") != std::string::npos ||
           allocator_conf.find("expandable_segments:true") != std::string::npos;
}

uint64_t TensorView::max_split_size() const {
    size_t at = allocator_conf.find("max_split_size_mb:");
    if (at == std::string::npos) return UINT64_MAX;
    char *end = nullptr;
    unsigned long long mb = strtoull(allocator_conf.c_str() + at + 18, &end, 10);
    return mb == 0 || mb > (UINT64_MAX >> 20) ? UINT64_MAX : uint64_t(mb) << 20;
}

const Stack *Report::stack(const std::string &id) const {
    if (id.empty()) return nullptr;
    auto it = stacks.find(id);
    return it == stacks.end() ? nullptr : &it->second;
}

uint64_t Report::live_bytes() const {
    if (process_bytes) return *process_bytes;
    uint64_t sum = 0;
    for (const StackBytes &s : by_stack) sum += s.bytes;
    return sum;
}

Bytes Report::peak() const {
    if (peak_bytes && process_peak_bytes) return std::max(*peak_bytes, *process_peak_bytes);
    return peak_bytes ? peak_bytes : process_peak_bytes;
}

std::string Report::command_line() const {
    std::string s;
    for (const std::string &a : command) {
        if (!s.empty()) s += ' ';
        s += a;
    }
    return s;
}

// ---- formatting ------------------------------------------------------------------------------

std::string human_bytes(const Bytes &bytes, const char *unknown) {
    return bytes ? human_bytes(*bytes) : std::string(unknown);
}

std::string base_name(const std::string &path) {
    auto slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string short_python_file(const std::string &file) {
    for (const char *marker : {"site-packages/", "dist-packages/"}) {
        auto at = file.rfind(marker);
        if (at != std::string::npos) return file.substr(at + strlen(marker));
    }
    if (file.empty() || file[0] == '<') return file;  // "<frozen importlib._bootstrap>", "<string>"
    auto last = file.find_last_of('/');
    if (last == std::string::npos || last == 0) return file;
    auto prev = file.find_last_of('/', last - 1);
    return prev == std::string::npos ? file : file.substr(prev + 1);
}

std::string short_symbol(const std::string &symbol) {
    // Drop the parameter list: the first '(' outside template brackets that is not part of
    // "(anonymous namespace)" or "operator()".
    std::string s = symbol;
    int angle = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        if (c == '<') ++angle;
        else if (c == '>' && angle > 0) --angle;
        else if (c == '(' && angle == 0) {
            if (s.compare(i, 21, "(anonymous namespace)") == 0) {
                i += 20;
                continue;
            }
            if (i >= 8 && s.compare(i - 8, 10, "operator()") == 0) {
                ++i;
                continue;
            }
            s.resize(i);
            break;
        }
    }
    // Collapse long template argument lists: "std::vector<at::Tensor, ...>::push_back" -> "std::vector<…>::push_back".
    if (s.size() > 80) {
        std::string out;
        int depth = 0;
        for (char c : s) {
            if (c == '<') {
                if (depth++ == 0) out += "<…>";
                continue;
            }
            if (c == '>' && depth > 0) {
                --depth;
                continue;
            }
            if (depth == 0) out += c;
        }
        s = out;
    }
    return s;
}

namespace {

// "alloc_until_oom.c:56" for a native frame its module's debug info named, else "".
std::string source_line_of(const Frame &f) {
    if (f.source_file.empty()) return "";
    return base_name(f.source_file) + (f.source_line ? ":" + std::to_string(*f.source_line) : "");
}

}  // namespace

std::string frame_label(const Frame &f) {
    if (f.python) {
        std::string where = short_python_file(f.file);
        if (f.line) where += ":" + std::to_string(*f.line);
        return (f.function.empty() ? std::string("<python>") : f.function) + " (" + where + ")";
    }
    std::string mod = base_name(f.module), source = source_line_of(f);
    if (!f.symbol.empty() && !source.empty()) return short_symbol(f.symbol) + " (" + source + ")";
    if (!f.symbol.empty()) return short_symbol(f.symbol) + (mod.empty() ? "" : " (" + mod + ")");
    std::string raw = !mod.empty() ? mod + "+" + (f.offset.empty() ? f.ip : f.offset) : f.ip;
    if (raw.empty()) raw = "[unknown]";
    return source.empty() ? raw : raw + " (" + source + ")";
}

std::string frame_key(const Frame &f) {
    if (f.python) return "py\x1f" + f.file + "\x1f" + f.function + "\x1f" + (f.line ? std::to_string(*f.line) : "");
    // Instruction pointers move with ASLR; a symbol, or module + offset, does not. A source line tells
    // apart two calls in one function, as a Python frame's line does.
    return "c\x1f" + base_name(f.module) + "\x1f" + (f.symbol.empty() ? f.offset : f.symbol) + "\x1f" + f.source_file +
           (f.source_line ? ":" + std::to_string(*f.source_line) : "");
}

std::string stack_key(const Stack &s) {
    std::string k;
    for (const Frame *f : frames_outermost_first(s)) {
        k += frame_key(*f);
        k += '\x1e';
    }
    return k;
}

bool is_plumbing(const Frame &f) {
    if (f.python) return false;
    std::string m = base_name(f.module);
    return m.rfind("libcuda.so", 0) == 0 || m.rfind("libcudart", 0) == 0 || m.rfind("libgpuguard", 0) == 0;
}

bool is_allocation_machinery(const Frame &f) {
    if (f.python) return false;
    if (is_plumbing(f)) return true;
    std::string m = base_name(f.module);
    if (m.rfind("libc10_cuda", 0) == 0 || m.rfind("libc10.so", 0) == 0) return true;
    for (const char *p : {"at::detail::empty", "at::native::empty", "at::empty", "at::_ops::empty", "c10::"})
        if (f.symbol.rfind(p, 0) == 0) return true;
    return false;
}

bool is_library_python(const Frame &f) {
    if (!f.python) return false;
    return f.file.find("site-packages/") != std::string::npos || f.file.find("dist-packages/") != std::string::npos ||
           f.file.find("/lib/python") != std::string::npos || (!f.file.empty() && f.file[0] == '<');
}

const Frame *best_frame(const Stack &s) {
    for (const Frame &f : s.frames)
        if (f.python) return &f;
    for (const Frame &f : s.frames)
        if (!is_allocation_machinery(f)) return &f;
    for (const Frame &f : s.frames)
        if (!is_plumbing(f)) return &f;
    return nullptr;
}

std::string where_label(const Report &r, const std::string &stack_id) {
    std::string best = best_label(r, stack_id);
    const Stack *s = r.stack(stack_id);
    const Frame *b = s ? best_frame(*s) : nullptr;
    if (!b || !is_library_python(*b)) return best;
    for (const Frame &f : s->frames)
        if (f.python && !is_library_python(f)) return best + " ← " + frame_label(f);
    return best;
}

std::string best_label(const Report &r, const std::string &stack_id) {
    const Stack *s = r.stack(stack_id);
    const Frame *f = s ? best_frame(*s) : nullptr;
    if (f) return frame_label(*f);
    if (s && !s->frames.empty()) return frame_label(s->frames.front());
    return "[unknown stack]";
}

std::vector<const Frame *> frames_outermost_first(const Stack &s) {
    std::vector<const Frame *> out;
    for (auto it = s.frames.rbegin(); it != s.frames.rend(); ++it) {
        // The shim's own frames are how we saw the call, not where the program made it.
        if (!it->python && base_name(it->module).rfind("libgpuguard", 0) == 0) continue;
        out.push_back(&*it);
    }
    return out;
}

}  // namespace gg::report
