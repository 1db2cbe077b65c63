// Where each supported CPython keeps what shim/python/frames.cpp reads: one small table per feature release.
//
// libpython is never linked, so these offsets stand in for its headers. They were measured with
// offsetof() against the headers each version installs (include/pythonX.Y/cpython/pystate.h,
// cpython/code.h, cpython/unicodeobject.h, internal/pycore_frame.h, and from 3.14
// internal/pycore_interpframe_structs.h), built as release (non-debug, GIL) x86-64, and hold for any
// LP64 target; 3.14 and 3.15 against Debian's python3.14-dev and python3.15-dev (tests/pyroot/layout.c
// prints a row). They are stable within a feature release: PyThreadState, PyCodeObject and the str
// structs are part of the (non-limited) C API that compiled extensions depend on, and
// _PyInterpreterFrame is what debuggers and profilers (py-spy, austin) rely on. A cheap self-check
// against the running interpreter's own type sizes guards against a build that differs anyway (a
// debug or free-threaded build): see check_layout() in shim/python/frames.cpp.
#pragma once
#include <cstdint>
#include <cstring>

namespace gg::py {

struct Layout {
    int major, minor;
    // PyThreadState: 3.11 and 3.12 reach the innermost frame through tstate->cframe->current_frame;
    // 3.13 dropped _PyCFrame and keeps tstate->current_frame (then tstate_cframe is -1).
    int tstate_cframe;
    int current_frame;  // in _PyCFrame, or in PyThreadState when tstate_cframe < 0
    // _PyInterpreterFrame (internal/pycore_frame.h).
    int frame_code;      // f_code (3.11, 3.12) / f_executable (3.13+)
    int frame_previous;  // previous
    int frame_instr;     // prev_instr (3.11, 3.12) / instr_ptr (3.13+)
    int frame_owner;     // owner (char)
    int frame_is_entry;  // is_entry (bool, 3.11 only); -1 where entry frames are owner CSTACK shims
    // PyCodeObject (cpython/code.h).
    int code_filename, code_name, code_qualname, code_linetable, code_firstlineno;
    int code_firsttraceable;  // _co_firsttraceable: instructions before it are the frame's prologue
    int code_adaptive;        // co_code_adaptive: the instructions; equals PyCode_Type.tp_basicsize
    // str (cpython/unicodeobject.h): compact ASCII data follows PyASCIIObject; other compact data
    // (latin-1, UCS-2 or UCS-4 by the state's kind) follows PyCompactUnicodeObject.
    int ascii_size, compact_size;
    int unicode_basicsize;  // sizeof(PyUnicodeObject) == PyUnicode_Type.tp_basicsize
    // 3.14+: f_executable is a _PyStackRef, a pointer whose low bits are tags (internal/pycore_stackref.h:
    // Py_TAG_REFCNT marks an immortal or deferred reference, Py_INT_TAG a tagged int); 0 before.
    uintptr_t code_tags;
};

// Offsets shared by every supported version (object.h, bytesobject.h, unicodeobject.h).
constexpr int kObType = 8;            // PyObject.ob_type
constexpr int kVarSize = 16;          // PyVarObject.ob_size (bytes length)
constexpr int kBytesData = 32;        // PyBytesObject.ob_sval
constexpr int kStrLength = 16;        // PyASCIIObject.length (code points)
constexpr int kStrHash = 24;          // PyASCIIObject.hash, -1 until computed
constexpr int kStrState = 32;         // PyASCIIObject.state bit field: interned:2 kind:3 compact:1 ascii:1
constexpr int kTypeName = 24;         // PyTypeObject.tp_name
constexpr int kTypeBasicSize = 32;    // PyTypeObject.tp_basicsize
constexpr int kOwnedByGenerator = 1;  // enum _frameowner, all versions
// 3.12+: the eval loop's entry shim frame, on the C stack. 3.12 and 3.13 name it FRAME_OWNED_BY_CSTACK;
// 3.14 inserts FRAME_OWNED_BY_INTERPRETER at 3 (CSTACK moves to 4) and gives the entry frame that owner,
// and 3.15 drops CSTACK: the entry frame's owner is 3 in every version.
constexpr int kOwnedByCStack = 3;

constexpr Layout kLayouts[] = {
    // 3.11.7: tstate.cframe 56, _PyCFrame.current_frame 8; frame f_code 32, previous 48,
    // prev_instr 56, is_entry 68, owner 69; str has a wstr pointer, hence the larger sizes.
    {3, 11, 56, 8, 32, 48, 56, 69, 68, 112, 120, 128, 136, 72, 168, 184, 48, 72, 80, 0},
    // 3.12.1: tstate.cframe 56, _PyCFrame.current_frame 0; frame f_code 0, previous 8,
    // prev_instr 56, owner 70 (after return_offset); wstr is gone from str.
    {3, 12, 56, 0, 0, 8, 56, 70, -1, 112, 120, 128, 136, 68, 176, 192, 40, 56, 64, 0},
    // 3.13.0: tstate.current_frame 72; frame f_executable 0, previous 8, instr_ptr 56, owner 70.
    {3, 13, -1, 72, 0, 8, 56, 70, -1, 112, 120, 128, 136, 68, 184, 200, 40, 56, 64, 0},
    // 3.14.8: as 3.13 but owner 74 (after stackpointer), _co_firsttraceable 192, co_code_adaptive 208,
    // and f_executable a tagged _PyStackRef (2 tag bits).
    {3, 14, -1, 72, 0, 8, 56, 74, -1, 112, 120, 128, 136, 68, 192, 208, 40, 56, 64, 3},
    // 3.15.0: as 3.14.
    {3, 15, -1, 72, 0, 8, 56, 74, -1, 112, 120, 128, 136, 68, 192, 208, 40, 56, 64, 3},
};

// Whether p can be an object or frame pointer at all: every one is 8-aligned, none is in the first
// page or above the user address space. Used to stop a walk before following a damaged pointer.
inline bool plausible(uintptr_t p) { return p >= 4096 && p < (uintptr_t(1) << 56) && !(p & 7); }

inline const Layout *find_layout(int major, int minor) {
    for (const Layout &l : kLayouts)
        if (l.major == major && l.minor == minor) return &l;
    return nullptr;
}

// Reads a T at base+off of the interpreter's memory without assuming alignment (the layouts are
// CPython's, not ours). Used by the frame walk and the string reader.
template <class T>
T at(uintptr_t base, int off) {
    T v;
    std::memcpy(&v, reinterpret_cast<const void *>(base + off), sizeof v);
    return v;
}

// The executable a frame runs, its tags cleared: a code object, or None or another object (3.13+) that
// the caller tells from a code object by its type. A tagged int is never one (it reads as 0).
inline uintptr_t frame_executable(const Layout &l, uintptr_t frame) {
    uintptr_t ref = at<uintptr_t>(frame, l.frame_code);
    if (l.code_tags && (ref & l.code_tags) == l.code_tags) return 0;  // Py_INT_TAG: every tag bit set
    return ref & ~l.code_tags;
}

}  // namespace gg::py
