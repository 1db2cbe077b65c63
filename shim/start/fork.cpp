// The shim across fork(): pthread_atfork handlers, registered when the library is loaded, that take
// every lock of the shim before fork() and release them on both sides (the list and its order are in
// shim/start/fork_locks.def), and give the child what it must not share with its parent.
#include <pthread.h>

#include "shim/base/clock.h"
#include "shim/core/state.h"
#include "shim/cudnn/plans.h"
#include "shim/cudnn/record.h"
#include "shim/device/device.h"
#include "shim/python/frames.h"
#include "shim/quota/episode.h"
#include "shim/report/phase.h"
#include "shim/report/report.h"
#include "shim/stacks/symbols.h"
#include "shim/stacks/table.h"
#include "shim/stacks/unwind.h"
#include "shim/torch/view.h"
#include "shim/track/tracker.h"
#include "shim/usage/usage.h"

namespace gg {
namespace {

struct ForkLock {
    void (*lock)();
    void (*unlock)();
};

const ForkLock kForkLocks[] = {
#define FORK_LOCK(lock, unlock) {lock, unlock},
#include "shim/start/fork_locks.def"
};

void (*const kChildResets[])() = {
#define FORK_CHILD_RESET(reset) reset,
#include "shim/start/fork_locks.def"
};

// Whether this fork's prepare handler took the locks (forks are serialised by glibc's atfork lock).
bool g_fork_locked = false;

void before_fork() {
    // First, and whether or not the state exists: waiting for unwinds in flight must not happen
    // with our locks held (an unwinding thread may be about to take one of them to intern its stack).
    stacks::unwind::before_fork();
    g_fork_locked = built_state() != nullptr;
    if (!g_fork_locked) return;  // nothing of ours is in use yet
    for (const ForkLock &l : kForkLocks) l.lock();
}

void unlock_all_after_fork() {
    for (size_t i = sizeof kForkLocks / sizeof kForkLocks[0]; i-- > 0;) kForkLocks[i].unlock();
}

void after_fork_in_parent() {
    if (g_fork_locked) unlock_all_after_fork();
    stacks::unwind::after_fork(false);
}

void after_fork_in_child() {
    stacks::unwind::after_fork(true);
    if (!g_fork_locked) return;
    unlock_all_after_fork();
    for (void (*reset)() : kChildResets) reset();
    forget_thread_id();
    // The child has its own address space but the parent's ledger slot pointer: it must claim a slot
    // of its own before it charges anything (join() checks the pid).
    if (State *s = built_state(); s && s->ledger) s->ledger->on_fork_child();
}

// Registered when the library is loaded, before any thread could be inside the shim: registered by
// the first hooked call instead, they could miss a fork() that another thread makes meanwhile. They
// do nothing until the state exists. (The only thing the shim does at load: it cannot fail in any
// way a program would notice.)
__attribute__((constructor)) void register_fork_handlers() {
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

}  // namespace
}  // namespace gg
