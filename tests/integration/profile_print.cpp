// The profiling build's step table (shim/base/profile.cpp, compiled here with GG_PROFILE) for durations
// known in advance, so that t_bench_report.sh checks what the GPU benchmark reads from the real
// printer: 100 allocations whose hook takes 3,000 ns, 2,000 of them in the driver; 100 frees of
// 1,500 ns, 1,000 in the driver; and a nested step, which the benchmark must not add again.
#define GG_PROFILE
#include "shim/base/clock.cpp"  // the timers' clock (steady_ns)
#include "shim/base/profile.cpp"

int main() {
    using namespace gg::profile;
    for (int i = 0; i < 100; i++) {
        add(kAllocTotal, 3000);
        add(kAllocDriver, 2000);
        add(kCaptureNative, 700);
        add(kFreeTotal, 1500);
        add(kFreeDriver, 1000);
    }
    return 0;
}
