#include "shim/core/sigbus_rescue.h"

#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "common/base/log.h"
#include "common/ledger/ledger.h"
#include "shim/core/state.h"

namespace gg::sigbus {
namespace {

ledger::Ledger *g_ledger = nullptr;
struct sigaction g_previous;
char g_message[768];
size_t g_message_len = 0;
std::atomic<bool> g_said{false};

// Async-signal-safe throughout: the rescue (atomics and mremap), write, sigaction, raise.
void on_sigbus(int sig, siginfo_t *info, void *context) {
    int saved = errno;
    bool fault = info && info->si_code > 0;  // raised by the hardware, not sent with kill()
    if (fault && g_ledger && g_ledger->rescue_fault(info->si_addr)) {
        state_recheck();  // the next hook charges again what the file lost
        if (!g_said.exchange(true)) {
            ssize_t ignored = write(STDERR_FILENO, g_message, g_message_len);
            (void)ignored;
        }
        errno = saved;
        return;  // the access runs again, on the private copy
    }
    errno = saved;
    // Not ours: what would have happened without us.
    if (g_previous.sa_flags & SA_SIGINFO) {
        if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, context);
        return;
    }
    if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
        g_previous.sa_handler(sig);
        return;
    }
    // The default action (an ignored fault cannot be ignored either): restore it, then let the
    // faulting instruction run again, or send the signal again when it came from kill().
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    if (!fault) raise(sig);
}

}  // namespace

void install(ledger::Ledger *ledger, const char *path) {
    if (!ledger || !ledger->shared()) return;
    int n = snprintf(g_message, sizeof g_message,
                     "gpuguard: the ledger %s was truncated under this process; it goes on with a private copy: "
                     "its limit stands, but other processes' usage is no longer counted\n",
                     path);
    g_message_len = n < 0 ? 0 : (size_t)n < sizeof g_message ? (size_t)n : sizeof g_message - 1;
    g_ledger = ledger;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    // SA_ONSTACK: a program that set up an alternate stack for its own fault handlers keeps using it.
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &g_previous) != 0) {
        log_error("cannot install the SIGBUS handler that survives a truncated ledger: %s", strerror(errno));
        g_ledger = nullptr;
    }
}

}  // namespace gg::sigbus
