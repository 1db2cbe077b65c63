// Finding and calling a native unwinder at run time. Internal to the stacks module (and its tests).
//
// libunwind is never linked: a preload library with a missing DT_NEEDED is silently not loaded
// (FACTS.md), and the GPU machine has no libunwind installed. So it is dlopen'ed once, lazily:
//   1. libunwind.so.8 beside libgpuguard.so (the build ships a copy there),
//   2. libunwind.so.8 through the loader's normal search path,
//   3. libgcc's _Unwind_Backtrace (linked statically into the shim; libgcc_s.so.1 otherwise).
// GPUGUARD_UNWINDER=libunwind|libgcc|none, read once, puts one first (a diagnostics knob; "none"
// turns native stacks off). ThreadSanitizer builds put libgcc first (see stacks_unwind.cpp).
#pragma once

namespace gg::stacks::unwind {

// Fills ips with return addresses, innermost first, starting at or just above the caller; returns
// how many. Loads the unwinder on first use. 0 when no unwinder is available.
int backtrace(void **ips, int max);

// "libunwind", "libgcc" or "none"; loads the unwinder on first use.
const char *name();

// Test and diagnostics hook: switches to the named unwinder ("libunwind", "libgcc", "none") now.
// Returns false, changing nothing, when that unwinder cannot be loaded. Threads already inside
// backtrace() finish with the previous one; both stay loaded for the life of the process.
bool select(const char *which);

}  // namespace gg::stacks::unwind
