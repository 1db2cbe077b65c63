// What our dlsym and cuGetProcAddress hand back: the hook, when the library's answer is the real
// function of one of our rows, else the library's answer unchanged. Pure decisions over a table of
// rows (shim/hooks/hook_table.cpp makes the one from shim/api/hooks.def), so that unit tests can
// check them with a table of their own.
#pragma once
#include <cstddef>

#include "shim/api/cuda_api.h"

namespace gg {

// One driver hook: what cuGetProcAddress and dlsym need to know of it.
struct DriverRow {
    const char *symbol;
    const char *family;      // the base name a program asks cuGetProcAddress for
    int since;               // the lowest cudaVersion for which the driver answers the family with it
    bool per_thread_stream;  // the _ptsz variant
    void *hook;
    void *(*real)(const DriverRow &row);  // the real function behind it (from real_driver())
};

// A runtime, NVML or cuDNN hook: the real function is found where the program loaded the library.
struct OtherRow {
    const char *symbol;
    void *hook;
    void *(*find_real)(const char *symbol);
};

struct HookTable {
    const DriverRow *driver;
    size_t driver_count;
    const OtherRow *other;
    size_t other_count;
};

// Whether a name is one of our hooks (any library). Cheap for every other name: the dlsym
// interposer asks it for each lookup of the process.
bool is_hooked_name(const HookTable &t, const char *symbol);

// Our replacement for a dlsym result: the hook when `answer` is the real function we stand in front
// of, else `answer` unchanged.
void *dlsym_answer(const HookTable &t, const char *symbol, void *answer);

// Our replacement for a cuGetProcAddress result, honouring cudaVersion and flags (per-thread-stream
// variants): the hook for the variant the driver chose (by identity with our real function, else by
// the driver's own rule: the newest variant the caller's version allows), else `answer` unchanged.
void *procaddress_answer(const HookTable &t, const char *symbol, int cuda_version, cuuint64_t flags, void *answer);

}  // namespace gg
