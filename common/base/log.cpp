#include "common/base/log.h"

#include "common/base/printable.h"
#include "common/settings/settings.h"

#include <atomic>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gg {

void log_vline(const char *fmt, va_list ap) {
    char buf[1024];
    static const char prefix[] = "gpuguard: ";
    size_t n = sizeof(prefix) - 1;
    memcpy(buf, prefix, n);
    int k = vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
    if (k < 0) k = 0;
    size_t body = (size_t)k < sizeof(buf) - n - 1 ? (size_t)k : sizeof(buf) - n - 2;
    // The message names values from elsewhere (a variable, a path, a program's argv): none of their
    // bytes may reach a terminal as a control (an escape sequence), and the line stays one line.
    make_printable(buf + n, body);
    n += body;
    if (n == 0 || buf[n - 1] != '\n') buf[n++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, buf, n);
    (void)ignored;
}

void log_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_vline(fmt, ap);
    va_end(ap);
}

bool debug_enabled() {
    // Read once: getenv is not safe against a concurrent setenv, and this is called from hooks. No
    // C++ static guard: a fork() while another thread held it would leave the child waiting on it
    // forever. Racing first callers each read the variable and store the same answer.
    static std::atomic<int> known{0};  // 0: not read yet, 1: off, 2: on
    int k = known.load(std::memory_order_relaxed);
    if (k == 0) {
        k = settings::read_flag(settings::process_env(), settings::Id::kDebug) ? 2 : 1;
        known.store(k, std::memory_order_relaxed);
    }
    return k == 2;
}

void log_debug(const char *fmt, ...) {
    if (!debug_enabled()) return;
    va_list ap;
    va_start(ap, fmt);
    log_vline(fmt, ap);
    va_end(ap);
}

}  // namespace gg
