// Where in a program's life an allocation was made, read from its stack's frames: a training step's
// phases (forward, backward, optimizer), inference, the model's weights being moved to the GPU,
// communication buffers (process groups, NCCL), a KV cache. The diagnosis (analysis.h), the text
// summary and the HTML page tag holders with these.
#pragma once

#include <string>

#include "tools/report/model.h"

namespace gg::report {

enum class Phase {
    Optimizer,      // under torch/optim: optimizer state and the step's temporaries
    Backward,       // autograd: gradients and backward temporaries
    Forward,        // a training step's forward computation: activations kept for backward
    Inference,      // a forward computation with no backward in the program (eval, generate())
    Weights,        // Module.to / .cuda / loading a state dict: the model's parameters
    Communication,  // torch.distributed, DDP's buckets, NCCL
    KvCache,        // transformers' cache_utils: a KV cache that grows with every generated token
    Other,
};
constexpr int kPhases = static_cast<int>(Phase::Other) + 1;

// "optimizer step", "autograd backward", "forward pass", "inference", "model weights",
// "communication buffers", "KV cache", "other".
const char *phase_name(Phase p);
// "optimizer", "backward", "forward", "inference", "weights", "communication", "kv_cache", "other":
// the keys of --json.
const char *phase_id(Phase p);

// Whether the program trains (some stack of the report passes through autograd's backward or an
// optimizer) or only runs forward (inference): the same forward frames mean activations kept for
// backward in one and transient values in the other.
enum class Mode { Unknown, Training, Inference };
Mode mode_of(const Report &r);

// The phase of one stack; `mode` tells a forward computation of training from inference (Unknown:
// forward, as before the report's mode is known).
Phase classify(const Stack &s, Mode mode = Mode::Unknown);

// True when the stack goes through PyTorch's caching allocator (c10::cuda::CUDACachingAllocator,
// or any frame in libc10_cuda).
bool through_caching_allocator(const Stack &s);

// The frame that names a KV cache's growth (the innermost frame in transformers' cache_utils.py),
// or null.
const Frame *kv_cache_frame(const Stack &s);

}  // namespace gg::report
