// The OWN rows of common/floor/glibc.def: functions and data that glibc 2.17 does not have under any
// version, defined here as __wrap_NAME for the binaries linked with --wrap=NAME. Each does what the
// glibc function does, through a call that 2.17 has (the old stat calls, the raw system call) or, for
// _dl_find_object, glibc's own function where the running glibc has it.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <ctime>

#define GG_FLOOR extern "C" __attribute__((visibility("hidden")))

// Before 2.33, <sys/stat.h> made stat() a call of __xstat(_STAT_VER, ...), _STAT_VER being 1 on
// x86-64; every glibc still exports these for the binaries built that way.
extern "C" int gg_glibc___xstat(int, const char *, struct stat *);
extern "C" int gg_glibc___lxstat(int, const char *, struct stat *);
extern "C" int gg_glibc___fxstat(int, int, struct stat *);
__asm__(".symver gg_glibc___xstat, __xstat@GLIBC_2.2.5");
__asm__(".symver gg_glibc___lxstat, __lxstat@GLIBC_2.2.5");
__asm__(".symver gg_glibc___fxstat, __fxstat@GLIBC_2.2.5");
const int kStatVer = 1;

GG_FLOOR int __wrap_stat(const char *path, struct stat *buf) { return gg_glibc___xstat(kStatVer, path, buf); }
GG_FLOOR int __wrap_lstat(const char *path, struct stat *buf) { return gg_glibc___lxstat(kStatVer, path, buf); }
GG_FLOOR int __wrap_fstat(int fd, struct stat *buf) { return gg_glibc___fxstat(kStatVer, fd, buf); }
// struct stat64 is struct stat on x86-64.
GG_FLOOR int __wrap_fstat64(int fd, struct stat *buf) { return gg_glibc___fxstat(kStatVer, fd, buf); }

// getrandom (2.25) is the system call (Linux 3.17); an older kernel says ENOSYS, as glibc's would.
GG_FLOOR ssize_t __wrap_getrandom(void *buf, size_t len, unsigned flags) {
    return syscall(SYS_getrandom, buf, len, flags);
}

GG_FLOOR int __wrap_getentropy(void *buf, size_t len) {
    if (len > 256) {
        errno = EIO;
        return -1;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t n = syscall(SYS_getrandom, static_cast<char *>(buf) + got, len - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        got += static_cast<size_t>(n);
    }
    return 0;
}

// arc4random (2.36) cannot fail. The static libstdc++ links it for std::random_device, which gpuguard
// never uses; should it ever run, it gets the kernel's randomness, else /dev/urandom, else the clock.
GG_FLOOR uint32_t __wrap_arc4random(void) {
    uint32_t v = 0;
    if (__wrap_getentropy(&v, sizeof v) == 0) return v;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, &v, sizeof v);
        close(fd);
        if (n == static_cast<ssize_t>(sizeof v)) return v;
    }
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint32_t>(
        (static_cast<uint64_t>(ts.tv_nsec) ^ static_cast<uint64_t>(ts.tv_sec)) * 0x9E3779B97F4A7C15ull >> 32);
}

// glibc 2.32 tells libstdc++ when a process has a single thread, so that reference counts can skip
// their atomic instructions. Always 0 ("there may be other threads"): the atomic path, which is what
// libstdc++ took everywhere before 2.32 and what a preloaded library in a threaded program takes anyway.
extern "C" {
__attribute__((visibility("hidden"))) char __wrap___libc_single_threaded = 0;
}

// _dl_find_object (2.35) is how libgcc's unwinder finds the .eh_frame_hdr of the object that holds
// an address, without the loader's lock. Where the running glibc has it (found once at load), it is
// called; elsewhere the object is found as libgcc did before 2.35, with dl_iterate_phdr.
namespace {

typedef int (*FindObjectFn)(void *, struct dl_find_object *);
FindObjectFn g_real_find_object = nullptr;

__attribute__((constructor)) void find_real_find_object() {
    g_real_find_object = reinterpret_cast<FindObjectFn>(dlvsym(RTLD_DEFAULT, "_dl_find_object", "GLIBC_2.35"));
}

struct Search {
    uintptr_t pc;
    struct dl_find_object *out;
    bool found;
};

int search_object(struct dl_phdr_info *info, size_t, void *data) {
    Search *s = static_cast<Search *>(data);
    bool inside = false;
    uintptr_t lo = UINTPTR_MAX, hi = 0, eh = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) &p = info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + p.p_vaddr;
        if (p.p_type == PT_LOAD) {
            if (s->pc >= start && s->pc < start + p.p_memsz) inside = true;
            if (start < lo) lo = start;
            if (start + p.p_memsz > hi) hi = start + p.p_memsz;
        } else if (p.p_type == PT_GNU_EH_FRAME) {
            eh = start;
        }
    }
    if (!inside) return 0;
    *s->out = {};
    s->out->dlfo_map_start = reinterpret_cast<void *>(lo);
    s->out->dlfo_map_end = reinterpret_cast<void *>(hi);
    s->out->dlfo_eh_frame = reinterpret_cast<void *>(eh);
    s->found = true;
    return 1;
}

}  // namespace

GG_FLOOR int __wrap__dl_find_object(void *pc, struct dl_find_object *result) {
    if (FindObjectFn real = __atomic_load_n(&g_real_find_object, __ATOMIC_RELAXED)) return real(pc, result);
    Search s{reinterpret_cast<uintptr_t>(pc), result, false};
    dl_iterate_phdr(search_object, &s);
    return s.found ? 0 : -1;
}
