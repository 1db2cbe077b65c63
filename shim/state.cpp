#include "state.h"

#include <cstdlib>
#include <ctime>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "stacks.h"
#include "tracker.h"
#include "triggers.h"

namespace gg {
namespace {

thread_local int t_tid = 0;

void before_fork() { tracker().lock_for_fork(); }
void after_fork_in_parent() { tracker().unlock_after_fork(); }

void after_fork_in_child() {
    tracker().unlock_after_fork();
    tracker().clear_after_fork();
    t_tid = 0;  // the forking thread has a new id in the child
    // The child has its own address space but the parent's ledger slot pointer: it must claim a slot
    // of its own before it charges anything (join() checks the pid).
    if (state().ledger) state().ledger->on_fork_child();
}

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
    std::string spec_text = s->ledger ? s->ledger->limit_spec() : s->cfg->limit_text;
    std::string why;
    if (!spec_text.empty() && !parse_limit_spec(spec_text, &s->spec, &why)) {
        log_error("the ledger's limit '%s' is not valid (%s); refusing every device allocation", spec_text.c_str(), why.c_str());
        s->fail_closed = true;
    }
    stacks::configure(s->cfg->stack_depth, s->cfg->python_stacks);
    tracker();  // created before fork handlers can run
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    // Registered before the report triggers, so that at exit the report (LIFO) still sees this
    // process's share before it leaves the ledger.
    atexit([] { state().ledger->leave(); });
    triggers::install(*s->cfg);
    return s;
}

}  // namespace

uint64_t State::limit_for(int ordinal, const char *uuid, uint64_t physical_total) const {
    if (fail_closed) return 0;
    return spec.for_device(ordinal, uuid).resolve(physical_total);
}

State &state() {
    static State *s = build();
    return *s;
}

uint64_t mono_ns() {
    // The coarse clock (a few ms of resolution, no system call even where the vDSO clock source
    // falls back to one) is enough for ages, episodes and a timeline of 1 ms steps, and it is on
    // the path of every allocation.
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t unix_ns() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int thread_id() {
    if (!t_tid) t_tid = (int)syscall(SYS_gettid);
    return t_tid;
}

}  // namespace gg
