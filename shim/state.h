// The shim's process-wide state, set up once, lazily, on the first hooked call (never in a
// constructor: nothing that can fail or touch the driver runs at load time).
#pragma once
#include <cstdint>

#include "config.h"
#include "ledger.h"

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

State &state();

uint64_t mono_ns();  // CLOCK_MONOTONIC
uint64_t unix_ns();  // CLOCK_REALTIME
int thread_id();     // gettid, cached per thread

}  // namespace gg
