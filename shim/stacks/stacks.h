// Allocation stacks: captured as raw instruction pointers (plus Python frames) on the hot path,
// deduplicated into one table so that a stack seen a million times is stored once, and symbolized
// only when a report is made.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gg::stacks {

using StackId = uint32_t;  // 0 means "no stack"

// Set once from the configuration before the first capture. depth: native frames kept
// (GPUGUARD_STACK_DEPTH); python: also record Python frames (GPUGUARD_PYTHON_STACKS); reuse: reuse
// the stack of a Python call site already unwound on this thread (GPUGUARD_STACK_REUSE,
// shim/stacks/reuse.h).
void configure(int depth, bool python, bool reuse = true);

// How often a stack was reused and unwound (shim/stacks/reuse.h), for the report.
struct ReuseCounts {
    uint64_t reused, unwound, checks, changes, unstable_sites, evicted, threads;
    uint64_t deep_checks, deep_sites;  // Python keys of the innermost frames: whole keys compared, and found changed
    uint64_t whole_keys;               // keys of every Python frame made (each a walk of them all)
};
ReuseCounts reuse_counts();
// What the caching walker (shim/stacks/cfi_walker.h) did, for the report: walks, rules it had to work out from
// .eh_frame (the other frames came from its table), walks handed to the fallback unwinder, short walks
// answered from the stack words they read before (shim/stacks/walk_memo.h).
struct WalkerCounts {
    uint64_t walks, rules_learned, fallbacks, recalled;  // recalled: short walks answered by the walk memo
    uint64_t trusted;  // recalled walks answered by their tag without comparing the words (walk_memo.h)
};
WalkerCounts walker_counts();
// Loads the unwinder and looks for Python once, after configure(), outside any lock or C++ static
// guard: both take the loader's lock (shim/base/race_once.h).
void warm_up();

// Captures the calling thread's stack, dropping `skip` innermost native frames (the shim's own),
// interns it and returns its id. Never allocates device memory, never takes the GIL; safe to call
// from any hooked call. Returns 0 when capture is impossible (no unwinder, re-entered, table full).
StackId capture(int skip);

// Report time: the stack's frames, innermost first, native and Python merged, each as described in
// docs/report-schema.md ("kind", "ip", "module", "offset", "build_id", "symbol" / "file",
// "function", "line"). Symbolization is cached per module and per address.
nlohmann::json frames_json(StackId id);

// Number of distinct stacks interned so far.
size_t count();

// The stack's native return addresses, innermost first (empty for 0 or an unknown id).
std::vector<uintptr_t> native_frames(StackId id);

// Which unwinder is in use: "libunwind", "libgcc" (the fallback when libunwind.so.8 is not found)
// or "none". For reports and `gpuguard doctor`.
const char *unwinder();

}  // namespace gg::stacks
