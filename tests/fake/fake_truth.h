// The ground truth of the fake driver, shared across processes: how many bytes of each PHYSICAL device
// the fake driver has handed out right now, and the most it ever had. Tests compare it with what the
// shim believes. FAKE_CUDA_TRUTH=/path names the file; every process using the fake driver maps it
// MAP_SHARED, so the file also makes the processes share one physical device's capacity, as a real GPU does.
//
// Layout: a flat array of kMaxDevices {current, max} pairs of std::atomic<uint64_t> (lock-free and
// address-free on x86-64, so a killed process never leaves them locked), then a table of who holds
// what: per process id, its bytes on each device (the fake NVML's per-process list, as nvidia-smi's).
// A new, zero-filled file is a valid empty state: nobody has to initialise it, so processes racing to
// create it are harmless.
// A process that exits normally gives its bytes back (the fake driver's teardown, like the real driver
// at process exit); one killed by SIGKILL leaves them counted: `fake_truth FILE reset` clears them.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "fake_device.h"

namespace fake {

struct TruthDevice {
    std::atomic<uint64_t> current;  // bytes of device memory handed out now
    std::atomic<uint64_t> max;      // the highest `current` ever reached
};
constexpr int kMaxProcs = 256;
struct TruthProc {
    std::atomic<int32_t> pid;  // 0: free; an entry whose process is gone may be taken by another
    std::atomic<uint64_t> bytes[kMaxDevices];
    // What earlier images of the pid left in `bytes` (an exec: a real driver frees them then, the fake
    // keeps them, as after a SIGKILL; or a dead process's whose pid was reused): not the process's own,
    // so NVML's per-process list shows bytes - left (images_left, when the fake driver starts).
    std::atomic<uint64_t> left[kMaxDevices];
};
struct Truth {
    TruthDevice dev[kMaxDevices];
    TruthProc proc[kMaxProcs];
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

// The pid the truth knows process `pid` (one of this image's) by: its own, or, for a process that is
// init of a PID namespace of its own, its pid outside, which FAKE_CUDA_TRUTH_PID=<inside>:<outside>
// gives (tests/soak): the supervisor reads the table by the pids it sees, and a pid 1 in each
// namespace would otherwise be one entry for all of them, and take entries of live processes it
// cannot see for those of dead ones (pid_gone).
inline int truth_pid(int pid) {
    const char *e = ::getenv("FAKE_CUDA_TRUTH_PID");
    int inside = 0, outside = 0;
    if (e && ::sscanf(e, "%d:%d", &inside, &outside) == 2 && inside == pid && outside > 0) return outside;
    return pid;
}

inline bool pid_gone(int pid) { return pid <= 0 || (::kill(pid, 0) != 0 && errno == ESRCH); }

// The entry of process `pid`, or null; with `claim`, a free entry (or one of a process that is gone)
// becomes its.
inline TruthProc *truth_proc(Truth *t, int pid, bool claim) {
    for (TruthProc &p : t->proc)
        if (p.pid.load() == pid) return &p;
    if (!claim) return nullptr;
    for (TruthProc &p : t->proc) {
        int32_t cur = p.pid.load();
        if (cur != 0 && !pid_gone(cur)) continue;
        if (!p.pid.compare_exchange_strong(cur, pid)) continue;
        for (auto &b : p.bytes) b.store(0);
        for (auto &b : p.left) b.store(0);
        return &p;
    }
    return nullptr;  // a full table: the per-process view misses this process
}

// A new image of process `pid` starts (the test driver's first use in it): what its entry holds now
// was left by earlier images.
inline void images_left(Truth *t, int pid) {
    if (TruthProc *p = truth_proc(t, pid, false))
        for (int i = 0; i < kMaxDevices; i++) p->left[i].store(p->bytes[i].load());
}

// Takes `bytes` of physical device `phys` for process `pid` if that keeps it within `capacity`; false
// means the device is full (the fake's "driver OOM").
inline bool truth_take(Truth *t, int pid, int phys, uint64_t bytes, uint64_t capacity) {
    TruthDevice &d = t->dev[phys];
    uint64_t cur = d.current.load();
    do {
        if (bytes > capacity || cur > capacity - bytes) return false;
    } while (!d.current.compare_exchange_weak(cur, cur + bytes));
    uint64_t now = cur + bytes, mx = d.max.load();
    while (now > mx && !d.max.compare_exchange_weak(mx, now)) {}
    if (TruthProc *p = truth_proc(t, pid, true)) p->bytes[phys].fetch_add(bytes);
    return true;
}

// Clamped at zero so that a reset file never shows a wrapped-around terabyte count.
inline void sub_clamped(std::atomic<uint64_t> &c, uint64_t bytes) {
    uint64_t cur = c.load();
    while (!c.compare_exchange_weak(cur, cur >= bytes ? cur - bytes : 0)) {}
}

// Gives back bytes that process `pid` took.
inline void truth_give(Truth *t, int pid, int phys, uint64_t bytes) {
    sub_clamped(t->dev[phys].current, bytes);
    if (TruthProc *p = truth_proc(t, pid, false)) sub_clamped(p->bytes[phys], bytes);
}

}  // namespace fake
