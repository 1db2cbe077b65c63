// Why stacks are unwound: in the profiling build (make PROFILE=1) only, a count of the site cache's
// verdicts by the kind of key, and the stacks unwound most often with the number of distinct keys that
// led to each, printed at exit. A stack unwound once a step under a new key each time is a site whose
// key is not stable (tests/bench/gpu_tensor_cost.sh reads this on the GPU machine). Internal to stacks.
#pragma once
#include <cstdint>

namespace gg::stacks::census {

enum class Kind { kPython, kNative, kPythonExtended };
enum class Outcome { kMiss, kReuse, kCheck, kUnstable };

#ifdef GG_PROFILE
void note(Kind kind, Outcome outcome);
void unwound(uint64_t key, uint32_t stack);
#else
inline void note(Kind, Outcome) {}
inline void unwound(uint64_t, uint32_t) {}
#endif

}  // namespace gg::stacks::census
