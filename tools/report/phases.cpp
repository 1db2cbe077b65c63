#include "tools/report/phases.h"

namespace gg::report {
namespace {

bool contains(const std::string &s, const char *needle) { return s.find(needle) != std::string::npos; }

bool any_python(const Stack &s, const char *file_part) {
    for (const Frame &f : s.frames)
        if (f.python && contains(f.file, file_part)) return true;
    return false;
}

bool autograd_backward(const Stack &s) {
    for (const Frame &f : s.frames) {
        if (f.python && contains(f.file, "torch/autograd/")) return true;
        // Backward mostly runs on the autograd engine's own threads, where no Python frame is left.
        if (!f.python && (contains(f.symbol, "torch::autograd::Engine") || contains(f.symbol, "autograd::generated")))
            return true;
    }
    return false;
}

// Module.to / .cuda / .half ... (Module._apply) or loading weights: the parameters themselves.
bool moving_weights(const Stack &s) {
    for (const Frame &f : s.frames) {
        if (!f.python) continue;
        if (contains(f.file, "torch/nn/modules/module.py") &&
            (f.function == "_apply" || contains(f.function, "Module.to") || contains(f.function, "Module.cuda") ||
             f.function == "to" || f.function == "cuda" || contains(f.function, "load_state_dict")))
            return true;
        if (contains(f.file, "modeling_utils.py") && contains(f.function, "from_pretrained")) return true;
    }
    return false;
}

bool communication(const Stack &s) {
    for (const Frame &f : s.frames) {
        if (f.python &&
            (contains(f.file, "torch/distributed/") || contains(f.file, "torch/nn/parallel/distributed.py")))
            return true;
        if (!f.python && (contains(f.symbol, "c10d::") || contains(f.module, "libnccl") || contains(f.symbol, "nccl")))
            return true;
    }
    return false;
}

}  // namespace

const char *phase_name(Phase p) {
    switch (p) {
        case Phase::Optimizer: return "optimizer step";
        case Phase::Backward: return "autograd backward";
        case Phase::Forward: return "forward pass";
        case Phase::Inference: return "inference";
        case Phase::Weights: return "model weights";
        case Phase::Communication: return "communication buffers";
        case Phase::KvCache: return "KV cache";
        case Phase::Other: break;
    }
    return "other";
}

const char *phase_id(Phase p) {
    static const char *const ids[] = {"optimizer", "backward",      "forward",  "inference",
                                      "weights",   "communication", "kv_cache", "other"};
    return ids[static_cast<int>(p)];
}

const Frame *kv_cache_frame(const Stack &s) {
    for (const Frame &f : s.frames)
        if (f.python && contains(f.file, "cache_utils.py")) return &f;
    return nullptr;
}

Phase classify(const Stack &s, Mode mode) {
    if (kv_cache_frame(s)) return Phase::KvCache;
    if (communication(s)) return Phase::Communication;
    if (any_python(s, "torch/optim/")) return Phase::Optimizer;
    if (autograd_backward(s)) return Phase::Backward;
    if (moving_weights(s)) return Phase::Weights;
    // Under PyTorch's Python code, in none of the above: the forward computation, which in training
    // is where the activations that backward needs are allocated. Other Python libraries (CuPy, JAX,
    // Numba) have no such phases: they stay Other.
    for (const Frame &f : s.frames)
        if (f.python && (contains(f.file, "torch/") || contains(f.file, "transformers/")))
            return mode == Mode::Inference ? Phase::Inference : Phase::Forward;
    return Phase::Other;
}

Mode mode_of(const Report &r) {
    bool torch = false;
    for (const auto &[id, s] : r.stacks) {
        if (autograd_backward(s) || any_python(s, "torch/optim/")) return Mode::Training;
        torch = torch || any_python(s, "torch/");
    }
    return torch ? Mode::Inference : Mode::Unknown;
}

bool through_caching_allocator(const Stack &s) {
    for (const Frame &f : s.frames) {
        if (f.python) continue;
        if (contains(f.symbol, "c10::cuda::CUDACachingAllocator")) return true;
        if (base_name(f.module).rfind("libc10_cuda", 0) == 0) return true;
    }
    return false;
}

}  // namespace gg::report
