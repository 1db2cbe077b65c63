// Reports that are not failures: at exit (GPUGUARD_REPORT_ON_EXIT=1), on an opt-in signal
// (GPUGUARD_REPORT_SIGNAL; nothing is installed unless asked) and on request from the program
// (gpuguard_report() in include/gpuguard/gpuguard.h).
#pragma once

namespace gg {
struct Config;
}

namespace gg::triggers {

// Called once when the shim starts (from inside state()'s construction: it must not call state()).
void install(const Config &c);

// The device a report that is not about a failure is about: the calling thread's, else device 0 once
// the driver has devices, else none (-1).
int report_ordinal();

}  // namespace gg::triggers
