// Prints the row of shim/python/layout.h's kLayouts for the CPython whose headers it is built against
// (t_pyframes.sh builds it against each release in the Debian root of tests/pyroot/make_root.sh and
// compares with the table). The internal headers need Py_BUILD_CORE. 3.14+ only: the frame's struct
// moved to internal/pycore_interpframe_structs.h, and its f_executable became a tagged _PyStackRef.
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>

#if PY_VERSION_HEX < 0x030E0000
#error "tests/pyroot/layout.c reads the headers of CPython 3.14 and later"
#endif
#include "internal/pycore_frame.h"
#include "internal/pycore_interpframe_structs.h"
#include "internal/pycore_stackref.h"

typedef struct _PyInterpreterFrame Frame;

int main(void) {
    printf("{%d, %d, -1, %zu, %zu, %zu, %zu, %zu, -1, %zu, %zu, %zu, %zu, %zu, %zu, %zu, %zu, %zu, %zu, %d}\n",
           PY_MAJOR_VERSION, PY_MINOR_VERSION, offsetof(PyThreadState, current_frame), offsetof(Frame, f_executable),
           offsetof(Frame, previous), offsetof(Frame, instr_ptr), offsetof(Frame, owner),
           offsetof(PyCodeObject, co_filename), offsetof(PyCodeObject, co_name), offsetof(PyCodeObject, co_qualname),
           offsetof(PyCodeObject, co_linetable), offsetof(PyCodeObject, co_firstlineno),
           offsetof(PyCodeObject, _co_firsttraceable), offsetof(PyCodeObject, co_code_adaptive), sizeof(PyASCIIObject),
           sizeof(PyCompactUnicodeObject), sizeof(PyUnicodeObject), (int)Py_TAG_BITS);
    // The owner of the eval loop's entry frame (Python/ceval.c), kOwnedByCStack in layout.h.
    printf("entry frame owner %d\n", (int)FRAME_OWNED_BY_INTERPRETER);
    return 0;
}
