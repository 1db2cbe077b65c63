// One-line diagnostics on stderr, always prefixed "gpuguard:".
//
// The shim runs inside other people's processes, often inside a hook that a signal or the driver's own
// thread entered, so these functions format into a stack buffer and emit the line with one write(2):
// no allocation, no stdio locks, no interleaving of half lines between threads.
#pragma once
#include <cstdarg>

namespace gg {

// Always printed: configuration errors, refused allocations, written reports.
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// Printed only with GPUGUARD_DEBUG=1: unknown frees, clamped counters, resolution details.
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool debug_enabled();
// Tests and the command may silence or redirect nothing; this only exists so that the command's
// own messages share the prefix and the single-write behaviour.
void log_vline(const char *fmt, va_list ap);

}  // namespace gg
