#include "shim/report/triggers.h"

#include <pthread.h>
#include <semaphore.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "common/base/log.h"
#include "shim/api/export.h"
#include "shim/core/state.h"
#include "shim/device/device.h"
#include "shim/report/phase.h"
#include "shim/report/report.h"
#include "shim/resolve/real.h"

namespace gg::triggers {
namespace {

sem_t g_signal_sem;

// Signal handlers may do almost nothing: this one wakes the reporter thread (sem_post is
// async-signal-safe), which builds and writes the report in ordinary context.
void on_signal(int) {
    int saved = errno;
    sem_post(&g_signal_sem);
    errno = saved;
}

void *reporter_thread(void *) {
    phase::stand_in_for_main_thread();
    for (;;) {
        if (sem_wait(&g_signal_sem) != 0) continue;
        std::string path =
            report::write(report::Reason::kSignal, "report asked for by signal", nullptr, report_ordinal());
        if (!path.empty()) log_error("report: %s", path.c_str());
    }
    return nullptr;
}

void at_exit() {
    std::string path =
        report::write(report::Reason::kExit, "report at exit (GPUGUARD_REPORT_ON_EXIT=1)", nullptr, report_ordinal());
    if (!path.empty()) log_error("report at exit: %s", path.c_str());
}

}  // namespace

// Before cuInit the driver can neither name nor size a device: describing one then would enter a
// made-up device in the shared ledger for good, and cache it as this process's device 0.
int report_ordinal() {
    int ordinal = current_ordinal();
    if (ordinal >= 0) return ordinal;
    const RealDriver &r = real_driver();
    int count = 0;
    return r.cuDeviceGetCount && r.cuDeviceGetCount(&count) == CUDA_SUCCESS && count > 0 ? 0 : -1;
}

std::string bounded_message(const char *text) {
    size_t n = strnlen(text, kMaxMessageBytes + 1);
    if (n <= kMaxMessageBytes) return std::string(text, n);
    size_t total = n + strlen(text + n);
    size_t cut = kMaxMessageBytes;
    while (cut > 0 && ((unsigned char)text[cut] & 0xC0) == 0x80) cut--;  // never inside a character
    return std::string(text, cut) + " [message cut: " + std::to_string(total) + " bytes in all]";
}

void install(const Config &c) {
    if (c.report_on_exit) atexit(at_exit);
    if (c.report_signal) {
        sem_init(&g_signal_sem, 0, 0);
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        // The reporter blocks every signal so that the program's signals keep going where they went.
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&t, &attr, reporter_thread, nullptr);
        pthread_sigmask(SIG_SETMASK, &old, nullptr);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            log_error("cannot start the report thread for GPUGUARD_REPORT_SIGNAL: %s", strerror(rc));
            return;
        }
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(c.report_signal, &sa, nullptr);
    }
}

}  // namespace gg::triggers

GG_EXPORT int gpuguard_report(const char *reason) {
    gg::state();
    std::string path = gg::report::write(gg::report::Reason::kRequest,
                                         gg::triggers::bounded_message(reason ? reason : "report requested"), nullptr,
                                         gg::triggers::report_ordinal());
    if (path.empty()) return -1;
    gg::log_error("report: %s", path.c_str());
    return 0;
}
