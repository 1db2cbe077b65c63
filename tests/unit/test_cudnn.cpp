// The pure parts of the cuDNN module: how legacy algorithm lists are capped, and the plan table.
#include <doctest/doctest.h>

#include "shim/cudnn/cap.h"
#include "shim/cudnn/plans.h"

using namespace gg::cudnn;

namespace {

constexpr uint64_t kMiB = 1ull << 20;

cudnnConvolutionFwdAlgoPerf_t perf(int algo, cudnnStatus_t status, uint64_t memory) {
    cudnnConvolutionFwdAlgoPerf_t p{};
    p.algo = (cudnnConvolutionFwdAlgo_t)algo;
    p.status = status;
    p.memory = memory;
    return p;
}

}  // namespace

TEST_CASE("algorithms over the cap are marked NOT_SUPPORTED and moved behind those that fit, order kept") {
    cudnnConvolutionFwdAlgoPerf_t list[] = {
        perf(6, CUDNN_STATUS_SUCCESS, 4096 * kMiB),  // fastest, too big
        perf(1, CUDNN_STATUS_SUCCESS, 0),
        perf(5, CUDNN_STATUS_SUCCESS, 2048 * kMiB),  // too big
        perf(2, CUDNN_STATUS_SUCCESS, 512 * kMiB),
        perf(7, CUDNN_STATUS_ALLOC_FAILED, 8192 * kMiB),  // already failed: left as cuDNN said
    };
    uint64_t largest = 0;
    CHECK(cap_results(list, 5, 1024 * kMiB, &largest) == 2);
    CHECK(largest == 4096 * kMiB);
    int algos[5];
    for (int i = 0; i < 5; i++) algos[i] = (int)list[i].algo;
    CHECK(algos[0] == 1);
    CHECK(algos[1] == 2);
    CHECK(algos[2] == 6);
    CHECK(algos[3] == 5);
    CHECK(algos[4] == 7);
    CHECK(list[2].status == CUDNN_STATUS_NOT_SUPPORTED);
    CHECK(list[3].status == CUDNN_STATUS_NOT_SUPPORTED);
    CHECK(list[4].status == CUDNN_STATUS_ALLOC_FAILED);
    CHECK(list[2].memory == 4096 * kMiB);  // the size stays, so a reader sees why
}

TEST_CASE("a list that fits is left exactly as cuDNN returned it") {
    cudnnConvolutionFwdAlgoPerf_t list[] = {perf(3, CUDNN_STATUS_SUCCESS, 1024 * kMiB),
                                            perf(0, CUDNN_STATUS_SUCCESS, 0)};
    uint64_t largest = 1;
    CHECK(cap_results(list, 2, 1024 * kMiB, &largest) == 0);  // equal to the cap fits
    CHECK(largest == 0);
    CHECK(list[0].algo == 3);
    CHECK(list[0].status == CUDNN_STATUS_SUCCESS);
}

TEST_CASE("a cap of 0 (quota exhausted) leaves only the algorithms that need no workspace") {
    cudnnConvolutionFwdAlgoPerf_t list[] = {perf(2, CUDNN_STATUS_SUCCESS, 1), perf(0, CUDNN_STATUS_SUCCESS, 0)};
    uint64_t largest = 0;
    CHECK(cap_results(list, 2, 0, &largest) == 1);
    CHECK(list[0].algo == 0);
    CHECK(list[1].status == CUDNN_STATUS_NOT_SUPPORTED);
}

TEST_CASE("the largest usable workspace ignores results cuDNN could not use") {
    cudnnConvolutionFwdAlgoPerf_t list[] = {perf(0, CUDNN_STATUS_ALLOC_FAILED, 8192 * kMiB),
                                            perf(1, CUDNN_STATUS_SUCCESS, 64 * kMiB), perf(2, CUDNN_STATUS_SUCCESS, 0)};
    CHECK(largest_usable(list, 3) == 64 * kMiB);
    CHECK(largest_usable(list, 0) == 0);
}

TEST_CASE("the plan table knows plans only, their sizes once known, and forgets destroyed ones") {
    int a = 0, b = 0;
    plans::created(&a);
    CHECK(plans::is_plan(&a));
    CHECK_FALSE(plans::is_plan(&b));
    CHECK(plans::workspace(&a) == plans::kUnknown);
    plans::set_workspace(&b, 5);  // not a plan: ignored
    CHECK(plans::workspace(&b) == plans::kUnknown);
    plans::set_workspace(&a, 64 * kMiB);
    CHECK(plans::workspace(&a) == (int64_t)(64 * kMiB));
    plans::destroyed(&b);  // any descriptor may be destroyed
    plans::destroyed(&a);
    CHECK_FALSE(plans::is_plan(&a));
}
