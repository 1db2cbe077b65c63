// Finding and calling a native unwinder at run time. Internal to the stacks module (and its tests).
//
// The first that loads, lazily:
//   1. "cfi": the shim's own caching walker (shim/stacks/cfi_walker.h; x86-64), which hands each stack it cannot
//      walk to the next one that loads;
//   2. "libunwind": libunwind.so.8 beside libgpuguard.so (the build ships a copy there), else through
//      the loader's search path. Never linked: a preload library with a missing DT_NEEDED is silently
//      not loaded (docs/platform-facts.md), and the GPU machine has no libunwind installed;
//   3. "libgcc": _Unwind_Backtrace (linked statically into the shim; libgcc_s.so.1 otherwise).
// GPUGUARD_UNWINDER=cfi|libunwind|libgcc|none, read once, puts one first (a diagnostics knob; "none"
// turns native stacks off). ThreadSanitizer builds put libgcc before libunwind (see shim/stacks/unwind.cpp).
#pragma once
#include <cstdint>

#include "shim/stacks/cfi_walker.h"

namespace gg::stacks::unwind {

// Fills ips with return addresses, innermost first, starting at or just above the caller; returns
// how many. Loads the unwinder on first use. 0 when no unwinder is available.
// stop: when it answers true for a frame, that frame is the last one kept. The caching walker and
// libgcc's unwinder stop there; libunwind's fills up to max regardless.
// tag_only (a salt, -1 for none): 0 frames where the caching walker recalled this walk with a tag under
// that salt, which last_walk() then gives (the caller needs nothing else).
using StopFn = bool (*)(uintptr_t ip);
int backtrace(void **ips, int max, StopFn stop = nullptr, int tag_only = -1);

// The caching walker's word on this thread's last backtrace() (cfi::last_walk): its tag under `salt`
// and whether it went to the thread's outermost frame. Nothing (0, not whole) when that walk was not
// the walker's own, or not remembered.
cfi::LastWalk last_walk(uint16_t salt);
void tag_last_walk(uint32_t value, uint16_t salt);

// "cfi", "libunwind", "libgcc" or "none"; loads the unwinder on first use.
const char *name();

// Test and diagnostics hook: switches to the named unwinder ("cfi", "libunwind", "libgcc", "none") now.
// Returns false, changing nothing, when that unwinder cannot be loaded. Threads already inside
// backtrace() finish with the previous one; both stay loaded for the life of the process.
bool select(const char *which);

// fork() while another thread is inside the unwinder: libunwind and libgcc take locks of their own
// (caches, the registered-frames list) and register no fork handlers, so a child forked then would
// hang at its first unwind, on a lock held by a thread it does not have. The shim's prepare handler
// calls before_fork(): new unwinds are skipped (no native frames) until the fork is done, and those
// in flight are waited for, up to half a second; if one is still running then, the child gets no
// native stacks at all (one line says so). after_fork() lets unwinding go on, on both sides.
void before_fork();
void after_fork(bool child);

}  // namespace gg::stacks::unwind
