// Opening a ledger: creating it complete, validating what is at the path, who may trust it, and
// replacing an idle one; leaving it at a clean exit.
#include "common/ledger/ledger.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/ledger/internal.h"

namespace gg::ledger {

using namespace internal;

uint64_t internal::now_ns(clockid_t clock) {
    timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

std::string internal::errno_text(int e) { return strerror(e); }

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

// Creates a complete ledger at `path`: written under a temporary name, then linked (or, when
// `replace`, renamed) into place, so nobody maps a half-written file.
bool internal::create_file(const std::string &path, const std::string &spec, int group, bool replace,
                           std::string *error) {
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

std::string default_path() {
    struct stat st;
    const char *dir =
        (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0) ? "/dev/shm" : "/tmp";
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
            *error =
                "cannot open ledger " + o.path + ": " + (errno == ELOOP ? "it is a symbolic link" : errno_text(errno));
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
            *error =
                "ledger " + o.path + " belongs to another user (uid " + std::to_string(st.st_uid) + ")" +
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
                *notice = "the limit '" + o.limit_spec + "' differs from the limit '" +
                          (theirs.empty() ? "none" : theirs) + "' of the shared ledger " + o.path + ", which stands";
        }
        // Two processes starting together on an idle ledger may both replace it; the one whose
        // file lost the race maps a file no longer at the path. Joining first makes the ledger
        // busy (nobody replaces a busy ledger), then the file at the path must be the one mapped.
        l->join();
        struct stat now;
        if (stat(o.path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
            // The private copy for rescue_fault(): address space only until remember() writes it.
            void *copy = mmap(nullptr, sizeof(Header), PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
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
    clear_kinds(header_, *slot);
    slot->state.store(kSlotReclaimed);
    slot_.store(nullptr);
}

Ledger::~Ledger() {
    leave();
    if (header_) munmap(header_, map_size_);
    if (remembered_ && rescue_.load() == kIntact) munmap(remembered_, sizeof(Header));
}

}  // namespace gg::ledger
