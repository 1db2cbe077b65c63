// The wiring: the first hooked call of a process builds its State here (core/state.h declares
// state_slow(), the one way in), setting up every room below: the ledger, stacks, the tensor view,
// the SIGBUS rescue, the tracker and the report triggers. Nothing below this floor includes it.
#include "shim/core/state.h"

#include <unistd.h>
#include <atomic>
#include <cstdlib>

#include "common/base/log.h"
#include "common/settings/settings.h"
#include "shim/base/clock.h"
#include "shim/core/sigbus_rescue.h"
#include "shim/report/triggers.h"
#include "shim/stacks/stacks.h"
#include "shim/torch/view.h"
#include "shim/track/tracker.h"
#include "shim/usage/usage.h"

namespace gg {
namespace {

// The pid of the process one of whose threads is building the state (0: nobody). A fork() in another
// thread while build() runs leaves the child a builder that does not exist there: the child then
// builds its own state (a C++ static would leave it waiting forever on a guard nobody releases).
std::atomic<int> g_builder{0};
State *build() {
    State *s = new State();  // never freed: hooks may run during exit, after static destructors
    s->cfg = &config();
    s->start_unix_ns = unix_ns();
    s->start_mono_ns = mono_ns();
    s->fail_closed = s->cfg->fail_closed;

    ledger::OpenOptions o;
    o.path = s->cfg->ledger_path;
    o.limit_spec = s->fail_closed ? "" : s->cfg->limit_text;
    o.group = s->cfg->ledger_group;
    if (s->fail_closed) o.path.clear();  // a broken limit must not become a shared ledger's limit
    std::string error, notice;
    s->ledger = ledger::Ledger::open(o, &error, &notice);
    if (!s->ledger) {
        log_error("%s; the quota applies to this process alone", error.c_str());
        o.path.clear();
        s->ledger = ledger::Ledger::open(o, &error, &notice);
    }
    if (!notice.empty()) log_error("%s", notice.c_str());
    // The ledger's limit stands over this process's wish. Most often it is the wish, already checked.
    std::string spec_text = s->ledger ? s->ledger->limit_spec() : s->cfg->limit_text;
    if (spec_text == s->cfg->limit_text) {
        s->spec = s->cfg->limit;
    } else {
        settings::CheckedLimit theirs = settings::check_limit(settings::ledger_limit(spec_text));
        s->spec = theirs.spec;
        if (!theirs.ok()) {
            log_error("%s; refusing every device allocation", theirs.problem.c_str());
            s->fail_closed = true;
        }
    }
    stacks::configure(s->cfg->stack_depth, s->cfg->python_stacks, s->cfg->stack_reuse);
    torch::configure(s->cfg->tensor_view, s->cfg->tensor_events);
    torch::register_section();
    usage::register_section();
    if (s->ledger) sigbus::install(s->ledger, s->ledger->path().c_str());
    tracker();  // created before fork handlers can run
    // No leave() at exit: the driver frees a process's memory only when the process is torn down,
    // after atexit handlers; releasing the bytes earlier let siblings be admitted past the limit
    // (seen in the soak test). The others reclaim a dead process's slot instead: at once on a
    // refusal or a memory query, and within 500 ms on the allocation path.
    triggers::install(*s->cfg);
    return s;
}

// Every first caller waits here for one builder; none waits on the loader's lock meanwhile, and build()
// never needs it, so a caller that holds it (inside dlopen) waits only for build() itself.
State *build_once() {
    int me = getpid();
    for (;;) {
        if (State *s = detail::g_built.load(std::memory_order_acquire)) return s;
        int builder = g_builder.load(std::memory_order_acquire);
        if (builder == me) {  // another thread of this process is building: it takes milliseconds
            usleep(100);
            continue;
        }
        // Nobody, or a thread of the parent we were forked from in the middle of build().
        if (!g_builder.compare_exchange_strong(builder, me, std::memory_order_acq_rel)) continue;
        State *s = build();
        detail::g_built.store(s, std::memory_order_release);
        return s;
    }
}

// After the ledger's file was truncated and the SIGBUS handler gave this process a private copy of
// it (shim/core/sigbus_rescue.h): the bytes this process had charged before, lost with the file, are charged again
// from the tracker. Every hook comes here before it touches the ledger, so no free of such an
// allocation can reach the copy first; only a hook in flight on another thread at the very moment
// of the rescue can be missed (the counters are clamped, never negative).
void recharge_after_rescue(State &s) {
    uint64_t before = s.ledger->rescued_at_ns();
    Tracker::Snapshot snap = tracker().snapshot(SIZE_MAX);
    uint64_t bytes[ledger::kMaxDevices] = {};
    for (const auto &[key, a] : snap.top)
        if (a.ledger_dev >= 0 && a.ledger_dev < ledger::kMaxDevices && a.t_ns < before) bytes[a.ledger_dev] += a.bytes;
    for (int d = 0; d < ledger::kMaxDevices; d++) s.ledger->add_own_bytes(d, bytes[d]);
}

}  // namespace

State &state_slow() {
    State *s = detail::g_built.load(std::memory_order_acquire);
    if (s == nullptr) s = build_once();
    // Not inside build(): other threads wait while build() runs, and warming up takes the loader's
    // lock; a thread inside dlopen (a library constructor that allocates) waiting for build() would
    // wait forever for us (shim/base/race_once.h). A capture racing the warm-up loads what it needs itself,
    // also without a lock.
    static std::atomic<bool> warmed{false};
    if (!warmed.load(std::memory_order_relaxed) && !warmed.exchange(true)) stacks::warm_up();
    // Published first, then asked: a rescue after the question clears it again (state_recheck(),
    // seq_cst), so none is missed. Other threads may go on before the recharge ends, as they could
    // when every state() asked.
    for (;;) {
        detail::g_ready.store(s);
        if (!s->ledger || !s->ledger->take_recovery()) return *s;
        recharge_after_rescue(*s);
    }
}

}  // namespace gg
