// The preload library: whether it loads (in a probe process, with LD_PRELOAD as a command would get
// it), its libunwind, and whether it really is in a given command's process.
#include <elf.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "common/settings/settings.h"
#include "tools/cli/library_probe.h"
#include "tools/cli/preload.h"
#include "tools/cli/process.h"
#include "tools/commands/doctor/checks.h"

namespace gg::doctor {
namespace {

// Whether /proc/<pid>/maps holds `lib` (by its real path). *settled is true once the loader has
// finished with the process's libraries (libc is mapped), before which an absence means nothing.
bool maps_hold(int pid, const std::string &lib, bool *settled) {
    std::ifstream maps(pid ? "/proc/" + std::to_string(pid) + "/maps" : std::string("/proc/self/maps"));
    std::string line;
    bool found = false;
    *settled = false;
    while (std::getline(maps, line)) {
        size_t slash = line.find('/');
        if (slash == std::string::npos) continue;
        std::string path = line.substr(slash);
        if (path == lib) found = true;
        if (path.find("/libc.so") != std::string::npos || path.find("/libc-") != std::string::npos ||
            path.find("ld-musl") != std::string::npos)
            *settled = true;
    }
    return found;
}

}  // namespace

// `gpuguard doctor --probe-library LIB`, started by doctor with LD_PRELOAD=LIB: says whether the
// loader preloaded LIB, why not (dlopen's reason), and which libunwind the shim would find.
int probe_library(const std::string &lib) {
    bool settled;
    printf("preloaded %d\n", maps_hold(0, real_path(lib), &settled) ? 1 : 0);
    void *h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    printf("dlopen %s\n", h ? "ok" : dlerror());
    printf("shim %d\n", h && dlsym(h, "gpuguard_report") ? 1 : 0);
    std::string beside = lib.substr(0, lib.rfind('/') + 1) + "libunwind.so.8";
    if (access(beside.c_str(), F_OK) == 0) {
        void *u = dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
        printf("unwind beside %s\n", u ? "ok" : dlerror());
    } else {
        void *u = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
        printf("unwind system %s\n", u ? where(u).c_str() : "none");
    }
    fflush(stdout);
    _exit(0);  // no destructors: the shim is in this process
}

// Returns the library's path when it loads, else "".
std::string check_library(Checks &c) {
    std::string why, lib = gg::tool::find_library(&why);
    if (lib.empty()) {
        c.line(kFail, "library", why, "install gpuguard (make install) or set GPUGUARD_LIBRARY");
        return "";
    }
    gg::tool::LibraryProbe probe;
    gg::tool::ProbeVerdict verdict = gg::tool::probe_library_as_preload(lib, &probe, &why);
    if (verdict == gg::tool::ProbeVerdict::kUnchecked) {
        c.line(kWarn, "library", why, "check the system's process limits and /proc");
        return lib;
    }
    if (verdict == gg::tool::ProbeVerdict::kNotShim) {
        const char *fix = probe.dlopen.empty() ? "rebuild gpuguard for this system and report the crash"
                          : probe.dlopen == "ok" && probe.shim != "1"
                              ? "point GPUGUARD_LIBRARY at libgpuguard.so"
                              : "install what it names, or rebuild gpuguard against "
                                "this system's C library";
        c.line(kFail, "library", why, fix);
        return "";
    }
    c.line(kOk, "library", lib + " loads as a preload");
    const std::string &beside = probe.unwind_beside, &system = probe.unwind_system;
    if (beside == "ok") c.line(kOk, "libunwind", "libunwind.so.8 beside the library loads");
    else if (!beside.empty())
        c.line(kWarn, "libunwind",
               "libunwind.so.8 beside the library does not load (" + beside +
                   "); the stacks the caching walker declines use libgcc's unwinder");
    else if (!system.empty() && system != "none")
        c.line(kOk, "libunwind", "not beside the library; the system's loads (" + system + ")");
    else
        c.line(kWarn, "libunwind",
               "libunwind.so.8 is neither beside the library nor installed: the stacks the caching "
               "walker declines use libgcc's unwinder (slower); install it beside libgpuguard.so");
    const char *pre = settings::env("LD_PRELOAD");
    if (pre && *pre) {
        std::string first = std::string(pre).substr(0, std::string(pre).find_first_of(" :"));
        bool ours = first.size() >= 14 && first.compare(first.size() - 14, 14, "libgpuguard.so") == 0;
        c.line(kInfo, "LD_PRELOAD",
               std::string(pre) + (ours ? " (gpuguard first)" : " (gpuguard run puts the library first)"));
    } else {
        c.line(kInfo, "LD_PRELOAD",
               "not set in this shell: programs here run unguarded unless started by gpuguard run");
    }
    return lib;
}

namespace {

// What kind of program `path` is: "" for a dynamically linked one of our class; else why LD_PRELOAD
// cannot reach it ("statically linked", "32-bit"), or "script:INTERPRETER" for a #! script.
std::string program_kind(const std::string &path) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "";
    unsigned char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n >= 2 && buf[0] == '#' && buf[1] == '!') {
        std::string line((const char *)buf + 2, (size_t)n - 2);
        line = line.substr(0, line.find('\n'));
        size_t b = line.find_first_not_of(" \t");
        if (b == std::string::npos) return "";
        line = line.substr(b);
        return "script:" + line.substr(0, line.find_first_of(" \t"));
    }
    if (n < (ssize_t)sizeof(Elf64_Ehdr) || memcmp(buf, ELFMAG, SELFMAG) != 0) return "";
    if (buf[EI_CLASS] != ELFCLASS64) return "a 32-bit program, which a 64-bit library cannot be loaded into";
    const Elf64_Ehdr *eh = reinterpret_cast<const Elf64_Ehdr *>(buf);
    if (eh->e_phoff + (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > (uint64_t)n)
        return "";  // unusual layout: assume fine
    for (int i = 0; i < eh->e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, buf + eh->e_phoff + (size_t)i * sizeof(Elf64_Phdr), sizeof ph);
        if (ph.p_type == PT_INTERP) return "";
    }
    return "statically linked, so LD_PRELOAD cannot load anything into it";
}

}  // namespace

void check_command(Checks &c, const std::string &lib, char **cmd) {
    std::string path, why;
    int rc = gg::tool::locate_command(cmd[0], &path, &why);
    if (rc) {
        c.line(kFail, "command", why, "check the command's name and PATH");
        return;
    }
    std::string kind = program_kind(path);
    if (kind.compare(0, 7, "script:") == 0) {
        std::string interp;
        if (gg::tool::locate_command(kind.substr(7), &interp, &why) == 0) kind = program_kind(interp);
        else kind.clear();
    }
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID)))
        c.line(kWarn, "command", path + " is set-user-ID: the loader ignores LD_PRELOAD paths for it");

    printf("  running %s with libgpuguard.so preloaded; its output follows\n", cmd[0]);
    fflush(stdout);
    fflush(stderr);
    std::vector<std::string> env =
        gg::tool::environment_with("LD_PRELOAD", gg::tool::preload_with(lib, settings::env("LD_PRELOAD")));
    std::vector<char *> envp;
    for (auto &e : env) envp.push_back(const_cast<char *>(e.c_str()));
    envp.push_back(nullptr);
    pid_t pid;
    int err = posix_spawnp(&pid, cmd[0], nullptr, nullptr, cmd, envp.data());
    if (err) {
        c.line(kFail, "command", std::string("cannot start ") + cmd[0] + ": " + strerror(err), "check the command");
        return;
    }
    // Watch the process's memory map until it exits. A wrapper may exec another program (pyenv's
    // python3 is a shell script), so the last settled look is the one that counts.
    timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool seen_settled = false, loaded = false;
    std::string exe;
    int status = 0, looks = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        bool settled;
        bool has = maps_hold(pid, real_path(lib), &settled);
        if (settled) {
            seen_settled = true;
            loaded = has;
            char buf[PATH_MAX];
            ssize_t k = readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), buf, sizeof buf - 1);
            if (k > 0) exe.assign(buf, (size_t)k);
        }
        // Closely at first, where short commands live; a long run is looked at five times a second.
        usleep(++looks < 400 ? 5000 : 200000);
    }
    timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    std::string what = std::string(cmd[0]) + " (pid " + std::to_string(pid) + (exe.empty() ? "" : ", " + exe) + ")";
    if (seen_settled && loaded) {
        c.line(kOk, "preload", "libgpuguard.so is loaded in " + what);
    } else if (!kind.empty()) {
        c.line(kFail, "preload", std::string(cmd[0]) + " is " + kind,
               "run a dynamically linked 64-bit build of the program (it must reach libcuda through the loader)");
    } else if (seen_settled) {
        c.line(kFail, "preload", "libgpuguard.so is not loaded in " + what,
               "start the program so that LD_PRELOAD reaches it (gpuguard run -- ...); a wrapper that resets the "
               "environment drops it");
    } else {
        c.line(kWarn, "preload",
               std::string(cmd[0]) + " exited after " + std::to_string(ms) +
                   " ms, before its memory map could be read; give a command that runs a moment "
                   "(e.g. add a sleep)");
    }
    c.line(kInfo, "command", std::string(cmd[0]) + " " + gg::tool::describe_status(status));
}

}  // namespace gg::doctor
