// Python frames of the calling thread, read without the GIL.
//
// When an allocation reaches the driver from PyTorch or ctypes, the allocating thread has released the
// GIL, but its Python frames cannot change while it is inside our hook: it is blocked in us. So they
// are read the way sampling profilers (py-spy, austin) read them: the thread's own PyThreadState, the
// interpreter's frame list and each code object's line table, with the layout of the running CPython
// version, detected at run time (libpython is never linked). Nothing here acquires the GIL or calls
// Python code.
#pragma once
#include <cstdint>

namespace gg::py {

struct Frame {
    const char *file;      // interned: lives as long as the process
    const char *function;  // qualified name where the version has one
    int line;              // -1 when the line table could not be read
    // True for the outermost Python frame of one run of the eval loop: the frame that C code entered
    // (a call from C into Python). Python frames between two entry frames ran in one native
    // _PyEval_EvalFrameDefault activation, which is how native and Python stacks are merged.
    bool entry;
};

// Detects the interpreter once (Py_IsInitialized, its version, the frame layout). Cheap after the
// first call. False when the process has no Python, or a version whose layout is not known.
bool available();

// Writes the calling thread's Python frames, innermost first; returns how many (0 when there is no
// Python, the thread has no thread state, the interpreter is not initialised or is finalising,
// GPUGUARD_PYTHON_STACKS=0, or anything looked inconsistent).
int capture(Frame *out, int max);

// The calling thread's Python stack as it stands, for a site key (shim/stacks/reuse.h): a hash of
// `seed` and every frame's code object, instruction address and depth, or 0 when there are no Python
// frames (as capture() would find none). Reads only the frames themselves: no line
// table, no name, no lock, so a reused site costs a walk of pointers. Two different stacks give
// the same key where every frame ran the same instruction of a code object at the same address
// (a freed code object's address reused by another one, at the very same places: reuse's checks
// find that), or by a 64-bit hash's chance (the sum of each frame's own mix: frames.cpp, frame_part).
uint64_t site_key(uint64_t seed);
// The same of at most the `max_frames` innermost frames. `*beyond` is the address of the first frame
// left out (0 when the key covers every frame; the key then differs from any key of a stack of only
// those frames): where the Python stack stands under them, which the frames further out decide (their
// number and sizes on the interpreter's frame stack), read without reading them.
uint64_t site_key(uint64_t seed, int max_frames, uintptr_t *beyond);

// True when ip lies inside the interpreter's eval loop (_PyEval_EvalFrameDefault, and the parts of
// it learned below): the native frame where Python frames stand when native and Python stacks are merged.
bool is_eval_loop(uintptr_t ip);

// The eval loop's code outside its symbol's range: a compiler may split a function's rarely run blocks
// into a part of its own with no symbol (GCC's .cold), and Debian's builds of CPython 3.14 and 3.15 keep
// the whole dispatch loop there (docs/platform-facts.md). shim/stacks/eval_loop.cpp finds such a part
// from where the eval loop's frame lies, with these two:
// - the address of the innermost eval-loop run's entry frame, a local of that run's native frame
//   (3.12+, owner FRAME_OWNED_BY_CSTACK or _INTERPRETER), 0 where there is none (3.11, no Python frame);
uintptr_t innermost_entry_frame();
// - and [lo, hi) added to what is_eval_loop() answers for (at most kEvalLoopParts; false when full).
constexpr int kEvalLoopParts = 4;
bool add_eval_loop_part(uintptr_t lo, uintptr_t hi);

// "3.12" etc. for reports and `gpuguard doctor`; empty when not available().
const char *version();

// fork(): the lock(s) here are taken before fork and released on both sides (shim/start/start.cpp), so that the
// child never inherits one held by a thread that does not exist there.
void lock_for_fork();
void unlock_after_fork();

}  // namespace gg::py
