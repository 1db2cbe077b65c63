// Reports that are not failures: at exit (GPUGUARD_REPORT_ON_EXIT=1), on an opt-in signal
// (GPUGUARD_REPORT_SIGNAL; nothing is installed unless asked) and on request from the program
// (gpuguard_report() in include/gpuguard/gpuguard.h).
#pragma once
#include <cstddef>
#include <string>

namespace gg {
struct Config;
}

namespace gg::triggers {

// Called once when the shim starts (from inside state()'s construction: it must not call state()).
void install(const Config &c);

// A requested report's message is kept to its first 4 KiB, cut between UTF-8 characters and marked
// with its whole length: the report stays one its reader accepts (64 MiB at most) however long the
// program's message, and the summary that quotes it stays short.
constexpr size_t kMaxMessageBytes = 4096;
std::string bounded_message(const char *text);

// The device a report that is not about a failure is about: the calling thread's, else device 0 once
// the driver has devices, else none (-1).
int report_ordinal();

}  // namespace gg::triggers
