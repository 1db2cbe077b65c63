// Out-of-memory episodes. One OOM in PyTorch is several failing driver calls (the caching allocator
// frees its cache and retries; cuDNN probes plan after plan), so failures less than a second apart
// are one episode and give one report. Reports per process are capped (GPUGUARD_MAX_REPORTS).
#pragma once
#include <cstdint>

#include "shim/api/refusal.h"

namespace gg::episode {

using Cause = RefusalCause;
using Request = Refusal;

// A failed allocation. skip_frames: the shim's own frames above the caller.
void failed(const Request &r, int skip_frames);

// PyTorch's caching allocator gave up on a request of `requested` bytes (shim/torch/view.h), after
// the driver failures of the current episode (its report is then written again with PyTorch's view
// of the out-of-memory), or without any (a report of its own, reason allocator_oom).
void allocator_out_of_memory(int ordinal, uint64_t requested);

// c10 handed out a block: when a refusal inside its allocator waited for PyTorch's verdict, PyTorch
// recovered from it (it freed its cache and retried), so it was no out-of-memory: no report. True
// when there was such a refusal.
bool allocator_recovered();

// fork(): the episode lock is taken across it (shim/start/start.cpp); the child starts with no episode.
void lock_for_fork();
void unlock_after_fork();
void reset_after_fork();

}  // namespace gg::episode
