// Why stacks are unwound: in the profiling build (make PROFILE=1) only, a count of the site cache's
// verdicts by the kind of key, and the stacks unwound most often with the number of distinct keys that
// led to each, printed at exit. A stack unwound once a step under a new key each time is a site whose
// key is not stable (tests/bench/gpu_tensor_cost.sh reads this on the GPU machine). Internal to stacks.
#pragma once
#include <cstdint>

namespace gg::stacks::census {

// A Python key of the innermost frames, and one extended by the C stack's depth or native frames (an
// unstable site), by where the Python stack stands, or made of every frame (a deep site).
enum class Kind { kPython, kNative, kPythonExtended, kPythonDepth, kPythonAnchored, kPythonWhole, kCount };
enum class Outcome { kMiss, kReuse, kCheck, kUnstable };
// The walk memo's answers (shim/stacks/walk_memo.h): recalled; not recalled though a walk from the same
// start was kept (its words differed); not recalled, none kept from that start; and, on keeping a
// walk, whether it pushed out another (from the same start, or from another start of its set); and each
// kept walk a recall compared word by word (more than the recalls: sets holding several walks of a start);
// and the recalls trusted (answered by the tag without comparing: among the recalled).
enum class Memo {
    kRecalled,
    kWordsDiffer,
    kNoStart,
    kEvictedSameStart,
    kEvictedOtherStart,
    kComparedInFull,
    kTrusted,
    kTrustedWrong,  // counted by a build with GG_TRUST_AUDIT only: trusted, and its words differed
    kCount
};

#ifdef GG_PROFILE
void note(Kind kind, Outcome outcome);
void unwound(uint64_t key, uint32_t stack);
void memo(Memo what);
#else
inline void note(Kind, Outcome) {}
inline void unwound(uint64_t, uint32_t) {}
inline void memo(Memo) {}
#endif

}  // namespace gg::stacks::census
