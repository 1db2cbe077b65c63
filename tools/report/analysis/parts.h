// The pieces of analyze() (tools/report/analysis.h), one file per kind of finding:
//   analyze.cpp    the facts every piece needs, worked out once: who holds what (the container's
//                  processes; phases and allocators by stack; the tensor view and its what-if);
//   diagnosis.cpp  the headline and the lines under it, by the report's reason;
//   advice.cpp     what to change, each piece given only where the report's numbers support it.
#pragma once

#include <cstdint>
#include <string>

#include "tools/report/analysis.h"

namespace gg::report::analysis {

struct Facts {
    uint64_t live = 0;          // this process's live bytes
    uint64_t container = 0;     // the container's bytes (the ledger's), or live where not known
    uint64_t ledger_total = 0;  // the ledger's processes, summed: what a sibling's share is of
    uint64_t request = 0;       // the failed request's bytes (0: none)
    uint64_t held_total = 0;    // what the phases divide: tensor bytes, or live segment bytes
    std::string api;            // the failed call, or "an allocation"
    std::string on_device;      // " on device N", or empty
};

// What this process could have used when its allocation failed (advice.cpp): under the quota, the
// limit less the container's other processes (none under a per-process limit); out of device memory,
// the device's free memory and what the process holds (`holds`). 0 when the report does not say.
uint64_t memory_for_process(const Report &r, const Facts &f, const Analysis &a, uint64_t holds);

void diagnose(const Report &r, const Facts &f, Analysis &a);
void advise(const Report &r, const Facts &f, Analysis &a);

inline std::string process_desc(const Holder &h) {
    std::string s = "pid " + std::to_string(h.pid);
    if (!h.command.empty()) s += " (" + h.command + ")";
    return s;
}

}  // namespace gg::report::analysis
