// Whether a library really is gpuguard's shim and preloads: a copy of this command started with it
// in LD_PRELOAD (`gpuguard doctor --probe-library LIB`, tools/commands/doctor/library.cpp) says what
// the loader did. `run` refuses to start a program under a library that fails it (the program would
// run with no quota), and `doctor` reports it.
#pragma once
#include <string>

namespace gg::tool {

struct LibraryProbe {
    std::string preloaded;      // "1" when the loader mapped it as a preload
    std::string dlopen;         // "ok", or dlopen's reason
    std::string shim;           // "1" when it exports gpuguard_report (it is the shim, not another library)
    std::string unwind_beside;  // libunwind.so.8 beside it: "ok" or dlopen's reason; "" when none is there
    std::string unwind_system;  // else the system's: where it is, or "none"
    std::string out;            // all the probe printed
};

// Runs the probe: kShim, or with *why (one line naming `lib`) kNotShim when the probe saw `lib` fail
// to preload as the shim (it crashed, or did not load, or is another library), kUnchecked when it
// could not run at all (no /proc/self/exe, no process to start); *probe has what it said.
enum class ProbeVerdict { kShim, kNotShim, kUnchecked };
ProbeVerdict probe_library_as_preload(const std::string &lib, LibraryProbe *probe, std::string *why);

}  // namespace gg::tool
