#include "common/ledger/ledger.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <pthread.h>
#include <new>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/atomic_max.h"
#include "common/base/hot.h"
#include "common/base/log.h"

namespace gg::ledger {
namespace {

constexpr char kMagic[8] = {'G', 'P', 'U', 'G', 'L', 'E', 'D', 'G'};

// Ledger::rescue_ (see rescue_fault()).
enum Rescue : int { kIntact, kRemembering, kRescuing, kRescued, kRecovered, kFailed };

uint64_t now_ns(clockid_t clock) {
    timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

std::string errno_text(int e) { return strerror(e); }

// getpid() is a system call (about 115 ns on the CPU machine) and the ledger needs the pid twice per
// allocation to notice a fork: it is cached, and forgotten in every child. fork() runs the atfork
// handler below, but a child made by clone() without CLONE_VM runs no fork handler at all; it would
// keep its parent's pid and charge its parent's slot. So the cache lives in a page the kernel zeroes
// in every such child (MADV_WIPEONFORK, Linux 4.14); on an older kernel the atfork handler still
// covers fork().
std::atomic<int> g_pid_fallback{0};
std::atomic<std::atomic<int> *> g_pid_cell{nullptr};
void forget_pid() {
    if (std::atomic<int> *cell = g_pid_cell.load(std::memory_order_relaxed)) cell->store(0, std::memory_order_relaxed);
}
std::atomic<int> *make_pid_cell() {
    long page = sysconf(_SC_PAGESIZE);
    void *p = mmap(nullptr, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED && madvise(p, (size_t)page, MADV_WIPEONFORK) == 0) return new (p) std::atomic<int>(0);
    if (p != MAP_FAILED) munmap(p, (size_t)page);
    return &g_pid_fallback;
}
GG_HOT int self_pid() {
    std::atomic<int> *cell = g_pid_cell.load(std::memory_order_acquire);
    if (cell) {
        int p = cell->load(std::memory_order_relaxed);
        if (p) return p;
    } else {
        // Made without a C++ static guard: a fork() while another thread held the guard would leave
        // the child waiting on it forever. Racing first callers each make a cell; one is kept.
        std::atomic<int> *mine = make_pid_cell(), *first = nullptr;
        if (g_pid_cell.compare_exchange_strong(first, mine, std::memory_order_acq_rel)) {
            pthread_atfork(nullptr, nullptr, forget_pid);
            cell = mine;
        } else {
            if (mine != &g_pid_fallback) munmap(static_cast<void *>(mine), (size_t)sysconf(_SC_PAGESIZE));
            cell = first;
        }
    }
    int p = getpid();
    cell->store(p, std::memory_order_relaxed);
    return p;
}

void read_command(char *out, size_t size) {
    memset(out, 0, size);
    int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, out, size - 1);
    close(fd);
    for (ssize_t i = 0; i + 1 < n; i++)
        if (out[i] == '\0') out[i] = ' ';
}

void init_header(Header *h, const std::string &spec) {
    memcpy(h->magic, kMagic, sizeof kMagic);
    h->layout_version = kLayoutVersion;
    h->header_size = sizeof(Header);
    h->file_size = sizeof(Header);
    h->max_devices = kMaxDevices;
    h->max_slots = kMaxSlots;
    h->created_unix_ns = now_ns(CLOCK_REALTIME);
    h->creator_pid = getpid();
    snprintf(h->limit_spec, sizeof h->limit_spec, "%s", spec.c_str());
}

// Creates a complete ledger at `path`: written under a temporary name, then linked (or, when
// `replace`, renamed) into place, so nobody maps a half-written file.
bool create_file(const std::string &path, const std::string &spec, int group, bool replace, std::string *error) {
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    mode_t mode = group >= 0 ? 0660 : 0600;
    int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) {
        *error = "cannot create ledger " + path + ": " + errno_text(errno);
        return false;
    }
    bool ok = ftruncate(fd, sizeof(Header)) == 0;
    if (ok && group >= 0) ok = fchown(fd, (uid_t)-1, (gid_t)group) == 0 && fchmod(fd, mode) == 0;
    void *p = ok ? mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        *error = "cannot create ledger " + path + ": " + errno_text(errno);
        close(fd);
        unlink(tmp.c_str());
        return false;
    }
    init_header(static_cast<Header *>(p), spec);
    munmap(p, sizeof(Header));
    close(fd);
    int rc = replace ? rename(tmp.c_str(), path.c_str()) : link(tmp.c_str(), path.c_str());
    int e = errno;
    unlink(tmp.c_str());
    if (rc != 0 && !(e == EEXIST && !replace)) {
        *error = "cannot create ledger " + path + ": " + errno_text(e);
        return false;
    }
    return true;  // EEXIST: another process created it first; the caller opens theirs
}

bool slot_is_live(const Slot &s) { return s.state.load() == kSlotLive; }

// A text field of the shared file as a string for display: any process of the user may write those
// bytes, so the string stops at the field's end even without a NUL, and control bytes (a terminal
// escape sequence in a forged command line) become '?' before `gpuguard top` prints them.
template <size_t N>
std::string field_text(const char (&field)[N]) {
    std::string s(field, strnlen(field, N));
    for (char &c : s)
        if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
    return s;
}

}  // namespace

std::string uuid_string(const uint8_t u[16]) {
    char buf[48];
    snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    return buf;
}

std::string default_path() {
    struct stat st;
    const char *dir = (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0)
                          ? "/dev/shm"
                          : "/tmp";
    return std::string(dir) + "/gpuguard-" + std::to_string(getuid()) + ".ledger";
}

std::string validate(const void *data, size_t size) {
    if (size < sizeof(kMagic) + 8) return "too short to be a ledger (" + std::to_string(size) + " bytes)";
    const Header *h = static_cast<const Header *>(data);
    if (memcmp(h->magic, kMagic, sizeof kMagic) != 0) return "not a gpuguard ledger (bad magic)";
    if (h->layout_version != kLayoutVersion)
        return "ledger layout version " + std::to_string(h->layout_version) + ", this gpuguard reads version " +
               std::to_string(kLayoutVersion);
    if (size < sizeof(Header)) return "truncated ledger (" + std::to_string(size) + " bytes)";
    if (h->header_size != sizeof(Header) || h->file_size != sizeof(Header) || h->max_devices != kMaxDevices ||
        h->max_slots != kMaxSlots)
        return "ledger sizes do not match this gpuguard's layout";
    if (memchr(h->limit_spec, '\0', sizeof h->limit_spec) == nullptr) return "ledger limit is not terminated";
    if (h->slot_high.load() > kMaxSlots) return "ledger slot count out of range";
    return "";
}

uint64_t process_start_ticks(int pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    // The command field can hold spaces and parentheses: fields are counted after the last ')'.
    char *p = strrchr(buf, ')');
    if (!p) return 0;
    char state = p[2];
    if (state == 'Z' || state == 'X') return 1;  // exited; its device memory is already gone
    int field = 2;
    for (char *q = p + 1; *q; q++) {
        if (*q == ' ' && ++field == 22) return strtoull(q + 1, nullptr, 10);
    }
    return 0;
}

bool process_alive(int pid, uint64_t start_ticks) {
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    uint64_t now = process_start_ticks(pid);
    if (now == 1) return false;                         // a zombie
    if (now != 0 && start_ticks != 0 && now != start_ticks) return false;  // the pid was reused
    return true;
}

Ledger *Ledger::open(const OpenOptions &o, std::string *error, std::string *notice) {
    Ledger *l = new Ledger();
    l->read_only_ = o.read_only;
    if (o.path.empty()) {
        void *p = mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            *error = "cannot map a private ledger: " + errno_text(errno);
            delete l;
            return nullptr;
        }
        l->header_ = static_cast<Header *>(p);
        l->map_size_ = sizeof(Header);
        init_header(l->header_, o.limit_spec);
        return l;
    }
    l->path_ = o.path;
    for (int attempt = 0; attempt < 8; attempt++) {
        int fd = ::open(o.path.c_str(), (o.read_only ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && !o.read_only) {
            if (!create_file(o.path, o.limit_spec, o.group, false, error)) break;
            continue;
        }
        if (fd < 0) {
            *error = "cannot open ledger " + o.path + ": " + (errno == ELOOP ? "it is a symbolic link" : errno_text(errno));
            break;
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            *error = "ledger " + o.path + " is not a regular file";
            close(fd);
            break;
        }
        // Whoever can write the file can set the limit and forge the counts (docs/threat-model.md),
        // so it is trusted only when it is ours, or shared with the group GPUGUARD_LEDGER_GROUP names;
        // never when another user left it at the path (a squatter in a shared /dev/shm or /tmp would
        // otherwise set our quota), nor when every user may write it.
        bool group_shared = o.group >= 0 && st.st_gid == (gid_t)o.group && (st.st_mode & 0060) == 0060;
        if (!o.read_only && st.st_uid != geteuid() && !group_shared) {
            *error = "ledger " + o.path + " belongs to another user (uid " + std::to_string(st.st_uid) + ")" +
                     ((st.st_mode & 0060) == 0060 ? " and is not shared with the group GPUGUARD_LEDGER_GROUP names" : "");
            close(fd);
            break;
        }
        size_t size = (size_t)st.st_size;
        if (size < sizeof(Header)) {
            // Read what is there to say precisely what it is; never map past the end of the file.
            char head[64] = {};
            ssize_t n = pread(fd, head, sizeof head, 0);
            close(fd);
            std::string why = validate(head, n > 0 ? (size_t)n : 0);
            *error = "ledger " + o.path + ": " + (why.empty() ? "truncated ledger" : why);
            break;
        }
        void *p = mmap(nullptr, sizeof(Header), o.read_only ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) {
            *error = "cannot map ledger " + o.path + ": " + errno_text(errno);
            break;
        }
        std::string why = validate(p, size);
        if (why.empty() && !o.read_only && (st.st_mode & 0002)) {
            char mode[8];
            snprintf(mode, sizeof mode, "%03o", (unsigned)(st.st_mode & 0777));
            why = std::string("writable by every user (mode ") + mode + "), so anyone could set its limit";
        }
        if (!why.empty()) {
            munmap(p, sizeof(Header));
            *error = "ledger " + o.path + ": " + why;
            break;
        }
        l->header_ = static_cast<Header *>(p);
        l->map_size_ = sizeof(Header);
        if (o.read_only) return l;
        std::string theirs = l->limit_spec();
        if (theirs != o.limit_spec) {
            // The limit belongs to the processes using the ledger now. When none is alive (the
            // ledger is left from an earlier run) this process's limit replaces it.
            l->reclaim_dead(false);
            bool idle = true;
            // Clamped again although validate() checked it: the file can change after the check.
            for (uint32_t i = 0; i < l->header_->slot_high.load() && i < (uint32_t)kMaxSlots; i++)
                if (slot_is_live(l->header_->slots[i])) idle = false;
            if (idle) {
                munmap(p, sizeof(Header));
                l->header_ = nullptr;
                if (!create_file(o.path, o.limit_spec, o.group, true, error)) break;
                continue;
            }
            if (!o.limit_spec.empty())
                *notice = "the limit '" + o.limit_spec + "' differs from the limit '" + (theirs.empty() ? "none" : theirs) +
                          "' of the shared ledger " + o.path + ", which stands";
        }
        // Two processes starting together on an idle ledger may both replace it; the one whose
        // file lost the race maps a file no longer at the path. Joining first makes the ledger
        // busy (nobody replaces a busy ledger), then the file at the path must be the one mapped.
        l->join();
        struct stat now;
        if (stat(o.path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
            // The private copy for rescue_fault(): address space only until remember() writes it.
            void *copy = mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (copy != MAP_FAILED) l->remembered_ = static_cast<Header *>(copy);
            l->remember();
            return l;
        }
        l->leave();
        munmap(p, sizeof(Header));
        l->header_ = nullptr;
        notice->clear();
    }
    if (error->empty()) *error = "cannot open ledger " + o.path;
    delete l;
    return nullptr;
}

void Ledger::leave() {
    Slot *slot = slot_.load();
    if (!slot || slot_pid_.load() != getpid()) return;
    for (auto &b : slot->bytes) b.store(0);
    slot->state.store(kSlotReclaimed);
    slot_.store(nullptr);
}

Ledger::~Ledger() {
    leave();
    if (header_) munmap(header_, map_size_);
    if (remembered_ && rescue_.load() == kIntact) munmap(remembered_, sizeof(Header));
}

// What remember() keeps of a device entry (the copy is read field by field: other threads update
// the entries' atomics meanwhile).
namespace {
struct DeviceCopy {
    uint32_t state;
    uint8_t uuid[16];
    uint64_t limit, peak, physical_total;
    char name[64];
};
}  // namespace

void Ledger::remember() {
    if (!remembered_ || read_only_) return;
    std::lock_guard<std::mutex> lock(join_mu_);
    // Read the shared file first (this may fault, and be rescued from the previous copy), then
    // write the copy in a window where this thread touches nothing shared.
    const Header *h = header_;
    char head[offsetof(Header, slot_high)];
    memcpy(head, h, sizeof head);  // magic .. limit_spec: plain fields, fixed at creation
    DeviceCopy devs[kMaxDevices];
    for (int i = 0; i < kMaxDevices; i++) {
        const DeviceEntry &d = h->devices[i];
        devs[i].state = d.state.load();
        if (devs[i].state != kDeviceReady) continue;
        memcpy(devs[i].uuid, d.uuid, sizeof devs[i].uuid);
        devs[i].limit = d.limit.load();
        devs[i].peak = d.peak.load();
        devs[i].physical_total = d.physical_total.load();
        memcpy(devs[i].name, d.name, sizeof devs[i].name);
    }
    int expected = kIntact;
    if (!rescue_.compare_exchange_strong(expected, kRemembering)) return;  // rescued meanwhile
    Header *r = remembered_;
    memcpy(static_cast<void *>(r), head, sizeof head);
    for (int i = 0; i < kMaxDevices; i++) {
        if (devs[i].state != kDeviceReady) continue;
        DeviceEntry &m = r->devices[i];
        memcpy(m.uuid, devs[i].uuid, sizeof m.uuid);
        m.limit.store(devs[i].limit);
        m.peak.store(devs[i].peak);
        m.physical_total.store(devs[i].physical_total);
        memcpy(m.name, devs[i].name, sizeof m.name);
        m.state.store(kDeviceReady);
    }
    rescue_.store(kIntact);
}

// Async-signal-safe: atomics, pointer arithmetic and one system call.
bool Ledger::rescue_fault(const void *addr) {
    const char *base = reinterpret_cast<const char *>(header_);
    const char *a = static_cast<const char *>(addr);
    if (!base || !remembered_ || a < base || a >= base + map_size_) return false;
    int state;
    for (;;) {
        state = kIntact;
        if (rescue_.compare_exchange_strong(state, kRescuing)) break;
        if (state == kRemembering || state == kRescuing) continue;  // another thread, for microseconds
        return state == kRescued || state == kRecovered;  // already replaced: the access can go again
    }
    Header *r = remembered_;
    if (Slot *mine = slot_.load()) {
        size_t i = (size_t)(mine - header_->slots);  // no access to the lost page: arithmetic only
        Slot &m = r->slots[i];
        m.pid.store(slot_pid_.load());
        m.state.store(kSlotLive);
        r->slot_high.store((uint32_t)i + 1);
    }
    void *p = mremap(r, sizeof(Header), map_size_, MREMAP_MAYMOVE | MREMAP_FIXED, header_);
    rescued_at_ns_.store(now_ns(CLOCK_MONOTONIC));
    rescue_.store(p == MAP_FAILED ? kFailed : kRescued);
    return p != MAP_FAILED;
}

bool Ledger::take_recovery() {
    if (rescue_.load(std::memory_order_relaxed) != kRescued) return false;
    int expected = kRescued;
    return rescue_.compare_exchange_strong(expected, kRecovered);
}

void Ledger::add_own_bytes(int dev, uint64_t bytes) {
    if (Slot *slot = slot_.load(); slot && bytes) raise_to(slot->peak[dev], slot->bytes[dev].fetch_add(bytes) + bytes);
}

// Bounded by the field, not by the terminator validate() saw: another process may have written over
// it since.
std::string Ledger::limit_spec() const {
    if (!header_) return "";
    return field_text(header_->limit_spec);
}

int Ledger::device_index(const uint8_t uuid[16], uint64_t limit_if_new, uint64_t physical_total, const char *name) {
    int waits = 0;  // shared by all entries: see below
    for (int i = 0; i < kMaxDevices; i++) {
        DeviceEntry &d = header_->devices[i];
        for (;;) {
            uint32_t s = d.state.load();
            if (s == kDeviceReady) {
                if (memcmp(d.uuid, uuid, 16) == 0) {
                    remember();
                    return i;
                }
                break;
            }
            if (s == kDeviceFree) {
                // Entries are claimed in order, so a free one ends the table; a reader registers
                // nothing (retrying here spun forever on a read-only ledger: found by fuzz_ledger).
                if (read_only_) return -1;
                uint32_t expected = kDeviceFree;
                if (!d.state.compare_exchange_strong(expected, kDeviceClaiming)) continue;  // re-read it
                memcpy(d.uuid, uuid, 16);
                d.limit.store(limit_if_new);
                d.physical_total.store(physical_total);
                snprintf(d.name, sizeof d.name, "%s", name ? name : "");
                d.state.store(kDeviceReady);
                remember();
                return i;
            }
            // Another process is registering this entry: it takes microseconds. A claimer killed in
            // that window leaves the entry unusable, so it is waited on for a second at most, and
            // that second is the whole call's: a file whose every entry reads "claiming" (or a value
            // no gpuguard writes, skipped at once) must not stall an allocation for 32 seconds.
            if (s != kDeviceClaiming || waits >= 1000) break;
            waits++;
            usleep(1000);
        }
    }
    return -1;
}

GG_HOT bool Ledger::join() {
    int pid = self_pid();
    if (slot_.load(std::memory_order_acquire) && slot_pid_.load(std::memory_order_relaxed) == pid) return true;
    if (read_only_) return false;
    // The first allocations of a process may race on several threads: one claims the slot.
    std::lock_guard<std::mutex> lock(join_mu_);
    if (slot_.load() && slot_pid_.load() == pid) return true;
    slot_ = nullptr;
    uint64_t ticks = process_start_ticks(pid);
    // A live slot with this pid and start time is this very process before an exec(): exec keeps
    // both, so no other process can ever tell it from a live one, yet the driver freed its memory
    // with the old image. Its bytes go now.
    for (uint32_t i = 0; ticks > 1 && i < header_->slot_high.load() && i < (uint32_t)kMaxSlots; i++) {
        Slot &s = header_->slots[i];
        uint32_t expected = kSlotLive;
        if (s.pid.load() != pid || s.start_ticks.load() != ticks || !s.state.compare_exchange_strong(expected, kSlotReclaiming))
            continue;
        for (auto &b : s.bytes) b.exchange(0);
        s.state.store(kSlotReclaimed);
        header_->reclaimed_processes.fetch_add(1);
    }
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < kMaxSlots; i++) {
            Slot &s = header_->slots[i];
            uint32_t st = s.state.load();
            if (st != kSlotFree && st != kSlotReclaimed) continue;
            if (!s.state.compare_exchange_strong(st, kSlotClaiming)) continue;
            s.pid.store(pid);
            s.start_ticks.store(ticks);
            read_command(s.command, sizeof s.command);
            for (int d = 0; d < kMaxDevices; d++) {
                s.bytes[d].store(0);
                s.peak[d].store(0);
            }
            s.state.store(kSlotLive);
            uint32_t high = header_->slot_high.load();
            while (high < (uint32_t)i + 1 && !header_->slot_high.compare_exchange_weak(high, (uint32_t)i + 1)) {
            }
            slot_pid_.store(pid);
            slot_.store(&s, std::memory_order_release);
            return true;
        }
        if (reclaim_dead(false) == 0) break;
    }
    return false;
}

void Ledger::on_fork_child() {
    // The fork may have happened while another thread held join_mu_: a fresh mutex for the child.
    new (&join_mu_) std::mutex();
    slot_.store(nullptr);
    slot_pid_.store(0);
}

GG_HOT uint64_t Ledger::sum(int dev) const {
    uint64_t total = 0;
    uint32_t high = header_->slot_high.load();
    for (uint32_t i = 0; i < high && i < (uint32_t)kMaxSlots; i++) total += header_->slots[i].bytes[dev].load();
    return total;
}

GG_HOT bool Ledger::try_charge(int dev, uint64_t bytes, uint64_t *container_used) {
    if (!join()) return false;
    Slot *slot_ = this->slot_.load(std::memory_order_relaxed);
    uint64_t limit = header_->devices[dev].limit.load();
    for (int attempt = 0; attempt < 4; attempt++) {
        uint64_t mine = slot_->bytes[dev].fetch_add(bytes) + bytes;
        uint64_t total = sum(dev);
        if (total <= limit) {
            raise_to(slot_->peak[dev], mine);
            raise_to(header_->devices[dev].peak, total);
            if (container_used) *container_used = total;
            return true;
        }
        slot_->bytes[dev].fetch_sub(bytes);
        // Two admissions racing near the limit can both see the other's bytes and both back out;
        // try again while the bytes would fit without this request.
        uint64_t without = sum(dev);
        if (container_used) *container_used = without;
        if (without > limit || limit - without < bytes) return false;
    }
    return false;
}

GG_HOT void Ledger::charge(int dev, uint64_t bytes) {
    if (!join()) return;
    Slot *slot_ = this->slot_.load(std::memory_order_relaxed);
    uint64_t mine = slot_->bytes[dev].fetch_add(bytes) + bytes;
    raise_to(slot_->peak[dev], mine);
    raise_to(header_->devices[dev].peak, sum(dev));
}

GG_HOT uint64_t Ledger::release(int dev, uint64_t bytes) {
    Slot *slot = slot_.load(std::memory_order_acquire);
    if (!slot || slot_pid_.load(std::memory_order_relaxed) != self_pid()) return 0;
    std::atomic<uint64_t> &b = slot->bytes[dev];
    uint64_t cur = b.load();
    uint64_t take;
    do {
        take = cur < bytes ? cur : bytes;
    } while (!b.compare_exchange_weak(cur, cur - take));
    if (take < bytes) log_debug("released %llu bytes on device %d but the process held %llu", (unsigned long long)bytes, dev,
                                (unsigned long long)take);
    return take;
}

uint64_t Ledger::container_used(int dev) const { return sum(dev); }
uint64_t Ledger::own_bytes(int dev) const {
    Slot *slot = slot_.load();
    return slot ? slot->bytes[dev].load() : 0;
}
uint64_t Ledger::own_peak(int dev) const {
    Slot *slot = slot_.load();
    return slot ? slot->peak[dev].load() : 0;
}

GG_HOT int Ledger::reclaim_dead(bool periodic) {
    if (read_only_ || path_.empty()) return 0;
    if (periodic) {
        uint64_t now = now_ns(CLOCK_MONOTONIC_COARSE);
        uint64_t last = header_->last_reclaim_ns.load(std::memory_order_relaxed);
        if (now - last < 500000000ull) return 0;
        if (!header_->last_reclaim_ns.compare_exchange_strong(last, now)) return 0;
    }
    int reclaimed = 0;
    int self = getpid();
    uint32_t high = header_->slot_high.load();
    for (uint32_t i = 0; i < high && i < (uint32_t)kMaxSlots; i++) {
        Slot &s = header_->slots[i];
        if (!slot_is_live(s)) continue;
        int pid = s.pid.load();
        if (pid == self || process_alive(pid, s.start_ticks.load())) continue;
        uint32_t expected = kSlotLive;
        if (!s.state.compare_exchange_strong(expected, kSlotReclaiming)) continue;  // another process won
        uint64_t freed = 0;
        for (auto &b : s.bytes) freed += b.exchange(0);
        s.state.store(kSlotReclaimed);
        header_->reclaimed_processes.fetch_add(1);
        reclaimed++;
        if (freed) log_debug("reclaimed %llu bytes of dead process %d from ledger %s", (unsigned long long)freed, pid, path_.c_str());
    }
    return reclaimed;
}

std::vector<Ledger::DeviceView> Ledger::devices() const {
    std::vector<DeviceView> out;
    for (int i = 0; i < kMaxDevices; i++) {
        const DeviceEntry &d = header_->devices[i];
        if (d.state.load() != kDeviceReady) continue;
        out.push_back({i, uuid_string(d.uuid), field_text(d.name), d.limit.load(),
                       sum(i), d.peak.load(), d.physical_total.load()});
    }
    return out;
}

std::vector<Ledger::ProcessView> Ledger::processes() const {
    std::vector<ProcessView> out;
    uint32_t high = header_->slot_high.load();
    for (uint32_t i = 0; i < high && i < (uint32_t)kMaxSlots; i++) {
        const Slot &s = header_->slots[i];
        uint32_t st = s.state.load();
        if (st != kSlotLive && st != kSlotReclaimed) continue;
        ProcessView v;
        v.slot = (int)i;
        v.pid = s.pid.load();
        v.command = field_text(s.command);
        for (int d = 0; d < kMaxDevices; d++) {
            v.bytes.push_back(s.bytes[d].load());
            v.peak.push_back(s.peak[d].load());
        }
        v.reclaimed = st == kSlotReclaimed;
        v.alive = !v.reclaimed && process_alive(v.pid, s.start_ticks.load());
        v.self = &s == slot_.load();
        out.push_back(std::move(v));
    }
    return out;
}

}  // namespace gg::ledger
