// Other processes of the ledger: whether the one that took a slot is still alive (a pid can be
// reused, so its start time is compared too), and what this process's command line is.
#include "common/ledger/ledger.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
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
    if (now == 1) return false;                                            // a zombie
    if (now != 0 && start_ticks != 0 && now != start_ticks) return false;  // the pid was reused
    return true;
}

}  // namespace gg::ledger
