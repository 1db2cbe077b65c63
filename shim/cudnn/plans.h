// The backend execution plans alive in this process and their workspace sizes. cuDNN has no call
// that says what type a backend descriptor is; Finalize must check plans only (asking any other
// descriptor for a plan attribute fails, and cuDNN would log that failure), and Execute wants the
// plan's workspace size without a call into cuDNN.
#pragma once
#include <cstdint>

namespace gg::cudnn::plans {

constexpr int64_t kUnknown = -1;

void created(const void *plan);
void destroyed(const void *desc);  // any descriptor; a no-op for those that are not plans
bool is_plan(const void *desc);
void set_workspace(const void *plan, int64_t bytes);
// The plan's workspace size, or kUnknown (not a plan we saw created, or not finalized yet).
int64_t workspace(const void *plan);

// fork(): the lock(s) here are taken before fork and released on both sides (shim/start/start.cpp), so that the
// child never inherits one held by a thread that does not exist there.
void lock_for_fork();
void unlock_after_fork();

}  // namespace gg::cudnn::plans
