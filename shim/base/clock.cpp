#include "shim/base/clock.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/base/hot.h"

namespace gg {
namespace {

// initial-exec: the shim is preloaded, so its TLS is in the static block and a read is one load,
// never a call into the loader's __tls_get_addr (shim/quota/guard.cpp).
__attribute__((tls_model("initial-exec"))) thread_local int t_tid = 0;

}  // namespace

GG_HOT uint64_t mono_ns() {
    // The coarse clock (a few ms of resolution, no system call even where the vDSO clock source
    // falls back to one) is enough for ages, episodes and a timeline of 1 ms steps, and it is on
    // the path of every allocation.
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t steady_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t unix_ns() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

GG_HOT int thread_id() {
    if (!t_tid) t_tid = (int)syscall(SYS_gettid);
    return t_tid;
}

void forget_thread_id() { t_tid = 0; }

}  // namespace gg
