// The ground truth of the fake driver, shared across processes: how many bytes of each PHYSICAL device
// the fake driver has handed out right now, and the most it ever had. Tests compare it with what the
// shim believes. FAKE_CUDA_TRUTH=/path names the file; every process using the fake driver maps it
// MAP_SHARED, so the file also makes the processes share one physical device's capacity, as a real GPU does.
//
// Layout: a flat array of kMaxDevices {current, max} pairs of std::atomic<uint64_t> (lock-free and
// address-free on x86-64, so a killed process never leaves them locked). A new, zero-filled file is a
// valid empty state: nobody has to initialise it, so processes racing to create it are harmless.
// A process that exits normally gives its bytes back (the fake driver's teardown, like the real driver
// at process exit); one killed by SIGKILL leaves them counted: `fake_truth FILE reset` clears them.
#pragma once
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <cstdint>

#include "fake_device.h"

namespace fake {

struct TruthDevice {
    std::atomic<uint64_t> current;  // bytes of device memory handed out now
    std::atomic<uint64_t> max;      // the highest `current` ever reached
};
struct Truth {
    TruthDevice dev[kMaxDevices];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "truth counters must be lock-free to be shared");

// Maps the truth file (creating it when `create`), or returns nullptr. The mapping is never unmapped:
// it lives as long as the process.
inline Truth *truth_map(const char *path, bool create) {
    int fd = ::open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0666);
    if (fd < 0) return nullptr;
    struct stat st {};
    // ftruncate only ever grows a short file; growing fills with zeros, which is the empty state.
    if (::fstat(fd, &st) != 0 ||
        (st.st_size < static_cast<off_t>(sizeof(Truth)) && (!create || ::ftruncate(fd, sizeof(Truth)) != 0))) {
        ::close(fd);
        return nullptr;
    }
    void *p = ::mmap(nullptr, sizeof(Truth), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    return p == MAP_FAILED ? nullptr : static_cast<Truth *>(p);
}

// Takes `bytes` of physical device `phys` if that keeps it within `capacity`; false means the device is
// full (the fake's "driver OOM").
inline bool truth_take(Truth *t, int phys, uint64_t bytes, uint64_t capacity) {
    TruthDevice &d = t->dev[phys];
    uint64_t cur = d.current.load();
    do {
        if (bytes > capacity || cur > capacity - bytes) return false;
    } while (!d.current.compare_exchange_weak(cur, cur + bytes));
    uint64_t now = cur + bytes, mx = d.max.load();
    while (now > mx && !d.max.compare_exchange_weak(mx, now)) {}
    return true;
}

// Gives bytes back, clamped at zero so that a reset file never shows a wrapped-around terabyte count.
inline void truth_give(Truth *t, int phys, uint64_t bytes) {
    std::atomic<uint64_t> &c = t->dev[phys].current;
    uint64_t cur = c.load();
    while (!c.compare_exchange_weak(cur, cur >= bytes ? cur - bytes : 0)) {}
}

}  // namespace fake
