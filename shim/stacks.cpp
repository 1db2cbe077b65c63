// Capture (hot path: raw addresses, one hash, one short lock) and report-time rendering of stacks.
// Pieces: stacks_unwind (which unwinder), stacks_table (dedup), stacks_symbols (names),
// stacks_merge (where Python frames go).
#include "stacks.h"

#include <atomic>
#include <cstdio>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "log.h"
#include "profile.h"
#include "pyframes.h"
#include "stacks_merge.h"
#include "stacks_symbols.h"
#include "stacks_table.h"
#include "stacks_unwind.h"

namespace gg::stacks {
namespace {

constexpr int kMaxDepth = 128;
constexpr int kMaxPython = 128;
// Frames between the unwinder and capture()'s caller (capture, its helpers, the unwinder's own
// entry); they are found by return address, this only sizes the buffer.
constexpr int kSlack = 16;
// A Python frame is stored as three words: file, function (both interned, so pointers identify them)
// and line << 1 | entry.
constexpr int kPyWords = 3;
static_assert(kMaxDepth + kPyWords * kMaxPython <= int(table::kMaxWords), "a stack must fit the table");

std::atomic<int> g_depth{48};
std::atomic<bool> g_python{false};

// Set while this thread is inside capture(): an unwinder that allocates, under a profiler that hooks
// malloc and captures, would otherwise recurse. initial-exec: no __tls_get_addr (which may allocate)
// on the hot path; the shim is preloaded, so its TLS is in the static block.
__attribute__((tls_model("initial-exec"))) thread_local bool t_busy = false;

std::string hex_addr(uintptr_t v) {
    char buf[24];
    snprintf(buf, sizeof(buf), "0x%zx", size_t(v));
    return buf;
}

bool stop_at_eval_loop(uintptr_t ip) { return py::is_eval_loop(ip); }

StackId capture_unguarded(int skip, void *return_address) {
    int depth = g_depth.load(std::memory_order_relaxed);
    skip = skip < 0 ? 0 : skip > kMaxDepth ? kMaxDepth : skip;
    uintptr_t words[kMaxDepth + kPyWords * kMaxPython];
    int n_native = 0;

    bool python = g_python.load(std::memory_order_relaxed) && py::available();
    if (depth > 0) {
        GG_PROFILE_STEP(kCaptureNative);
        void *raw[kSlack + 2 * kMaxDepth];
        int want = kSlack + skip + depth;
        // With Python frames, the native walk can end at the innermost eval loop: the frames below
        // it are the interpreter's, and the Python frames tell more about them (the merge places all
        // Python frames after that eval-loop frame). Where the unwinder can stop, that saves most of
        // a deep interpreter stack.
        int n = unwind::backtrace(raw, want < int(std::size(raw)) ? want : int(std::size(raw)),
                                  python ? stop_at_eval_loop : nullptr);
        // Start at capture()'s caller, found by its return address: robust to inlining and tail
        // calls inside the shim and to each unwinder's idea of where the walk starts.
        int start = 0;
        for (int i = 0; i < n && i < kSlack; ++i)
            if (raw[i] == return_address) {
                start = i;
                break;
            }
        start += skip;
        for (int i = start; i < n && n_native < depth; ++i) words[n_native++] = reinterpret_cast<uintptr_t>(raw[i]);
    }

    int n_py = 0;
    if (python) {
        GG_PROFILE_STEP(kCapturePython);
        py::Frame frames[kMaxPython];
        n_py = py::capture(frames, kMaxPython);
        n_py = n_py < 0 ? 0 : n_py > kMaxPython ? kMaxPython : n_py;
        uintptr_t *w = words + n_native;
        for (int i = 0; i < n_py; ++i, w += kPyWords) {
            w[0] = reinterpret_cast<uintptr_t>(frames[i].file);
            w[1] = reinterpret_cast<uintptr_t>(frames[i].function);
            w[2] = uintptr_t(uint32_t(frames[i].line)) << 1 | uintptr_t(frames[i].entry);
        }
    }
    GG_PROFILE_STEP(kCaptureIntern);
    return table::intern(words, uint32_t(n_native + kPyWords * n_py), uint32_t(n_native));
}

nlohmann::json native_json(uintptr_t ip, const symbols::Native &s) {
    return {{"kind", "native"}, {"ip", hex_addr(ip)}, {"module", s.module},
            {"offset", hex_addr(s.module.empty() ? 0 : ip - s.base)}, {"build_id", s.build_id},
            {"symbol", s.symbol}};
}

nlohmann::json python_json(const uintptr_t *w) {
    const char *file = reinterpret_cast<const char *>(w[0]);
    const char *function = reinterpret_cast<const char *>(w[1]);
    return {{"kind", "python"}, {"file", file ? file : ""}, {"function", function ? function : ""},
            {"line", int(uint32_t(w[2] >> 1))}};
}

}  // namespace

void configure(int depth, bool python) {
    g_depth.store(depth < 0 ? 0 : depth > kMaxDepth ? kMaxDepth : depth, std::memory_order_relaxed);
    g_python.store(python, std::memory_order_relaxed);
}

void warm_up() {
    // The unwinder and the Python runtime are found now, from the shim's initialisation, rather
    // than in the first capture, which might run in a signal handler or with the driver's locks held.
    if (g_depth.load(std::memory_order_relaxed) > 0) unwind::name();
    // is_eval_loop() finds the eval loop's range on first use: now, not inside an unwinder's callback.
    if (g_python.load(std::memory_order_relaxed) && py::available()) py::is_eval_loop(0);
}

// noinline: __builtin_return_address(0) must be the return address into our caller's frame, the one
// the unwinder reports for it.
__attribute__((noinline)) StackId capture(int skip) {
    if (t_busy) return 0;
    t_busy = true;
    StackId id = capture_unguarded(skip, __builtin_return_address(0));
    t_busy = false;
    return id;
}

nlohmann::json frames_json(StackId id) {
    nlohmann::json out = nlohmann::json::array();
    std::vector<uintptr_t> words;
    uint32_t n_native = 0;
    if (!table::get(id, &words, &n_native)) return out;
    size_t n_py = (words.size() - n_native) / kPyWords;

    std::vector<symbols::Native> natives;
    std::vector<uintptr_t> ips;
    for (uint32_t i = 0; i < n_native; ++i) {
        symbols::Native s = symbols::resolve(words[i]);
        // Leading frames inside libgpuguard.so (hooks the caller's `skip` did not cover): a report
        // should start at the program's call.
        if (ips.empty() && s.self) continue;
        natives.push_back(std::move(s));
        ips.push_back(words[i]);
    }
    std::vector<bool> is_eval(ips.size()), entry(n_py);
    const uintptr_t *py = words.data() + n_native;
    for (size_t j = 0; j < n_py; ++j) entry[j] = py[j * kPyWords + 2] & 1;
    if (n_py)
        for (size_t i = 0; i < ips.size(); ++i) is_eval[i] = py::is_eval_loop(ips[i]);

    for (const Placed &p : merge_order(is_eval, entry))
        out.push_back(p.python ? python_json(py + p.index * kPyWords) : native_json(ips[p.index], natives[p.index]));
    return out;
}

size_t count() { return table::count(); }

const char *unwinder() { return unwind::name(); }

}  // namespace gg::stacks
