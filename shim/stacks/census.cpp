// The profiling build's census of unwinds (shim/stacks/census.h).
#ifdef GG_PROFILE
#include "shim/stacks/census.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "shim/base/futex_lock.h"
#include "shim/stacks/stacks.h"

namespace gg::stacks::census {
namespace {

std::atomic<uint64_t> g_counts[int(Kind::kCount)][4];

// Stacks unwound (by id), each with its unwinds and its distinct keys (up to kKeys remembered).
constexpr int kStacks = 4096, kKeys = 64;
struct Entry {
    uint32_t stack = 0;
    uint64_t unwinds = 0;
    int keys = 0;
    uint64_t key[kKeys] = {};
};
Entry *g_table = nullptr;
FutexLock g_mu;

const char *kind_name(int k) {
    const char *names[] = {"python key",       "native key",        "python+native key",
                           "python+depth key", "python+anchor key", "whole python key"};
    static_assert(sizeof names / sizeof *names == int(Kind::kCount));
    return names[k];
}

// The innermost frames worth reading: the first Python frame or the first native one outside the shim.
std::string where(uint32_t stack) {
    std::string out;
    int shown = 0;
    for (const auto &f : frames_json(stack)) {
        std::string text =
            f.value("kind", "") == "python"
                ? f.value("file", "") + ":" + std::to_string(f.value("line", 0)) + " " + f.value("function", "")
                : f.value("symbol", "") + " (" + f.value("module", "") + ")";
        if (text.find("libgpuguard") != std::string::npos) continue;
        out += (shown ? " < " : "") + text.substr(0, 90);
        if (++shown == 6) break;
    }
    return out;
}

std::atomic<uint64_t> g_memo[int(Memo::kCount)];

void print_memo() {
    const char *names[] = {"recalled",
                           "words differ",
                           "no walk kept",
                           "evicted (same start)",
                           "evicted (other start)",
                           "compared in full",
                           "trusted",
                           "trusted, words differed (GG_TRUST_AUDIT)"};
    static_assert(sizeof names / sizeof *names == int(Memo::kCount));
    fprintf(stderr, "gpuguard: census walk memo:");
    for (int i = 0; i < int(Memo::kCount); i++)
        fprintf(stderr, "%s %s %llu", i ? "," : "", names[i], (unsigned long long)g_memo[i].load());
    fprintf(stderr, "\n");
}

__attribute__((destructor)) void print_census() {
    uint64_t any = 0;
    for (auto &kind : g_counts)
        for (auto &n : kind) any += n.load();
    if (!any) return;  // a process that captured nothing (a shell the program ran through)
    fprintf(stderr, "gpuguard: census %-18s %10s %10s %10s %10s\n", "key", "miss", "reuse", "check", "unstable");
    for (Kind kind : {Kind::kPython, Kind::kPythonAnchored, Kind::kPythonWhole, Kind::kPythonDepth,
                      Kind::kPythonExtended, Kind::kNative}) {  // as looked up
        int k = int(kind);
        fprintf(stderr, "gpuguard: census %-18s %10llu %10llu %10llu %10llu\n", kind_name(k),
                (unsigned long long)g_counts[k][0].load(), (unsigned long long)g_counts[k][1].load(),
                (unsigned long long)g_counts[k][2].load(), (unsigned long long)g_counts[k][3].load());
    }
    print_memo();
    if (!g_table) return;
    for (int shown = 0; shown < 15; shown++) {
        Entry *top = nullptr;
        for (int i = 0; i < kStacks; i++)
            if (g_table[i].stack && (!top || g_table[i].unwinds > top->unwinds)) top = &g_table[i];
        if (!top || top->unwinds < 2) break;
        fprintf(stderr, "gpuguard: census unwound %6llu times, %2d%s keys: %s\n", (unsigned long long)top->unwinds,
                top->keys, top->keys >= kKeys ? "+" : "", where(top->stack).c_str());
        top->stack = 0;
    }
}

}  // namespace

void note(Kind kind, Outcome outcome) { g_counts[int(kind)][int(outcome)].fetch_add(1, std::memory_order_relaxed); }

void memo(Memo what) { g_memo[int(what)].fetch_add(1, std::memory_order_relaxed); }

void unwound(uint64_t key, uint32_t stack) {
    if (!stack) return;
    std::lock_guard<FutexLock> lock(g_mu);
    if (!g_table) g_table = new Entry[kStacks];
    for (uint32_t i = stack % kStacks, n = 0; n < kStacks; i = (i + 1) % kStacks, n++) {
        Entry &e = g_table[i];
        if (e.stack && e.stack != stack) continue;
        e.stack = stack;
        e.unwinds++;
        for (int k = 0; k < e.keys; k++)
            if (e.key[k] == key) return;
        if (e.keys < kKeys) e.key[e.keys++] = key;
        return;
    }
}

}  // namespace gg::stacks::census
#endif
