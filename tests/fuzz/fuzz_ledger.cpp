// Fuzz target: the shared ledger file (common/ledger.*), which any process of the user (or of the
// ledger's group) can write. Promise (docs/threat-model.md): whatever the file holds, before or after
// a process maps it, the worst it can do is deny service (a forged limit or forged counts); it can
// never make the shim read or write outside its mapping, crash, or hang for long.
//
// Each input is used twice:
//   1. as raw bytes for validate(), the check every mapped file passes first;
//   2. as a script over a real ledger file: patches applied to a valid ledger before Ledger::open
//      (a corrupt or forged file), an optional truncation, then patches applied after the open
//      through the file (a hostile process writing while we run: validation is long past), then
//      the operations the shim and `gpuguard top` perform.
// Script: flags, npre, npre x patch, nafter, nafter x patch, then operation bytes. A patch is
// (u8 where, u16|u32 offset, u8 length, bytes); `where` picks the offset's width so that the small
// header and device table are reached as often as the 300 KiB of slots. A truncation after the open
// is not scripted: the next access faults with SIGBUS, as with any shared file mapping (the threat
// model says why that is accepted).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/ledger/ledger.h"
#include "fuzz_require.h"

using namespace gg::ledger;

namespace {

std::string g_dir, g_path;
std::vector<uint8_t> g_template;  // a valid ledger with one device and one reclaimed slot

struct Reader {
    const uint8_t *p;
    size_t n;
    uint8_t u8() {
        if (!n) return 0;
        n--;
        return *p++;
    }
    uint32_t u16() { return uint32_t(u8()) | uint32_t(u8()) << 8; }
    uint32_t u32() { return u16() | u16() << 16; }
};

struct Patch {
    size_t offset;
    std::vector<uint8_t> bytes;
};

Patch read_patch(Reader &r) {
    Patch p;
    uint8_t where = r.u8();
    p.offset = (where & 1) ? r.u16() : r.u32() % sizeof(Header);
    size_t len = r.u8() % 64 + 1;
    if (p.offset + len > sizeof(Header)) len = sizeof(Header) - p.offset;
    for (size_t i = 0; i < len; i++) p.bytes.push_back(r.u8());
    return p;
}

void write_all(int fd, const void *data, size_t size, off_t at) {
    FUZZ_REQUIRE(pwrite(fd, data, size, at) == (ssize_t)size);
}

// An entry another process is registering is waited on for up to a second of real time: logic the
// fuzzer learns nothing from, at 40 runs a second instead of thousands. Such entries become a state
// no gpuguard writes, which takes the same way out of the loop without the wait. (The wait itself is
// bounded per call, not per entry: see Ledger::device_index.)
void skip_claiming_waits(int fd) {
    for (int i = 0; i < kMaxDevices; i++) {
        off_t at = (off_t)(offsetof(Header, devices) + i * sizeof(DeviceEntry) + offsetof(DeviceEntry, state));
        uint32_t state = 0;
        if (pread(fd, &state, sizeof state, at) != (ssize_t)sizeof state) return;  // a cut-off file
        if (state == kDeviceClaiming) {
            state = 0xc1a1;
            write_all(fd, &state, sizeof state, at);
        }
    }
}

void cleanup() {
    if (g_dir.empty()) return;
    std::string cmd = "rm -rf '" + g_dir + "'";
    int ignored = system(cmd.c_str());
    (void)ignored;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    char dir[256];
    snprintf(dir, sizeof dir, "%s/gpuguard-fuzz-ledger.XXXXXX", base);
    FUZZ_REQUIRE(mkdtemp(dir) != nullptr);
    g_dir = dir;
    g_path = g_dir + "/ledger";
    atexit(cleanup);
    // The template is made by the code under test, as a first process would leave it.
    std::string error, notice;
    Ledger *l = Ledger::open({g_path, "1GiB", -1, false}, &error, &notice);
    FUZZ_REQUIRE(l != nullptr);
    uint8_t uuid[16] = {0x5e, 0x1d, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    int dev = l->device_index(uuid, 1ull << 30, 80ull << 30, "fuzz device");
    FUZZ_REQUIRE(dev == 0 && l->try_charge(dev, 4096, nullptr));
    delete l;
    int fd = open(g_path.c_str(), O_RDONLY);
    FUZZ_REQUIRE(fd >= 0);
    g_template.resize(sizeof(Header));
    FUZZ_REQUIRE(pread(fd, g_template.data(), g_template.size(), 0) == (ssize_t)g_template.size());
    close(fd);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // 1. validate() on arbitrary bytes, in a buffer of exactly their size so that ASan sees any
    //    read past the end.
    {
        std::vector<uint8_t> copy(data, data + size);
        (void)validate(copy.data(), copy.size());
    }

    // 2. The file.
    Reader r{data, size};
    uint8_t flags = r.u8();
    unlink(g_path.c_str());
    int fd = open(g_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    FUZZ_REQUIRE(fd >= 0);
    write_all(fd, g_template.data(), g_template.size(), 0);
    for (int i = 0, n = r.u8() % 8; i < n; i++) {
        Patch p = read_patch(r);
        write_all(fd, p.bytes.data(), p.bytes.size(), (off_t)p.offset);
    }
    skip_claiming_waits(fd);
    if (flags & 0x10) FUZZ_REQUIRE(ftruncate(fd, (off_t)(r.u32() % sizeof(Header))) == 0);  // a cut-off file
    if (flags & 0x20) FUZZ_REQUIRE(ftruncate(fd, (off_t)(sizeof(Header) + r.u16())) == 0);  // a longer one
    close(fd);

    OpenOptions o;
    o.path = g_path;
    static const char *const specs[] = {"1GiB", "", "2GiB", "0=1GiB,GPU-5e1d=2GiB"};
    o.limit_spec = specs[(flags >> 1) & 3];
    o.read_only = flags & 1;
    std::string error, notice;
    Ledger *l = Ledger::open(o, &error, &notice);
    if (!l) {
        FUZZ_REQUIRE(!error.empty());
        return 0;
    }

    // A process writing to the file after it was validated and mapped. Through the path, which
    // names the file this ledger mapped (open checks that), so that a read-only mapping sees it too.
    fd = open(g_path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    FUZZ_REQUIRE(fd >= 0);
    for (int i = 0, n = r.u8() % 8; i < n; i++) {
        Patch p = read_patch(r);
        write_all(fd, p.bytes.data(), p.bytes.size(), (off_t)p.offset);
    }
    skip_claiming_waits(fd);
    close(fd);

    uint8_t uuid[16] = {0x5e, 0x1d, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    if (flags & 0x40) uuid[15] = r.u8();  // a device the file may not hold yet
    int dev = l->device_index(uuid, (uint64_t)r.u32() << 8, 80ull << 30, "fuzz device");
    FUZZ_REQUIRE(dev >= -1 && dev < kMaxDevices);
    if (dev >= 0 && !o.read_only) {
        for (int i = 0, n = r.u8() % 8; i < n; i++) {
            uint64_t bytes = (uint64_t)r.u32() << (r.u8() % 33);
            uint64_t used = 0;
            switch (r.u8() % 4) {
                case 0: (void)l->try_charge(dev, bytes, &used); break;
                case 1: l->charge(dev, bytes); break;
                case 2: FUZZ_REQUIRE(l->release(dev, bytes) <= bytes); break;
                case 3: (void)l->reclaim_dead(r.u8() & 1); break;
            }
            (void)l->container_used(dev);
            (void)l->own_bytes(dev);
            (void)l->own_peak(dev);
            (void)l->limit(dev);
        }
    }
    // The views' text is bounded by its field (which a forged file need not NUL-terminate) and holds
    // nothing a terminal would act on.
    auto printable = [](const std::string &s) {
        for (unsigned char c : s)
            if (c < 0x20 || c == 0x7f) return false;
        return true;
    };
    FUZZ_REQUIRE(printable(l->limit_spec()));
    for (const auto &d : l->devices())
        FUZZ_REQUIRE(d.index >= 0 && d.index < kMaxDevices && d.name.size() <= sizeof(DeviceEntry::name) &&
                     printable(d.name));
    for (const auto &p : l->processes())
        FUZZ_REQUIRE(p.slot >= 0 && p.slot < kMaxSlots && p.command.size() <= sizeof(Slot::command) &&
                     printable(p.command) && p.bytes.size() == (size_t)kMaxDevices);
    delete l;
    return 0;
}
