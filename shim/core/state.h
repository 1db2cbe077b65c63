// The shim's process-wide state, set up once, lazily, on the first hooked call (never in a
// constructor: nothing that can fail or touch the driver runs at load time).
#pragma once
#include <atomic>
#include <cstdint>

#include "common/ledger/ledger.h"
#include "shim/base/clock.h"
#include "shim/core/config.h"

namespace gg {

struct State {
    const Config *cfg = nullptr;
    ledger::Ledger *ledger = nullptr;
    LimitSpec spec;            // the ledger's limit, which stands over this process's wish
    bool fail_closed = false;  // a malformed limit: refuse every device allocation
    uint64_t start_unix_ns = 0;
    uint64_t start_mono_ns = 0;

    uint64_t limit_for(int ordinal, const char *uuid, uint64_t physical_total) const;
};

namespace detail {
// The state, once it is built and warmed up and no rescued ledger awaits its recharge: what every
// hook's state() reads, several times a call. Null sends the caller through state_slow().
extern std::atomic<State *> g_ready;
// The state once built (null before): what state_slow() and built_state() read.
extern std::atomic<State *> g_built;
}  // namespace detail

// Builds the state on a process's first hooked call, or waits for the thread building it; then
// publishes it to g_ready. Defined by the wiring, shim/start/start.cpp, the one floor that may set
// up every room: this floor declares it so that every room can reach the state without including
// the rooms above it.
State &state_slow();

// Inline, one load and one branch: a hooked call reaches it several times, and each call into the
// shim's code is more lines for the driver's call to evict (BENCHMARKS.md, the footprint table).
inline State &state() {
    State *s = detail::g_ready.load(std::memory_order_acquire);
    return __builtin_expect(s != nullptr, 1) ? *s : state_slow();
}

// Sends the next state() through state_slow(): the SIGBUS handler calls it once it has rescued the
// ledger, so that the bytes lost with the file are charged again before the next hook touches it.
// Async-signal-safe.
void state_recheck();

// The state if it is built, else null: the fork handlers (shim/start/fork.cpp) do nothing before.
State *built_state();

// For unit tests of the core (tests/unit): `s` is the state from now on, as if the first hooked
// call had built it (with a private ledger, say). The caller owns it and keeps it alive.
void install_state_for_test(State *s);

}  // namespace gg
