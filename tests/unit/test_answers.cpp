// What our dlsym and cuGetProcAddress hand back (shim/resolve/answers.h), on a table of rows made up
// here: the hook when the library answered with the real function of one of our rows, the variant
// the driver's own rule picks for the caller's version and flags, and the library's answer untouched
// for everything else.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <string>

#include "shim/resolve/answers.h"

using namespace gg;

namespace {

// Distinct addresses standing for functions.
char hooks[16], reals[16], other[4];
void *hook(int i) { return &hooks[i]; }
void *real(int i) { return &reals[i]; }

std::map<std::string, void *> g_real_of;
void *real_by_symbol(const DriverRow &row) { return g_real_of[row.symbol]; }
void *runtime_real(const char *symbol) { return strcmp(symbol, "cudaMalloc") == 0 ? real(9) : nullptr; }

const DriverRow kRows[] = {
    {"cuMemAlloc_v2", "cuMemAlloc", 3020, false, hook(0), real_by_symbol},
    {"cuMemAllocAsync", "cuMemAllocAsync", 11020, false, hook(1), real_by_symbol},
    {"cuMemAllocAsync_ptsz", "cuMemAllocAsync", 11020, true, hook(2), real_by_symbol},
    {"cuGetProcAddress", "cuGetProcAddress", 11030, false, hook(3), real_by_symbol},
    {"cuGetProcAddress_v2", "cuGetProcAddress", 12000, false, hook(4), real_by_symbol},
};
const OtherRow kOther[] = {{"cudaMalloc", hook(9), runtime_real}};
const HookTable kTable = {kRows, 5, kOther, 1};

struct RealFunctions {
    RealFunctions() {
        g_real_of = {{"cuMemAlloc_v2", real(0)},
                     {"cuMemAllocAsync", real(1)},
                     {"cuMemAllocAsync_ptsz", real(2)},
                     {"cuGetProcAddress", real(3)},
                     {"cuGetProcAddress_v2", real(4)}};
    }
};

}  // namespace

TEST_CASE("cuGetProcAddress: the driver's real function of a row is answered with its hook") {
    RealFunctions r;
    CHECK(procaddress_answer(kTable, "cuMemAlloc", 12000, 0, real(0)) == hook(0));
    CHECK(procaddress_answer(kTable, "cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                             real(2)) == hook(2));
}

TEST_CASE("cuGetProcAddress: cudart's self-lookup gets our cuGetProcAddress for its version") {
    RealFunctions r;
    // docs/platform-facts.md: cudart asks for "cuGetProcAddress" itself and resolves everything else
    // through the pointer it gets; handing back the real one would hide every allocation.
    CHECK(procaddress_answer(kTable, "cuGetProcAddress", 12000, 0, real(4)) == hook(4));
    CHECK(procaddress_answer(kTable, "cuGetProcAddress", 11030, 0, real(3)) == hook(3));
}

TEST_CASE("cuGetProcAddress: an alias the driver hands out is replaced by the driver's own rule") {
    RealFunctions r;
    void *alias = &other[0];
    CHECK(procaddress_answer(kTable, "cuGetProcAddress", 12000, 0, alias) == hook(4));  // newest for 12000
    CHECK(procaddress_answer(kTable, "cuGetProcAddress", 11040, 0, alias) == hook(3));  // _v2 is from 12000
    CHECK(procaddress_answer(kTable, "cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, alias) ==
          hook(2));
    CHECK(procaddress_answer(kTable, "cuMemAllocAsync", 12000, 0, alias) == hook(1));
    // The per-thread flag on a family without a _ptsz variant: the plain one.
    CHECK(procaddress_answer(kTable, "cuMemAlloc", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, alias) ==
          hook(0));
}

TEST_CASE("cuGetProcAddress: versions older than any row, other families and null pass through") {
    RealFunctions r;
    void *alias = &other[1];
    CHECK(procaddress_answer(kTable, "cuMemAlloc", 3010, 0, alias) == alias);  // the 32-bit cuMemAlloc of CUDA 3.1
    CHECK(procaddress_answer(kTable, "cuLaunchKernel", 12000, 0, alias) == alias);
    CHECK(procaddress_answer(kTable, "cuMemAlloc", 12000, 0, nullptr) == nullptr);
    CHECK(procaddress_answer(kTable, nullptr, 12000, 0, alias) == alias);
}

TEST_CASE("dlsym: the real function of a hooked name becomes the hook, anything else is untouched") {
    RealFunctions r;
    CHECK(dlsym_answer(kTable, "cuMemAlloc_v2", real(0)) == hook(0));
    CHECK(dlsym_answer(kTable, "cudaMalloc", real(9)) == hook(9));
    // Another library's function of the same name (a second cudart, a wrapper) is not ours to replace.
    CHECK(dlsym_answer(kTable, "cuMemAlloc_v2", &other[2]) == &other[2]);
    CHECK(dlsym_answer(kTable, "cudaMalloc", &other[3]) == &other[3]);
    CHECK(dlsym_answer(kTable, "malloc", &other[2]) == &other[2]);
    CHECK(is_hooked_name(kTable, "cudaMalloc"));
    CHECK(is_hooked_name(kTable, "cuMemAllocAsync_ptsz"));
    CHECK_FALSE(is_hooked_name(kTable, "cuMemAlloc"));  // a family, not a symbol
    CHECK_FALSE(is_hooked_name(kTable, "free"));
}
