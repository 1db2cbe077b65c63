// The program's phase as it tags it (gpuguard_phase(), Python's `with gpuguard.phase("eval")`): a
// report written while a phase is set names it. Phases are per thread: a report names the phase of
// the thread that writes it (the thread whose call failed, the thread that asked for it), so that a
// thread's report never names what another thread is doing.
#pragma once
#include <string>

namespace gg::phase {

// The calling thread's phase; "" for none.
std::string current();

// Called by a thread of gpuguard's own that writes reports for the program (GPUGUARD_REPORT_SIGNAL's):
// its reports name the main thread's phase, the program having no phase of its own there.
void stand_in_for_main_thread();

// fork(): the main thread's phase lock is taken before fork and released on both sides
// (shim/start/fork_locks.def): a child forked while another thread set the phase would otherwise
// hang at its first report.
void lock_for_fork();
void unlock_after_fork();

}  // namespace gg::phase
