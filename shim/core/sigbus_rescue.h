// Survives the shared ledger's file being truncated under the process (see Ledger::rescue_fault):
// a SIGBUS handler that rescues faults inside the ledger's mapping and passes every other SIGBUS
// on exactly as if it were not there (to the handler installed before it, or the default action).
#pragma once

namespace gg::ledger {
class Ledger;
}

namespace gg::sigbus {

// Installs the handler for this ledger (a shared one; nothing for a private ledger).
void install(ledger::Ledger *ledger, const char *path);

}  // namespace gg::sigbus
