// Other processes of the ledger: whether the owner of a slot is still alive, and what this process's
// command line and PID namespace are.
//
// Liveness is an open-file-description lock (F_OFD_SETLK) that the owner holds on its slot's byte
// range of the file (common/ledger/layout.h). Not a pid: a pid means nothing in another PID namespace
// (Kubernetes containers that share /dev/shm, a sidecar), where it names no process or another one,
// and a process that exec'd keeps its pid while the driver has freed its memory. The kernel drops an
// OFD lock when the last descriptor of its open file description closes: at death by any signal,
// and at exec (the ledger's descriptor is close-on-exec). A fork()ed child shares its parent's open
// file description, so the child opens one of its own (Ledger::own_descriptor).
#include "common/ledger/ledger.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "common/ledger/internal.h"

namespace gg::ledger {

using namespace internal;

void internal::read_command(char *out, size_t size) {
    memset(out, 0, size);
    int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, out, size - 1);
    close(fd);
    for (ssize_t i = 0; i + 1 < n; i++)
        if (out[i] == '\0') out[i] = ' ';
}

uint64_t internal::pid_namespace() {
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

Range internal::slot_range(int i) {
    return {(off_t)(offsetof(Header, slots) + (size_t)i * sizeof(Slot)), (off_t)sizeof(Slot)};
}
Range internal::device_range(int i) {
    return {(off_t)(offsetof(Header, devices) + (size_t)i * sizeof(DeviceEntry)), (off_t)sizeof(DeviceEntry)};
}
Range internal::all_slots_range() { return {(off_t)offsetof(Header, slots), (off_t)sizeof(Header::slots)}; }
Range internal::replace_range() { return {0, (off_t)sizeof(Header::magic)}; }
Range internal::cost_range(int i) {
    return {(off_t)(offsetof(Header, costs) + (size_t)i * sizeof(DeviceCost)), (off_t)sizeof(DeviceCost)};
}

// The byte range r of the file as an open-file-description lock request of the given type.
static struct flock range_lock(short type, Range r) {
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = r.start;
    fl.l_len = r.length;
    return fl;
}

bool internal::try_lock(int fd, Range r) {
    struct flock fl = range_lock(F_WRLCK, r);
    return fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

void internal::unlock(int fd, Range r) {
    struct flock fl = range_lock(F_UNLCK, r);
    fcntl(fd, F_OFD_SETLK, &fl);
}

Held internal::held_by_another(int fd, Range r) {
    struct flock fl = range_lock(F_WRLCK, r);
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return Held::kUnknown;
    return fl.l_type == F_UNLCK ? Held::kNo : Held::kYes;
}

int internal::reopen(int fd, const std::string &path) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    int again = ::open(proc, O_RDWR | O_CLOEXEC);
    if (again >= 0) return again;
    int e = errno;
    struct stat was, now;
    again = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (again >= 0 && fstat(fd, &was) == 0 && fstat(again, &now) == 0 && was.st_dev == now.st_dev &&
        was.st_ino == now.st_ino)
        return again;
    if (again >= 0) close(again);
    errno = e;
    return -1;
}

bool Ledger::owner_alive(int i) const {
    const Slot *mine = slot_.load();
    if (mine == &header_->slots[i]) return true;
    if (fd_ < 0) return false;  // a private ledger: this process's slot is the only one
    // Unknown (a file system without OFD locks): alive, so that nobody's bytes are taken from it.
    return held_by_another(fd_, slot_range(i)) != Held::kNo;
}

}  // namespace gg::ledger
