// GPUGUARD_WARN_AT: the container's usage crossed the set fraction of its limit going up. One line on
// stderr and a report (reason warn_at), written by whoever saw the crossing: the admission of an
// allocation (shim/quota/guard.cpp) or a context charged after the fact (shim/usage/context.cpp).
#pragma once
#include <cstdint>

namespace gg::report {

void warn_at_crossed(int ordinal, uint64_t used, uint64_t limit);

}  // namespace gg::report
