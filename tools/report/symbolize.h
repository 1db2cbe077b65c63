// Names native frames at report time: the shim records module + offset + build id (the hot path does
// no symbolization), and `gpuguard report` turns them into function, file and line from the module's
// own debug info, or from a separate debug file found by build id under /usr/lib/debug/.build-id/.
//
// elfutils' libdw does the reading. It is loaded with dlopen, and only when a report has native frames:
// the command ships in a wheel and a .deb that must start where elfutils is not installed, and with
// the glibc floor of common/floor/glibc.def. Nothing here reaches the network (no debuginfod).
//
// Whatever the report names as a module is opened only when it is a regular file that starts as an ELF
// executable or shared object, so that a report naming /dev/zero, a FIFO or /etc/shadow neither hangs
// nor reads what it should not.
#pragma once

#include <string>
#include <vector>

#include "tools/report/model.h"

namespace gg::report {

struct SymbolizeOptions {
    std::string library = "libdw.so.1";        // the elfutils library to load
    std::string debug_dir = "/usr/lib/debug";  // its .build-id/xx/yyyy.debug files are searched
};

// Fills Frame::symbol, source_file and source_line of the native frames of `r` whose module's debug
// info names them; the others stay as module + offset. Returns what a person should know, one line
// each without the "gpuguard: " prefix: libdw missing, a module not on this machine, one whose build id
// is not the report's, one without debug info. Never throws; never fails the report.
std::vector<std::string> symbolize(Report &r, const SymbolizeOptions &opt = SymbolizeOptions());

}  // namespace gg::report
