// The program's phase as it tags it (gpuguard_phase(), Python's `with gpuguard.phase("eval")`): a
// report written while a phase is set names it.
#pragma once
#include <string>

namespace gg::phase {

// The phase set now; "" for none.
std::string current();

}  // namespace gg::phase
