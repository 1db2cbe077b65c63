// Finding the real cuDNN function behind each hook, so that a hook can never call back into itself.
//
// cuDNN 9 is a thin dispatcher, libcudnn.so.9, whose every export lazily dlopens a sub-library
// (libcudnn_graph.so.9 for the backend API, libcudnn_cnn.so.9 for the legacy convolution API, ...)
// RTLD_LOCAL, dlsyms the same name there (through our dlsym interposer) and jumps to it. Frameworks
// load libcudnn.so.9 late and often RTLD_LOCAL, so dlsym(RTLD_NEXT) from a preload finds nothing (a
// call through null) or the dispatcher; and a dispatcher whose table ever held our hook would bounce
// hook -> dispatcher -> hook forever. So, for each hooked symbol:
//   - the "terminal" is the definition in a loaded cuDNN sub-library (basename libcudnn_*), found by
//     dlsym on that library's own handle and checked with dladdr to be neither the shim nor the
//     dispatcher. It cannot lead back to us unless cuDNN calls its public API, which the depth guard
//     below passes straight to a terminal again.
//   - the "entry" is what a program gets for the name: the definition in libcudnn.so.9 (or .8), else
//     the next definition after the shim (RTLD_NEXT), never the shim's own. Our dlsym answers the hook
//     for the entry only; the dispatcher's own lookups in its sub-libraries get the terminal, so its
//     table never holds a hook.
//   - a hook at depth 0 calls the terminal, or the entry while the sub-library is not loaded yet (the
//     dispatcher then loads it); a hook entered from inside cuDNN (depth > 0) calls the terminal only,
//     or answers CUDNN_STATUS_NOT_INITIALIZED: at most one pass through the dispatcher, never a loop,
//     never a call through null. A monolithic library (no sub-libraries) is its own terminal.
// When cuDNN is not in the process nothing is found and every hook answers NOT_INITIALIZED.
#pragma once
#include <atomic>
#include <cstdint>

namespace gg::cudnn {

// One hooked symbol's cached resolution; constant-initialized, one per hook (shim/hooks/cudnn.cpp).
struct Slot {
    const char *name;
    std::atomic<void *> terminal{nullptr};
    std::atomic<void *> entry{nullptr};
    // The loader's object-add count at the last failed terminal search: no new library, no new search.
    std::atomic<unsigned long long> miss_generation{~0ull};

    // The function to call: the terminal, else (only when `outermost`) the entry; null when none.
    void *resolve(bool outermost);
};

// One hook invocation: counts this thread's depth inside cuDNN hooks and picks the function to call.
// Only the outermost hook on a thread records or caps anything.
class Gate {
public:
    explicit Gate(Slot &slot);
    ~Gate();
    bool outermost() const { return outermost_; }
    template <typename Fn>
    Fn fn() const {
        return reinterpret_cast<Fn>(fn_);
    }
    Gate(const Gate &) = delete;
    Gate &operator=(const Gate &) = delete;

private:
    bool outermost_;
    void *fn_;
};

// The entry point of `symbol` in the loaded cuDNN (see above), or null: what our dlsym replaces.
void *entry_of(const char *symbol);

}  // namespace gg::cudnn
