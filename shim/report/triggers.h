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

}  // namespace gg::triggers
