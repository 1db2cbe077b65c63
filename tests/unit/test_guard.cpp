// The decision core through its interface (shim/quota/guard.h), as a hook calls it, on a core of the
// test's own (core_fixture.h): admission against the ledger, tracking, the rollback of a failed
// call, frees, and the quota view that cuMemGetInfo answers with.
#include <doctest/doctest.h>

#include "core_fixture.h"
#include "shim/quota/guard.h"

using namespace gg;
using gg::testing::Core;
using gg::testing::kGiB;
using gg::testing::kMiB;

namespace {

// A whole allocation as a hook makes it: admit, then (the driver said yes) commit.
CUresult allocate(uint64_t key, uint64_t bytes) {
    guard::Ticket t;
    CUresult r = guard::admit(Api::cuMemAlloc_v2, -1, bytes, &t);
    if (r == CUDA_SUCCESS) guard::commit(t, KeyKind::kPointer, key, bytes);
    return r;
}

void release(uint64_t key) {
    Allocation a;
    bool found = guard::take(KeyKind::kPointer, key, &a);
    guard::finish_free(found, KeyKind::kPointer, key, a, CUDA_SUCCESS);
}

}  // namespace

TEST_CASE("admit charges the ledger, commit tracks, the free gives both back") {
    Core core("1GiB");
    guard::DriverCall scope;
    CHECK(allocate(0x1000, 512 * kMiB) == CUDA_SUCCESS);
    CHECK(core.used() == 512 * kMiB);
    CHECK(tracker().live_bytes() == 512 * kMiB);
    release(0x1000);
    CHECK(core.used() == 0);
    CHECK(tracker().live_bytes() == 0);
}

TEST_CASE("a request past the limit is refused before the driver, with one report") {
    Core core("1GiB");
    guard::DriverCall scope;
    REQUIRE(allocate(0x1000, 768 * kMiB) == CUDA_SUCCESS);
    CHECK(allocate(0x2000, 512 * kMiB) == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(core.used() == 768 * kMiB);  // nothing of the refused request stays charged
    CHECK(tracker().live_bytes() == 768 * kMiB);
    CHECK(core.reports().size() == 1);
    CHECK(core.reports()[0].find("gpuguard-quota-") != std::string::npos);
    // A second refusal within the episode's second joins it: no second report.
    CHECK(allocate(0x3000, 512 * kMiB) == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(core.reports().size() == 1);
}

TEST_CASE("a driver failure un-charges exactly what the request charged") {
    Core core("1GiB");
    guard::DriverCall scope;
    REQUIRE(allocate(0x1000, 256 * kMiB) == CUDA_SUCCESS);
    guard::Ticket t;
    REQUIRE(guard::admit(Api::cuMemAlloc_v2, -1, 512 * kMiB, &t) == CUDA_SUCCESS);
    CHECK(core.used() == 768 * kMiB);
    guard::failed(t, CUDA_ERROR_INVALID_VALUE);
    CHECK(core.used() == 256 * kMiB);
    CHECK(core.reports().empty());  // not an out-of-memory: no episode
}

TEST_CASE("the driver's out-of-memory under the limit is reported as a driver OOM") {
    Core core("1GiB");
    guard::DriverCall scope;
    guard::Ticket t;
    REQUIRE(guard::admit(Api::cuMemAlloc_v2, -1, 512 * kMiB, &t) == CUDA_SUCCESS);
    guard::failed(t, CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(core.used() == 0);
    REQUIRE(core.reports().size() == 1);
    CHECK(core.reports()[0].find("gpuguard-driver_oom-") != std::string::npos);
}

TEST_CASE("a free the driver refuses leaves the allocation tracked and charged") {
    Core core("1GiB");
    guard::DriverCall scope;
    REQUIRE(allocate(0x1000, 128 * kMiB) == CUDA_SUCCESS);
    Allocation a;
    REQUIRE(guard::take(KeyKind::kPointer, 0x1000, &a));
    guard::finish_free(true, KeyKind::kPointer, 0x1000, a, CUDA_ERROR_INVALID_VALUE);
    CHECK(core.used() == 128 * kMiB);
    CHECK(tracker().live_bytes() == 128 * kMiB);
    release(0x1000);
    CHECK(core.used() == 0);
}

TEST_CASE("an allocation larger than admitted (a pitch) is charged the difference at commit") {
    Core core("1GiB");
    guard::DriverCall scope;
    guard::Ticket t;
    REQUIRE(guard::admit(Api::cuMemAllocPitch_v2, -1, 100 * kMiB, &t) == CUDA_SUCCESS);
    guard::commit(t, KeyKind::kPointer, 0x1000, 104 * kMiB);
    CHECK(core.used() == 104 * kMiB);
    release(0x1000);
    CHECK(core.used() == 0);
}

// A pitch narrower than the estimate admitted: the ledger holds what the allocation holds, so that its
// free leaves nothing charged (the difference stayed charged until the process exited).
TEST_CASE("an allocation smaller than admitted (a narrower pitch) is charged what it holds") {
    Core core("1GiB");
    guard::DriverCall scope;
    guard::Ticket t;
    REQUIRE(guard::admit(Api::cuMemAllocPitch_v2, -1, 100 * kMiB, &t) == CUDA_SUCCESS);
    guard::commit(t, KeyKind::kPointer, 0x1000, 50 * kMiB);
    CHECK(core.used() == 50 * kMiB);
    release(0x1000);
    CHECK(core.used() == 0);
}

TEST_CASE("an unknown pointer's free changes nothing") {
    Core core("1GiB");
    guard::DriverCall scope;
    REQUIRE(allocate(0x1000, 64 * kMiB) == CUDA_SUCCESS);
    Allocation a;
    CHECK_FALSE(guard::take(KeyKind::kPointer, 0x9999, &a));
    guard::finish_free(false, KeyKind::kPointer, 0x9999, a, CUDA_SUCCESS);
    CHECK(core.used() == 64 * kMiB);
}

TEST_CASE("the quota view: the limit and the container's usage, for cuMemGetInfo and NVML") {
    Core core("2GiB");
    guard::DriverCall scope;
    REQUIRE(allocate(0x1000, 512 * kMiB) == CUDA_SUCCESS);
    guard::QuotaView q = guard::quota_of(0);
    CHECK(q.limited);
    CHECK(q.limit == 2 * kGiB);
    CHECK(q.container_used == 512 * kMiB);
    Core unlimited("");
    CHECK_FALSE(guard::quota_of(0).limited);
}

// Issue 18, defect 1: SIZE_MAX (a negative size cast to size_t) wrapped the admission's sum and was
// admitted; its rollback then took the process's other bytes off the ledger.
TEST_CASE("a request that would wrap the sum is refused uncharged, with a limit or without") {
    {
        Core core("300MiB");
        guard::DriverCall scope;
        REQUIRE(allocate(0x1000, 200 * kMiB) == CUDA_SUCCESS);
        for (uint64_t huge : {UINT64_MAX, UINT64_MAX - 200 * kMiB + 1, UINT64_MAX / 2, 300 * kMiB + 1}) {
            guard::Ticket t;
            CHECK(guard::admit(Api::cuMemAlloc_v2, -1, huge, &t) == CUDA_ERROR_OUT_OF_MEMORY);
            CHECK_FALSE(t.charged);
            CHECK(core.used() == 200 * kMiB);
        }
        guard::Ticket t;
        REQUIRE(guard::admit(Api::cuMemAlloc_v2, -1, 100 * kMiB, &t) == CUDA_SUCCESS);
        guard::failed(t, CUDA_ERROR_OUT_OF_MEMORY);  // the rollback takes exactly what was charged
        CHECK(core.used() == 200 * kMiB);
    }
    {
        Core core("");  // no limit: the driver decides, and the ledger's count never wraps
        guard::DriverCall scope;
        REQUIRE(allocate(0x1000, 200 * kMiB) == CUDA_SUCCESS);
        guard::Ticket t;
        CHECK(guard::admit(Api::cuMemAlloc_v2, -1, UINT64_MAX, &t) == CUDA_SUCCESS);
        CHECK_FALSE(t.charged);
        guard::failed(t, CUDA_ERROR_OUT_OF_MEMORY);
        CHECK(core.used() == 200 * kMiB);
    }
}
