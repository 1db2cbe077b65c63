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
    std::string shim;           // "1" when it exports gpuguard's API (it is the shim, not another library)
    std::string unwind_beside;  // libunwind.so.8 beside it: "ok" or dlopen's reason; "" when none is there
    std::string unwind_system;  // else the system's: where it is, or "none"
    std::string out;            // all the probe printed
};

// Runs the probe. False with *why (one line naming `lib`) when the probe could not run, crashed, or
// found `lib` not preloading as the shim; *probe has what it said in any case.
bool probe_library_as_preload(const std::string &lib, LibraryProbe *probe, std::string *why);

}  // namespace gg::tool
