// What this process's cuDNN asked for and used, for the "cudnn" section of every report
// (docs/report-schema.md). Cheap on the hot path: atomics for the totals; a short lock and a stack
// capture only when a call site asks for a larger workspace than it ever did.
#pragma once
#include <cstdint>

namespace gg::cudnn {

// cuDNN was found in the process (at `library`): from now on every report has the section.
void present(const char *library);

// cuDNN answered how much workspace something needs (a size query, a plan, the largest of an
// algorithm list). `site` is the hook's return address: requests are grouped by call site and the
// stack of each site's largest request is kept. Call it from the hook's own body: the stack starts
// at the hook's caller.
void requested(uint64_t bytes, const void *site);

// The cap turned a plan down (finalize failed), or marked `n` legacy algorithm results.
void rejected_plan(uint64_t bytes);
void rejected_algorithms(int n, uint64_t largest_bytes);
// The cap a decision was made with (the report shows the latest).
void cap_applied(uint64_t cap_bytes);

// Workspace handed to a running call (an execute, a convolution): counted while it runs.
class InUse {
public:
    explicit InUse(uint64_t bytes);
    ~InUse();
    InUse(const InUse &) = delete;
    InUse &operator=(const InUse &) = delete;

private:
    uint64_t bytes_;
};

// fork(): the lock(s) here are taken before fork and released on both sides (shim/start/start.cpp), so that the
// child never inherits one held by a thread that does not exist there.
void lock_for_fork();
void unlock_after_fork();

}  // namespace gg::cudnn
