#include "shim/report/phase.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "shim/api/export.h"

namespace gg::phase {
namespace {

// Set a few times per run and read only when a report is written: a lock is cheap enough.
std::mutex g_lock;
std::string *g_phase;  // never freed: a report at exit may still read it

}  // namespace

std::string current() {
    std::lock_guard<std::mutex> hold(g_lock);
    return g_phase ? *g_phase : "";
}

}  // namespace gg::phase

GG_EXPORT int gpuguard_phase(const char *name) {
    std::lock_guard<std::mutex> hold(gg::phase::g_lock);
    if (!gg::phase::g_phase) gg::phase::g_phase = new std::string;
    gg::phase::g_phase->assign(name ? name : "", name ? std::min<size_t>(strlen(name), 200) : 0);
    return 0;
}
