// Clocks and the thread id, as every hooked call reads them: cheap, no system call on the way of an
// allocation once a thread has its id.
#pragma once
#include <cstdint>

namespace gg {

uint64_t mono_ns();  // CLOCK_MONOTONIC_COARSE: a few ms of resolution, never a system call
uint64_t unix_ns();  // CLOCK_REALTIME
// CLOCK_MONOTONIC, to the nanosecond, for timing a piece of work (the profiling build's timers, the
// tensor view's flush judge); a system call where the clock source has no vDSO, so not on the way of
// every allocation.
uint64_t steady_ns();
int thread_id();  // gettid, cached per thread
// In the child of fork(): the forking thread has a new id there.
void forget_thread_id();

}  // namespace gg
