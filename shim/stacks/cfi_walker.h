// A caching stack walker: the DWARF call-frame rules of each return address, found once and kept.
// Internal to the stacks module (shim/stacks/unwind.cpp uses it as the default unwinder on x86-64).
//
// Why: on the GPU machine a PyTorch stack costs about 10 µs to unwind with libunwind or libgcc,
// whatever the depth (BENCHMARKS.md, "the no-caching training loop"): both look up and interpret
// the unwind tables of libtorch and libpython again at each capture, with caches made cold by the
// driver's call. A training loop allocates from the same few hundred code paths every step, so the
// rule of each return address (where the caller's frame starts, where the return address and the
// caller's frame pointer were saved) is worked out once per thread, from the .eh_frame entry that
// libgcc's _Unwind_Find_FDE finds, and then a frame costs one table lookup and two loads. PyTorch's
// own profiler unwinder does the same for the same reason.
//
// Only what x86-64 compilers emit for ordinary functions is implemented: the frame's base (CFA) at
// an offset from rsp or rbp, the return address and rbp saved at offsets from it, and the two
// expressions GCC uses for a realigned frame (CFA loaded from rbp + k, rbp saved at rbp + k).
// Anything else (another DWARF expression, a signal frame, a frame whose return address is kept in
// a register) makes walk() give up, and the caller unwinds that stack with libunwind or libgcc. Every load is checked
// against the thread's stack bounds and the frame bases must rise, so a wrong rule or a corrupt stack ends the walk
// early, never faults.
//
// The rules are kept per thread (no lock) in a two-way table (shim/stacks/cfi_rule_table.h). A library unloaded
// and another loaded at its address would leave stale rules: the table is emptied when the loader's
// count of unloaded objects changes, and only its "no unwind information here" answers when the
// count of loaded ones does; the counts are checked every kLoaderCheckEvery walks.
#pragma once
#include <cstdint>

namespace gg::stacks::cfi {

using StopFn = bool (*)(uintptr_t ip);

// Whether this build can walk at all (x86-64 with libgcc's _Unwind_Find_FDE).
bool available();

// Fills ips with return addresses, innermost first, starting with one inside walk() itself; a short
// walk (max at most WalkMemo::kMaxLoads) from a depth walked before is recalled from the stack words
// it read then, when they are all the same (or, for a caller that wants only its tag, `tag_only`, and
// a walk the memo trusts, when those at its start's forks are: shim/stacks/walk_memo.h);
// stops after max, at the end of the stack, or after the first frame for which stop() answers
// true. Returns how many, or -1 when some frame needs a rule this walker does not implement (see
// above): the caller then unwinds with a general unwinder.
// `tag_only` (a salt, -1 for none): a caller that needs only the value attached to the walk
// (last_walk) gets 0 frames when the walk is recalled with a value under that salt: copying the
// return addresses out of the memo would cost more than the rest of the recall (BENCHMARKS.md).
int walk(void **ips, int max, StopFn stop, int tag_only = -1);

// This thread's last walk, if it was recalled from the memo or remembered in it: the value a caller
// attached to it (the capture's stack id: shim/stacks/capture.cpp) with the same salt, 0 otherwise,
// and whether it went to the thread's outermost frame. A recalled walk's value stands for the same
// walk: the memo answers only for the same stack words, or, for a walk it trusts and a caller that
// asked for the tag alone, for the same words at the start's forks, checked now and then
// (shim/stacks/walk_memo.h).
struct LastWalk {
    uint32_t tag = 0;
    bool whole = false;
};
LastWalk last_walk(uint16_t salt);
void tag_last_walk(uint32_t value, uint16_t salt);

// The return addresses of a walk from the caller outward, as walk() gives them (never recalled, nor
// remembered), each with the stack address it was read from, which rises frame by frame: a frame's own
// locals lie between its return address's slot and the next. At most max (frames, not stack words).
// Returns how many (those read before a frame whose rule it does not implement, too), -1 where it read
// none. Not for the hot path.
int walk_with_slots(void **ips, uintptr_t *slots, int max);

// The range [*lo, *hi) of the code that the .eh_frame entry covering `pc` describes: a whole function,
// or a part the compiler split off it (GCC's "cold" parts have an entry of their own). False where no
// entry covers pc, or it cannot be read.
bool function_range(uintptr_t pc, uintptr_t *lo, uintptr_t *hi);

// Per-process counters, for tests and the profile.
struct Counts {
    uint64_t walks;        // calls of walk()
    uint64_t rule_misses;  // rules worked out from .eh_frame (the rest came from the table)
    uint64_t fallbacks;    // walks that met a rule they do not implement: the stack went to the fallback
    uint64_t recalled;     // short walks answered from the memo of the words they read (walk_memo.h)
    uint64_t trusted;      // of those, answered by their tag without comparing the words (walk_memo.h)
};
Counts counts();

constexpr int kLoaderCheckEvery = 256;

// For the fuzz target (tests/fuzz/fuzz_cfi.cpp): what the .eh_frame entry (FDE) at `fde`, for a
// function starting at `start`, says of `pc`: 0 a rule walk() follows, 1 the end of the stack, 2 a
// rule it does not implement. The entry and its CIE are read only within their lengths.
int rule_kind_of_entry(const uint8_t *fde, uintptr_t start, uintptr_t pc);

}  // namespace gg::stacks::cfi
