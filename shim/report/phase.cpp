#include "shim/report/phase.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "shim/api/export.h"
#include "shim/base/clock.h"
#include "shim/base/per_thread.h"

namespace gg::phase {
namespace {

constexpr size_t kMaxPhaseLength = 200;

struct ThreadPhase {
    std::string name;
};
PerThread<ThreadPhase> g_thread_phase;

// The main thread's phase, also kept where gpuguard's own report thread can read it. Set a few times
// per run and read only when a report is written: a lock is cheap enough.
std::mutex g_main_lock;
std::string *g_main_phase;  // never freed: a report at exit may still read it
__attribute__((tls_model("initial-exec"))) thread_local bool t_stands_in_for_main = false;

bool on_main_thread() { return thread_id() == (int)getpid(); }

std::string main_phase() {
    std::lock_guard<std::mutex> hold(g_main_lock);
    return g_main_phase ? *g_main_phase : "";
}

void set_main_phase(const std::string &name) {
    std::lock_guard<std::mutex> hold(g_main_lock);
    if (!g_main_phase) g_main_phase = new std::string;
    *g_main_phase = name;
}

}  // namespace

std::string current() {
    if (t_stands_in_for_main) return main_phase();
    const ThreadPhase *mine = g_thread_phase.peek();
    return mine ? mine->name : "";
}

void stand_in_for_main_thread() { t_stands_in_for_main = true; }

void lock_for_fork() { g_main_lock.lock(); }
void unlock_after_fork() { g_main_lock.unlock(); }

}  // namespace gg::phase

GG_EXPORT int gpuguard_phase(const char *name) {
    using namespace gg::phase;
    std::string phase(name ? name : "", name ? strnlen(name, kMaxPhaseLength) : 0);
    ThreadPhase *mine = g_thread_phase.get();
    if (!mine) return -1;
    mine->name = phase;
    if (on_main_thread()) set_main_phase(phase);
    return 0;
}
