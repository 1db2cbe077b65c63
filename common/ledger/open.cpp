// Opening a ledger: creating it complete, validating what is at the path, who may trust it, and
// replacing an idle one; leaving it at a clean exit.
#include "common/ledger/ledger.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/ledger/internal.h"
#include "common/units/size_spec.h"

namespace gg::ledger {

using namespace internal;

uint64_t internal::now_ns(clockid_t clock) {
    timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

std::string internal::errno_text(int e) { return strerror(e); }

static_assert(sizeof(Header::limit_spec) > kMaxLimitSpecLength, "a spec the parser accepts must fit the ledger whole");

void internal::init_header(Header *h, const std::string &spec) {
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

namespace {

// Backs every page of the ledger's size in the file with storage, so that no access to the mapping
// can fault for lack of it. A new file (nobody sees it yet) is grown to the size; an existing one
// keeps its size and has its holes filled (a file another program made sparse). Where the file
// system cannot reserve (no fallocate), a new file is written with zeros, and an existing one must
// already have all its blocks. False with errno set when the space is not there.
bool reserve(int fd, bool existing) {
    if (fallocate(fd, existing ? FALLOC_FL_KEEP_SIZE : 0, 0, (off_t)sizeof(Header)) == 0) return true;
    if (errno != EOPNOTSUPP && errno != ENOSYS) return false;
    if (existing) {
        struct stat st;
        if (fstat(fd, &st) != 0) return false;
        if ((uint64_t)st.st_blocks * 512 >= sizeof(Header)) return true;
        errno = EOPNOTSUPP;
        return false;
    }
    static const char zeros[65536] = {};
    for (size_t off = 0; off < sizeof(Header);) {
        size_t n = sizeof(Header) - off < sizeof zeros ? sizeof(Header) - off : sizeof zeros;
        ssize_t w = pwrite(fd, zeros, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        off += (size_t)w;
    }
    return true;
}

// The file's first sizeof(Header) bytes in private memory; *size becomes what could be read.
void *snapshot(int fd, size_t *size) {
    void *p = mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return p;
    size_t got = 0;
    while (got < sizeof(Header)) {
        ssize_t n = pread(fd, static_cast<char *>(p) + got, sizeof(Header) - got, (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    *size = got;
    return p;
}

// What is at the path: opened, checked and mapped, not yet adopted by a Ledger. 1: found; 0: nothing
// there; -1: refused, with *error set.
int open_existing(const OpenOptions &o, int *fd_out, void **map_out, std::string *error) {
    // O_NONBLOCK: a FIFO (or a device) at the path must not hang the open; it is refused below.
    int fd = ::open(o.path.c_str(), (o.read_only ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT) return 0;
    if (fd < 0) {
        *error = "cannot open ledger " + o.path + ": " + (errno == ELOOP ? "it is a symbolic link" : errno_text(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        *error = "ledger " + o.path + " is not a regular file";
        close(fd);
        return -1;
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
        return -1;
    }
    size_t size = (size_t)st.st_size;
    if (size < sizeof(Header)) {
        // Read what is there to say precisely what it is; never map past the end of the file.
        char head[64] = {};
        ssize_t n = pread(fd, head, sizeof head, 0);
        close(fd);
        std::string why = validate(head, n > 0 ? (size_t)n : 0);
        *error = "ledger " + o.path + ": " + (why.empty() ? "truncated ledger" : why);
        return -1;
    }
    // A reader (gpuguard top, doctor) reads a copy: a file truncated or rewritten in place while it
    // reads cannot fault (SIGBUS), and what it shows is one moment's state.
    void *p =
        o.read_only ? snapshot(fd, &size) : mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        *error = "cannot " + std::string(o.read_only ? "read" : "map") + " ledger " + o.path + ": " + errno_text(errno);
        close(fd);
        return -1;
    }
    std::string why = validate(p, size);
    // Who owns a slot is an OFD lock on it (common/ledger/processes.cpp): a file system without
    // them cannot tell a live process's slot from a dead one's.
    if (why.empty() && held_by_another(fd, all_slots_range()) == Held::kUnknown)
        why = "its file system has no open file description locks (" + errno_text(errno) +
              "), which tell live processes from dead ones";
    if (why.empty() && !o.read_only && (st.st_mode & 0002)) {
        char mode[8];
        snprintf(mode, sizeof mode, "%03o", (unsigned)(st.st_mode & 0777));
        why = std::string("writable by every user (mode ") + mode + "), so anyone could set its limit";
    }
    int e = 0;
    if (why.empty() && !o.read_only && !reserve(fd, true)) {
        e = errno;
        why = "cannot reserve its pages: " + errno_text(e) + " (joining would write pages the file system cannot back)";
    }
    if (!why.empty()) {
        munmap(p, sizeof(Header));
        close(fd);
        *error = "ledger " + o.path + ": " + why;
        errno = e;
        return -1;
    }
    *fd_out = fd;
    *map_out = p;
    return 1;
}

// 64 bits for names and delays that must differ between processes: getrandom, else the clock mixed
// with an address of this process (which ASLR moves).
uint64_t random_bits() {
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
    return (now_ns(CLOCK_MONOTONIC) ^ reinterpret_cast<uintptr_t>(&r)) * 0x9E3779B97F4A7C15ull;
}

// A complete new ledger under a temporary name next to the path: created exclusively, sized, mapped
// and initialised. Nobody can see it until it is linked or renamed into place.
bool create_temp(const OpenOptions &o, std::string *tmp, int *fd_out, void **map_out, std::string *error) {
    mode_t mode = o.group >= 0 ? 0660 : 0600;
    // Named by the pid and 64 random bits: processes in PID namespaces of their own share pids (every
    // container's first process is pid 1), and a name taken by another (or left by one killed while it
    // created) is no reason to give up the shared quota: another name is tried.
    int fd = -1;
    for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
        char suffix[48];
        snprintf(suffix, sizeof suffix, ".tmp.%d.%016llx", (int)getpid(), (unsigned long long)random_bits());
        *tmp = o.path + suffix;
        fd = ::open(tmp->c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        *error = "cannot create ledger " + o.path + ": " + errno_text(errno);
        return false;
    }
    // Its space is reserved before it is mapped: a page of a shared mapping that the file system
    // cannot back raises SIGBUS when first written (a full /dev/shm killed the program here).
    bool ok = reserve(fd, false);
    if (ok && o.group >= 0) ok = fchown(fd, (uid_t)-1, (gid_t)o.group) == 0 && fchmod(fd, mode) == 0;
    void *p = ok ? mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        int e = errno;
        *error = "cannot create ledger " + o.path + ": " + errno_text(e) + " (it needs " +
                 std::to_string(sizeof(Header) >> 10) + " KiB)";
        close(fd);
        unlink(tmp->c_str());
        errno = e;
        return false;
    }
    init_header(static_cast<Header *>(p), o.limit_spec);
    *fd_out = fd;
    *map_out = p;
    return true;
}

// A retired flag nobody stands behind: the file is still the one at the path and no replacer holds the
// lock on its magic (one killed between setting the flag and its rename). Cleared, so that the file
// is decided on again instead of never opened; true then. Checked again under the lock: a replacer
// may have finished in between.
bool clear_stale_retirement(int fd, Header *h, const std::string &path) {
    auto at_path = [&] {
        struct stat mapped, now;
        return fstat(fd, &mapped) == 0 && stat(path.c_str(), &now) == 0 && mapped.st_ino == now.st_ino &&
               mapped.st_dev == now.st_dev;
    };
    if (!at_path() || !try_lock(fd, replace_range())) return false;
    bool stale = at_path();
    if (stale) h->retired.store(0);
    unlock(fd, replace_range());
    return stale;
}

// A little wait before trying again while another process replaces the ledger (microseconds of
// work); spread at random so that racing processes do not retry in step (by pid they did, where each
// is pid 1 of its own namespace).
void pause_briefly(int) { usleep((useconds_t)(500 + random_bits() % 1500)); }

}  // namespace

// Takes over a mapped file: the mapping, and a description of its own for the locks (the mapping's
// keeps its description referenced, also in a forked child; common/ledger/processes.cpp).
bool Ledger::adopt(int fd, void *map, std::string *error) {
    int lock_fd = read_only_ ? fd : reopen(fd, path_);
    if (lock_fd < 0) {
        *error = "cannot open ledger " + path_ + " again: " + errno_text(errno);
        munmap(map, sizeof(Header));
        close(fd);
        return false;
    }
    if (lock_fd != fd) close(fd);
    header_ = static_cast<Header *>(map);
    map_size_ = sizeof(Header);
    fd_ = lock_fd;
    fd_pid_.store(getpid());
    return true;
}

// Lets go of the file adopted last: its slot, its mapping, its locks.
void Ledger::drop() {
    leave();
    if (header_) munmap(header_, map_size_);
    if (fd_ >= 0) close(fd_);
    header_ = nullptr;
    fd_ = -1;
}

// Creates a ledger and puts it at the path, this process already joined: busy from the moment
// anyone can see it, so no other process takes it for idle and replaces it. `replace`: renamed over
// an idle ledger this process has retired; else linked, which fails when another process was first.
Ledger::Publish Ledger::publish_new(const OpenOptions &o, bool replace, std::string *error) {
    std::string tmp;
    int fd;
    void *map;
    if (!create_temp(o, &tmp, &fd, &map, error)) return Publish::kFailed;
    if (!adopt(fd, map, error)) {
        unlink(tmp.c_str());
        return Publish::kFailed;
    }
    if (!join()) {
        *error = "cannot join the new ledger " + o.path;
        drop();
        unlink(tmp.c_str());
        return Publish::kFailed;
    }
    int rc = replace ? rename(tmp.c_str(), o.path.c_str()) : link(tmp.c_str(), o.path.c_str());
    int e = errno;
    if (rc != 0 || !replace) unlink(tmp.c_str());
    if (rc == 0) return Publish::kDone;
    drop();
    errno = e;
    if (!replace && e == EEXIST) return Publish::kExists;  // another process created it first
    *error = "cannot create ledger " + o.path + ": " + errno_text(e);
    return Publish::kFailed;
}

// The private copy for rescue_fault(): address space only until remember() writes it.
void Ledger::finish_open() {
    void *copy =
        mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (copy != MAP_FAILED) remembered_ = static_cast<Header *>(copy);
    remember();
}

// Replacing an idle ledger is one decision, made on the file replaced, by one process at a time:
//   the replacer  takes the lock on the magic's bytes (one replacer), stores retired = 1, then asks
//                 the kernel whether any slot is locked; if none, it puts a new file at the path
//                 (publish_new, joined before it is visible); if one is, it stores retired = 0.
//   a joiner      takes its slot's lock, then reads retired; if 1, it leaves and opens the path again.
// The kernel orders the two locks' operations: when the joiner's lock came first, the replacer sees
// it and does not replace; when the replacer's question came first, its store came before that, and
// the joiner's read after its own lock sees it. So no process stays on a file that is replaced, and
// two replacers cannot both win (they used to, and ended on two files: defect 3 of issue 18).
Ledger *Ledger::open(const OpenOptions &o, std::string *error, std::string *notice) {
    if (o.path.empty()) return open_private(o, error);
    if (o.limit_spec.size() >= sizeof(Header::limit_spec)) {  // the parser refuses these: never cut one
        *error = "cannot open ledger " + o.path + ": its limit is longer than " +
                 std::to_string(sizeof(Header::limit_spec) - 1) + " characters";
        return nullptr;
    }
    Ledger *l = new Ledger();
    l->read_only_ = o.read_only;
    l->path_ = o.path;
    l->pid_ns_ = pid_namespace();
    int cause = 0;  // errno of the failure, for the caller (gpuguard run tells a full disk apart)
    for (int attempt = 0; attempt < 200; attempt++) {
        Step step = l->open_attempt(o, attempt, &cause, error, notice);
        if (step == Step::kOpened) return l;
        if (step == Step::kStop) break;
    }
    if (error->empty()) *error = "cannot open ledger " + o.path + ": it kept changing while this process opened it";
    delete l;
    errno = cause;
    return nullptr;
}

// GPUGUARD_LEDGER=none: a ledger of this process alone, in anonymous memory.
Ledger *Ledger::open_private(const OpenOptions &o, std::string *error) {
    void *p = mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        *error = "cannot map a private ledger: " + errno_text(errno);
        return nullptr;
    }
    Ledger *l = new Ledger();
    l->read_only_ = o.read_only;
    l->header_ = static_cast<Header *>(p);
    l->map_size_ = sizeof(Header);
    init_header(l->header_, o.limit_spec);
    return l;
}

// One try at the file the path names now: opened (and joined unless read-only), gone again or
// being replaced (kAgain: the path will name another file), or a failure in *error (kStop).
Ledger::Step Ledger::open_attempt(const OpenOptions &o, int attempt, int *cause, std::string *error,
                                  std::string *notice) {
    notice->clear();
    int fd;
    void *map;
    int found = open_existing(o, &fd, &map, error);
    if (found < 0) {
        *cause = errno;
        return Step::kStop;
    }
    if (found == 0) return create_at_path(o, cause, error);
    if (!adopt(fd, map, error)) return Step::kStop;
    if (o.read_only) return Step::kOpened;
    if (header_->retired.load() && !clear_stale_retirement(fd_, header_, o.path)) {
        // Being replaced, or replaced: the path will name the new file.
        drop();
        pause_briefly(attempt);
        return Step::kAgain;
    }
    std::string theirs = limit_spec();
    if (theirs != o.limit_spec) {
        Step step = replace_if_idle(o, attempt, cause, error);
        if (step != Step::kStands) return step;
        if (!o.limit_spec.empty())
            *notice = "the limit '" + o.limit_spec + "' differs from the limit '" + (theirs.empty() ? "none" : theirs) +
                      "' of the shared ledger " + o.path + ", which stands";
    }
    return join_found(o, attempt, error);
}

// No file at the path: this process creates it, unless it only reads.
Ledger::Step Ledger::create_at_path(const OpenOptions &o, int *cause, std::string *error) {
    if (o.read_only) {
        *error = "no ledger at " + o.path;
        return Step::kStop;
    }
    Publish p = publish_new(o, false, error);
    if (p == Publish::kDone) {
        finish_open();
        return Step::kOpened;
    }
    *cause = errno;
    return p == Publish::kFailed ? Step::kStop : Step::kAgain;
}

// The file's limit differs from this process's. The limit belongs to the processes using the ledger
// now; when none is alive (the ledger is left from an earlier run) this process's limit replaces it.
// kStands: busy, the file's limit stands and this process goes on to join it.
Ledger::Step Ledger::replace_if_idle(const OpenOptions &o, int attempt, int *cause, std::string *error) {
    if (!try_lock(fd_, replace_range())) {  // another process is deciding
        drop();
        pause_briefly(attempt);
        return Step::kAgain;
    }
    Header *h = header_;
    bool replaced = false;
    if (!h->retired.load()) {
        h->retired.store(1);
        if (held_by_another(fd_, all_slots_range()) == Held::kNo) return replace_idle(o, cause, error);
        h->retired.store(0);  // busy: the limit stands
    } else {
        replaced = true;
    }
    unlock(fd_, replace_range());
    if (!replaced) return Step::kStands;
    drop();
    pause_briefly(attempt);
    return Step::kAgain;
}

// Idle, and retired by this process. The old file stays mapped, and its replace lock held, until the
// new one is at the path: whoever opens the old one meanwhile sees it retired.
Ledger::Step Ledger::replace_idle(const OpenOptions &o, int *cause, std::string *error) {
    Header *h = header_;
    int old_fd = fd_;
    header_ = nullptr;
    fd_ = -1;
    Publish p = publish_new(o, true, error);
    *cause = errno;
    if (p != Publish::kDone) h->retired.store(0);
    munmap(h, sizeof(Header));
    close(old_fd);  // and with it the replace lock
    if (p != Publish::kDone) return Step::kStop;
    finish_open();
    return Step::kOpened;
}

// Joins the file found at the path, and keeps it if it is still the one there.
Ledger::Step Ledger::join_found(const OpenOptions &o, int attempt, std::string *error) {
    if (!join()) {
        // Every slot held by a live process: the file is not this process's to share.
        *error = "ledger " + o.path + ": all " + std::to_string(kMaxSlots) + " slots are held by live processes";
        return Step::kStop;
    }
    if (header_->retired.load()) {  // a replacer decided before this process's lock: go where it went
        drop();
        pause_briefly(attempt);
        return Step::kAgain;
    }
    // A file removed or replaced by hand (not by gpuguard) leaves this one off the path: the
    // processes that open the path from now on would never see this one's bytes.
    struct stat mapped, now;
    if (fstat(fd_, &mapped) == 0 && stat(o.path.c_str(), &now) == 0 && now.st_ino == mapped.st_ino &&
        now.st_dev == mapped.st_dev) {
        finish_open();
        return Step::kOpened;
    }
    drop();
    return Step::kAgain;
}

void Ledger::leave() {
    std::lock_guard<std::mutex> lock(join_mu_);
    Slot *slot = slot_.load();
    if (!slot || slot_pid_.load() != getpid()) return;
    for (auto &b : slot->bytes) b.store(0);
    clear_kinds(header_, *slot);
    slot->state.store(kSlotReclaimed);
    if (fd_ >= 0 && fd_pid_.load() == getpid()) unlock(fd_, slot_range((int)(slot - header_->slots)));
    slot_.store(nullptr);
}

Ledger::~Ledger() {
    leave();
    if (header_) munmap(header_, map_size_);
    if (fd_ >= 0) close(fd_);
    if (remembered_ && rescue_.load() == kIntact) munmap(remembered_, sizeof(Header));
}

}  // namespace gg::ledger
