// Report-time symbolization of native frames: module, load base, GNU build id, demangled symbol.
// Internal to the stacks module. Cached per module and per address; never called on the hot path.
#pragma once
#include <cstdint>
#include <string>

namespace gg::stacks::symbols {

struct Native {
    std::string module;    // path of the ELF object holding ip ("" when none: JIT code, a bad ip)
    uintptr_t base = 0;    // load bias: ip - base is the address addr2line expects in `module`
    std::string build_id;  // hex of NT_GNU_BUILD_ID, "" when the module has none
    std::string symbol;    // demangled dladdr name, "" when the object does not export one
    bool self = false;     // inside libgpuguard.so itself (never true when the shim is linked into a program)
};

// ip is a return address (every frame but a signal frame's), so the symbol is looked up at ip - 1:
// a call at the very end of a function would otherwise be named after the next function.
Native resolve(uintptr_t ip);

// fork(): the lock(s) here are taken before fork and released on both sides (shim/start/start.cpp), so that the
// child never inherits one held by a thread that does not exist there.
void lock_for_fork();
void unlock_after_fork();

}  // namespace gg::stacks::symbols
